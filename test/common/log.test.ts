import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readdirSync, readFileSync, writeFileSync, utimesSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { configureLogging, listScopes, LogConfigError, registerScopes, scope, setScopeLevel, type LogOptions } from '../../src/common/log.js';

const dir = mkdtempSync(join(tmpdir(), 'mesh-log-'));
registerScopes(['ads', 'model', 'authn']);

function logTo(file: string, opts: Partial<LogOptions> = {}): () => string[] {
  configureLogging({ asJson: false, caller: [], outputLevel: 'default:info', stacktraceLevel: 'default:none', targets: [file], ...opts });
  return () => readFileSync(file, 'utf8').split('\n').filter(Boolean);
}

test('plain lines: RFC3339 UTC time, level, scope, message, tab-separated', () => {
  const lines = logTo(join(dir, 'plain.log'));
  scope('ads').info('push to 3 proxies');
  scope('ads').debug('hidden at info');
  assert.equal(lines().length, 1);
  assert.match(lines()[0]!, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z\tinfo\tads\tpush to 3 proxies$/);
});

test('per-scope levels: default seeds every scope, a named scope overrides it', () => {
  const lines = logTo(join(dir, 'levels.log'), { outputLevel: 'default:warn,ads:debug' });
  scope('ads').debug('ads debug');
  scope('model').info('model info');
  scope('model').warn('model warn');
  assert.deepEqual(lines().map((l) => l.split('\t').slice(1).join('\t')), ['debug\tads\tads debug', 'warn\tmodel\tmodel warn']);
  const none = logTo(join(dir, 'none.log'), { outputLevel: 'default:none' });
  scope('model').error('silenced');
  assert.deepEqual(none(), []);
});

test('unknown scopes and levels are errors naming the flag', () => {
  assert.throws(() => logTo(join(dir, 'x.log'), { outputLevel: 'ads:loud' }), (e: Error) => e instanceof LogConfigError && /unknown level "loud"/.test(e.message));
  assert.throws(() => logTo(join(dir, 'x.log'), { outputLevel: 'nope:debug' }), /--log_output_level.*unknown scope "nope"/);
  assert.throws(() => logTo(join(dir, 'x.log'), { stacktraceLevel: 'default:sometimes' }), /--log_stacktrace_level/);
  assert.throws(() => logTo(join(dir, 'x.log'), { caller: ['nope'] }), /--log_caller.*unknown scope "nope"/);
});

test('JSON lines carry time, level, scope, msg, fields, and caller for the asked scopes', () => {
  const lines = logTo(join(dir, 'json.log'), { asJson: true, caller: ['authn'] });
  scope('authn').info('jwks fetched', { issuer: 'https://issuer.example' });
  scope('model').info('no caller here');
  const [a, b] = lines().map((l) => JSON.parse(l) as Record<string, string>);
  assert.equal(a!.level, 'info');
  assert.equal(a!.scope, 'authn');
  assert.equal(a!.msg, 'jwks fetched');
  assert.equal(a!.issuer, 'https://issuer.example');
  assert.match(a!.caller!, /log\.test\.[jt]s:\d+$/);
  assert.match(a!.time!, /Z$/);
  assert.equal(b!.caller, undefined);
});

test('stack traces are captured at and above the stacktrace level', () => {
  const lines = logTo(join(dir, 'stack.log'), { stacktraceLevel: 'default:error' });
  scope('model').warn('no stack');
  scope('model').error('with stack');
  const all = lines();
  assert.match(all[0]!, /\twarn\tmodel\tno stack$/);
  assert.match(all[1]!, /\terror\tmodel\twith stack$/);
  assert.match(all[2]!, /^\s+at /, 'the stack follows the error line');
});

test('several targets receive every line', () => {
  const a = join(dir, 'a.log');
  const b = join(dir, 'b.log');
  configureLogging({ asJson: false, caller: [], outputLevel: 'default:info', stacktraceLevel: 'default:none', targets: [a, b] });
  scope('ads').info('to both');
  assert.match(readFileSync(a, 'utf8'), /to both/);
  assert.match(readFileSync(b, 'utf8'), /to both/);
});

test('levels change at run time', () => {
  const lines = logTo(join(dir, 'runtime.log'));
  scope('model').debug('before');
  setScopeLevel('model', 'debug');
  scope('model').debug('after');
  assert.deepEqual(lines().map((l) => l.split('\t')[3]), ['after']);
  assert.equal(listScopes().find((s) => s.name === 'model')!.level, 'debug');
  assert.throws(() => setScopeLevel('nope', 'debug'), /unknown scope/);
});

test('rotation: past max size the file is renamed, and backups beyond the count or age are removed', () => {
  const rdir = mkdtempSync(join(tmpdir(), 'mesh-rotate-'));
  const path = join(rdir, 'mesh.log');
  // An old backup from a previous run, past max age: pruned at the first rotation.
  const stale = join(rdir, 'mesh-2020-01-01T00-00-00.000.log');
  writeFileSync(stale, 'old\n');
  utimesSync(stale, new Date('2020-01-01'), new Date('2020-01-01'));
  configureLogging({ asJson: false, caller: [], outputLevel: 'default:info', stacktraceLevel: 'default:none', targets: [], rotate: { path, maxSizeMB: 1, maxAgeDays: 30, maxBackups: 2 } });
  const chunk = 'x'.repeat(64 * 1024);
  for (let i = 0; i < 80; i++) scope('ads').info(chunk); // ~5 MiB: four rotations
  const files = readdirSync(rdir).sort();
  assert.ok(files.includes('mesh.log'));
  const backups = files.filter((f) => f !== 'mesh.log');
  assert.equal(backups.length, 2, `two backups kept: ${files.join(', ')}`);
  assert.ok(!files.includes('mesh-2020-01-01T00-00-00.000.log'), 'the stale backup is gone');
  for (const f of files) assert.ok(readFileSync(join(rdir, f)).length <= 1024 * 1024, `${f} stays within 1 MiB`);
  configureLogging({ asJson: false, caller: [], outputLevel: 'default:info', stacktraceLevel: 'default:none', targets: ['stdout'] });
});
