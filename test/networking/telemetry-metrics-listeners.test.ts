// The standard metrics in what the discovery server builds: the stats filter configs of each
// listener class (the Go mesh's TestTelemetryFilters JSON, with our names), where the metadata
// exchange and stats filters sit in sidecar and gateway listeners, per workload and across
// snapshots, and the services in the clusters' metadata the stats filter labels requests with.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { JsonObject, JsonValue } from '@bufbuild/protobuf';
import type { Listener } from '../../src/gen/envoy/config/listener/v3/listener_pb.js';
import { ClusterSchema, type Cluster } from '../../src/gen/envoy/config/cluster/v3/cluster_pb.js';
import { FilterSchema } from '../../src/gen/envoy/config/listener/v3/listener_components_pb.js';
import { HttpConnectionManagerSchema, HttpFilterSchema } from '../../src/gen/envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager_pb.js';
import { create } from '@bufbuild/protobuf';
import { pack, toEnvoyJson, unpack } from '../../src/envoy/types.js';
import { HCM_FILTER_NAME } from '../../src/envoy/names.js';
import { RBACSchema } from '../../src/gen/envoy/extensions/filters/http/rbac/v3/rbac_pb.js';
import type { AnyResource, TelemetrySpec } from '../../src/api/types.js';
import { setScopeLevel } from '../../src/common/log.js';
import { parseProxy } from '../../src/model/proxy.js';
import { recordedMetrics } from '../../src/model/telemetry-metrics.js';
import { readTelemetryProviders } from '../../src/model/telemetry-providers.js';
import { listenerTelemetry, type ListenerClass } from '../../src/networking/telemetry-filters.js';
import { XdsCache } from '../../src/xds/cache.js';
import { sidecarClusters, sidecarListeners } from '../../src/xds/generators/sidecar.js';
import { gatewayListeners } from '../../src/xds/generators/gateway.js';
import { goldenCases } from '../helpers/golden.js';
import { MESH, pushOf, serviceEntry, sidecar, sidecarProxy, validated } from './fixtures.js';
import { telemetryService } from '../../src/networking/telemetry-metadata.js';

setScopeLevel('model', 'error');

const PROVIDERS = readTelemetryProviders({});

function telemetry(namespace: string, name: string, spec: TelemetrySpec): AnyResource {
  return validated(name, [{ apiVersion: 'telemetry.mesh.io/v1', kind: 'Telemetry', metadata: { namespace, name }, spec }])[0]!;
}

const telemetrySpec = (r: AnyResource) => r as Extract<AnyResource, { kind: 'Telemetry' }>;

/** The typed_config of a class's HTTP stats filters, without @type; [] when it has none. */
function statsJson(cls: ListenerClass, spec: TelemetrySpec): JsonValue[] {
  const t = listenerTelemetry(cls, recordedMetrics([telemetrySpec(telemetry('mesh-system', 'mesh', spec))], PROVIDERS));
  assert.equal(t.httpStats.length, t.tcpStats.length, 'the same configs on HTTP and TCP');
  return t.httpStats.map((f) => {
    const { ['@type']: type, ...config } = (toEnvoyJson(HttpFilterSchema, f) as { typed_config: JsonObject }).typed_config;
    assert.equal(type, 'type.googleapis.com/mesh.stats.PluginConfig');
    return config;
  });
}

const OVERRIDES = { providers: [{ name: 'prometheus' }], overrides: [{ match: { metric: 'REQUEST_COUNT' as const }, tagOverrides: { remove: { operation: 'REMOVE' as const }, add: { value: 'bar' } } }] };

test('stats configs per class, as the Go mesh generateStatsConfig: Prometheus names, tags, host header fallback, reporting interval', () => {
  const cfg = { metrics: [{ dimensions: { add: 'bar' }, name: 'requests_total', tags_to_remove: ['remove'] }] };
  assert.deepEqual(statsJson('sidecar-outbound', { metrics: [OVERRIDES] }), [cfg]);
  assert.deepEqual(statsJson('sidecar-inbound', { metrics: [OVERRIDES] }), [{ disable_host_header_fallback: true, ...cfg }]);
  assert.deepEqual(statsJson('gateway', { metrics: [OVERRIDES] }), [{ disable_host_header_fallback: true, ...cfg }]);
  assert.deepEqual(statsJson('sidecar-outbound', { metrics: [{ providers: [{ name: 'prometheus' }] }] }), [{}], 'default prometheus');
  assert.deepEqual(statsJson('sidecar-outbound', { metrics: [{ providers: [{ name: 'prometheus' }], reportingInterval: '15s' }] }), [{ tcp_reporting_duration: '15s' }]);
  assert.deepEqual(statsJson('sidecar-outbound', { metrics: [{ overrides: [{ match: { customMetric: 'my_metric' }, disabled: true }, { match: { metric: 'TCP_SENT_BYTES' }, disabled: true }] }] }), [{ metrics: [{ name: 'tcp_sent_bytes_total', drop: true }, { name: 'my_metric', drop: true }] }], 'sorted by the override name (enum name or custom name), custom names kept');
});

test('a side whose metrics are off gets no stats filter; metadata exchange stays (peers still need this proxy\'s metadata)', () => {
  const spec: TelemetrySpec = { metrics: [{ overrides: [{ match: { mode: 'SERVER' }, disabled: true }] }] };
  assert.deepEqual(statsJson('sidecar-inbound', spec), []);
  assert.deepEqual(statsJson('sidecar-outbound', spec), [{}]);
  assert.deepEqual(statsJson('gateway', spec), [{ disable_host_header_fallback: true }], 'a gateway is the CLIENT side');
  const off = listenerTelemetry('sidecar-inbound', recordedMetrics([telemetrySpec(telemetry('mesh-system', 'mesh', spec))], PROVIDERS));
  assert.equal(off.metadataExchange.name, 'mesh.metadata_exchange');
  assert.deepEqual(listenerTelemetry('sidecar-outbound', recordedMetrics([], readTelemetryProviders({ defaultProviders: { metrics: [] } }))).httpStats, [], 'no provider in scope: no stats filter');
});

test('metadata exchange: inbound learns the downstream peer and answers, outbound and gateways the upstream', () => {
  const mx = (cls: ListenerClass) => (toEnvoyJson(HttpFilterSchema, listenerTelemetry(cls, []).metadataExchange) as { typed_config: JsonObject }).typed_config;
  const headers = [{ istio_headers: {} }];
  assert.deepEqual(mx('sidecar-inbound'), { downstream_discovery: headers, downstream_propagation: headers, '@type': 'type.googleapis.com/mesh.http.peer_metadata.Config' });
  assert.deepEqual(mx('sidecar-outbound'), { upstream_discovery: headers, upstream_propagation: headers, '@type': 'type.googleapis.com/mesh.http.peer_metadata.Config' });
  assert.deepEqual(mx('gateway'), mx('sidecar-outbound'));
});

/** Per listener and chain: the names of its network filters, and of its connection manager's HTTP filters. */
function filterNames(listeners: readonly Listener[]): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  for (const l of listeners) {
    for (const c of l.filterChains) {
      out[`${l.name}/${c.name}`] = c.filters.flatMap((f) => {
        if (f.name !== HCM_FILTER_NAME || f.configType.case !== 'typedConfig') return [f.name];
        return unpack(f.configType.value, HttpConnectionManagerSchema).httpFilters.map((h) => h.name);
      });
    }
  }
  return out;
}

const rbacHttp = create(HttpFilterSchema, { name: 'envoy.filters.http.rbac', configType: { case: 'typedConfig', value: pack(RBACSchema, {}) } });
const rbacTcp = create(FilterSchema, { name: 'envoy.filters.network.rbac', configType: { case: 'typedConfig', value: pack(RBACSchema, {}) } });
const SECURITY = { inboundHttpFilters: () => [rbacHttp], inboundNetworkFilters: () => [rbacTcp] };

const echo = (version: string) => sidecarProxy(version === 'v1' ? '10.0.0.1' : '10.0.0.2', `echo-${version}`, 'foo', { LABELS: { app: 'echo', version } });

test('sidecar: metadata exchange first, stats right before the router (after the security filters, ALPN, fault and CORS) and before every tcp_proxy', () => {
  const names = filterNames(sidecarListeners(echo('v1'), pushOf(MESH), { ...SECURITY, metrics: PROVIDERS }));
  assert.deepEqual(names['virtualInbound/0.0.0.0_8080'], ['mesh.metadata_exchange', 'envoy.filters.http.rbac', 'mesh.stats', 'envoy.filters.http.router']);
  assert.deepEqual(names['virtualInbound/virtualInbound-ipv4-passthrough'], ['envoy.filters.network.rbac', 'mesh.stats', 'envoy.filters.network.tcp_proxy']);
  assert.deepEqual(names['virtualInbound/virtualInbound-blackhole'], ['mesh.stats', 'envoy.filters.network.tcp_proxy']);
  assert.deepEqual(names['0.0.0.0_80/0.0.0.0_80'], ['mesh.metadata_exchange', 'mesh.alpn', 'envoy.filters.http.fault', 'envoy.filters.http.cors', 'mesh.stats', 'envoy.filters.http.router']);
  assert.deepEqual(names['10.96.0.20_5432/10.96.0.20_5432'], ['mesh.stats', 'envoy.filters.network.tcp_proxy']);
  assert.deepEqual(names['virtualOutbound/virtualOutbound-catchall-tcp'], ['mesh.stats', 'envoy.filters.network.tcp_proxy']);
  assert.deepEqual(names['virtualOutbound/virtualOutbound-blackhole'], ['mesh.stats', 'envoy.filters.network.tcp_proxy']);
  const db = filterNames(sidecarListeners(sidecarProxy('10.0.0.5', 'db-1', 'foo'), pushOf(MESH), { ...SECURITY, metrics: PROVIDERS }));
  assert.deepEqual(db['virtualInbound/0.0.0.0_5432'], ['envoy.filters.network.rbac', 'mesh.stats', 'envoy.filters.network.tcp_proxy'], 'an inbound TCP port');
  const none = filterNames(sidecarListeners(echo('v1'), pushOf(MESH), SECURITY));
  assert.deepEqual(none['virtualInbound/0.0.0.0_8080'], ['envoy.filters.http.rbac', 'envoy.filters.http.router'], 'without metrics providers (tests, proxyless): as before');
});

test('gateway: metadata exchange first, stats before the router and the TCP proxies', () => {
  const router = parseProxy('router~10.0.0.60~ingress-1.ingress~ingress.svc.cluster.local', { NAMESPACE: 'ingress', LABELS: { app: 'ingress' } });
  for (const name of ['http-hosts', 'tcp']) {
    const c = goldenCases('test/networking/testdata/gateway').find((g) => g.name === name)!;
    const names = Object.values(filterNames(gatewayListeners(router, pushOf(validated(c.name, c.documents)), { inboundHttpFilters: () => [rbacHttp], inboundNetworkFilters: () => [rbacTcp], metrics: PROVIDERS })));
    const expected = name === 'tcp' ? ['envoy.filters.network.rbac', 'mesh.stats', 'envoy.filters.network.tcp_proxy'] : ['mesh.metadata_exchange', 'envoy.filters.http.rbac', 'mesh.alpn', 'envoy.filters.http.fault', 'envoy.filters.http.cors', 'mesh.stats', 'envoy.filters.http.router'];
    assert.ok(names.length > 0 && names.every((n) => JSON.stringify(n) === JSON.stringify(expected)), `${name}: ${JSON.stringify(names)}`);
  }
});

const inboundStats = (listeners: readonly Listener[]) => filterNames(listeners)['virtualInbound/0.0.0.0_8080'];
const outboundStats = (listeners: readonly Listener[]) => filterNames(listeners)['0.0.0.0_80/0.0.0.0_80'];

test('per workload within one snapshot, and across snapshots through one XDS cache', () => {
  const quiet = telemetry('foo', 'quiet-v2', { selector: { matchLabels: { version: 'v2' } }, metrics: [{ overrides: [{ match: { mode: 'SERVER' }, disabled: true }] }] });
  const cache = new XdsCache();
  const push = pushOf([...MESH, quiet]);
  const v2 = sidecarListeners(echo('v2'), push, { metrics: PROVIDERS, cache });
  const v1 = sidecarListeners(echo('v1'), push, { metrics: PROVIDERS, cache });
  assert.deepEqual(inboundStats(v2), ['mesh.metadata_exchange', 'envoy.filters.http.router']);
  assert.ok(outboundStats(v2)?.includes('mesh.stats'), 'v2 keeps its CLIENT metrics');
  assert.deepEqual(inboundStats(v1), ['mesh.metadata_exchange', 'mesh.stats', 'envoy.filters.http.router']);
  const off = telemetry('mesh-system', 'mesh', { metrics: [{ overrides: [{ disabled: true }] }] });
  const later = sidecarListeners(echo('v1'), pushOf([...MESH, off]), { metrics: PROVIDERS, cache });
  assert.deepEqual([inboundStats(later), outboundStats(later)?.includes('mesh.stats')], [['mesh.metadata_exchange', 'envoy.filters.http.router'], false], 'a mesh-wide Telemetry turns every side off');
  const back = sidecarListeners(echo('v1'), pushOf(MESH), { metrics: PROVIDERS, cache });
  assert.deepEqual(inboundStats(back), ['mesh.metadata_exchange', 'mesh.stats', 'envoy.filters.http.router'], 'deleted: the default provider again');
});

/** The services of a cluster's `filter_metadata.mesh`. */
function services(c: Cluster | undefined): JsonValue {
  const json = toEnvoyJson(ClusterSchema, c!) as { metadata?: { filter_metadata?: { mesh?: { services?: JsonValue } } } };
  return json.metadata?.filter_metadata?.mesh?.services ?? null;
}

test('cluster metadata: the outbound cluster\'s service; the inbound cluster\'s services on its port, none for a service outside the mesh', () => {
  const alias = serviceEntry('foo', 'echo-alias', { hosts: ['echo-alias.foo.svc.cluster.local'], location: 'MESH_INTERNAL', resolution: 'STATIC', ports: [{ number: 80, name: 'http', protocol: 'HTTP', targetPort: 8080 }], workloadSelector: { labels: { app: 'echo' } } });
  const push = pushOf([...MESH, alias]);
  const clusters = sidecarClusters(echo('v1'), push);
  const byName = (n: string) => clusters.find((c) => c.name === n);
  assert.deepEqual(services(byName('outbound|5432||db.foo.svc.cluster.local')), [{ host: 'db.foo.svc.cluster.local', name: 'db.foo.svc.cluster.local', namespace: 'foo' }], 'a ServiceEntry host is its own name, as in the Go mesh');
  assert.deepEqual(services(byName('outbound|443||api.example.com')), [{ host: 'api.example.com', name: 'api.example.com', namespace: 'bar' }], 'outbound: external services too');
  assert.deepEqual(services(byName('inbound|8080||')), [{ host: 'echo-alias.foo.svc.cluster.local', name: 'echo-alias.foo.svc.cluster.local', namespace: 'foo' }, { host: 'echo.foo.svc.cluster.local', name: 'echo.foo.svc.cluster.local', namespace: 'foo' }], 'every service on the port, in the registry\'s order');
  assert.deepEqual(services(byName('inbound|7070||')), [{ host: 'echo.foo.svc.cluster.local', name: 'echo.foo.svc.cluster.local', namespace: 'foo' }]);
  assert.equal(services(byName('PassthroughCluster')), null);
  const vm = serviceEntry('foo', 'vm', { hosts: ['vm.example.com'], location: 'MESH_EXTERNAL', resolution: 'STATIC', ports: [{ number: 9000, name: 'tcp', protocol: 'TCP' }], endpoints: [{ address: '10.0.0.7' }] });
  const external = sidecarClusters(sidecarProxy('10.0.0.7', 'vm-1', 'foo'), pushOf([...MESH, vm]));
  assert.equal(services(external.find((c) => c.name === 'inbound|9000||')), null, 'inbound of a MESH_EXTERNAL service: none, as the Go mesh');
});

test('cluster metadata: a Sidecar ingress port takes the service of the instance on that port, as the Go mesh\'s findOrCreateService; an orchestrator Service is named by its name', () => {
  const ingress = sidecar('foo', 'echo', { workloadSelector: { labels: { app: 'echo' } }, ingress: [{ port: { number: 8080, protocol: 'HTTP', name: 'http' }, defaultEndpoint: '127.0.0.1:8080' }, { port: { number: 9999, protocol: 'TCP', name: 'tcp' }, defaultEndpoint: '127.0.0.1:9999' }] });
  const clusters = sidecarClusters(echo('v1'), pushOf([...MESH, ingress]));
  assert.deepEqual(services(clusters.find((c) => c.name === 'inbound|8080||')), [{ host: 'echo.foo.svc.cluster.local', name: 'echo.foo.svc.cluster.local', namespace: 'foo' }]);
  assert.equal(services(clusters.find((c) => c.name === 'inbound|9999||')), null, 'no instance on the port: the Go mesh\'s placeholder service is outside the mesh, no metadata');
  const k8s = { hostname: 'echo.foo.svc.cluster.local', namespace: 'foo', addresses: [], ports: [], resolution: 'STATIC' as const, exportTo: [], external: false, registry: 'Orchestrator', labels: {}, source: 'Service/foo/echo' };
  assert.deepEqual(telemetryService(k8s), { host: 'echo.foo.svc.cluster.local', name: 'echo', namespace: 'foo' });
});
