import { test } from 'node:test';
import assert from 'node:assert/strict';
import { listSettings, loadSettings, setting, SettingsError } from '../../src/common/env.js';

test('settings are typed with the spec defaults', () => {
  loadSettings('discovery', {});
  assert.equal(setting('PILOT_DEBOUNCE_AFTER'), 100);
  assert.equal(setting('PILOT_XDS_SEND_TIMEOUT'), 5000);
  assert.equal(setting('PILOT_PUSH_THROTTLE'), 100);
  assert.equal(setting('PILOT_TRACE_SAMPLING'), 1);
  assert.equal(setting('XDS_AUTH'), true);
  assert.equal(setting('TOKEN_AUDIENCES'), 'mesh-ca');
  assert.equal(setting('POD_NAMESPACE'), 'mesh-system');
  loadSettings('agent', {});
  assert.equal(setting('POD_NAMESPACE'), '', 'the agent has no default namespace');
});

test('values from the environment use Go parsing rules', () => {
  loadSettings('discovery', { PILOT_DEBOUNCE_AFTER: '1m30s', XDS_AUTH: 'F', PILOT_STATUS_QPS: '2.5', K_REVISION: 'rev-7' });
  assert.equal(setting('PILOT_DEBOUNCE_AFTER'), 90_000);
  assert.equal(setting('XDS_AUTH'), false);
  assert.equal(setting('PILOT_STATUS_QPS'), 2.5);
  assert.equal(setting('K_REVISION'), 'rev-7');
});

test('every bad value is reported at once, naming variable and expected type', () => {
  assert.throws(
    () => loadSettings('discovery', { PILOT_DEBOUNCE_AFTER: 'fast', XDS_AUTH: 'yes', PILOT_PUSH_THROTTLE: '1.5', PILOT_TRACE_SAMPLING: 'x' }),
    (e: unknown) => {
      assert.ok(e instanceof SettingsError);
      assert.deepEqual(e.problems, [
        'PILOT_DEBOUNCE_AFTER="fast": invalid value, expected a Duration such as 100ms, 5s or 1m30s',
        'PILOT_PUSH_THROTTLE="1.5": invalid value, expected an Integer',
        'PILOT_TRACE_SAMPLING="x": invalid value, expected a Float',
        'XDS_AUTH="yes": invalid value, expected a Boolean (true or false)',
      ]);
      return true;
    },
  );
});

test('the listing shows value, default and whether each variable is set and effective', () => {
  loadSettings('agent', { SECRET_TTL: '12h' });
  const rows = listSettings('agent');
  const ttl = rows.find((r) => r.name === 'SECRET_TTL')!;
  assert.deepEqual({ ...ttl, description: '' }, { name: 'SECRET_TTL', type: 'Duration', scope: 'A', value: '12h0m0s', default: '24h0m0s', set: true, effective: true, description: '' });
  assert.ok(!rows.some((r) => r.scope === 'D'), 'discovery-only variables are not the agent\'s');
  assert.equal(rows.find((r) => r.name === 'POD_NAMESPACE')!.effective, true);
  assert.equal(rows.find((r) => r.name === 'CREDENTIAL_FETCHER_TYPE')!.effective, false);
});
