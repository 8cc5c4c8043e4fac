import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Debouncer, mergePush } from '../../src/xds/debounce.js';
import type { PushRequest } from '../../src/xds/generator.js';
import { eventually } from '../helpers/proc.js';

const LDS = 'type.googleapis.com/envoy.config.listener.v3.Listener';
const EDS = 'type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment';

test('a burst of events becomes one push with every type and reason', async () => {
  const pushes: PushRequest[] = [];
  const d = new Debouncer((r) => pushes.push(r), { afterMs: 30, maxMs: 10_000, edsDebounce: true });
  d.enqueue({ reason: 'config', types: new Set([LDS]), triggeredAt: 5 });
  d.enqueue({ reason: 'endpoint', types: new Set([EDS]), endpointsOnly: true, triggeredAt: 3 });
  d.enqueue({ reason: 'config', types: new Set([LDS]) });
  await eventually(() => assert.equal(pushes.length, 1));
  assert.deepEqual([...pushes[0]!.types!].sort(), [EDS, LDS].sort());
  assert.equal(pushes[0]!.reason, 'config,endpoint');
  assert.equal(pushes[0]!.triggeredAt, 3);
  d.close();
});

test('events that never go quiet still push once the maximum wait has passed', async () => {
  const pushes: PushRequest[] = [];
  const d = new Debouncer((r) => pushes.push(r), { afterMs: 50, maxMs: 120, edsDebounce: true });
  const started = Date.now();
  // An event every 20 ms keeps resetting the quiet timer; only the maximum can end the burst.
  while (pushes.length === 0 && Date.now() - started < 5_000) {
    d.enqueue({ reason: 'config' });
    await new Promise((r) => setTimeout(r, 20));
  }
  assert.equal(pushes.length, 1, 'the maximum cut the burst');
  assert.equal(pushes[0]!.types, undefined, 'an event without types means every type');
  d.close();
});

test('with EDS debounce off, endpoint events push at once', () => {
  const pushes: PushRequest[] = [];
  const d = new Debouncer((r) => pushes.push(r), { afterMs: 10_000, maxMs: 10_000, edsDebounce: false });
  d.enqueue({ reason: 'endpoint', types: new Set([EDS]), endpointsOnly: true });
  assert.equal(pushes.length, 1);
  d.enqueue({ reason: 'config' });
  assert.equal(pushes.length, 1, 'config events still wait');
  d.flush();
  assert.equal(pushes.length, 2);
  d.close();
});

test('merging with a full push stays a full push', () => {
  const merged = mergePush({ reason: 'a', types: new Set([LDS]) }, { reason: 'b' });
  assert.equal(merged.types, undefined);
  assert.equal(merged.reason, 'a,b');
});
