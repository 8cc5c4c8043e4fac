// Gateway translation, one golden case per file in testdata/gateway/: the case's resources
// (validated as a user's would be) in; out, what a router proxy in namespace `ingress` labelled
// `app: ingress` gets: its listeners, its route configurations, the servers left out and the
// notices about what is not effective. Selection scoping and the route name of a deleted server are
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
import { sidecarRoutes } from '../../src/xds/generators/sidecar.js';
import { setScopeLevel } from '../../src/common/log.js';
import { goldenCases } from '../helpers/golden.js';
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
    const opts = { onProblem: (m: string) => problems.push(m) };
    const listeners = gatewayListeners(proxy, push, opts);
    const routes = gatewayRoutes(proxy, push, undefined, opts);
    const notices = resources.flatMap((r) => (r.kind === 'Gateway' ? gatewayNotices(r) : r.kind === 'VirtualService' ? [...virtualServiceNotices(r), ...gatewayRouteNotices(r)] : []));
    const out: JsonValue = {
      listeners: listeners.map((l) => toEnvoyJson(ListenerSchema, l)),
      routes: routes.map((r) => toEnvoyJson(RouteConfigurationSchema, r)),
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

test('the network rbac filters of the policies selecting a gateway come before tcp_proxy on its TCP and TLS passthrough chains', () => {
  const rbac = create(FilterSchema, { name: 'envoy.filters.network.rbac', configType: { case: 'typedConfig', value: pack(NetworkRbacSchema, { statPrefix: 'tcp.', rules: {} }) } });
  for (const name of ['tcp', 'passthrough']) {
    const chains = gatewayListeners(routerProxy(), pushOf(caseResources(name)), { inboundNetworkFilters: () => [rbac] }).flatMap((l) => l.filterChains);
    const tcp = chains.filter((c) => c.filters.at(-1)?.name === 'envoy.filters.network.tcp_proxy');
    assert.ok(tcp.length > 0, name);
    for (const c of tcp) assert.deepEqual(c.filters.map((f) => f.name), ['envoy.filters.network.rbac', 'envoy.filters.network.tcp_proxy'], `${name}: ${c.name}`);
  }
});
