// "Nothing the spec names is silently ignored": the lists of effective settings and metrics, which
// drive the "not yet effective" notices, must equal what the code actually reads and records.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { WIRED_SETTINGS } from '../../src/common/env.js';
import { metricNames, WIRED_METRICS } from '../../src/common/metrics.js';
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
