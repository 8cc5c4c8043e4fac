import { test } from 'node:test';
import assert from 'node:assert/strict';
import { formatDuration, MAX_DURATION_NS, parseDuration, toMillis } from '../../src/common/duration.js';

test('Go durations parse to nanoseconds and print back in Go form', () => {
  const cases: Array<[string, bigint, string]> = [
    ['500ms', 500_000_000n, '500ms'],
    ['1m30s', 90_000_000_000n, '1m30s'],
    ['1m0s', 60_000_000_000n, '1m0s'],
    ['24h0m0s', 86_400_000_000_000n, '24h0m0s'],
    ['1.5h', 5_400_000_000_000n, '1h30m0s'],
    ['2562047h47m16.854775807s', MAX_DURATION_NS, '2562047h47m16.854775807s'],
    ['0', 0n, '0s'],
    ['-5s', -5_000_000_000n, '-5s'],
    ['100us', 100_000n, '100µs'],
    ['42ns', 42n, '42ns'],
    ['1.25s', 1_250_000_000n, '1.25s'],
  ];
  for (const [text, ns, printed] of cases) {
    assert.equal(parseDuration(text), ns, text);
    assert.equal(formatDuration(ns), printed, text);
  }
});

test('bad durations are rejected with the input named', () => {
  for (const bad of ['', '5', 'fast', '1x', '1m30', '.s', '2562047h47m17s']) {
    assert.throws(() => parseDuration(bad), (e: Error) => e.message.includes(`"${bad}"`) || bad === '', bad);
  }
});

test('milliseconds saturate at the largest timer Node accepts', () => {
  assert.equal(toMillis(1_500_000n), 1);
  assert.equal(toMillis(MAX_DURATION_NS), 2_147_483_647);
});
