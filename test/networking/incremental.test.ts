// Generation work shared between proxies and kept across snapshots (docs/xds-server.md, "The XDS
// cache"): what is reused must be exactly what a build from scratch gives, and what changed must
// be rebuilt.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { create, toBinary } from '@bufbuild/protobuf';
import { RouteConfigurationSchema, type RouteConfiguration } from '../../src/gen/envoy/config/route/v3/route_pb.js';
import { HttpFilterSchema, type HttpFilter } from '../../src/gen/envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager_pb.js';
import { RouterSchema } from '../../src/gen/envoy/extensions/filters/http/router/v3/router_pb.js';
import type { AnyResource } from '../../src/api/types.js';
import { PushContext } from '../../src/model/push-context.js';
import type { Service, ServiceInstance } from '../../src/model/service.js';
import { XdsCache } from '../../src/xds/cache.js';
import { clusterLoadAssignments } from '../../src/xds/generators/sidecar-endpoints.js';
import { sidecarClusters, sidecarListeners, sidecarRoutes } from '../../src/xds/generators/sidecar.js';
import { AggregateRegistry } from '../../src/registry/aggregate.js';
import { ServiceEntryRegistry } from '../../src/registry/serviceentry.js';
import { ClusterLoadAssignmentSchema } from '../../src/gen/envoy/config/endpoint/v3/endpoint_pb.js';
import { pack } from '../../src/envoy/types.js';
import { hcmOf, listenerByName, svc } from './envoy.js';
import { pushOf, serviceEntry, sidecar, sidecarProxy, storeOf, workloadEntry } from './fixtures.js';

const NET = 'networking.mesh.io/v1';

function httpService(namespace: string, name: string, extra: { addresses?: string[]; app?: string } = {}): AnyResource {
  return serviceEntry(namespace, name, {
    hosts: [`${name}.${namespace}.svc.cluster.local`],
    ...(extra.addresses ? { addresses: extra.addresses } : {}),
    location: 'MESH_INTERNAL',
    resolution: 'STATIC',
    ports: [{ number: 80, name: 'http', protocol: 'HTTP', targetPort: 8080 }],
    workloadSelector: { labels: { app: extra.app ?? name } },
  });
}

function filter(name: string): HttpFilter {
  return create(HttpFilterSchema, { name, configType: { case: 'typedConfig', value: pack(RouterSchema, {}) } });
}

/** The HTTP filter names of a listener's first HTTP chain. */
function inboundHttpFilterNames(listeners: readonly ReturnType<typeof sidecarListeners>[number][]): string[] {
  const chain = listenerByName(listeners, 'virtualInbound').filterChains.find((c) => c.filters[0]?.name === 'envoy.filters.network.http_connection_manager')!;
  return hcmOf(chain).httpFilters.map((f) => f.name);
}

test('sidecars with the same inbound inputs share one listener list; another policy selection gets its own, with its filters', () => {
  const push = pushOf([
    httpService('foo', 'echo'),
    httpService('foo', 'other'),
    workloadEntry('foo', 'echo-1', { address: '10.0.0.1', labels: { app: 'echo' } }),
    workloadEntry('foo', 'echo-2', { address: '10.0.0.2', labels: { app: 'echo' } }),
    workloadEntry('foo', 'other-1', { address: '10.0.0.3', labels: { app: 'other' } }),
  ]);
  const echoFilters = [filter('envoy.filters.http.rbac')];
  const otherFilters = [filter('envoy.filters.http.jwt_authn'), filter('envoy.filters.http.rbac')];
  const opts = { cache: new XdsCache(), inboundHttpFilters: (p: { labels: Readonly<Record<string, string>> }) => (p.labels['app'] === 'echo' ? echoFilters : otherFilters) };
  const echo1 = sidecarListeners(sidecarProxy('10.0.0.1', 'echo-1', 'foo', { LABELS: { app: 'echo' } }), push, opts);
  const echo2 = sidecarListeners(sidecarProxy('10.0.0.2', 'echo-2', 'foo', { LABELS: { app: 'echo' } }), push, opts);
  const other = sidecarListeners(sidecarProxy('10.0.0.3', 'other-1', 'foo', { LABELS: { app: 'other' } }), push, opts);
  assert.equal(echo2, echo1, 'the same list for the same ports and filters');
  assert.notEqual(other, echo1);
  assert.deepEqual(inboundHttpFilterNames(echo1), ['envoy.filters.http.rbac', 'envoy.filters.http.router']);
  assert.deepEqual(inboundHttpFilterNames(other), ['envoy.filters.http.jwt_authn', 'envoy.filters.http.rbac', 'envoy.filters.http.router']);
  // Other inbound options are inputs too: HTTP/1.0 from the proxy's own metadata.
  const http10 = sidecarListeners(sidecarProxy('10.0.0.2', 'echo-2', 'foo', { LABELS: { app: 'echo' }, HTTP10: '1' }), push, opts);
  assert.notEqual(http10, echo1);
});

test("headless Pod listeners: each Pod's proxy lacks the listener of its own address and keeps the others'", () => {
  const ports = [{ name: 'tcp-db', port: 5432, protocol: 'TCP' as const }];
  const db: Service = svc({ hostname: 'db.foo.svc.cluster.local', ports, resolution: 'NONE', registry: 'Orchestrator' });
  const instance = (address: string): ServiceInstance => ({
    hostname: db.hostname,
    namespace: 'foo',
    servicePort: ports[0]!,
    address,
    endpointPort: 5432,
    labels: {},
    serviceAccount: '',
    locality: { region: '', zone: '', subZone: '' },
    weight: 1,
    network: '',
    clusterId: 'c1',
  });
  const instances = [instance('10.0.1.1'), instance('10.0.1.2')];
  const push = PushContext.build({ config: storeOf([]), registry: { services: () => [db], instances: () => instances }, clusterId: 'c1' });
  const opts = { headlessPodListeners: true, cache: new XdsCache() };
  const names = (ip: string): string[] => sidecarListeners(sidecarProxy(ip, `p-${ip}`, 'foo'), push, opts).map((l) => l.name).filter((n) => n.endsWith('_5432'));
  assert.deepEqual(names('10.0.1.1'), ['10.0.1.2_5432']);
  assert.deepEqual(names('10.0.1.2'), ['10.0.1.1_5432']);
  assert.deepEqual(names('10.0.9.9'), ['10.0.1.1_5432', '10.0.1.2_5432'], 'a proxy that is no Pod of the service sees every Pod');
});

const bytes = (r: RouteConfiguration): Uint8Array => toBinary(RouteConfigurationSchema, r);
const hostOf = (r: RouteConfiguration, name: string) => r.virtualHosts.find((h) => h.name === name);

test('RDS: a new service builds its virtual host only; the configuration is the one a build from scratch gives', () => {
  const cache = new XdsCache();
  const proxy = sidecarProxy('10.0.0.1', 'a-1', 'foo');
  const base = [httpService('foo', 'a'), httpService('bar', 'b'), workloadEntry('foo', 'a-1', { address: '10.0.0.1', labels: { app: 'a' } })];
  const [before] = sidecarRoutes(proxy, pushOf(base), undefined, false, cache);
  const next = pushOf([...base, httpService('bar', 'c')]);
  const [after] = sidecarRoutes(proxy, next, undefined, false, cache);
  const [scratch] = sidecarRoutes(proxy, next);
  assert.deepEqual(bytes(after!), bytes(scratch!));
  assert.deepEqual(after!.virtualHosts.map((h) => h.name), ['a.foo.svc.cluster.local:80', 'b.bar.svc.cluster.local:80', 'c.bar.svc.cluster.local:80', 'allow_any']);
  assert.equal(hostOf(after!, 'a.foo.svc.cluster.local:80'), hostOf(before!, 'a.foo.svc.cluster.local:80'), 'unchanged hosts are reused');
  assert.equal(hostOf(after!, 'b.bar.svc.cluster.local:80'), hostOf(before!, 'b.bar.svc.cluster.local:80'));
  // Unchanged inputs: the very same configuration (nothing packed or sent again).
  assert.equal(sidecarRoutes(proxy, pushOf([...base, httpService('bar', 'c')]), undefined, false, cache)[0], after);
  // The bare name is the proxy's namespace's only: a proxy in `bar` gets `b` and `c`, not `a`.
  const [fromBar] = sidecarRoutes(sidecarProxy('10.0.0.7', 'x-1', 'bar'), next, undefined, false, cache);
  assert.ok(hostOf(fromBar!, 'b.bar.svc.cluster.local:80')!.domains.includes('b'));
  assert.ok(!hostOf(fromBar!, 'a.foo.svc.cluster.local:80')!.domains.includes('a'));
  assert.ok(hostOf(after!, 'a.foo.svc.cluster.local:80')!.domains.includes('a'));
});

test('RDS: a domain claimed by an earlier host is dropped from the later one without changing the reused host', () => {
  const cache = new XdsCache();
  const proxy = sidecarProxy('10.0.0.1', 'x-1', 'foo');
  const twinB = httpService('foo', 'b', { addresses: ['10.96.0.1'] });
  const [shared] = sidecarRoutes(proxy, pushOf([httpService('foo', 'a', { addresses: ['10.96.0.1'] }), twinB]), undefined, false, cache);
  assert.ok(!hostOf(shared!, 'b.foo.svc.cluster.local:80')!.domains.includes('10.96.0.1'), 'the VIP stays with the first host');
  const [alone] = sidecarRoutes(proxy, pushOf([twinB]), undefined, false, cache);
  assert.ok(hostOf(alone!, 'b.foo.svc.cluster.local:80')!.domains.includes('10.96.0.1'), 'alone, b keeps its VIP');
});

test('RDS: a host routed by a VirtualService follows its edits', () => {
  const cache = new XdsCache();
  const proxy = sidecarProxy('10.0.0.1', 'x-1', 'foo');
  const vs = (subsetHost: string): AnyResource => ({
    apiVersion: NET,
    kind: 'VirtualService',
    metadata: { namespace: 'foo', name: 'a' },
    spec: { hosts: ['a.foo.svc.cluster.local'], http: [{ route: [{ destination: { host: subsetHost } }] }] },
  });
  const base = [httpService('foo', 'a'), httpService('foo', 'b')];
  const routeCluster = (r: RouteConfiguration): string => {
    const action = hostOf(r, 'a.foo.svc.cluster.local:80')!.routes[0]!.action;
    assert.equal(action.case, 'route');
    assert.equal(action.value.clusterSpecifier.case, 'cluster');
    return action.value.clusterSpecifier.value;
  };
  for (const [target, cluster] of [
    ['a.foo.svc.cluster.local', 'outbound|80||a.foo.svc.cluster.local'],
    ['b.foo.svc.cluster.local', 'outbound|80||b.foo.svc.cluster.local'],
  ] as const) {
    const push = pushOf([...base, vs(target)]);
    const [cached] = sidecarRoutes(proxy, push, undefined, false, cache);
    assert.equal(routeCluster(cached!), cluster);
    assert.deepEqual(bytes(cached!), bytes(sidecarRoutes(proxy, push)[0]!));
  }
});

test("CDS: scopes that see a service alike share its clusters; a DestinationRule exported to one namespace changes that scope's only", () => {
  const dr: AnyResource = {
    apiVersion: NET,
    kind: 'DestinationRule',
    metadata: { namespace: 'foo', name: 'a' },
    spec: { host: 'a.foo.svc.cluster.local', exportTo: ['.'], trafficPolicy: { connectionPool: { tcp: { maxConnections: 7 } } } },
  };
  const push = pushOf([httpService('foo', 'a'), httpService('bar', 'b'), dr]);
  const cluster = (ns: string, name: string) => sidecarClusters(sidecarProxy('10.0.0.9', 'x-1', ns), push, true, new XdsCache()).find((c) => c.name === name)!;
  assert.equal(cluster('bar', 'outbound|80||b.bar.svc.cluster.local'), cluster('baz', 'outbound|80||b.bar.svc.cluster.local'));
  assert.equal(cluster('bar', 'outbound|80||a.foo.svc.cluster.local'), cluster('baz', 'outbound|80||a.foo.svc.cluster.local'));
  const inFoo = cluster('foo', 'outbound|80||a.foo.svc.cluster.local');
  assert.equal(inFoo.circuitBreakers?.thresholds[0]?.maxConnections, 7, 'the rule applies in its own namespace');
  assert.notEqual(cluster('bar', 'outbound|80||a.foo.svc.cluster.local').circuitBreakers?.thresholds[0]?.maxConnections, 7, 'and not where it is not exported');
});

test('a new service a Sidecar hides from a proxy leaves its clusters, routes and listeners the very same objects (nothing to send)', () => {
  const cache = new XdsCache();
  const base = [httpService('bar', 'b'), httpService('foo', 'a'), sidecar('bar', 'own-namespace', { egress: [{ hosts: ['./*'] }] })];
  const proxy = sidecarProxy('10.0.0.7', 'b-1', 'bar');
  const generate = (push: PushContext) => ({
    clusters: sidecarClusters(proxy, push, true, cache),
    routes: sidecarRoutes(proxy, push, undefined, false, cache),
    listeners: sidecarListeners(proxy, push, { cache }),
  });
  const before = generate(pushOf(base));
  const after = generate(pushOf([...base, httpService('foo', 'c')]));
  for (const kind of ['clusters', 'routes', 'listeners'] as const) {
    assert.equal(after[kind].length, before[kind].length, kind);
    after[kind].forEach((m, i) => assert.equal(m, before[kind][i], `${kind}: ${m.name}`));
  }
  assert.ok(!after.clusters.some((c) => c.name.includes('a.foo')), 'the Sidecar hides foo');
});

test('across snapshots of one registry: an endpoint change rebuilds that service\'s assignment only, a new service adds its clusters and keeps the others\' objects', () => {
  const cache = new XdsCache();
  const store = storeOf([httpService('foo', 'a'), httpService('bar', 'b'), workloadEntry('foo', 'a-1', { address: '10.0.0.1', labels: { app: 'a' } }), workloadEntry('bar', 'b-1', { address: '10.0.0.2', labels: { app: 'b' } })]);
  const registry = new AggregateRegistry([new ServiceEntryRegistry(store, 'c1')]);
  const snapshot = (): PushContext => PushContext.build({ config: store, registry, domain: 'cluster.local', clusterId: 'c1' });
  const proxy = sidecarProxy('10.0.0.1', 'a-1', 'foo');
  const byName = <T extends { clusterName?: string; name?: string }>(list: readonly T[]): Map<string, T> => new Map(list.map((m) => [m.clusterName ?? m.name!, m]));
  const [a, b] = ['outbound|80||a.foo.svc.cluster.local', 'outbound|80||b.bar.svc.cluster.local'];

  const first = snapshot();
  const endpoints1 = byName(clusterLoadAssignments(proxy, first, undefined, cache));
  const clusters1 = byName(sidecarClusters(proxy, first, true, cache));

  store.apply(workloadEntry('bar', 'b-2', { address: '10.0.0.3', labels: { app: 'b' } }));
  const second = snapshot();
  const endpoints2 = byName(clusterLoadAssignments(proxy, second, undefined, cache));
  assert.equal(endpoints2.get(a), endpoints1.get(a), 'the unchanged assignment is the same object');
  assert.notEqual(endpoints2.get(b), endpoints1.get(b));
  assert.deepEqual(endpoints2.get(b)!.endpoints.flatMap((l) => l.lbEndpoints).length, 2, 'the new endpoint is in');
  const scratch = byName(clusterLoadAssignments(proxy, pushOf([...store.list('ServiceEntry'), ...store.list('WorkloadEntry')])));
  for (const name of [a, b]) assert.deepEqual(toBinary(ClusterLoadAssignmentSchema, endpoints2.get(name)!), toBinary(ClusterLoadAssignmentSchema, scratch.get(name)!), name);

  store.apply(httpService('bar', 'c'));
  const third = snapshot();
  const clusters3 = byName(sidecarClusters(proxy, third, true, cache));
  assert.ok(clusters3.has('outbound|80||c.bar.svc.cluster.local'));
  for (const name of [a, b]) assert.equal(clusters3.get(name), clusters1.get(name), `${name}: the same cluster object`);
  assert.equal(byName(clusterLoadAssignments(proxy, third, undefined, cache)).get(b), endpoints2.get(b));
});
