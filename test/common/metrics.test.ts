// Each program exposes exactly its scope's metrics, and the exposition passes promtool's parser.
// promtool also lints names; the spec's names win over Prometheus naming conventions (the Go mesh
// exports the same names), so the only lints allowed are naming-convention ones.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { counter, gauge, histogram, metricNames, programRegistry } from '../../src/common/metrics.js';
import { REPO_ROOT } from '../helpers/proc.js';

const spec = readFileSync(join(REPO_ROOT, '..', 'shared', 'spec', 'commands.md'), 'utf8');
const specRows = [...spec.split('## Events')[1]!.split('## Errors')[0]!.matchAll(/^\| ([a-z_:\- ]+?) \| (Sum|Count|LastValue|Distribution) \| (D\+A|D|A) \|/gm)].map((m) => ({
  name: m[1]!.replace('envoy-free name: ', ''),
  type: m[2]!,
  scope: m[3]!,
}));

/** Spec Sums that go down (SDS connections): gauges here, as docs/identity.md says. */
const GAUGES_TYPED_SUM = new Set(['total_active_connections', 'total_stale_connections']);

const NAMING_LINTS = [/counter metrics should have "_total" suffix/, /non-histogram and non-summary metrics should not have "_count" suffix/, /use base unit "seconds" instead of "milliseconds"/, /non-counter metrics should not have "_total" suffix/];

function promtool(text: string): { code: number | null; problems: string[] } {
  const r = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
  assert.equal(r.error, undefined, 'promtool is installed (Debian package prometheus)');
  return { code: r.status, problems: (r.stdout + r.stderr).split('\n').filter(Boolean) };
}

test('each program exposes exactly the spec metrics of its scope, with Prometheus types from the spec types', async () => {
  assert.equal(specRows.length, 107);
  for (const [program, letter] of [['discovery', 'D'], ['agent', 'A']] as const) {
    const expected = specRows.filter((r) => r.scope === 'D+A' || r.scope === letter).map((r) => r.name).sort();
    assert.deepEqual([...metricNames(program)].sort(), expected);
    const text = await programRegistry(program).metrics();
    for (const r of specRows.filter((x) => x.scope === 'D+A' || x.scope === letter)) {
      const type = GAUGES_TYPED_SUM.has(r.name) ? 'gauge' : { Sum: 'counter', Count: 'counter', LastValue: 'gauge', Distribution: 'histogram' }[r.type];
      assert.match(text, new RegExp(`^# TYPE ${r.name} ${type}$`, 'm'), `${program}: ${r.name}`);
    }
    for (const r of specRows.filter((x) => x.scope !== 'D+A' && x.scope !== letter)) {
      assert.doesNotMatch(text, new RegExp(`^# TYPE ${r.name} `, 'm'), `${program} does not expose ${r.name}`);
    }
  }
});

test('the exposition of both programs, with recorded values, passes promtool check metrics', async () => {
  counter('pilot_xds_pushes').inc({ type: 'lds' });
  gauge('pilot_xds').set(3);
  histogram('pilot_xds_send_time').observe(0.002);
  counter('pilot_total_xds_rejects').inc({ type: 'cds' });
  for (const program of ['discovery', 'agent'] as const) {
    const { code, problems } = promtool(await programRegistry(program).metrics());
    assert.ok(code === 0 || code === 3, `promtool parsed the ${program} exposition (exit ${code}): ${problems.join('\n')}`);
    for (const p of problems) assert.ok(NAMING_LINTS.some((re) => re.test(p)), `only naming lints caused by spec names: ${p}`);
  }
});

test('promtool catches a broken exposition, so the check above can fail', () => {
  const { code } = promtool('# TYPE x counter\nx{a="1" 1\n');
  assert.equal(code, 1);
});
