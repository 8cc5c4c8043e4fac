// LEAST_REQUEST with Envoy's semantics: with equal weights the endpoint with fewer active requests
// wins among choice_count random draws; with unequal weights the shares follow
// weight / (active + 1)^bias; bad config is refused naming the field; and end to end through
// mesh-proxy an upstream that holds its requests gets clearly fewer of them than a fast one.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type ServerResponse } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it, test } from 'node:test';
import { Cluster_DiscoveryType, Cluster_LbPolicy, ClusterSchema } from '../../src/gen/envoy/config/cluster/v3/cluster_pb.js';
import { create } from '@bufbuild/protobuf';
import { loadBootstrap } from '../../src/dataplane/bootstrap.js';
import { DynamicClusterManager } from '../../src/dataplane/clusters.js';
import { ActiveRequests, leastRequestPick, LEAST_REQUEST_DEFAULTS } from '../../src/dataplane/least-request.js';
import { MeshProxy } from '../../src/dataplane/proxy.js';
import { StatsStore } from '../../src/dataplane/stats.js';
import { ConfigError } from '../../src/envoy/config-error.js';
import { pack, TypeUrl } from '../../src/envoy/types.js';
import { eventually } from '../helpers/proc.js';
import { close, get, listen } from '../helpers/http.js';
import { FixtureAds, hcmChain, listener, writeBootstrap } from './xds-fixtures.js';

/** A fixed pseudo-random sequence, so that the shares below do not depend on luck. */
function lcg(seed = 7): () => number {
  let x = seed;
  return () => {
    x = (x * 1103515245 + 12345) % 2 ** 31;
    return x / 2 ** 31;
  };
}

const a = { host: '10.0.0.1', port: 80, weight: 1 };
const b = { host: '10.0.0.2', port: 80, weight: 1 };

function share(n: number, pick: () => { host: string }, host: string): number {
  let hits = 0;
  for (let i = 0; i < n; i++) if (pick().host === host) hits++;
  return hits / n;
}

test('equal weights: the endpoint with fewer active requests wins the draw; more choices avoid a busy one more', () => {
  const active = new ActiveRequests();
  for (let i = 0; i < 5; i++) active.begin(a);
  const random = lcg();
  // a is only picked when every draw is a: 1/4 with two choices, 1/1024 with ten.
  const two = share(2000, () => leastRequestPick([a, b], LEAST_REQUEST_DEFAULTS, active, [], random), a.host);
  assert.ok(two > 0.15 && two < 0.35, `busy endpoint's share with 2 choices: ${two}`);
  const ten = share(2000, () => leastRequestPick([a, b], { choiceCount: 10, bias: 1 }, active, [], random), a.host);
  assert.ok(ten < 0.01, `busy endpoint's share with 10 choices: ${ten}`);
});

test('a release takes the request off once; idle endpoints share equally', () => {
  const active = new ActiveRequests();
  const release = active.begin(a);
  active.begin(a);
  release();
  release();
  assert.equal(active.of(a), 1);
  const idle = new ActiveRequests();
  const random = lcg(3);
  const s = share(4000, () => leastRequestPick([a, b], LEAST_REQUEST_DEFAULTS, idle, [], random), a.host);
  assert.ok(s > 0.4 && s < 0.6, `share of one of two idle endpoints: ${s}`);
});

test('unequal weights: shares follow weight / (active + 1)^bias', () => {
  const heavy = { host: '10.0.0.3', port: 80, weight: 2 };
  const active = new ActiveRequests();
  const current: number[] = [];
  assert.equal(share(300, () => leastRequestPick([heavy, b], LEAST_REQUEST_DEFAULTS, active, current), heavy.host), 2 / 3, 'idle: by weight');
  for (let i = 0; i < 3; i++) active.begin(heavy);
  // 2 / (3 + 1) = 0.5 against 1: a third.
  const busyState: number[] = [];
  const busy = share(300, () => leastRequestPick([heavy, b], LEAST_REQUEST_DEFAULTS, active, busyState), heavy.host);
  assert.ok(Math.abs(busy - 1 / 3) < 0.01, `busy heavy endpoint's share: ${busy}`);
  const noBiasState: number[] = [];
  const noBias = share(300, () => leastRequestPick([heavy, b], { choiceCount: 2, bias: 0 }, active, noBiasState), heavy.host);
  assert.ok(Math.abs(noBias - 2 / 3) < 0.01, `bias 0 ignores active requests: ${noBias}`);
});

test('choice_count below 2 is refused naming the field; the cluster set is unchanged', () => {
  const cm = new DynamicClusterManager(new StatsStore());
  const cluster = (choiceCount: number) =>
    create(ClusterSchema, {
      name: 'lr',
      clusterDiscoveryType: { case: 'type', value: Cluster_DiscoveryType.STATIC },
      lbPolicy: Cluster_LbPolicy.LEAST_REQUEST,
      lbConfig: { case: 'leastRequestLbConfig', value: { choiceCount } },
    });
  cm.commit(cm.prepare([cluster(3)], new Map()));
  assert.throws(() => cm.prepare([cluster(1)], new Map()), (e: unknown) => e instanceof ConfigError && /least_request_lb_config\.choice_count/.test(e.message) && /at least 2, got 1/.test(e.message));
  assert.equal(cm.info().length, 1);
});

describe('LEAST_REQUEST through mesh-proxy', () => {
  let dir: string;
  let ads: FixtureAds;
  let proxy: MeshProxy;
  const held: ServerResponse[] = [];
  let slowArrived: () => void = () => {};
  const slow = createServer((_req, res) => {
    held.push(res);
    slowArrived();
  });
  const fast = createServer((_req, res) => res.end('fast'));

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'least-request-'));
    const ports = [await listen(slow), await listen(fast)];
    ads = new FixtureAds();
    await ads.listen();
    const lbEndpoints = ports.map((p) => ({ hostIdentifier: { case: 'endpoint' as const, value: { address: { address: { case: 'socketAddress' as const, value: { address: '127.0.0.1', portSpecifier: { case: 'portValue' as const, value: p } } } } } } }));
    ads.set(TypeUrl.Cluster, [
      { name: 'app', any: pack(ClusterSchema, { name: 'app', clusterDiscoveryType: { case: 'type', value: Cluster_DiscoveryType.STATIC }, lbPolicy: Cluster_LbPolicy.LEAST_REQUEST, loadAssignment: { clusterName: 'app', endpoints: [{ lbEndpoints }] } }) },
    ]);
    ads.set(TypeUrl.Listener, [listener('in', 0, [hcmChain({ cluster: 'app' })])]);
    proxy = new MeshProxy({ bootstrap: loadBootstrap({ path: writeBootstrap(dir, ads.port, 0) }), drainTimeMs: 1_000, initialBackoffMs: 50 });
    await proxy.start();
    await eventually(() => assert.ok(proxy.listeners.info().find((l) => l.name === 'in')?.bound, 'listener in is bound'), 10_000);
  });

  after(async () => {
    for (const r of held) r.end();
    await proxy.stop(0);
    ads.close();
    await close(slow);
    await close(fast);
    rmSync(dir, { recursive: true, force: true });
  });

  it('sends clearly fewer requests to an upstream that still holds earlier ones (round robin would split them evenly)', async () => {
    const port = proxy.listeners.info().find((l) => l.name === 'in')!.bound!.port;
    const pending: Promise<unknown>[] = [];
    let fastAnswers = 0;
    const total = 100;
    for (let i = 0; i < total; i++) {
      // Each request either reaches the slow upstream (and stays open there) or is answered by the fast one.
      const arrived = new Promise<void>((r) => (slowArrived = r));
      const answered = get(false, port, '/');
      pending.push(answered);
      const outcome = await Promise.race([arrived.then(() => 'slow'), answered.then((r) => r.body)]);
      if (outcome === 'fast') fastAnswers++;
    }
    assert.equal(held.length + fastAnswers, total);
    assert.ok(held.length < total * 0.4, `the slow upstream got ${held.length} of ${total} while holding them`);
    assert.ok(held.length > 0, 'the slow upstream is still chosen when both draws are it');
    for (const r of held) r.end('slow');
    await Promise.all(pending);
  });
});
