import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Backoff, TokenBucket, type Clock } from '../../src/config/pacing.js';

/** A clock that only moves when the code under test sleeps, recording each sleep. */
function fakeClock(): Clock & { sleeps: number[]; advance(ms: number): void } {
  let t = 0;
  const sleeps: number[] = [];
  return {
    sleeps,
    now: () => t,
    advance: (ms) => (t += ms),
    sleep: async (ms) => {
      sleeps.push(ms);
      t += ms;
    },
  };
}

describe('TokenBucket', () => {
  it('lets a burst through, then paces at qps', async () => {
    const clock = fakeClock();
    const bucket = new TokenBucket(10, 3, clock);
    for (let i = 0; i < 5; i++) await bucket.take();
    assert.deepEqual(clock.sleeps.map((s) => Math.round(s)), [100, 100]);
  });

  it('refills with time, up to the burst', async () => {
    const clock = fakeClock();
    const bucket = new TokenBucket(2, 2, clock);
    await bucket.take();
    await bucket.take();
    clock.advance(10_000);
    await bucket.take();
    await bucket.take();
    assert.deepEqual(clock.sleeps, []);
    await bucket.take();
    assert.deepEqual(clock.sleeps.map((s) => Math.round(s)), [500]);
  });

  it('is unlimited when qps is not positive', async () => {
    const clock = fakeClock();
    const bucket = new TokenBucket(0, 0, clock);
    for (let i = 0; i < 100; i++) await bucket.take();
    assert.deepEqual(clock.sleeps, []);
  });
});

describe('Backoff', () => {
  it('doubles up to the maximum with jitter, and resets', () => {
    const backoff = new Backoff({ initialMs: 100, maxMs: 1000 }, () => 1);
    assert.deepEqual([1, 2, 3, 4, 5].map(() => backoff.next()), [100, 200, 400, 800, 1000]);
    backoff.reset();
    assert.equal(backoff.next(), 100);
    const low = new Backoff({ initialMs: 100, maxMs: 1000 }, () => 0);
    assert.equal(low.next(), 50);
  });
});
