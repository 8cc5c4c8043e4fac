import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { proxyNodeFlags } from '../../src/dataplane/node-flags.js';

// The largest young generation a Node process reaches while it allocates short-lived objects, in
// MiB: what the effective --max-semi-space-size allows (V8 reserves two semi-spaces).
const YOUNG_GENERATION_PROBE = `
const v8 = require('node:v8');
let keep = [], max = 0;
for (let i = 0; i < 2e6; i++) {
  keep.push({ a: i, b: [i] });
  if (keep.length > 200000) keep = [];
  if (i % 10000 === 0) max = Math.max(max, v8.getHeapSpaceStatistics().find((s) => s.space_name === 'new_space').space_size);
}
process.stdout.write(String(max / 1048576));`;

function youngGenerationMiB(env: NodeJS.ProcessEnv): number {
  return Number(execFileSync(process.execPath, [...proxyNodeFlags(env), '-e', YOUNG_GENERATION_PROBE], { env: { PATH: process.env.PATH, ...env } }).toString());
}

test('a proxy process runs with 2 MiB semi-spaces unless NODE_OPTIONS sets its own size, which wins', () => {
  assert.deepEqual(proxyNodeFlags({}), ['--max-semi-space-size=2', '--heap-growing-percent=20']);
  assert.ok(youngGenerationMiB({}) <= 4, 'the proxy default caps the young generation at two 2 MiB semi-spaces');
  assert.deepEqual(proxyNodeFlags({ NODE_OPTIONS: '--max-old-space-size=512 --max-semi-space-size=16' }), ['--heap-growing-percent=20']);
  assert.deepEqual(proxyNodeFlags({ NODE_OPTIONS: '--max_semi_space_size=16' }), ['--heap-growing-percent=20'], "V8's underscore spelling is the same flag");
  assert.ok(youngGenerationMiB({ NODE_OPTIONS: '--max-semi-space-size=16' }) > 4, "the user's 16 MiB semi-spaces are in effect");
  assert.deepEqual(proxyNodeFlags({ NODE_OPTIONS: '--max-old-space-size=512' }), ['--max-semi-space-size=2', '--heap-growing-percent=20'], 'other NODE_OPTIONS leave the defaults alone');
});
