// Envoy's priority load and panic (arch_overview/upstream/load_balancing "Priority levels" and
// "Panic threshold"): the documented tables, levels of 100 hosts each so that a count is a percent.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { choosePriority, loadExcluding, priorityLoad } from '../../src/dataplane/priority-load.js';

const levels = (...healthy: number[]) => healthy.map((h) => ({ hosts: 100, healthy: h }));
// Panic off: the documented load tables leave panic aside (with Envoy's 50 % the 25 % rows would be in panic).
const loadOf = (...healthy: number[]) => priorityLoad(levels(...healthy), 140, 0).load;

describe('priority load (overprovisioning factor 1.4)', () => {
  it("two levels: P=0 keeps everything down to 72 % healthy, then hands the rest to P=1 (Envoy's table)", () => {
    const table: [number, number, number, number][] = [
      [100, 100, 100, 0],
      [72, 100, 100, 0],
      [71, 100, 99, 1],
      [50, 100, 70, 30],
      [25, 100, 35, 65],
      [0, 100, 0, 100],
      [72, 72, 100, 0],
      [71, 71, 99, 1],
      [50, 50, 70, 30],
      [25, 25, 50, 50],
    ];
    for (const [p0, p1, to0, to1] of table) assert.deepEqual(loadOf(p0, p1), [to0, to1], `${p0} % / ${p1} % healthy`);
  });

  it('three levels: each takes its normalized health until the levels above it reach 100 %; rounding goes to the first level', () => {
    assert.deepEqual(loadOf(100, 100, 100), [100, 0, 0]);
    assert.deepEqual(loadOf(50, 50, 100), [70, 30, 0]);
    assert.deepEqual(loadOf(25, 25, 100), [35, 35, 30]);
    // Health 35 + 35 + 28 = 98: 35/35/28 of 98, and the 2 % lost to rounding on P=0, as Envoy's
    // code does (its documentation's table rounds to 36/36/28).
    assert.deepEqual(loadOf(25, 25, 20), [37, 35, 28]);
  });

  it('the overprovisioning factor of the assignment counts: 1.0 sends a 90 %-healthy P=0 only 90 %', () => {
    assert.deepEqual(priorityLoad(levels(90, 100), 100, 0).load, [90, 10]);
  });
});

describe('panic threshold', () => {
  it('a level under the threshold is in panic only while the cluster as a whole is short of 100 %', () => {
    // P=0 30 % healthy (health 42) is under 50 %, but P=1 makes up the rest: no panic.
    assert.deepEqual(priorityLoad(levels(30, 100), 140, 50), { load: [42, 58], panic: [false, false] });
    // One level, 30 % healthy: health 42 < 100, and 30 < 50: panic, all of its hosts.
    assert.deepEqual(priorityLoad(levels(30), 140, 50), { load: [100], panic: [true] });
    // 40 % healthy is not under a threshold of 40.
    assert.deepEqual(priorityLoad(levels(40), 140, 40).panic, [false]);
  });

  it('every level in panic: the load follows the host counts', () => {
    assert.deepEqual(priorityLoad(levels(25, 25, 20), 140, 50), { load: [34, 33, 33], panic: [true, true, true] });
    const r = priorityLoad([{ hosts: 3, healthy: 0 }, { hosts: 1, healthy: 0 }], 140, 50);
    assert.deepEqual(r, { load: [75, 25], panic: [true, true] });
  });

  it('a threshold of 0 never panics: with nothing healthy the load stays on P=0, which has no host to pick', () => {
    assert.deepEqual(priorityLoad(levels(0, 0), 140, 0), { load: [100, 0], panic: [false, false] });
    assert.deepEqual(priorityLoad(levels(10), 140, 0), { load: [100], panic: [false] });
  });
});

it('choosePriority maps a roll in [0, 100) onto the cumulative load', () => {
  const load = [70, 30];
  assert.equal(choosePriority(load, 0), 0);
  assert.equal(choosePriority(load, 69), 0);
  assert.equal(choosePriority(load, 70), 1);
  assert.equal(choosePriority(load, 99), 1);
  assert.equal(choosePriority([0, 100], 0), 1);
});

describe('a retry under previous_priorities', () => {
  it('gives the excluded levels no load, the others their health; nothing left: the original load', () => {
    assert.deepEqual(loadExcluding(levels(100, 100, 100), 140, new Set([0])), [0, 100, 0]);
    assert.deepEqual(loadExcluding(levels(100, 50, 100), 140, new Set([0])), [0, 70, 30], 'P=1 at 70 % health carries 70 %');
    assert.deepEqual(loadExcluding(levels(100, 10), 140, new Set([0])), [0, 100], 'the rest scaled up to 100 %');
    assert.equal(loadExcluding(levels(100, 0), 140, new Set([0])), undefined, 'only an unhealthy level left');
    assert.equal(loadExcluding(levels(100, 100), 140, new Set([0, 1])), undefined, 'every level tried');
  });
});
