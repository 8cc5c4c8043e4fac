// The cluster manager: endpoints from load_assignment and EDS, health, priorities, weights,
// two-phase updates, ORIGINAL_DST by header, and what is refused.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { create, type MessageInitShape } from '@bufbuild/protobuf';
import { Cluster_DiscoveryType, Cluster_LbPolicy, ClusterSchema } from '../../src/gen/envoy/config/cluster/v3/cluster_pb.js';
import { HealthStatus } from '../../src/gen/envoy/config/core/v3/health_check_pb.js';
import { ClusterLoadAssignmentSchema } from '../../src/gen/envoy/config/endpoint/v3/endpoint_pb.js';
import { DynamicClusterManager } from '../../src/dataplane/clusters.js';
import { ConfigError } from '../../src/envoy/config-error.js';
import { requestView } from '../../src/envoy/request.js';
import { StatsStore } from '../../src/dataplane/stats.js';

type ClusterInit = MessageInitShape<typeof ClusterSchema>;
const ep = (port: number, o: { weight?: number; health?: HealthStatus } = {}) => ({
  hostIdentifier: { case: 'endpoint' as const, value: { address: { address: { case: 'socketAddress' as const, value: { address: '10.0.0.1', portSpecifier: { case: 'portValue' as const, value: port } } } } } },
  ...(o.weight ? { loadBalancingWeight: o.weight } : {}),
  healthStatus: o.health ?? HealthStatus.UNKNOWN,
});
const cla = (name: string, localities: Array<{ priority?: number; eps: ReturnType<typeof ep>[]; zone?: string; weight?: number }>) =>
  create(ClusterLoadAssignmentSchema, {
    clusterName: name,
    endpoints: localities.map((l) => ({ priority: l.priority ?? 0, lbEndpoints: l.eps, locality: { region: 'r', zone: l.zone ?? '' }, ...(l.weight ? { loadBalancingWeight: l.weight } : {}) })),
  });
const cluster = (init: ClusterInit) => create(ClusterSchema, init);
const eds = (name: string, extra: Omit<Exclude<ClusterInit, { $typeName: string }>, 'name'> = {}) =>
  cluster({ name, clusterDiscoveryType: { case: 'type', value: Cluster_DiscoveryType.EDS }, edsClusterConfig: { edsConfig: { configSourceSpecifier: { case: 'ads', value: {} } } }, ...extra });
const view = requestView({});

function picks(cm: DynamicClusterManager, name: string, n: number): number[] {
  return Array.from({ length: n }, () => cm.get(name)!.pick(view)?.port ?? 0);
}

describe('DynamicClusterManager', () => {
  it('balances round robin over HEALTHY/UNKNOWN endpoints of the best priority, by weight, while it is healthy enough', () => {
    const cm = new DynamicClusterManager(new StatsStore());
    // 3 of 4 healthy (75 %, times 1.4 over 100 %): P=0 takes everything.
    const assignments = new Map([
      ['a', cla('a', [{ eps: [ep(1, { weight: 3 }), ep(2, { health: HealthStatus.HEALTHY }), ep(5), ep(3, { health: HealthStatus.UNHEALTHY })] }, { priority: 1, eps: [ep(9)] }])],
    ]);
    cm.commit(cm.prepare([eds('a')], assignments));
    const counts = new Map<number, number>();
    for (const p of picks(cm, 'a', 50)) counts.set(p, (counts.get(p) ?? 0) + 1);
    assert.deepEqual([...counts.entries()].sort(), [[1, 30], [2, 10], [5, 10]]);
    // 2 of 4 healthy: P=0's health is 70, so P=1 gets 30 % of the requests (Envoy's priority load).
    cm.commit(cm.prepareEndpoints(new Map([['a', cla('a', [{ eps: [ep(1), ep(2), ep(3, { health: HealthStatus.UNHEALTHY }), ep(4, { health: HealthStatus.DRAINING })] }, { priority: 1, eps: [ep(9)] }])]])));
    const spread = picks(cm, 'a', 2000);
    const toBackup = spread.filter((p) => p === 9).length / spread.length;
    assert.ok(toBackup > 0.25 && toBackup < 0.35, `P=1 share ${toBackup}`);
    assert.ok(spread.every((p) => p === 1 || p === 2 || p === 9), 'no unhealthy host outside panic');
    // Priority 0 with no healthy host: priority 1 takes over.
    cm.commit(cm.prepareEndpoints(new Map([['a', cla('a', [{ eps: [ep(3, { health: HealthStatus.UNHEALTHY })] }, { priority: 1, eps: [ep(9)] }])]])));
    assert.deepEqual(picks(cm, 'a', 2), [9, 9]);
  });

  it('locality_weighted_lb_config: a locality by its weight times its availability, then a host of it; a locality without weight gets nothing', () => {
    const cm = new DynamicClusterManager(new StatsStore());
    const weighted = eds('w', { commonLbConfig: { localityConfigSpecifier: { case: 'localityWeightedLbConfig', value: {} } } });
    const localities = (aHealthy: boolean) => [
      { zone: 'a', weight: 80, eps: [ep(1), ep(2, { health: aHealthy ? HealthStatus.HEALTHY : HealthStatus.UNHEALTHY })] },
      { zone: 'b', weight: 20, eps: [ep(3)] },
      { zone: 'c', eps: [ep(4)] },
    ];
    cm.commit(cm.prepare([weighted, eds('plain')], new Map([['w', cla('w', localities(true))], ['plain', cla('plain', localities(true))]])));
    const share = (name: string, n: number) => {
      const counts = new Map<number, number>();
      for (const p of picks(cm, name, n)) counts.set(p, (counts.get(p) ?? 0) + 1);
      return [...counts.entries()].sort();
    };
    assert.deepEqual(share('w', 100), [[1, 40], [2, 40], [3, 20]], 'zone a 80 %, its two hosts in turn; zone b 20 %; zone c never');
    assert.deepEqual(share('plain', 100), [[1, 25], [2, 25], [3, 25], [4, 25]], 'without the config: every host in turn');
    // One of zone a's two hosts unhealthy: availability min(1, 1.4 x 1/2) = 0.7, so 56 against 20.
    cm.commit(cm.prepareEndpoints(new Map([['w', cla('w', localities(false))]])));
    const [[, one], [, three]] = share('w', 76) as [number, number][];
    assert.deepEqual([one, three], [56, 20]);
  });

  it('keeps a cluster (and its pool) across updates; an EDS cluster without assignment has no endpoint', () => {
    const cm = new DynamicClusterManager(new StatsStore());
    cm.commit(cm.prepare([eds('a')], new Map()));
    const before = cm.get('a');
    assert.equal(before!.pick(view), undefined);
    cm.commit(cm.prepareEndpoints(new Map([['a', cla('a', [{ eps: [ep(5)] }])]])));
    assert.equal(cm.get('a'), before);
    assert.equal(cm.get('a')!.pick(view)?.port, 5);
    cm.commit(cm.prepare([], new Map()));
    assert.equal(cm.get('a'), undefined);
  });

  it('routes ORIGINAL_DST by the x-envoy-original-dst-host header when allowed', () => {
    const cm = new DynamicClusterManager(new StatsStore());
    cm.commit(
      cm.prepare(
        [cluster({ name: 'o', clusterDiscoveryType: { case: 'type', value: Cluster_DiscoveryType.ORIGINAL_DST }, lbPolicy: Cluster_LbPolicy.CLUSTER_PROVIDED, lbConfig: { case: 'originalDstLbConfig', value: { useHttpHeader: true } } })],
        new Map(),
      ),
    );
    assert.deepEqual(cm.get('o')!.pick(requestView({ headers: { 'x-envoy-original-dst-host': '10.1.1.1:8080' } })), { host: '10.1.1.1', port: 8080 });
    assert.equal(cm.get('o')!.pick(view), undefined);
  });

  it('routes ORIGINAL_DST to the restored original destination, never to the listener the client reached', () => {
    const cm = new DynamicClusterManager(new StatsStore());
    cm.commit(cm.prepare([cluster({ name: 'o', clusterDiscoveryType: { case: 'type', value: Cluster_DiscoveryType.ORIGINAL_DST }, lbPolicy: Cluster_LbPolicy.CLUSTER_PROVIDED })], new Map()));
    const o = cm.get('o')!;
    assert.deepEqual(o.pick(requestView({ destination: { address: '10.9.8.7', port: 443, restored: true } })), { host: '10.9.8.7', port: 443 });
    // Not restored: the destination is the proxy's own listener, where connecting would loop.
    assert.equal(o.pick(requestView({ destination: { address: '127.0.0.1', port: 15001 } })), undefined);
    // The header is only read when the cluster says so.
    assert.equal(o.pick(requestView({ headers: { 'x-envoy-original-dst-host': '10.1.1.1:8080' } })), undefined);
  });

  it('refuses what it cannot honour, naming the field, and changes nothing', () => {
    const cm = new DynamicClusterManager(new StatsStore());
    cm.commit(cm.prepare([eds('a')], new Map()));
    assert.throws(() => cm.prepare([cluster({ name: 'o', clusterDiscoveryType: { case: 'type', value: Cluster_DiscoveryType.ORIGINAL_DST } })], new Map()), (e: unknown) => e instanceof ConfigError && /^cluster o\.lb_policy/.test(e.message));
    assert.throws(() => cm.prepare([eds('a'), eds('a')], new Map()), /duplicate cluster name/);
    assert.throws(
      () => cm.prepare([cluster({ name: 's', loadAssignment: { endpoints: [{ lbEndpoints: [{ hostIdentifier: { case: 'endpoint', value: { address: { address: { case: 'pipe', value: { path: '/x' } } } } } }] }] } })], new Map()),
      /cluster s\.load_assignment\.endpoints\[0\]\.lb_endpoints\[0\]\.endpoint\.address: a socket_address is required/,
    );
    assert.ok(cm.get('a'));
  });
});
