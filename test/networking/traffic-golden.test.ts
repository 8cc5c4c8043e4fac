// VirtualService and DestinationRule translation, one golden case per file in
// testdata/traffic/: the case's resources (validated as a user's would be) in, the Envoy resources a
// client sidecar in namespace `foo` gets for them out: its outbound clusters, the load assignments
// of the EDS ones, its outbound route configurations, and the notices about what is not effective.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { JsonValue } from '@bufbuild/protobuf';
import { ClusterSchema } from '../../src/gen/envoy/config/cluster/v3/cluster_pb.js';
import { ClusterLoadAssignmentSchema } from '../../src/gen/envoy/config/endpoint/v3/endpoint_pb.js';
import { RouteConfigurationSchema } from '../../src/gen/envoy/config/route/v3/route_pb.js';
import { toEnvoyJson } from '../../src/envoy/types.js';
import { destinationRuleNotices, virtualServiceNotices } from '../../src/model/traffic-notices.js';
import { clusterLoadAssignments } from '../../src/xds/generators/sidecar-endpoints.js';
import { sidecarClusters, sidecarListeners, sidecarRoutes } from '../../src/xds/generators/sidecar.js';
import { ListenerSchema } from '../../src/gen/envoy/config/listener/v3/listener_pb.js';
import { TrafficDirection } from '../../src/gen/envoy/config/core/v3/base_pb.js';
import { setScopeLevel } from '../../src/common/log.js';
import { loadSettings } from '../../src/common/env.js';
import { goldenCases } from '../helpers/golden.js';
import { pushOf, sidecarProxy, validated } from './fixtures.js';
import { parseProxy, TLS_TRANSPORT_EXTENSION } from '../../src/model/proxy.js';
import { UPSTREAM_PROXY_PROTOCOL_SOCKET_NAME } from '../../src/envoy/names.js';
import type { MeshMtlsSettings } from '../../src/xds/generators/mtls.js';
import { readTelemetryProviders } from '../../src/model/telemetry-providers.js';

// The notices are part of each golden output; their log lines would only repeat them.
setScopeLevel('model', 'error');

const MESH_MTLS: MeshMtlsSettings = { trustDomain: 'cluster.local', aliases: [], skipValidation: false, autoMtls: true, inboundTlsV2: true };

/** The client as mesh-proxy announces itself: a workload certificate over SDS, the TLS and PROXY protocol sockets. */
function meshProxyClient() {
  const meta = { NAMESPACE: 'foo', LABELS: { app: 'client', version: 'v1' }, SDS: 'true' };
  return parseProxy('sidecar~10.0.0.50~client.foo~foo.svc.cluster.local', meta, [TLS_TRANSPORT_EXTENSION, UPSTREAM_PROXY_PROTOCOL_SOCKET_NAME]);
}


for (const c of goldenCases('test/networking/testdata/traffic')) {
  test(`traffic golden: ${c.name}`, () => {
    // The dr-inheritance* cases run with PILOT_ENABLE_DESTINATION_RULE_INHERITANCE on (validation and translation).
    const inheritance = c.name.startsWith('dr-inheritance');
    loadSettings('discovery', inheritance ? { PILOT_ENABLE_DESTINATION_RULE_INHERITANCE: 'true' } : {});
    const resources = validated(c.name, c.documents);
    const push = pushOf(resources, [], 'cluster.local', { destinationRuleInheritance: inheritance });
    // The dr-proxy-protocol* cases' client is a mesh-proxy with mesh mTLS (auto mTLS, ISTIO_MUTUAL).
    const meshProxy = c.name.startsWith('dr-proxy-protocol');
    const proxy = meshProxy ? meshProxyClient() : sidecarProxy('10.0.0.50', 'client', 'foo', { LABELS: { app: 'client', version: 'v1' } });
    const clusters = sidecarClusters(proxy, push, false, undefined, meshProxy ? MESH_MTLS : undefined).filter((cl) => cl.name.startsWith('outbound|'));
    const eds = clusterLoadAssignments(proxy, push);
    // The vs-tcp-sniffed* cases run with outbound protocol sniffing (ports of unknown protocol).
    const sniffing = c.name.startsWith('vs-tcp-sniffed');
    const routes = sidecarRoutes(proxy, push, undefined, sniffing);
    // Outbound listeners of TCP, TLS and sniffed ports: where `tcp` and `tls` routes land.
    // The default mesh config's metrics (prometheus): the stats filter before every TCP proxy.
    const l4 = sidecarListeners(proxy, push, { outboundSniffing: sniffing, metrics: readTelemetryProviders({}) }).filter((l) => l.trafficDirection === TrafficDirection.OUTBOUND && !l.useOriginalDst && l.filterChains.some((fc) => fc.filters.some((f) => f.name.endsWith('tcp_proxy'))));
    const notices = resources.flatMap((r) => (r.kind === 'DestinationRule' ? destinationRuleNotices(r) : r.kind === 'VirtualService' ? virtualServiceNotices(r) : []));
    const out: JsonValue = {
      clusters: clusters.map((cl) => toEnvoyJson(ClusterSchema, cl)),
      endpoints: eds.map((e) => toEnvoyJson(ClusterLoadAssignmentSchema, e)),
      routes: routes.map((r) => toEnvoyJson(RouteConfigurationSchema, r)),
      tcpListeners: l4.map((l) => toEnvoyJson(ListenerSchema, l)),
      notices,
    };
    c.check(out);
  });
}

test('MESH_DEFAULT_REQUEST_TIMEOUT times out VirtualService routes that set no timeout; an explicit timeout wins', () => {
  const c = goldenCases('test/networking/testdata/traffic').find((g) => g.name === 'vs-weighted')!;
  const push = pushOf(validated(c.name, c.documents));
  const proxy = sidecarProxy('10.0.0.51', 'client', 'foo', { LABELS: { app: 'client' } });
  const [rc] = sidecarRoutes(proxy, push, new Set(['9080']), false, undefined, { timeout: 1.5 });
  const timeouts = rc!.virtualHosts.flatMap((vh) => vh.routes.map((r) => [r.name, r.action.case === 'route' ? r.action.value.timeout : undefined]));
  assert.deepEqual(timeouts, [
    ['jason.header', { $typeName: 'google.protobuf.Duration', seconds: 1n, nanos: 500_000_000 }],
    ['split', { $typeName: 'google.protobuf.Duration', seconds: 2n, nanos: 500_000_000 }],
    // The allow_any catch-all to PassthroughCluster keeps no timeout.
    ['default', { $typeName: 'google.protobuf.Duration', seconds: 0n, nanos: 0 }],
  ]);
});

test("locality failover follows the node's own locality over its workload's, and the mesh's localityLbSetting where the rule sets none", () => {
  const c = goldenCases('test/networking/testdata/traffic').find((g) => g.name === 'dr-locality-failover')!;
  const push = pushOf(validated(c.name, c.documents));
  const priorities = (cla: ReturnType<typeof clusterLoadAssignments>, cluster: string) =>
    cla.find((e) => e.clusterName === cluster)!.endpoints.map((l) => [`${l.locality?.region}/${l.locality?.zone}`, l.priority]);
  const inEurope = parseProxy('sidecar~10.0.0.50~client.foo~foo.svc.cluster.local', { NAMESPACE: 'foo', LABELS: { app: 'client' } }, [], { region: 'eu-west', zone: 'zone-a', subZone: '' });
  assert.deepEqual(priorities(clusterLoadAssignments(inEurope, push), 'outbound|9080||ratings.foo.svc.cluster.local'), [
    ['eu-west/zone-a', 0],
    ['us-east/zone-a', 1],
    ['us-east/zone-b', 1],
    ['us-west/zone-c', 1],
  ]);
  // The mesh turns locality balancing off: a rule's own localityLbSetting still applies (as the Go mesh).
  const off = clusterLoadAssignments(inEurope, push, undefined, undefined, { enabled: false });
  assert.deepEqual(priorities(off, 'outbound|9080||ratings.foo.svc.cluster.local')[0], ['eu-west/zone-a', 0]);
});

test('clients with other labels and localities share one assignment list where no cluster fails over or distributes', () => {
  const c = goldenCases('test/networking/testdata/traffic').find((g) => g.name === 'dr-subsets')!;
  const push = pushOf(validated(c.name, c.documents));
  const a = parseProxy('sidecar~10.0.0.60~a.foo~foo.svc.cluster.local', { NAMESPACE: 'foo', LABELS: { app: 'a' } }, [], { region: 'r1', zone: 'z1', subZone: '' });
  const b = parseProxy('sidecar~10.0.0.61~b.foo~foo.svc.cluster.local', { NAMESPACE: 'foo', LABELS: { app: 'b' } }, [], { region: 'r2', zone: 'z2', subZone: '' });
  assert.equal(clusterLoadAssignments(a, push, undefined, undefined, { enabled: false }), clusterLoadAssignments(b, push, undefined, undefined, { enabled: false }));
});

test('a proxy that does not announce the PROXY protocol socket (proxyless gRPC) gets the rule without proxyProtocol', () => {
  const c = goldenCases('test/networking/testdata/traffic').find((g) => g.name === 'dr-proxy-protocol')!;
  const push = pushOf(validated(c.name, c.documents));
  const socketsOf = (proxy: ReturnType<typeof parseProxy>) =>
    sidecarClusters(proxy, push, false, undefined, MESH_MTLS)
      .filter((cl) => cl.name.startsWith('outbound|'))
      .flatMap((cl) => [cl.transportSocket, ...cl.transportSocketMatches.map((m) => m.transportSocket)].map((ts) => ts?.name));
  assert.ok(socketsOf(meshProxyClient()).includes(UPSTREAM_PROXY_PROTOCOL_SOCKET_NAME));
  const grpc = parseProxy('sidecar~10.0.0.51~client.foo~foo.svc.cluster.local', { NAMESPACE: 'foo', SDS: 'true', GENERATOR: 'grpc' }, [TLS_TRANSPORT_EXTENSION]);
  const sockets = socketsOf(grpc);
  assert.ok(!sockets.includes(UPSTREAM_PROXY_PROTOCOL_SOCKET_NAME), 'no PROXY protocol socket');
  assert.ok(sockets.includes('envoy.transport_sockets.tls'), 'the rest of the rule still applies');
});

test('proxyProtocol of the trafficPolicy and of a subset is translated, not reported; one in portLevelSettings (the API has none there) is', () => {
  const rule = (trafficPolicy: Record<string, unknown>, subsetPolicy: Record<string, unknown> = {}) =>
    destinationRuleNotices({ apiVersion: 'networking.mesh.io/v1', kind: 'DestinationRule', metadata: { namespace: 'foo', name: 'r' }, spec: { host: 'r', trafficPolicy, subsets: [{ name: 'v1', trafficPolicy: subsetPolicy }] } });
  assert.deepEqual(rule({ proxyProtocol: { version: 'V2' } }, { proxyProtocol: { version: 'V1' } }), []);
  assert.deepEqual(rule({ portLevelSettings: [{ port: { number: 80 }, proxyProtocol: { version: 'V1' } }] }), ['DestinationRule foo/r: trafficPolicy.portLevelSettings[0].proxyProtocol is not effective yet']);
});

test('tunnel of the trafficPolicy and of a subset is translated, not reported; one in portLevelSettings (the API has none there) is', () => {
  const rule = (trafficPolicy: Record<string, unknown>, subsetPolicy: Record<string, unknown> = {}) =>
    destinationRuleNotices({ apiVersion: 'networking.mesh.io/v1', kind: 'DestinationRule', metadata: { namespace: 'foo', name: 'r' }, spec: { host: 'r', trafficPolicy, subsets: [{ name: 'v1', trafficPolicy: subsetPolicy }] } });
  assert.deepEqual(rule({ tunnel: { protocol: 'CONNECT', targetHost: 'r.foo.svc.cluster.local', targetPort: 9000 } }, { tunnel: { protocol: 'POST', targetHost: '10.0.0.1', targetPort: 9000 } }), []);
  assert.deepEqual(rule({ portLevelSettings: [{ port: { number: 80 }, tunnel: { targetHost: 'a', targetPort: 1 } }] }), ['DestinationRule foo/r: trafficPolicy.portLevelSettings[0].tunnel is not effective yet']);
});
