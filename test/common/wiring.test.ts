// "Nothing the spec names is silently ignored": the lists of effective settings and metrics, which
// drive the "not yet effective" notices, must equal what the code actually reads and records.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { WIRED_SETTINGS } from '../../src/common/env.js';
import { COMPATIBILITY_METRICS, ineffectiveMetrics, metricNames, programRegistry, WIRED_METRICS } from '../../src/common/metrics.js';
import { REPO_ROOT } from '../helpers/proc.js';

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = join(dir, e.name);
    if (e.isDirectory()) return e.name === 'gen' ? [] : sources(p);
    return e.name.endsWith('.ts') ? [p] : [];
  });
}

const code = sources(join(REPO_ROOT, 'src')).map((f) => readFileSync(f, 'utf8')).join('\n');


function referenced(re: RegExp): string[] {
  return [...new Set([...code.matchAll(re)].map((m) => m[1]!))].sort();
}

test('every setting read with setting() is listed as effective, and every listed one is read', () => {
  const read = referenced(/\bsetting\('([A-Z0-9_]+)'\)/g);
  // Flag defaults read their variable through the flag table's `env:` field.
  const viaFlags = referenced(/\benv: '([A-Z0-9_]+)'/g);
  assert.deepEqual([...new Set([...read, ...viaFlags])].sort(), [...WIRED_SETTINGS].sort());
});

test('every metric the code records is listed as effective, and every listed one is recorded', () => {
  // A spec metric name written as a literal outside the registry is a metric some component records,
  // whether passed straight to counter()/gauge()/histogram() or through a name table.
  const outsideRegistry = sources(join(REPO_ROOT, 'src'))
    .filter((f) => !f.endsWith(join('common', 'metrics.ts')))
    .map((f) => readFileSync(f, 'utf8'))
    .join('\n');
  const names = [...new Set([...metricNames('discovery'), ...metricNames('agent')])];
  const recorded = names.filter((n) => outsideRegistry.includes(`'${n}'`)).sort();
  assert.deepEqual(recorded, [...WIRED_METRICS].sort());
});

test('a metric declared for compatibility is never recorded, says why in its HELP text, and is not listed as not yet effective', async () => {
  assert.deepEqual([...COMPATIBILITY_METRICS.keys()], ['validator_validation_config_delete_error']);
  const exposition = await programRegistry('discovery').metrics();
  for (const [name, reason] of COMPATIBILITY_METRICS) {
    assert.ok(!WIRED_METRICS.has(name), `${name} is recorded after all: list it as wired instead`);
    assert.ok(metricNames('discovery').includes(name), `${name} is a spec metric`);
    assert.ok(!ineffectiveMetrics('discovery').includes(name));
    assert.ok(exposition.includes(`# HELP ${name} webhook configuration delete errors (declared for compatibility with the Go mesh, never recorded: ${reason})`), exposition.split('\n').find((l) => l.includes(name)));
  }
});
