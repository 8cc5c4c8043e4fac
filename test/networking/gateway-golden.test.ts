// Gateway translation, one golden case per file in testdata/gateway/: the case's resources
// (validated as a user's would be) in; out, what a router proxy in namespace `ingress` labelled
// `app: ingress` gets: its listeners, its route configurations, its SNI-DNAT clusters and their
// endpoints (AUTO_PASSTHROUGH), the servers left out and the notices about what is not effective. Selection scoping and the route name of a deleted server are
// checked below.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { create, type JsonValue } from '@bufbuild/protobuf';
import { FilterSchema } from '../../src/gen/envoy/config/listener/v3/listener_components_pb.js';
import { RBACSchema as NetworkRbacSchema } from '../../src/gen/envoy/extensions/filters/network/rbac/v3/rbac_pb.js';
import type { AnyResource } from '../../src/api/types.js';
import { ListenerSchema } from '../../src/gen/envoy/config/listener/v3/listener_pb.js';
import { RouteConfigurationSchema } from '../../src/gen/envoy/config/route/v3/route_pb.js';
import { pack, toEnvoyJson } from '../../src/envoy/types.js';
import { gatewayNotices, gatewayRouteNotices } from '../../src/model/gateway.js';
import { parseProxy, type Proxy } from '../../src/model/proxy.js';
import { virtualServiceNotices } from '../../src/model/traffic-notices.js';
import { gatewayListeners, gatewayRoutes, mergedGatewayFor } from '../../src/xds/generators/gateway.js';
import { sidecarClusters, sidecarRoutes } from '../../src/xds/generators/sidecar.js';
import { gatewayClusters, gatewayLoadAssignments } from '../../src/xds/generators/gateway-clusters.js';
import { ClusterSchema, type Cluster } from '../../src/gen/envoy/config/cluster/v3/cluster_pb.js';
import { ClusterLoadAssignmentSchema } from '../../src/gen/envoy/config/endpoint/v3/endpoint_pb.js';
import { setScopeLevel } from '../../src/common/log.js';
import { goldenCases } from '../helpers/golden.js';
import { readTelemetryProviders } from '../../src/model/telemetry-providers.js';
import { pushOf, sidecarProxy, validated } from './fixtures.js';

setScopeLevel('model', 'error');


function routerProxy(namespace = 'ingress', labels: Record<string, string> = { app: 'ingress' }): Proxy {
  return parseProxy(`router~10.0.0.60~ingress-1.${namespace}~${namespace}.svc.cluster.local`, { NAMESPACE: namespace, LABELS: labels });
}

const cases = goldenCases('test/networking/testdata/gateway');

for (const c of cases) {
  test(`gateway golden: ${c.name}`, () => {
    const resources = validated(c.name, c.documents);
    const push = pushOf(resources);
    const proxy = routerProxy();
    const problems: string[] = [];
    // The default mesh config's metrics (prometheus): metadata exchange and stats filters.
    const opts = { onProblem: (m: string) => problems.push(m), metrics: readTelemetryProviders({}) };
    const listeners = gatewayListeners(proxy, push, opts);
    const routes = gatewayRoutes(proxy, push, undefined, opts);
    const notices = resources.flatMap((r) => (r.kind === 'Gateway' ? gatewayNotices(r) : r.kind === 'VirtualService' ? [...virtualServiceNotices(r), ...gatewayRouteNotices(r)] : []));
    const out: JsonValue = {
      listeners: listeners.map((l) => toEnvoyJson(ListenerSchema, l)),
      routes: routes.map((r) => toEnvoyJson(RouteConfigurationSchema, r)),
      sniDnatClusters: gatewayClusters(proxy, push, {}).filter((x) => x.name.startsWith('outbound_.')).map((x) => toEnvoyJson(ClusterSchema, x)),
      sniDnatEndpoints: gatewayLoadAssignments(proxy, push, undefined, {}).filter((x) => x.clusterName.startsWith('outbound_.')).map((x) => toEnvoyJson(ClusterLoadAssignmentSchema, x)),
      rejected: [...mergedGatewayFor(proxy, push, {}).rejected],
      problems,
      notices,
    };
    c.check(out);
  });
}

function caseResources(name: string): AnyResource[] {
  const c = cases.find((g) => g.name === name)!;
  return validated(c.name, c.documents);
}

test('PILOT_SCOPE_GATEWAY_TO_NAMESPACE: a gateway proxy is selected only by Gateways of its own namespace', () => {
  const push = pushOf(caseResources('http-hosts'));
  const inFoo = routerProxy('foo');
  assert.deepEqual(gatewayListeners(inFoo, push).map((l) => l.name), ['0.0.0.0_80'], 'without scoping, the Gateway of namespace ingress selects a proxy in foo');
  assert.deepEqual(gatewayListeners(inFoo, push, { scopeGatewayToNamespace: true }), []);
  assert.deepEqual(gatewayListeners(routerProxy(), push, { scopeGatewayToNamespace: true }).map((l) => l.name), ['0.0.0.0_80']);
});

test('a route configuration the proxy still asks for after its server is gone is answered empty', () => {
  const push = pushOf(caseResources('http-hosts'));
  const [kept, gone] = gatewayRoutes(routerProxy(), push, new Set(['http.8080', 'http.80']));
  assert.equal(kept!.name, 'http.80');
  assert.equal(gone!.name, 'http.8080');
  assert.deepEqual(gone!.virtualHosts, []);
});

test('a sidecar does not get the routes of VirtualServices bound only to a Gateway', () => {
  const push = pushOf(caseResources('http-hosts'));
  const routes = sidecarRoutes(sidecarProxy('10.0.0.50', 'client', 'foo'), push);
  const reviews = routes.flatMap((r) => r.virtualHosts).find((vh) => vh.name === 'reviews.foo.svc.cluster.local:9080')!;
  // reviews-public is bound to the mesh too, and names reviews.example.com, not the service: the
  // service keeps its default route; bookinfo (gateway only) routes nothing for sidecars.
  assert.deepEqual(reviews.routes.map((r) => r.name), ['default']);
  assert.ok(!routes.some((r) => r.virtualHosts.some((vh) => vh.domains.includes('bookinfo.example.com'))));
});

test('PILOT_FILTER_GATEWAY_CLUSTER_CONFIG: a gateway gets only the clusters and endpoints of the services its routes lead to', () => {
  const ratings = validated('ratings', [
    { apiVersion: 'networking.mesh.io/v1', kind: 'ServiceEntry', metadata: { namespace: 'foo', name: 'ratings' }, spec: { hosts: ['ratings.foo.svc.cluster.local'], location: 'MESH_INTERNAL', resolution: 'STATIC', ports: [{ number: 9080, name: 'http', protocol: 'HTTP' }], endpoints: [{ address: '10.0.9.1' }] } },
  ]);
  const push = pushOf([...caseResources('http-hosts'), ...ratings]);
  const proxy = routerProxy();
  const names = (on: boolean) => gatewayClusters(proxy, push, { filterGatewayClusters: on }).map((c) => c.name).sort();
  assert.deepEqual(names(false), ['BlackHoleCluster', 'PassthroughCluster', 'outbound|9080|v1|reviews.foo.svc.cluster.local', 'outbound|9080|v2|reviews.foo.svc.cluster.local', 'outbound|9080||ratings.foo.svc.cluster.local', 'outbound|9080||reviews.foo.svc.cluster.local']);
  assert.deepEqual(names(true), ['BlackHoleCluster', 'PassthroughCluster', 'outbound|9080|v1|reviews.foo.svc.cluster.local', 'outbound|9080|v2|reviews.foo.svc.cluster.local', 'outbound|9080||reviews.foo.svc.cluster.local']);
  const asked = new Set(['outbound|9080||ratings.foo.svc.cluster.local', 'outbound|9080||reviews.foo.svc.cluster.local']);
  assert.deepEqual(gatewayLoadAssignments(proxy, push, asked, { filterGatewayClusters: false }).map((c) => c.clusterName).sort(), [...asked].sort());
  assert.deepEqual(gatewayLoadAssignments(proxy, push, asked, { filterGatewayClusters: true }).map((c) => c.clusterName), ['outbound|9080||reviews.foo.svc.cluster.local']);
  // A proxy no Gateway selects has no route, so no service cluster at all.
  assert.deepEqual(gatewayClusters(routerProxy('ingress', { app: 'other' }), push, { filterGatewayClusters: true }).map((c) => c.name).sort(), ['BlackHoleCluster', 'PassthroughCluster']);
});

test('AUTO_PASSTHROUGH: a chain only for service ports the server hosts cover; no SNI-DNAT cluster without such a server', () => {
  const push = pushOf(caseResources('auto-passthrough'));
  const chains = gatewayListeners(routerProxy(), push)[0]!.filterChains.map((c) => c.name);
  assert.ok(chains.every((n) => n.endsWith('backend.foo.svc.cluster.local')), 'ext (MESH_EXTERNAL) and db.bar (not covered) get no chain');
  const plain = pushOf(caseResources('http-hosts'));
  assert.ok(!gatewayClusters(routerProxy(), plain, {}).some((c) => c.name.startsWith('outbound_.')));
});

test('an orch-gateway:// credentialName that can never be served is reported when the Gateway is read', () => {
  const server = (credentialName: string) => ({ port: { number: 443, name: 'https', protocol: 'HTTPS' }, hosts: ['*.example.com'], tls: { mode: 'SIMPLE', credentialName } });
  const [gw] = validated('credentials', [
    { apiVersion: 'networking.mesh.io/v1', kind: 'Gateway', metadata: { namespace: 'gw', name: 'refs' }, spec: { servers: [server('orch-gateway://gw/site'), server('orch-gateway://site'), server('orch-gateway://other/site')] } },
  ]);
  assert.deepEqual(gatewayNotices(gw as Parameters<typeof gatewayNotices>[0], true), [
    'Gateway gw/refs: servers[1].tls.credentialName orch-gateway://site is never served: orch-gateway:// names need <namespace>/<name>',
    'Gateway gw/refs: servers[2].tls.credentialName orch-gateway://other/site is never served: it names a Secret of namespace other: a Gateway only gets Secrets of its own namespace (a cross-namespace reference would need a ReferenceGrant, which is not supported)',
  ]);
});

test('the network rbac filters of the policies selecting a gateway come before tcp_proxy on its TCP and TLS passthrough chains', () => {
  const rbac = create(FilterSchema, { name: 'envoy.filters.network.rbac', configType: { case: 'typedConfig', value: pack(NetworkRbacSchema, { statPrefix: 'tcp.', rules: {} }) } });
  for (const name of ['tcp', 'passthrough']) {
    const chains = gatewayListeners(routerProxy(), pushOf(caseResources(name)), { inboundNetworkFilters: () => [rbac] }).flatMap((l) => l.filterChains);
    const tcp = chains.filter((c) => c.filters.at(-1)?.name === 'envoy.filters.network.tcp_proxy');
    assert.ok(tcp.length > 0, name);
    for (const c of tcp) assert.deepEqual(c.filters.map((f) => f.name), ['envoy.filters.network.rbac', 'envoy.filters.network.tcp_proxy'], `${name}: ${c.name}`);
  }
});

test('DestinationRule tls.credentialName: a gateway originates with the Secret over SDS, a sidecar does not read it', () => {
  const resources = validated('dr-credential', [
    { apiVersion: 'networking.mesh.io/v1', kind: 'ServiceEntry', metadata: { namespace: 'ingress', name: 'pay' }, spec: { hosts: ['pay.example.com'], location: 'MESH_EXTERNAL', resolution: 'DNS', ports: [{ number: 443, name: 'https', protocol: 'HTTPS' }] } },
    { apiVersion: 'networking.mesh.io/v1', kind: 'DestinationRule', metadata: { namespace: 'ingress', name: 'pay' }, spec: { host: 'pay.example.com', trafficPolicy: { tls: { mode: 'MUTUAL', credentialName: 'pay-client', subjectAltNames: ['pay.example.com'] } } } },
  ]);
  const push = pushOf(resources);
  const tlsOf = (clusters: readonly { name: string }[]) => {
    const c = clusters.find((x) => x.name === 'outbound|443||pay.example.com') as Cluster;
    return (toEnvoyJson(ClusterSchema, c) as { transport_socket?: { typed_config: { common_tls_context: Record<string, unknown> } } }).transport_socket?.typed_config.common_tls_context;
  };
  const ads = { ads: {}, resource_api_version: 'V3' };
  assert.deepEqual(tlsOf(gatewayClusters(routerProxy(), push, {})), {
    tls_certificate_sds_secret_configs: [{ name: 'orch://pay-client', sds_config: ads }],
    combined_validation_context: {
      default_validation_context: { match_typed_subject_alt_names: [{ san_type: 'DNS', matcher: { exact: 'pay.example.com' } }] },
      validation_context_sds_secret_config: { name: 'orch://pay-client-cacert', sds_config: ads },
    },
  });
  const agent = {
    api_config_source: { api_type: 'GRPC', grpc_services: [{ envoy_grpc: { cluster_name: 'sds-grpc' } }], set_node_on_first_message_only: true, transport_api_version: 'V3' },
    resource_api_version: 'V3',
  };
  assert.deepEqual(
    tlsOf(sidecarClusters(sidecarProxy('10.0.0.70', 'app', 'ingress'), push, false)),
    {
      combined_validation_context: {
        default_validation_context: { match_typed_subject_alt_names: [{ san_type: 'DNS', matcher: { exact: 'pay.example.com' } }] },
        validation_context_sds_secret_config: { name: 'file-root:system', sds_config: agent },
      },
    },
    'a sidecar: TLS without the credential (reported), the server verified against the system roots',
  );
  const skip = pushOf(validated('dr-credential-skip', [resources[0]!, { ...resources[1]!, spec: { host: 'pay.example.com', trafficPolicy: { tls: { mode: 'MUTUAL', credentialName: 'pay-client', insecureSkipVerify: true } } } }]));
  assert.deepEqual(tlsOf(gatewayClusters(routerProxy(), skip, {})), {
    tls_certificate_sds_secret_configs: [{ name: 'orch://pay-client', sds_config: ads }],
    validation_context: { trust_chain_verification: 'ACCEPT_UNTRUSTED' },
  });
});
