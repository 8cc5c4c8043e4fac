// The generators behind the xDS server: fixture ServiceEntries/WorkloadEntries in, each type's
// resources for a proxy out; gRPC shapes checked by @grpc/grpc-js-xds's own resource validators.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { create, type JsonObject } from '@bufbuild/protobuf';
import type { Any } from '@bufbuild/protobuf/wkt';
import { status } from '@grpc/grpc-js';
import { register as registerGrpcXds } from '@grpc/grpc-js-xds';
import { ListenerResourceType } from '@grpc/grpc-js-xds/build/src/xds-resource-type/listener-resource-type.js';
import { RouteConfigurationResourceType } from '@grpc/grpc-js-xds/build/src/xds-resource-type/route-config-resource-type.js';
import { ClusterResourceType } from '@grpc/grpc-js-xds/build/src/xds-resource-type/cluster-resource-type.js';
import { EndpointResourceType } from '@grpc/grpc-js-xds/build/src/xds-resource-type/endpoint-resource-type.js';
import type { XdsResourceType, XdsDecodeContext } from '@grpc/grpc-js-xds/build/src/xds-resource-type/xds-resource-type.js';
import { NodeSchema } from '../../src/gen/envoy/config/core/v3/base_pb.js';
import { ClusterSchema, Cluster_DiscoveryType, Cluster_LbPolicy } from '../../src/gen/envoy/config/cluster/v3/cluster_pb.js';
import { ClusterLoadAssignmentSchema } from '../../src/gen/envoy/config/endpoint/v3/endpoint_pb.js';
import { ListenerSchema, type Listener } from '../../src/gen/envoy/config/listener/v3/listener_pb.js';
import { ListenerFilterSchema } from '../../src/gen/envoy/config/listener/v3/listener_components_pb.js';
import { RouteConfigurationSchema } from '../../src/gen/envoy/config/route/v3/route_pb.js';
import { HttpFilterSchema } from '../../src/gen/envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager_pb.js';
import { HttpConnectionManagerSchema } from '../../src/gen/envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager_pb.js';
import { RouterSchema } from '../../src/gen/envoy/extensions/filters/http/router/v3/router_pb.js';
import { XdsStreamError, type ProxyInfo, type ResourceGenerator, type XdsResource } from '../../src/xds/generator.js';
import { createMeshGenerators, ProxyModels } from '../../src/xds/generators/index.js';
import { pack, toEnvoyJson, TypeUrl, unpack, unpackAny } from '../../src/envoy/types.js';
import type { PushContext } from '../../src/model/push-context.js';
import { MockRegistry } from '../../src/registry/mock.js';
import { MESH, pushOf, serviceEntry, sidecar } from './fixtures.js';
import type { AnyResource } from '../../src/api/types.js';
import { gauge } from '../../src/common/metrics.js';
import { setScopeLevel } from '../../src/common/log.js';
import { addr, hcmOf, listenerByName, tcpClusterOf } from './envoy.js';

// Conflict and Sidecar warnings are expected here; the assertions check them.
setScopeLevel('model', 'error');
const ECHO = 'echo.foo.svc.cluster.local';
let connections = 0;

function info(id: string, metadata: JsonObject): ProxyInfo {
  return { id, metadata, node: create(NodeSchema, { id }), connectionId: `c${++connections}`, peer: 'ipv4:127.0.0.1:1' };
}

function echoProxy(meta: JsonObject = {}): ProxyInfo {
  return info(`sidecar~10.0.0.1~echo-1.foo~foo.svc.cluster.local`, { NAMESPACE: 'foo', LABELS: { app: 'echo' }, ...meta });
}

const fakeSecurity = [
  create(HttpFilterSchema, { name: 'envoy.filters.http.jwt_authn', configType: { case: 'typedConfig', value: pack(RouterSchema, {}) } }),
  create(HttpFilterSchema, { name: 'envoy.filters.http.rbac', configType: { case: 'typedConfig', value: pack(RouterSchema, {}) } }),
];

function generators(push: PushContext, problems: string[] = [], conflicts: string[] = []): Map<string, ResourceGenerator> {
  return createMeshGenerators({ pushContext: () => push, inboundHttpFilters: () => fakeSecurity, inboundSniffing: false, onProblem: (m) => problems.push(m), onInboundConflict: (m) => conflicts.push(m) });
}

async function generate(gens: Map<string, ResourceGenerator>, typeUrl: string, proxy: ProxyInfo, names?: string[]): Promise<readonly XdsResource[]> {
  const subscription = names ? { wildcard: false, names: new Set(names) } : { wildcard: true, names: new Set<string>() };
  return gens.get(typeUrl)!.generate({ proxy, typeUrl, subscription });
}

function names(rs: readonly XdsResource[]): string[] {
  return rs.map((r) => r.name);
}

test('PILOT_SIDECAR_USE_REMOTE_ADDRESS: outbound HTTP connection managers use the peer address, inbound ones never', async () => {
  const listenersWith = async (on: boolean) => {
    const gens = createMeshGenerators({ pushContext: () => pushOf(MESH), inboundSniffing: false, sidecarUseRemoteAddress: on });
    return (await generate(gens, TypeUrl.Listener, echoProxy())).map((r) => unpack(r.resource, ListenerSchema));
  };
  const on = await listenersWith(true);
  assert.equal(hcmOf(listenerByName(on, '0.0.0.0_80').filterChains[0]!).useRemoteAddress, true);
  assert.equal(hcmOf(listenerByName(on, 'virtualInbound').filterChains[1]!).useRemoteAddress, undefined, 'inbound: the Go mesh sets it only on the outbound side');
  assert.equal(hcmOf(listenerByName(await listenersWith(false), '0.0.0.0_80').filterChains[0]!).useRemoteAddress, undefined, 'default: unset (false)');
});

test('a captured sidecar: listeners, routes, clusters and endpoints for what it can reach', async () => {
  const mock = new MockRegistry();
  mock.addService({ hostname: 'mocked.baz.svc.cluster.local', namespace: 'baz', ports: [{ name: 'http', port: 80, protocol: 'HTTP' }] });
  mock.setEndpoints('mocked.baz.svc.cluster.local', 'baz', [{ address: '10.2.0.1', endpointPort: 8000 }]);
  const gens = generators(pushOf(MESH, [mock]));
  const proxy = echoProxy();

  const lds = await generate(gens, TypeUrl.Listener, proxy);
  assert.deepEqual(names(lds), ['virtualOutbound', 'virtualInbound', '0.0.0.0_443', '10.96.0.20_5432', '0.0.0.0_80', '0.0.0.0_7070']);
  const listeners = lds.map((r) => unpack(r.resource, ListenerSchema));
  const inbound = listenerByName(listeners, 'virtualInbound');
  assert.deepEqual(inbound.filterChains.map((c) => [c.name, c.filterChainMatch?.destinationPort]), [
    ['0.0.0.0_7070', 7070],
    ['0.0.0.0_8080', 8080],
    ['virtualInbound-blackhole', 15006],
    ['virtualInbound-ipv4-passthrough', undefined],
    ['virtualInbound-ipv6-passthrough', undefined],
  ]);
  for (const chain of inbound.filterChains.slice(0, 2)) {
    assert.deepEqual(hcmOf(chain).httpFilters.map((f) => f.name), ['envoy.filters.http.jwt_authn', 'envoy.filters.http.rbac', 'envoy.filters.http.router']);
    // As the Go mesh's pilot: no stream idle timeout (Envoy's default would be 5 minutes).
    assert.deepEqual(hcmOf(chain).streamIdleTimeout, { $typeName: 'google.protobuf.Duration', seconds: 0n, nanos: 0 });
  }
  const outboundHttp = hcmOf(listenerByName(listeners, '0.0.0.0_80').filterChains[0]!);
  assert.equal(outboundHttp.streamIdleTimeout?.seconds, 0n);
  assert.equal(tcpClusterOf(listenerByName(listeners, '0.0.0.0_443').filterChains[0]!), 'outbound|443||api.example.com');

  const cds = await generate(gens, TypeUrl.Cluster, proxy);
  assert.deepEqual(names(cds), [
    'outbound|443||api.example.com',
    'outbound|5432||db.foo.svc.cluster.local',
    `outbound|80||${ECHO}`,
    `outbound|7070||${ECHO}`,
    'outbound|80||mocked.baz.svc.cluster.local',
    'inbound|7070||',
    'inbound|8080||',
    'BlackHoleCluster',
    'PassthroughCluster',
  ]);
  const inbound8080 = unpack(cds.find((r) => r.name === 'inbound|8080||')!.resource, ClusterSchema);
  const ep = inbound8080.loadAssignment!.endpoints[0]!.lbEndpoints[0]!.hostIdentifier;
  assert.equal(ep.case === 'endpoint' && addr(ep.value.address), '127.0.0.1:8080');
  const api = unpack(cds[0]!.resource, ClusterSchema);
  assert.deepEqual(api.clusterDiscoveryType, { case: 'type', value: Cluster_DiscoveryType.STRICT_DNS });

  const eds = await generate(gens, TypeUrl.ClusterLoadAssignment, proxy, [`outbound|80||${ECHO}`, 'outbound|443||api.example.com', 'outbound|80||mocked.baz.svc.cluster.local', 'junk', 'outbound|81||nope']);
  assert.deepEqual(names(eds), [`outbound|80||${ECHO}`, 'outbound|80||mocked.baz.svc.cluster.local'], 'DNS clusters and unknown names have no load assignment');
  const cla = unpack(eds[0]!.resource, ClusterLoadAssignmentSchema);
  assert.deepEqual(
    cla.endpoints.map((l) => [
      `${l.locality?.region}/${l.locality?.zone}/${l.locality?.subZone}`,
      l.loadBalancingWeight,
      l.lbEndpoints.map((e) => (e.hostIdentifier.case === 'endpoint' ? `${addr(e.hostIdentifier.value.address)}*${e.loadBalancingWeight}` : '')),
    ]),
    [
      ['us-east/zone-a/rack-1', 3, ['10.0.0.1:8080*3']],
      ['us-west/zone-b/', 1, ['10.0.0.2:8080*1']],
    ],
  );
  const mocked = unpack(eds[1]!.resource, ClusterLoadAssignmentSchema);
  const mockedEp = mocked.endpoints[0]!.lbEndpoints[0]!.hostIdentifier;
  assert.equal(mockedEp.case === 'endpoint' && addr(mockedEp.value.address), '10.2.0.1:8000');

  const rds = await generate(gens, TypeUrl.RouteConfiguration, proxy, ['80', '9999']);
  assert.deepEqual(names(rds), ['80']);
  const rc = unpack(rds[0]!.resource, RouteConfigurationSchema);
  assert.deepEqual(rc.virtualHosts.map((v) => v.name), [`${ECHO}:80`, 'mocked.baz.svc.cluster.local:80', 'allow_any']);
  assert.ok(rc.virtualHosts[1]!.domains.includes('mocked.baz'));
  assert.ok(!rc.virtualHosts[1]!.domains.includes('mocked'), 'bare names only in the same namespace');
  assert.deepEqual(names(await generate(gens, TypeUrl.RouteConfiguration, proxy)), ['80', '7070']);

  // Every nested Any is a registered Envoy type: the config dumps as Envoy JSON.
  for (const r of [...lds, ...cds, ...eds, ...rds]) {
    const msg = unpackAny(r.resource);
    const schema = [ListenerSchema, ClusterSchema, ClusterLoadAssignmentSchema, RouteConfigurationSchema].find((s) => s.typeName === msg.$typeName)!;
    assert.doesNotThrow(() => toEnvoyJson(schema, msg as never), r.name);
  }
});

test('interception TPROXY: both capture listeners are transparent (IP_TRANSPARENT), as the Go mesh builds them; REDIRECT leaves it unset', async () => {
  const gens = generators(pushOf(MESH, []));
  const capture = async (mode: string) =>
    (await generate(gens, TypeUrl.Listener, echoProxy({ INTERCEPTION_MODE: mode }))).map((r) => unpack(r.resource, ListenerSchema)).filter((l) => l.name.startsWith('virtual'));
  assert.deepEqual((await capture('TPROXY')).map((l) => [l.name, l.transparent]), [['virtualOutbound', true], ['virtualInbound', true]]);
  assert.deepEqual((await capture('REDIRECT')).map((l) => [l.name, l.transparent]), [['virtualOutbound', undefined], ['virtualInbound', undefined]]);
});

test('interception TPROXY: virtualInbound (only) has original_src with mark 1337 first, so the app sees the client address; REDIRECT has none', async () => {
  const gens = generators(pushOf(MESH, []));
  const filters = async (mode: string) =>
    (await generate(gens, TypeUrl.Listener, echoProxy({ INTERCEPTION_MODE: mode })))
      .map((r) => unpack(r.resource, ListenerSchema))
      .filter((l) => l.name.startsWith('virtual'))
      .map((l) => [l.name, l.listenerFilters.map((f) => (f.configType.case === 'typedConfig' ? toEnvoyJson(ListenerFilterSchema, f) : f.name))]);
  const tproxy = await filters('TPROXY');
  assert.deepEqual(tproxy.find(([name]) => name === 'virtualOutbound')![1], []);
  const inbound = tproxy.find(([name]) => name === 'virtualInbound')![1] as JsonObject[];
  assert.deepEqual(inbound[0], {
    name: 'envoy.filters.listener.original_src',
    typed_config: { '@type': 'type.googleapis.com/envoy.extensions.filters.listener.original_src.v3.OriginalSrc', mark: 1337 },
  });
  for (const [, list] of await filters('REDIRECT')) assert.ok(!(list as JsonObject[]).some((f) => f.name === 'envoy.filters.listener.original_src'));
});

/** Each inbound cluster's type and STATIC endpoint, from the CDS the proxy gets. */
async function inboundTargets(gens: Map<string, ResourceGenerator>, proxy: ProxyInfo): Promise<[string, string, string][]> {
  return (await generate(gens, TypeUrl.Cluster, proxy))
    .map((r) => unpack(r.resource, ClusterSchema))
    .filter((c) => c.name.startsWith('inbound|'))
    .map((c) => {
      const h = c.loadAssignment?.endpoints[0]?.lbEndpoints[0]?.hostIdentifier;
      const type = c.clusterDiscoveryType.case === 'type' ? Cluster_DiscoveryType[c.clusterDiscoveryType.value] : '';
      return [c.name, type!, h?.case === 'endpoint' ? addr(h.value.address) : ''];
    });
}

test("interception TPROXY: inbound clusters go to the connection's own destination (ORIGINAL_DST, the pod's address), as the Go mesh's; REDIRECT keeps 127.0.0.1", async () => {
  const gens = generators(pushOf(MESH, []));
  assert.deepEqual(await inboundTargets(gens, echoProxy({ INTERCEPTION_MODE: 'TPROXY' })), [
    ['inbound|7070||', 'ORIGINAL_DST', ''],
    ['inbound|8080||', 'ORIGINAL_DST', ''],
  ]);
  const inbound = (await generate(gens, TypeUrl.Cluster, echoProxy({ INTERCEPTION_MODE: 'TPROXY' }))).find((r) => r.name === 'inbound|7070||')!;
  const grpc = unpack(inbound.resource, ClusterSchema);
  assert.equal(grpc.lbPolicy, Cluster_LbPolicy.CLUSTER_PROVIDED);
  assert.ok(grpc.typedExtensionProtocolOptions['envoy.extensions.upstreams.http.v3.HttpProtocolOptions'], 'the gRPC port lost its HTTP/2 upstream');
  assert.deepEqual(await inboundTargets(gens, echoProxy({ INTERCEPTION_MODE: 'REDIRECT' })), [
    ['inbound|7070||', 'STATIC', '127.0.0.1:7070'],
    ['inbound|8080||', 'STATIC', '127.0.0.1:8080'],
  ]);
});

test('interception TPROXY: a Sidecar defaultEndpoint is kept (127.0.0.1 stays loopback, 0.0.0.0 is the workload IP), and a captureMode NONE port keeps 127.0.0.1', async () => {
  const push = pushOf([
    ...MESH,
    sidecar('foo', 'local', {
      workloadSelector: { labels: { app: 'echo' } },
      ingress: [
        { port: { number: 18080, name: 'http', protocol: 'HTTP' }, defaultEndpoint: '127.0.0.1:8080' },
        { port: { number: 15432, name: 'tcp', protocol: 'TCP' }, defaultEndpoint: '0.0.0.0:5432' },
        { port: { number: 9090, name: 'http-captured', protocol: 'HTTP' } },
        { port: { number: 9091, name: 'http-own', protocol: 'HTTP' }, captureMode: 'NONE' },
      ],
    }),
  ]);
  assert.deepEqual(await inboundTargets(generators(push), echoProxy({ INTERCEPTION_MODE: 'TPROXY' })), [
    ['inbound|18080||', 'STATIC', '127.0.0.1:8080'],
    ['inbound|15432||', 'STATIC', '10.0.0.1:5432'],
    ['inbound|9090||', 'ORIGINAL_DST', ''],
    ['inbound|9091||', 'STATIC', '127.0.0.1:9091'],
  ]);
});

test('interception NONE: listeners on the Sidecar ingress ports to defaultEndpoint, outbound on 127.0.0.1 egress ports', async () => {
  const problems: string[] = [];
  const push = pushOf([
    ...MESH,
    sidecar('foo', 'local', {
      workloadSelector: { labels: { app: 'echo' } },
      ingress: [
        { port: { number: 18080, name: 'http', protocol: 'HTTP' }, defaultEndpoint: '127.0.0.1:8080' },
        { port: { number: 15432, name: 'tcp', protocol: 'TCP' }, bind: '127.0.0.1', defaultEndpoint: '0.0.0.0:5432' },
        { port: { number: 19000, name: 'http-bad', protocol: 'HTTP' }, defaultEndpoint: 'unix:///var/run/app.sock' },
        { port: { number: 18080, name: 'http-again', protocol: 'HTTP' }, defaultEndpoint: '127.0.0.1:9999' },
      ],
      egress: [{ port: { number: 5432, name: 'tcp', protocol: 'TCP' }, hosts: ['./*'] }],
    }),
  ]);
  const conflicts: string[] = [];
  const gens = generators(push, problems, conflicts);
  const proxy = echoProxy({ INTERCEPTION_MODE: 'NONE' });
  const lds = await generate(gens, TypeUrl.Listener, proxy);
  assert.deepEqual(names(lds), ['0.0.0.0_18080', '127.0.0.1_15432', '127.0.0.1_5432']);
  const listeners = lds.map((r) => unpack(r.resource, ListenerSchema));
  const http = listenerByName(listeners, '0.0.0.0_18080');
  assert.equal(addr(http.address), '0.0.0.0:18080');
  assert.notEqual(http.useOriginalDst, true);
  assert.deepEqual(hcmOf(http.filterChains[0]!).httpFilters.map((f) => f.name), ['envoy.filters.http.jwt_authn', 'envoy.filters.http.rbac', 'envoy.filters.http.router']);
  const out = listenerByName(listeners, '127.0.0.1_5432');
  assert.equal(out.bindToPort, true);
  assert.equal(tcpClusterOf(out.filterChains[0]!), 'outbound|5432||db.foo.svc.cluster.local');
  assert.deepEqual(problems, [
    'Sidecar/foo/local: spec.ingress[2].defaultEndpoint: "unix:///var/run/app.sock" is not <ip>:<port> (e.g. 127.0.0.1:8080; unix sockets are not supported)',
  ]);
  assert.deepEqual(conflicts, ['Sidecar/foo/local: spec.ingress[3].port.number: 18080 is already used by an earlier ingress listener']);
  // Without a test hook, the conflict is counted in pilot_conflict_inbound_listener.
  await generate(createMeshGenerators({ pushContext: () => push, inboundHttpFilters: () => fakeSecurity }), TypeUrl.Listener, proxy);
  assert.equal((await gauge('pilot_conflict_inbound_listener').get()).values[0]?.value, 1);

  const cds = (await generate(gens, TypeUrl.Cluster, proxy)).map((r) => unpack(r.resource, ClusterSchema));
  const target = (name: string): string => {
    const c = cds.find((x) => x.name === name)!;
    const h = c.loadAssignment!.endpoints[0]!.lbEndpoints[0]!.hostIdentifier;
    return h.case === 'endpoint' ? addr(h.value.address) : '';
  };
  assert.equal(target('inbound|18080||'), '127.0.0.1:8080');
  assert.equal(target('inbound|15432||'), '10.0.0.1:5432', '0.0.0.0 in defaultEndpoint means the workload IP');
});

test('a Sidecar ingress listener with captureMode NONE gets its own bound listener under REDIRECT; the others stay chains of virtualInbound', async () => {
  const push = pushOf([
    ...MESH,
    sidecar('foo', 'local', {
      workloadSelector: { labels: { app: 'echo' } },
      ingress: [
        { port: { number: 18080, name: 'http', protocol: 'HTTP' }, defaultEndpoint: '127.0.0.1:8080' },
        { port: { number: 19090, name: 'http-direct', protocol: 'HTTP' }, captureMode: 'NONE', defaultEndpoint: '127.0.0.1:9090' },
      ],
    }),
  ]);
  const listeners = (await generate(generators(push), TypeUrl.Listener, echoProxy())).map((r) => unpack(r.resource, ListenerSchema));
  const direct = listenerByName(listeners, '0.0.0.0_19090');
  assert.equal(addr(direct.address), '0.0.0.0:19090');
  assert.notEqual(direct.bindToPort, false, 'bound on its port');
  assert.notEqual(direct.useOriginalDst, true);
  assert.deepEqual(hcmOf(direct.filterChains[0]!).httpFilters.map((f) => f.name), ['envoy.filters.http.jwt_authn', 'envoy.filters.http.rbac', 'envoy.filters.http.router']);
  const inbound = listenerByName(listeners, 'virtualInbound');
  const ports = inbound.filterChains.map((c) => c.filterChainMatch?.destinationPort);
  assert.ok(ports.includes(18080) && !ports.includes(19090), `virtualInbound keeps the captured port only: ${ports.join(',')}`);
});

test('a malformed node is refused with INVALID_ARGUMENT', async () => {
  const proxies = new ProxyModels();
  const bad = info('sidecar~nope~x.foo~foo.svc.cluster.local', {});
  assert.throws(() => proxies.of(bad), (e: unknown) => e instanceof XdsStreamError && e.code === status.INVALID_ARGUMENT && /not an IP/.test(e.message));
  const gens = generators(pushOf(MESH));
  await assert.rejects(async () => generate(gens, TypeUrl.Listener, bad), XdsStreamError);
  const good = echoProxy();
  assert.equal(proxies.of(good), proxies.of(good), 'parsed once per stream');
});

test("a server's workload identity (what the orchestrator says a proxy is) applies to its own proxies only", () => {
  const good = echoProxy();
  const fromPod = new ProxyModels((p) => ({ ...p, labels: { app: 'from-pod' } }));
  assert.deepEqual(fromPod.of(good).labels, { app: 'from-pod' });
  assert.deepEqual(new ProxyModels().of(good).labels, { app: 'echo' }, 'another server in the same process keeps what the proxy claims');
});

// ---------------------------------------------------------------- proxyless gRPC

// The client's own setup: registers the HTTP filters (router...) its validators accept.
registerGrpcXds();
const decodeContext = {} as XdsDecodeContext;

/** What @grpc/grpc-js-xds makes of a resource: its decoded value, or the validation error. */
function grpcDecode(type: XdsResourceType, any: Any): { name: string; value?: object; error?: string } {
  return type.decode(decodeContext, { type_url: any.typeUrl, value: Buffer.from(any.value) });
}

function assertGrpcAccepts(type: XdsResourceType, rs: readonly XdsResource[]): void {
  for (const r of rs) {
    const d = grpcDecode(type, r.resource);
    assert.equal(d.error, undefined, `${r.name}: ${d.error}`);
    assert.equal(d.name, r.name);
  }
}

function grpcProxy(): ProxyInfo {
  return echoProxy({ GENERATOR: 'grpc' });
}

test('gRPC client: api_listener host:port with RDS over ADS, routes, EDS cluster and endpoints accepted by grpc-js-xds', async () => {
  const gens = generators(pushOf(MESH));
  const proxy = grpcProxy();
  const lds = await generate(gens, TypeUrl.Listener, proxy, [`${ECHO}:7070`, 'echo.foo:7070', 'echo:7070', 'echo:1', 'nope.foo:7070', 'bad']);
  assert.deepEqual(names(lds), [`${ECHO}:7070`, 'echo.foo:7070', 'echo:7070'], 'unknown hosts and ports are absent');
  assertGrpcAccepts(ListenerResourceType.get(), lds);
  const l: Listener = unpack(lds[0]!.resource, ListenerSchema);
  assert.equal(l.apiListener?.apiListener?.typeUrl, 'type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager');
  const hcm = unpack(l.apiListener!.apiListener!, HttpConnectionManagerSchema);
  assert.equal(hcm.routeSpecifier.case, 'rds');
  assert.equal(hcm.routeSpecifier.value?.routeConfigName, `${ECHO}:7070`);
  assert.deepEqual(hcm.httpFilters.map((f) => f.name), ['envoy.filters.http.router']);

  const rds = await generate(gens, TypeUrl.RouteConfiguration, proxy, [`${ECHO}:7070`, 'echo:7070']);
  assertGrpcAccepts(RouteConfigurationResourceType.get(), rds);
  const rc = unpack(rds[1]!.resource, RouteConfigurationSchema);
  assert.ok(rc.virtualHosts[0]!.domains.includes('echo:7070'));
  const action = rc.virtualHosts[0]!.routes[0]!.action;
  assert.equal(action.case === 'route' && action.value.clusterSpecifier.value, `outbound|7070||${ECHO}`);

  const cds = await generate(gens, TypeUrl.Cluster, proxy);
  assert.ok(!names(cds).some((n) => n.startsWith('inbound|')), 'no inbound clusters for proxyless clients');
  assertGrpcAccepts(ClusterResourceType.get(), cds.filter((r) => r.name === `outbound|7070||${ECHO}`));

  const eds = await generate(gens, TypeUrl.ClusterLoadAssignment, proxy, [`outbound|7070||${ECHO}`]);
  const decoded = grpcDecode(EndpointResourceType.get(), eds[0]!.resource);
  assert.equal(decoded.error, undefined);
  assert.deepEqual(
    unpack(eds[0]!.resource, ClusterLoadAssignmentSchema).endpoints.flatMap((l) => l.lbEndpoints.map((e) => (e.hostIdentifier.case === 'endpoint' ? addr(e.hostIdentifier.value.address) : ''))),
    ['10.0.0.1:7070', '10.0.0.2:17070'],
  );
});

test('gRPC client with inline routes; gRPC server listener with a non-forwarding route', async () => {
  const push = pushOf(MESH);
  const gens = createMeshGenerators({ pushContext: () => push, inlineRoutes: true, inboundSniffing: false });
  const proxy = grpcProxy();
  const server = 'xds.mesh.io/grpc/lds/inbound/0.0.0.0:7070';
  const lds = await generate(gens, TypeUrl.Listener, proxy, [`${ECHO}:7070`, server, 'xds.mesh.io/grpc/lds/inbound/garbage']);
  assert.deepEqual(names(lds), [`${ECHO}:7070`, server]);
  assertGrpcAccepts(ListenerResourceType.get(), lds);
  const client = unpack(unpack(lds[0]!.resource, ListenerSchema).apiListener!.apiListener!, HttpConnectionManagerSchema);
  assert.equal(client.routeSpecifier.case, 'routeConfig');
  const s = unpack(lds[1]!.resource, ListenerSchema);
  assert.equal(addr(s.address), '0.0.0.0:7070');
  assert.deepEqual(s.listenerFilters, []);
  const shcm = hcmOf(s.filterChains[0]!);
  assert.equal(shcm.routeSpecifier.case, 'routeConfig');
  assert.equal(shcm.routeSpecifier.case === 'routeConfig' && shcm.routeSpecifier.value.virtualHosts[0]!.routes[0]!.action.case, 'nonForwardingAction');
});

test('outbound listener conflicts are counted per snapshot in the pilot_conflict_* gauges', async () => {
  const tcp = (name: string): AnyResource => serviceEntry('foo', name, { hosts: [`${name}.example.com`], resolution: 'STATIC', ports: [{ number: 9000, name: 'tcp', protocol: 'TCP' }] });
  const http = serviceEntry('foo', 'web', { hosts: ['web.example.com'], resolution: 'STATIC', ports: [{ number: 9000, name: 'http', protocol: 'HTTP' }] });
  let push = pushOf([tcp('a'), tcp('b'), tcp('c'), http]);
  const gens = createMeshGenerators({ pushContext: () => push, inboundSniffing: false });
  const value = async (name: Parameters<typeof gauge>[0]): Promise<number> => (await gauge(name).get()).values[0]?.value ?? 0;
  const lds = await generate(gens, TypeUrl.Listener, echoProxy());
  assert.equal(tcpClusterOf(unpack(lds.find((r) => r.name === '0.0.0.0_9000')!.resource, ListenerSchema).filterChains[0]!), 'outbound|9000||a.example.com');
  await generate(gens, TypeUrl.Listener, echoProxy());
  assert.equal(await value('pilot_conflict_outbound_listener_tcp_over_current_tcp'), 2, 'distinct conflicts, not one per proxy');
  assert.equal(await value('pilot_conflict_outbound_listener_http_over_current_tcp'), 1);
  push = pushOf([tcp('a')]);
  await generate(gens, TypeUrl.Listener, echoProxy());
  assert.equal(await value('pilot_conflict_outbound_listener_tcp_over_current_tcp'), 0);
  assert.equal(await value('pilot_conflict_outbound_listener_http_over_current_tcp'), 0);
});

test('mesh h2UpgradePolicy UPGRADE: outbound clusters of HTTP ports speak HTTP/2 unless their rule says DO_NOT_UPGRADE; TCP ports keep HTTP/1.1', async () => {
  const web = serviceEntry('foo', 'web', { hosts: ['web.foo.svc.cluster.local'], addresses: ['10.96.5.1'], location: 'MESH_INTERNAL', resolution: 'STATIC', ports: [{ number: 80, name: 'http', protocol: 'HTTP' }, { number: 5000, name: 'tcp', protocol: 'TCP' }] });
  const legacy = serviceEntry('foo', 'legacy', { hosts: ['legacy.foo.svc.cluster.local'], addresses: ['10.96.5.2'], location: 'MESH_INTERNAL', resolution: 'STATIC', ports: [{ number: 80, name: 'http', protocol: 'HTTP' }] });
  const keep: AnyResource = { apiVersion: 'networking.mesh.io/v1', kind: 'DestinationRule', metadata: { namespace: 'foo', name: 'legacy' }, spec: { host: 'legacy', trafficPolicy: { connectionPool: { http: { h2UpgradePolicy: 'DO_NOT_UPGRADE' } } } } };
  const push = pushOf([...MESH, web, legacy, keep]);
  const h2 = async (upgrade: boolean) => {
    const cds = createMeshGenerators({ pushContext: () => push, ...(upgrade ? { h2Upgrade: true } : {}) }).get(TypeUrl.Cluster)!;
    const out = await cds.generate({ proxy: info('sidecar~10.0.0.1~echo-1.foo~foo.svc.cluster.local', { NAMESPACE: 'foo' }), typeUrl: TypeUrl.Cluster, subscription: { wildcard: true, names: new Set() } });
    const clusters = out.map((r) => toEnvoyJson(ClusterSchema, unpack(r.resource, ClusterSchema)) as { name: string; typed_extension_protocol_options?: Record<string, { explicit_http_config?: Record<string, unknown> }> });
    return clusters
      .filter((c) => c.name.includes('web.foo') || c.name.includes('legacy.foo'))
      .filter((c) => c.typed_extension_protocol_options?.['envoy.extensions.upstreams.http.v3.HttpProtocolOptions']?.explicit_http_config?.['http2_protocol_options'] !== undefined)
      .map((c) => c.name)
      .sort();
  };
  assert.deepEqual(await h2(true), ['outbound|80||web.foo.svc.cluster.local']);
  assert.deepEqual(await h2(false), [], 'DO_NOT_UPGRADE is the mesh default');
});

test('mesh tcpKeepalive: every outbound, inbound and passthrough cluster keeps alive; a rule overrides the fields it sets', async () => {
  const web = serviceEntry('foo', 'web', { hosts: ['web.foo.svc.cluster.local'], addresses: ['10.96.5.1'], location: 'MESH_INTERNAL', resolution: 'STATIC', ports: [{ number: 80, name: 'http', protocol: 'HTTP' }] });
  const tuned = serviceEntry('foo', 'tuned', { hosts: ['tuned.foo.svc.cluster.local'], addresses: ['10.96.5.2'], location: 'MESH_INTERNAL', resolution: 'STATIC', ports: [{ number: 80, name: 'http', protocol: 'HTTP' }] });
  const rule: AnyResource = { apiVersion: 'networking.mesh.io/v1', kind: 'DestinationRule', metadata: { namespace: 'foo', name: 'tuned' }, spec: { host: 'tuned', trafficPolicy: { connectionPool: { tcp: { tcpKeepalive: { probes: 9 } } } } } };
  const push = pushOf([...MESH, web, tuned, rule]);
  const keepalives = async (mesh: boolean) => {
    const cds = createMeshGenerators({ pushContext: () => push, ...(mesh ? { tcpKeepalive: { time: '300s', interval: '30s', probes: 3 } } : {}) }).get(TypeUrl.Cluster)!;
    const out = await cds.generate({ proxy: echoProxy(), typeUrl: TypeUrl.Cluster, subscription: { wildcard: true, names: new Set() } });
    const clusters = out.map((r) => toEnvoyJson(ClusterSchema, unpack(r.resource, ClusterSchema)) as { name: string; upstream_connection_options?: { tcp_keepalive?: unknown } });
    return Object.fromEntries(clusters.filter((c) => /web\.foo|tuned\.foo|^inbound|PassthroughCluster/.test(c.name)).map((c) => [c.name, c.upstream_connection_options?.tcp_keepalive]));
  };
  const on = await keepalives(true);
  const inbound = Object.keys(on).filter((n) => n.startsWith('inbound'));
  assert.ok(inbound.length > 0, `an inbound cluster: ${Object.keys(on).join(', ')}`);
  const meshWide = { keepalive_time: 300, keepalive_interval: 30, keepalive_probes: 3 };
  for (const name of ['outbound|80||web.foo.svc.cluster.local', 'PassthroughCluster', ...inbound]) assert.deepEqual(on[name], meshWide, name);
  assert.deepEqual(on['outbound|80||tuned.foo.svc.cluster.local'], { ...meshWide, keepalive_probes: 9 }, "the rule's probes over the mesh's");
  const off = await keepalives(false);
  assert.deepEqual(off['outbound|80||web.foo.svc.cluster.local'], undefined, 'no keepalive without the mesh config or a rule');
  assert.deepEqual(off['outbound|80||tuned.foo.svc.cluster.local'], { keepalive_probes: 9 });
});

test("inbound clusters take their connection pool as the Go mesh's buildInboundClusters does: the Sidecar's, else the service's rule without workloadSelector at the port; never an h2 upgrade", async () => {
  const dr = (name: string, spec: object): AnyResource => ({ apiVersion: 'networking.mesh.io/v1', kind: 'DestinationRule', metadata: { namespace: 'foo', name }, spec });
  const catchAll = dr('echo', {
    host: 'echo',
    trafficPolicy: {
      connectionPool: { tcp: { maxConnections: 50, connectTimeout: '2s' }, http: { http2MaxRequests: 300, idleTimeout: '30s', h2UpgradePolicy: 'UPGRADE' } },
      portLevelSettings: [{ port: { number: 7070 }, connectionPool: { http: { maxRequestsPerConnection: 7 } } }],
    },
  });
  // Selects the echo workload: its own outbound clusters take it, its inbound ones do not (as in the Go mesh).
  const selecting = dr('echo-selected', { host: 'echo', workloadSelector: { labels: { app: 'echo' } }, trafficPolicy: { connectionPool: { tcp: { maxConnections: 1 } } } });
  const inboundOf = async (resources: AnyResource[]) => {
    const push = pushOf([...MESH, ...resources]);
    const cds = createMeshGenerators({ pushContext: () => push }).get(TypeUrl.Cluster)!;
    const out = await cds.generate({ proxy: echoProxy(), typeUrl: TypeUrl.Cluster, subscription: { wildcard: true, names: new Set() } });
    type Json = { name: string; connect_timeout?: string; circuit_breakers?: { thresholds: { max_connections?: number; max_requests?: number }[] }; typed_extension_protocol_options?: Record<string, { common_http_protocol_options?: object; explicit_http_config?: object }> };
    const clusters = out.map((r) => toEnvoyJson(ClusterSchema, unpack(r.resource, ClusterSchema)) as Json);
    return Object.fromEntries(
      clusters
        .filter((c) => c.name.startsWith('inbound') || c.name === 'outbound|80||echo.foo.svc.cluster.local')
        .map((c) => {
          const http = Object.values(c.typed_extension_protocol_options ?? {})[0];
          const t = c.circuit_breakers?.thresholds[0];
          return [c.name, { connect: c.connect_timeout, maxConnections: t?.max_connections, maxRequests: t?.max_requests, common: http?.common_http_protocol_options, protocol: Object.keys(http?.explicit_http_config ?? {})[0] }];
        }),
    );
  };
  const UNLIMITED = 4294967295;
  const byRule = await inboundOf([catchAll, selecting]);
  assert.deepEqual(byRule['inbound|8080||'], { connect: '2s', maxConnections: 50, maxRequests: 300, common: { idle_timeout: '30s' }, protocol: 'http_protocol_options' }, "the rule's pool, HTTP/1.1 to the app despite UPGRADE");
  assert.deepEqual(byRule['inbound|7070||'], { connect: '10s', maxConnections: UNLIMITED, maxRequests: UNLIMITED, common: { max_requests_per_connection: 7 }, protocol: 'http2_protocol_options' }, "the port's entry is the whole pool of port 7070");
  assert.equal(byRule['outbound|80||echo.foo.svc.cluster.local']!.maxConnections, 1, 'outbound: the selecting rule');
  const bySidecar = await inboundOf([catchAll, sidecar('foo', 'echo', { workloadSelector: { labels: { app: 'echo' } }, inboundConnectionPool: { tcp: { maxConnections: 11 } } })]);
  assert.deepEqual(bySidecar['inbound|8080||'], { connect: '10s', maxConnections: 11, maxRequests: UNLIMITED, common: undefined, protocol: undefined }, "the Sidecar's pool replaces the rule's");
  const none = await inboundOf([]);
  assert.deepEqual(none['inbound|8080||']!.maxConnections, UNLIMITED, 'no pool: no limit, as the Go mesh');
});
