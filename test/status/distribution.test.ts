// The distribution tracker alone: which proxies hold which generation, from what the xDS server
// tells it (generations, sends, ACKs, disconnects).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DistributionTracker } from '../../src/status/distribution.js';

const CDS = 'type.googleapis.com/envoy.config.cluster.v3.Cluster';
const LDS = 'type.googleapis.com/envoy.config.listener.v3.Listener';
const vs = (generation: number) => ({ kind: 'VirtualService' as const, namespace: 'default', name: 'reviews', generation });
const counts = (t: DistributionTracker) => t.progress().map((p) => `${p.resource.name}@${p.resource.generation} ${p.acked}/${p.total}`);

/** A generation at the current stamp sent to `conn` with `nonce`. */
function deliver(t: DistributionTracker, conn: string, type: string, version: string, nonce: string): void {
  t.generated(conn, type, t.stamp(), version);
  t.sent(conn, type, nonce, version);
}

test('a proxy counts once every type it watches has ACKed a push that includes the generation', () => {
  const t = new DistributionTracker(60_000);
  t.snapshot([vs(1)]);
  deliver(t, 'p1', CDS, 'c1', 'n1');
  deliver(t, 'p1', LDS, 'l1', 'n2');
  assert.deepEqual(counts(t), ['reviews@1 0/1']);
  t.acked('p1', CDS, 'n1');
  assert.deepEqual(counts(t), ['reviews@1 0/1'], 'listeners not yet ACKed');
  t.acked('p1', LDS, 'n2');
  assert.deepEqual(counts(t), ['reviews@1 1/1']);
  t.acked('p1', LDS, 'unknown-nonce');
  assert.deepEqual(counts(t), ['reviews@1 1/1'], 'an ACK of a nonce never sent claims nothing');
});

test('a new generation counts only proxies that ACK the push carrying it; types the push leaves alone stay current', () => {
  const t = new DistributionTracker(60_000);
  t.snapshot([vs(1)]);
  for (const p of ['p1', 'p2']) {
    deliver(t, p, CDS, 'c1', `${p}-1`);
    deliver(t, p, LDS, 'l1', `${p}-2`);
    t.acked(p, CDS, `${p}-1`);
    t.acked(p, LDS, `${p}-2`);
  }
  t.snapshot([vs(2)], new Set([LDS]));
  deliver(t, 'p1', LDS, 'l2', 'p1-3');
  deliver(t, 'p2', LDS, 'l2', 'p2-3');
  assert.deepEqual(counts(t), ['reviews@2 0/2']);
  t.acked('p1', LDS, 'p1-3');
  assert.deepEqual(counts(t), ['reviews@2 1/2'], 'clusters were not pushed: the ACKed ones still hold');
  t.disconnected('p2');
  assert.deepEqual(counts(t), ['reviews@2 1/1'], 'a proxy gone stops counting');
});

test('a generation that produced what the proxy already ACKed needs no send to count', () => {
  const t = new DistributionTracker(60_000);
  t.snapshot([vs(1)]);
  deliver(t, 'p1', CDS, 'c1', 'n1');
  t.acked('p1', CDS, 'n1');
  t.snapshot([vs(2)]);
  assert.deepEqual(counts(t), ['reviews@2 0/1']);
  t.generated('p1', CDS, t.stamp(), 'c1');
  assert.deepEqual(counts(t), ['reviews@2 1/1']);
});

test('a resource every proxy has held past the retention is no longer tracked; a deleted one at once', () => {
  let now = 0;
  const t = new DistributionTracker(1_000, () => now);
  t.snapshot([vs(1), { ...vs(1), name: 'ratings' }]);
  deliver(t, 'p1', CDS, 'c1', 'n1');
  t.acked('p1', CDS, 'n1');
  assert.deepEqual(counts(t), ['reviews@1 1/1', 'ratings@1 1/1']);
  t.snapshot([vs(1)], new Set());
  assert.deepEqual(counts(t), ['reviews@1 1/1']);
  now = 1_001;
  assert.deepEqual(counts(t), []);
});
