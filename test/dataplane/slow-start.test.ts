// Slow start (Envoy's slow_start_config on ROUND_ROBIN and LEAST_REQUEST clusters): an endpoint
// that joins healthy is balanced to at weight × max(min_weight_percent, (elapsed / window)^(1 /
// aggression)) until its window ends; endpoints that start together keep equal shares; bad config
// is refused naming the field; and through mesh-proxy a new endpoint gets a small share of the
// requests at first, where round robin alone would give it half.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it, test } from 'node:test';
import { create } from '@bufbuild/protobuf';
import { Cluster_DiscoveryType, Cluster_LbPolicy, ClusterSchema } from '../../src/gen/envoy/config/cluster/v3/cluster_pb.js';
import { loadBootstrap } from '../../src/dataplane/bootstrap.js';
import type { WeightedEndpoint } from '../../src/dataplane/cluster-spec.js';
import { DynamicClusterManager } from '../../src/dataplane/clusters.js';
import { MeshProxy } from '../../src/dataplane/proxy.js';
import { compileSlowStart, SlowStartClock, type SlowStartSpec } from '../../src/dataplane/slow-start.js';
import { StatsStore } from '../../src/dataplane/stats.js';
import { ConfigError } from '../../src/envoy/config-error.js';
import { TypeUrl } from '../../src/envoy/types.js';
import { eventually } from '../helpers/proc.js';
import { close, get, listen } from '../helpers/http.js';
import { FixtureAds, hcmChain, listener, staticCluster, writeBootstrap } from './xds-fixtures.js';

const endpoint = (host: string, health: WeightedEndpoint['health'] = 'healthy', weight = 1): WeightedEndpoint => ({ host, port: 80, weight, health, priority: 0, locality: '', localityWeight: 0 });
const a = endpoint('10.0.0.1');
const b = endpoint('10.0.0.2');
const linear: SlowStartSpec = { windowMs: 10_000, aggression: 1, minWeight: 0.1 };

test('a late endpoint ramps from the minimum weight to its own over the window; then plain weights apply', () => {
  const clock = new SlowStartClock();
  clock.observe([a], linear, 0);
  clock.observe([a, b], linear, 20_000);
  const at = (now: number) => clock.weights(linear, now);
  assert.equal(at(20_000)!(a), 1, 'a left its window long ago');
  assert.equal(at(20_000)!(b), 0.1, 'just joined: min_weight_percent');
  assert.equal(at(25_000)!(b), 0.5, 'half way: half its weight');
  assert.equal(at(29_000)!(b), 0.9);
  assert.equal(at(30_000), undefined, 'nobody in a window: the balancer uses plain weights');
});

test('aggression bends the ramp; weights scale; endpoints that start together stay equal', () => {
  const steep: SlowStartSpec = { windowMs: 10_000, aggression: 2, minWeight: 0 };
  const clock = new SlowStartClock();
  const heavy = endpoint('10.0.0.3', 'healthy', 4);
  clock.observe([a, heavy], steep, 0);
  // (2500 / 10000)^(1/2) = 0.5
  assert.equal(clock.weights(steep, 2_500)!(a), 0.5);
  assert.equal(clock.weights(steep, 2_500)!(heavy), 2);
});

test('an endpoint starts its window when it turns healthy, and again after it left and came back', () => {
  const clock = new SlowStartClock();
  clock.observe([a, endpoint('10.0.0.2', 'unhealthy')], linear, 0);
  clock.observe([a, b], linear, 50_000);
  assert.equal(clock.weights(linear, 50_000)!(b), 0.1, 'healthy now: its window starts now');
  clock.observe([a], linear, 70_000);
  clock.observe([a, b], linear, 80_000);
  assert.equal(clock.weights(linear, 85_000)!(b), 0.5, 'removed and re-added: a new window');
});

const cluster = (lbPolicy: Cluster_LbPolicy, slowStartConfig: object) =>
  create(ClusterSchema, {
    name: 'warm',
    clusterDiscoveryType: { case: 'type', value: Cluster_DiscoveryType.STATIC },
    lbPolicy,
    lbConfig: lbPolicy === Cluster_LbPolicy.ROUND_ROBIN ? { case: 'roundRobinLbConfig', value: { slowStartConfig } } : { case: 'leastRequestLbConfig', value: { slowStartConfig } },
  });

test('compile: Envoy defaults (aggression 1, 10 %), no window is no slow start, a bad aggression falls back to 1', () => {
  assert.deepEqual(compileSlowStart(cluster(Cluster_LbPolicy.ROUND_ROBIN, { slowStartWindow: { seconds: 30n } }), 'c'), { windowMs: 30_000, aggression: 1, minWeight: 0.1 });
  assert.equal(compileSlowStart(cluster(Cluster_LbPolicy.LEAST_REQUEST, {}), 'c'), undefined);
  const odd = compileSlowStart(cluster(Cluster_LbPolicy.LEAST_REQUEST, { slowStartWindow: { seconds: 5n }, aggression: { defaultValue: -1, runtimeKey: '(' }, minWeightPercent: { value: 25 } }), 'c');
  assert.deepEqual(odd, { windowMs: 5_000, aggression: 1, minWeight: 0.25 });
});

test('a min_weight_percent over 100 is refused naming the field; the cluster set is unchanged', () => {
  const cm = new DynamicClusterManager(new StatsStore());
  cm.commit(cm.prepare([cluster(Cluster_LbPolicy.ROUND_ROBIN, { slowStartWindow: { seconds: 5n } })], new Map()));
  assert.throws(
    () => cm.prepare([cluster(Cluster_LbPolicy.ROUND_ROBIN, { slowStartWindow: { seconds: 5n }, minWeightPercent: { value: 150 } })], new Map()),
    (e: unknown) => e instanceof ConfigError && /round_robin_lb_config\.slow_start_config\.min_weight_percent/.test(e.message) && /got 150/.test(e.message),
  );
  assert.equal(cm.info().length, 1);
});

describe('slow start through mesh-proxy', () => {
  let dir: string;
  let ads: FixtureAds;
  let proxy: MeshProxy;
  let firstJoined: number;
  const first = createServer((_req, res) => res.end('first'));
  const late = createServer((_req, res) => res.end('late'));
  let ports: number[];
  /** Short, so that the first endpoint is past its window before the late one joins. */
  const WINDOW_S = 2n;
  const warm = (lbPolicy: Cluster_LbPolicy) =>
    lbPolicy === Cluster_LbPolicy.ROUND_ROBIN
      ? { case: 'roundRobinLbConfig' as const, value: { slowStartConfig: { slowStartWindow: { seconds: WINDOW_S } } } }
      : { case: 'leastRequestLbConfig' as const, value: { slowStartConfig: { slowStartWindow: { seconds: WINDOW_S } } } };

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'slow-start-'));
    ports = [await listen(first), await listen(late)];
    ads = new FixtureAds();
    await ads.listen();
    ads.set(TypeUrl.Cluster, [staticCluster('app', [ports[0]!], { lbPolicy: Cluster_LbPolicy.ROUND_ROBIN, lbConfig: warm(Cluster_LbPolicy.ROUND_ROBIN) })]);
    ads.set(TypeUrl.Listener, [listener('in', 0, [hcmChain({ cluster: 'app' })])]);
    proxy = new MeshProxy({ bootstrap: loadBootstrap({ path: writeBootstrap(dir, ads.port, 0) }), drainTimeMs: 1_000, initialBackoffMs: 50 });
    await proxy.start();
    await eventually(() => assert.ok(proxy.listeners.info().find((l) => l.name === 'in')?.bound, 'listener in is bound'), 10_000);
    firstJoined = Date.now();
  });

  after(async () => {
    await proxy.stop(0);
    ads.close();
    await close(first);
    await close(late);
    rmSync(dir, { recursive: true, force: true });
  });

  async function lateShare(total: number): Promise<number> {
    const port = proxy.listeners.info().find((l) => l.name === 'in')!.bound!.port;
    let hits = 0;
    for (let i = 0; i < total; i++) if ((await get(false, port, '/')).body === 'late') hits++;
    return hits / total;
  }

  async function setCluster(lbPolicy: Cluster_LbPolicy, lbConfig: ReturnType<typeof warm> | undefined, members: readonly number[]): Promise<void> {
    ads.set(TypeUrl.Cluster, [staticCluster('app', members, { lbPolicy, ...(lbConfig ? { lbConfig } : {}) })]);
    await ads.push(TypeUrl.Cluster);
    await eventually(() => assert.equal(proxy.clusters.info().find((c) => c.name === 'app')?.endpoints.length, members.length), 10_000);
  }

  /** The late endpoint joins (again: removed first, so that its window starts over) while the first one is past its window. */
  async function lateJoins(lbPolicy: Cluster_LbPolicy): Promise<void> {
    await setCluster(lbPolicy, warm(lbPolicy), [ports[0]!]);
    await new Promise((r) => setTimeout(r, Math.max(0, firstJoined + Number(WINDOW_S) * 1000 + 100 - Date.now())));
    await setCluster(lbPolicy, warm(lbPolicy), ports);
  }

  it('round robin: a just added endpoint gets about min_weight_percent of its share, not half', async () => {
    await lateJoins(Cluster_LbPolicy.ROUND_ROBIN);
    // 0.1 against 1 at first: 1 in 11, a little more as it warms during the requests.
    const share = await lateShare(60);
    assert.ok(share > 0.03 && share < 0.25, `the late endpoint's share: ${share}`);
  });

  it('least request: the same ramp (Envoy weighs the draw while an endpoint warms)', async () => {
    await lateJoins(Cluster_LbPolicy.LEAST_REQUEST);
    const share = await lateShare(60);
    assert.ok(share > 0.03 && share < 0.25, `the late endpoint's share: ${share}`);
  });

  it('once the window has passed, or without slow start, the two endpoints split evenly', async () => {
    await new Promise((r) => setTimeout(r, Number(WINDOW_S) * 1000));
    // Least request (the last policy) draws at random between two idle endpoints: about half.
    const past = await lateShare(100);
    assert.ok(past > 0.3 && past < 0.7, `past the window: ${past}`);
    await setCluster(Cluster_LbPolicy.ROUND_ROBIN, undefined, [ports[0]!]);
    await setCluster(Cluster_LbPolicy.ROUND_ROBIN, undefined, ports);
    assert.equal(await lateShare(100), 0.5, 'no slow start');
  });
});
