// The mesh config's traffic defaults (outboundTrafficPolicy, connectTimeout, defaultHttpRetryPolicy)
// read from the file and applied where resources say nothing, as the Go mesh applies them: the
// mesh's outbound mode under a Sidecar's, the connect timeout of every cluster under a
// DestinationRule's, the retry policy of every route under a VirtualService's `retries`.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Cluster_DiscoveryType, type Cluster } from '../../src/gen/envoy/config/cluster/v3/cluster_pb.js';
import type { RouteConfiguration } from '../../src/gen/envoy/config/route/v3/route_pb.js';
import { setScopeLevel } from '../../src/common/log.js';
import { parseMeshConfig } from '../../src/model/mesh-config.js';
import { PushContext } from '../../src/model/push-context.js';
import { AggregateRegistry } from '../../src/registry/aggregate.js';
import { ServiceEntryRegistry } from '../../src/registry/serviceentry.js';
import type { AnyResource } from '../../src/api/types.js';
import { tcpClusterOf } from './envoy.js';
import { sidecarClusters, sidecarListeners, sidecarRoutes } from '../../src/xds/generators/sidecar.js';
import { gatewayRoutes } from '../../src/xds/generators/gateway.js';
import { parseProxy } from '../../src/model/proxy.js';
import { goldenCases } from '../helpers/golden.js';
import { MESH, sidecar, sidecarProxy, storeOf, validated } from './fixtures.js';

setScopeLevel('model', 'error');

const traffic = (yaml: string) => parseMeshConfig(yaml, 'mesh.yaml').traffic;

function push(resources: readonly AnyResource[], yaml = ''): PushContext {
  const store = storeOf(resources);
  const { outboundTrafficPolicy: mode, exportTo } = traffic(yaml);
  const registry = new AggregateRegistry([new ServiceEntryRegistry(store, 'c1')]);
  return PushContext.build({ config: store, registry, domain: 'cluster.local', clusterId: 'c1', ...(mode ? { outboundTrafficPolicy: mode } : {}), ...(exportTo ? { exportDefaults: exportTo } : {}) });
}

const client = () => sidecarProxy('10.0.0.1', 'echo-1', 'foo', { LABELS: { app: 'echo' } });

test('the mesh fields are read, effective, and refused with the field named when bad', () => {
  const m = parseMeshConfig('outboundTrafficPolicy: {mode: REGISTRY_ONLY}\nconnectTimeout: 2.5s\ndefaultHttpRetryPolicy: {attempts: 4, retryOn: "5xx,429", perTryTimeout: 1s}\n', 'mesh.yaml');
  assert.deepEqual(m.notEffective, []);
  assert.deepEqual(m.traffic, { outboundTrafficPolicy: 'REGISTRY_ONLY', connectTimeout: 2.5, defaultHttpRetryPolicy: { attempts: 4, retryOn: '5xx,429', perTryTimeout: '1s' } });
  assert.deepEqual(parseMeshConfig('', 'mesh.yaml').traffic, {});
  assert.deepEqual(traffic('outboundTrafficPolicy: {}\n'), { outboundTrafficPolicy: 'ALLOW_ANY' }, 'an empty policy keeps the default mesh config mode');
  const refused = (yaml: string, message: RegExp) => assert.throws(() => parseMeshConfig(yaml, 'mesh.yaml'), message);
  refused('outboundTrafficPolicy: {mode: DENY}\n', /^Error: mesh\.yaml: outboundTrafficPolicy\.mode: "DENY" is not one of ALLOW_ANY, REGISTRY_ONLY$/);
  refused('outboundTrafficPolicy: {egressProxy: {host: x}}\n', /^Error: mesh\.yaml: outboundTrafficPolicy\.egressProxy: unknown field \(expected mode\)$/);
  refused('connectTimeout: 10\n', /^Error: mesh\.yaml: connectTimeout: expected a duration such as 10s, got 10$/);
  refused('connectTimeout: 0s\n', /^Error: mesh\.yaml: connectTimeout: invalid duration "0s"; expected a positive duration/);
  refused('defaultHttpRetryPolicy: {attempts: -1}\n', /^Error: mesh\.yaml: defaultHttpRetryPolicy\.attempts: -1 is not a non-negative integer$/);
  refused('defaultHttpRetryPolicy: {retryOn: "5xx,sometimes"}\n', /^Error: mesh\.yaml: defaultHttpRetryPolicy\.retryOn: "sometimes" is not a valid retryOn policy/);
  refused('defaultHttpRetryPolicy: {retries: 3}\n', /^Error: mesh\.yaml: defaultHttpRetryPolicy\.retries: unknown field \(expected attempts, perTryTimeout, retryOn, retryRemoteLocalities, retryIgnorePreviousHosts, backoff\)$/);
  refused('defaultHttpRetryPolicy: {perTryTimeout: soon}\n', /^Error: mesh\.yaml: defaultHttpRetryPolicy\.perTryTimeout: invalid duration "soon"/);
});

/** The catch-all of virtualOutbound, and the default virtual host of each outbound route configuration. */
function outboundMode(p: PushContext): { virtualOutbound: string; catchAll: string[] } {
  const virtualOutbound = sidecarListeners(client(), p).find((l) => l.name === 'virtualOutbound')!;
  const catchAll = sidecarRoutes(client(), p).map((rc) => {
    const route = rc.virtualHosts.find((vh) => vh.domains.includes('*'))?.routes[0];
    return route?.action.case === 'route' && route.action.value.clusterSpecifier.case === 'cluster' ? route.action.value.clusterSpecifier.value : String(route?.action.case);
  });
  return { virtualOutbound: tcpClusterOf(virtualOutbound.filterChains.find((c) => c.name === 'virtualOutbound-catchall-tcp')!), catchAll };
}

test('outboundTrafficPolicy REGISTRY_ONLY mesh-wide: unknown destinations go to BlackHoleCluster unless a Sidecar allows them', () => {
  assert.deepEqual(outboundMode(push(MESH)), { virtualOutbound: 'PassthroughCluster', catchAll: ['PassthroughCluster', 'PassthroughCluster'] });
  const closed = outboundMode(push(MESH, 'outboundTrafficPolicy: {mode: REGISTRY_ONLY}\n'));
  assert.equal(closed.virtualOutbound, 'BlackHoleCluster');
  assert.deepEqual(closed.catchAll, ['directResponse', 'directResponse'], 'the catch-all routes answer (502) instead of passing through');
  const allowed = outboundMode(push([...MESH, sidecar('foo', 'default', { outboundTrafficPolicy: { mode: 'ALLOW_ANY' } })], 'outboundTrafficPolicy: {mode: REGISTRY_ONLY}\n'));
  assert.equal(allowed.virtualOutbound, 'PassthroughCluster', "the Sidecar's own mode wins");
  // As the Go mesh: a Sidecar policy without a mode is the enum's zero, REGISTRY_ONLY, whatever the mesh says.
  assert.equal(outboundMode(push([...MESH, sidecar('foo', 'default', { outboundTrafficPolicy: {} })])).virtualOutbound, 'BlackHoleCluster');
});

const timeoutOf = (clusters: readonly Cluster[], name: string): number => {
  const c = clusters.find((x) => x.name === name)!;
  return Number(c.connectTimeout!.seconds) + c.connectTimeout!.nanos / 1e9;
};

test('connectTimeout: every cluster (outbound, inbound, passthrough, blackhole) unless its DestinationRule sets one', () => {
  const rule: AnyResource[] = validated('connect-timeout', [{ apiVersion: 'networking.mesh.io/v1', kind: 'DestinationRule', metadata: { namespace: 'foo', name: 'db' }, spec: { host: 'db.foo.svc.cluster.local', trafficPolicy: { connectionPool: { tcp: { connectTimeout: '250ms' } } } } }]);
  const p = push([...MESH, ...rule]);
  const defaults = sidecarClusters(client(), p);
  const mesh = sidecarClusters(client(), push([...MESH, ...rule]), true, undefined, undefined, { connectTimeout: 2.5 });
  for (const name of ['outbound|80||echo.foo.svc.cluster.local', 'inbound|8080||', 'PassthroughCluster', 'BlackHoleCluster']) {
    assert.equal(timeoutOf(defaults, name), 10, `${name}: the Go mesh default`);
    assert.equal(timeoutOf(mesh, name), 2.5, `${name}: the mesh's`);
  }
  assert.equal(timeoutOf(mesh, 'outbound|5432||db.foo.svc.cluster.local'), 0.25, "the rule's wins");
  assert.ok(mesh.some((c) => c.clusterDiscoveryType.case === 'type' && c.clusterDiscoveryType.value === Cluster_DiscoveryType.ORIGINAL_DST));
});

const retriesOf = (rcs: readonly RouteConfiguration[]) =>
  rcs.flatMap((rc) => rc.virtualHosts.flatMap((vh) => vh.routes.map((r) => [`${vh.name}/${r.name}`, r.action.case === 'route' ? (r.action.value.retryPolicy ? { on: r.action.value.retryPolicy.retryOn, n: r.action.value.retryPolicy.numRetries, codes: r.action.value.retryPolicy.retriableStatusCodes } : 'none') : r.action.case] as const)));

test('defaultHttpRetryPolicy: the retries of default routes and VirtualService routes without their own; attempts 0 turns retries off', () => {
  const vs: AnyResource[] = validated('retries', [
    {
      apiVersion: 'networking.mesh.io/v1',
      kind: 'VirtualService',
      metadata: { namespace: 'foo', name: 'echo' },
      spec: { hosts: ['echo.foo.svc.cluster.local'], http: [{ name: 'own', match: [{ uri: { prefix: '/own' } }], retries: { attempts: 1, retryOn: 'reset' }, route: [{ destination: { host: 'echo' } }] }, { name: 'rest', route: [{ destination: { host: 'echo' } }] }] },
    },
  ]);
  const p = push([...MESH, ...vs]);
  const get = (retries?: { attempts?: number; retryOn?: string }) => new Map(retriesOf(sidecarRoutes(client(), push([...MESH, ...vs]), new Set(['80']), false, undefined, retries ? { retries } : {})));
  const goDefault = { on: 'connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes', n: 2, codes: [503] };
  const plain = new Map(retriesOf(sidecarRoutes(client(), p, new Set(['80']))));
  assert.deepEqual(plain.get('echo.foo.svc.cluster.local:80/rest'), goDefault);
  const mesh = get({ attempts: 5, retryOn: 'gateway-error,429' });
  assert.deepEqual(mesh.get('echo.foo.svc.cluster.local:80/rest'), { on: 'gateway-error,retriable-status-codes', n: 5, codes: [429] });
  assert.deepEqual(mesh.get('echo.foo.svc.cluster.local:80/own'), { on: 'reset', n: 1, codes: [] }, "the route's own retries win");
  const off = get({ attempts: 0 });
  assert.equal(off.get('echo.foo.svc.cluster.local:80/rest'), 'none');
  // A service without a VirtualService: its default route takes the mesh's policy too.
  const noVs = new Map(retriesOf(sidecarRoutes(client(), push(MESH), new Set(['80']), false, undefined, { retries: { attempts: 3 } })));
  const dflt = [...noVs].find(([k]) => k.startsWith('echo.foo.svc.cluster.local:80/'))![1];
  assert.deepEqual(dflt, { ...goDefault, n: 3 });
});

test('defaultHttpRetryPolicy on a gateway: its VirtualService routes without retries take it', () => {
  const c = goldenCases('test/networking/testdata/gateway').find((g) => g.name === 'http-hosts')!;
  const router = parseProxy('router~10.0.0.60~ingress-1.ingress~ingress.svc.cluster.local', { NAMESPACE: 'ingress', LABELS: { app: 'ingress' } });
  const routes = retriesOf(gatewayRoutes(router, push(validated(c.name, c.documents)), undefined, { defaultHttpRetryPolicy: { attempts: 7 } }));
  const forwarding = routes.filter(([, policy]) => typeof policy === 'object');
  assert.ok(forwarding.length > 0, 'the gateway has forwarding routes');
  for (const [name, policy] of forwarding) assert.equal(typeof policy === 'object' && policy.n, 7, name);
});

test('default*ExportTo: services, VirtualServices and DestinationRules without exportTo are visible only where the mesh says', () => {
  const docs = (exportTo?: string[]) => [
    { apiVersion: 'networking.mesh.io/v1', kind: 'DestinationRule', metadata: { namespace: 'foo', name: 'echo' }, spec: { host: 'echo.foo.svc.cluster.local', trafficPolicy: { connectionPool: { tcp: { connectTimeout: '3s' } } } } },
    { apiVersion: 'networking.mesh.io/v1', kind: 'VirtualService', metadata: { namespace: 'foo', name: 'echo' }, spec: { hosts: ['echo.foo.svc.cluster.local'], ...(exportTo ? { exportTo } : {}), http: [{ name: 'vs', route: [{ destination: { host: 'echo' } }] }] } },
  ];
  const outsider = sidecarProxy('10.0.0.9', 'other-1', 'bar');
  const seen = (p: PushContext) => {
    const clusters = sidecarClusters(outsider, p);
    const echo = clusters.find((c) => c.name === 'outbound|80||echo.foo.svc.cluster.local');
    const routes = sidecarRoutes(outsider, p, new Set(['80'])).flatMap((rc) => rc.virtualHosts.flatMap((vh) => vh.routes.map((r) => r.name)));
    return { echo: echo ? timeoutOf([echo], echo.name) : 'none', vsRoute: routes.includes('vs') };
  };
  assert.deepEqual(seen(push([...MESH, ...validated('x', docs())])), { echo: 3, vsRoute: true }, 'by default everything is exported everywhere');
  assert.deepEqual(seen(push([...MESH, ...validated('x', docs())], 'defaultServiceExportTo: ["."]\n')), { echo: 'none', vsRoute: false }, 'the service stays in its namespace');
  assert.deepEqual(seen(push([...MESH, ...validated('x', docs())], 'defaultDestinationRuleExportTo: ["."]\ndefaultVirtualServiceExportTo: [foo]\n')), { echo: 10, vsRoute: false }, 'the service is seen, its rule and VirtualService are not');
  assert.deepEqual(seen(push([...MESH, ...validated('x', docs(['*']))], 'defaultVirtualServiceExportTo: ["."]\n')).vsRoute, true, "a resource's own exportTo wins");
  assert.throws(() => parseMeshConfig('defaultServiceExportTo: []\n', 'mesh.yaml'), /^Error: mesh\.yaml: defaultServiceExportTo: expected a non-empty list of "\.", "\*" or namespaces, got \[\]$/);
  assert.throws(() => parseMeshConfig('defaultVirtualServiceExportTo: [".", "Not_A_Namespace"]\n', 'mesh.yaml'), /^Error: mesh\.yaml: defaultVirtualServiceExportTo\[1\]: invalid exportTo "Not_A_Namespace"/);
});
