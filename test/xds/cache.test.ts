// The XDS cache: an LRU with its metrics, and, through the mesh generators, resources reused across
// snapshots while their inputs are unchanged and rebuilt once an input changes.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { create, type JsonObject } from '@bufbuild/protobuf';
import { NodeSchema } from '../../src/gen/envoy/config/core/v3/base_pb.js';
import { ClusterLoadAssignmentSchema } from '../../src/gen/envoy/config/endpoint/v3/endpoint_pb.js';
import { setScopeLevel } from '../../src/common/log.js';
import type { AnyResource } from '../../src/api/types.js';
import { PushContext } from '../../src/model/push-context.js';
import { ServiceEntryRegistry } from '../../src/registry/serviceentry.js';
import { cacheKey, XdsCache } from '../../src/xds/cache.js';
import type { ProxyInfo, ResourceGenerator, XdsResource } from '../../src/xds/generator.js';
import { createMeshGenerators } from '../../src/xds/generators/index.js';
import { TypeUrl, unpack } from '../../src/envoy/types.js';
import { authorizationPolicy, MESH, storeOf, workloadEntry } from '../networking/fixtures.js';
import { counterValue, gaugeValue } from './harness.js';

setScopeLevel('model', 'error');

test('LRU: hits refresh recency, the least recently used entry is evicted beyond the size; metrics', async () => {
  const cache = new XdsCache({ enabled: true, size: 2, stats: true });
  const [hits, misses, evictions] = [await counterValue('xds_cache_reads', { type: 'hit' }), await counterValue('xds_cache_reads', { type: 'miss' }), await counterValue('xds_cache_evictions')];
  let builds = 0;
  const get = (k: string) => cache.getOrBuild(k, () => ({ k, n: ++builds }));
  const a = get('a');
  get('b');
  assert.equal(get('a'), a, 'a hit returns the kept object');
  get('c'); // evicts b, the least recently used
  assert.equal(cache.size, 2);
  assert.equal(await gaugeValue('xds_cache_size'), 2);
  assert.equal(get('a'), a);
  const buildsBefore = builds;
  get('b');
  assert.equal(builds, buildsBefore + 1, 'b was evicted and is built again');
  assert.equal(await counterValue('xds_cache_reads', { type: 'hit' }), hits + 2);
  assert.equal(await counterValue('xds_cache_reads', { type: 'miss' }), misses + 4);
  assert.equal(await counterValue('xds_cache_evictions'), evictions + 2);
  cache.clear();
  assert.equal(cache.size, 0);
  assert.equal(await counterValue('xds_cache_evictions'), evictions + 4);
});

test('unbounded with size <= 0; disabled builds every time; hit/miss reads counted only with stats', async () => {
  const unbounded = new XdsCache({ enabled: true, size: 0, stats: false });
  const reads = await counterValue('xds_cache_reads', { type: 'miss' });
  for (let i = 0; i < 50; i++) unbounded.getOrBuild(String(i), () => i);
  assert.equal(unbounded.size, 50);
  assert.equal(await counterValue('xds_cache_reads', { type: 'miss' }), reads, 'PILOT_XDS_CACHE_STATS off: no read accounting');
  const off = new XdsCache({ enabled: false, size: 10 });
  let builds = 0;
  off.getOrBuild('k', () => ++builds);
  off.getOrBuild('k', () => ++builds);
  assert.equal(builds, 2);
  assert.equal(off.size, 0);
});

test('keys: equal inputs give equal keys, any changed input another key', () => {
  assert.equal(cacheKey('eds', 'c', [{ address: '10.0.0.1', port: 80 }]), cacheKey('eds', 'c', [{ address: '10.0.0.1', port: 80 }]));
  assert.notEqual(cacheKey('eds', 'c', [{ address: '10.0.0.1', port: 80 }]), cacheKey('eds', 'c', [{ address: '10.0.0.1', port: 81 }]));
  assert.notEqual(cacheKey('eds', 'c', []), cacheKey('cds', 'c', []));
  assert.notEqual(cacheKey('x', 1n), cacheKey('x', 2n));
  assert.notEqual(cacheKey('x', { value: new Uint8Array([1, 2]) }), cacheKey('x', { value: new Uint8Array([1, 3]) }));
  assert.equal(cacheKey('x', { value: new Uint8Array([1, 2]) }), cacheKey('x', { value: new Uint8Array([1, 2]) }));
});

const ECHO_CLUSTER = 'outbound|80||echo.foo.svc.cluster.local';
const proxy: ProxyInfo = {
  id: 'sidecar~10.0.0.1~echo-1.foo~foo.svc.cluster.local',
  metadata: { NAMESPACE: 'foo', LABELS: { app: 'echo' } } as JsonObject,
  node: create(NodeSchema, { id: 'sidecar~10.0.0.1~echo-1.foo~foo.svc.cluster.local' }),
  connectionId: 'c1',
  peer: '127.0.0.1:1',
};

async function byName(gens: Map<string, ResourceGenerator>, typeUrl: string, names?: string[]): Promise<Map<string, XdsResource>> {
  const subscription = names ? { wildcard: false, names: new Set(names) } : { wildcard: true, names: new Set<string>() };
  const rs = await gens.get(typeUrl)!.generate({ proxy, typeUrl, subscription });
  return new Map(rs.map((r) => [r.name, r]));
}

test('generators reuse cached resources across snapshots while their inputs are unchanged, and rebuild them when an input changes', async () => {
  const store = storeOf(MESH);
  const registry = new ServiceEntryRegistry(store, 'c1');
  let push = PushContext.build({ config: store, registry, clusterId: 'c1' });
  const gens = createMeshGenerators({ pushContext: () => push, inboundSniffing: false, cache: new XdsCache({ enabled: true, size: 1000, stats: true }) });
  const snapshot = async () => ({
    cds: await byName(gens, TypeUrl.Cluster),
    eds: await byName(gens, TypeUrl.ClusterLoadAssignment, [ECHO_CLUSTER]),
    rds: await byName(gens, TypeUrl.RouteConfiguration, ['80']),
    lds: await byName(gens, TypeUrl.Listener),
  });
  const first = await snapshot();
  const hits = await counterValue('xds_cache_reads', { type: 'hit' });

  // A policy edit: a new snapshot, nothing a cluster, endpoint or route is built from has changed.
  store.apply(authorizationPolicy('foo', 'deny-all', {}) as AnyResource);
  push = PushContext.build({ config: store, registry, clusterId: 'c1' });
  const second = await snapshot();
  for (const [type, resources] of Object.entries(first)) {
    for (const [name, r] of resources) assert.equal(second[type as keyof typeof second].get(name), r, `${type} ${name} is the cached object`);
  }
  assert.ok((await counterValue('xds_cache_reads', { type: 'hit' })) > hits, 'served from the cache');

  // A new endpoint: its load assignment is rebuilt with it; the EDS cluster itself is unchanged.
  store.apply(workloadEntry('foo', 'echo-3', { address: '10.0.0.3', labels: { app: 'echo' } }));
  push = PushContext.build({ config: store, registry, clusterId: 'c1' });
  const third = await snapshot();
  const eds = third.eds.get(ECHO_CLUSTER)!;
  assert.notEqual(eds, first.eds.get(ECHO_CLUSTER));
  const addresses = unpack(eds.resource, ClusterLoadAssignmentSchema).endpoints.flatMap((l) =>
    l.lbEndpoints.map((e) => (e.hostIdentifier.case === 'endpoint' && e.hostIdentifier.value.address?.address.case === 'socketAddress' ? e.hostIdentifier.value.address.address.value.address : '')),
  );
  assert.deepEqual(addresses.sort(), ['10.0.0.1', '10.0.0.2', '10.0.0.3']);
  assert.equal(third.cds.get(ECHO_CLUSTER), first.cds.get(ECHO_CLUSTER), 'EDS cluster kept: endpoints are not part of its input');

  // A changed port protocol: the cluster and the routes are rebuilt.
  const echo = store.get({ kind: 'ServiceEntry', namespace: 'foo', name: 'echo' })!;
  store.apply({ ...echo, spec: { ...echo.spec, ports: [{ number: 80, name: 'http', protocol: 'HTTP2', targetPort: 8080 }, echo.spec.ports![1]!] } });
  push = PushContext.build({ config: store, registry, clusterId: 'c1' });
  const fourth = await snapshot();
  assert.notEqual(fourth.cds.get(ECHO_CLUSTER), first.cds.get(ECHO_CLUSTER));
  assert.notEqual(fourth.rds.get('80'), first.rds.get('80'));
  registry.close();
});
