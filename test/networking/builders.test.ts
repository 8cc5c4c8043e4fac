// The pure builders, field by field: fixture services in, Envoy messages out.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { create } from '@bufbuild/protobuf';
import { Cluster_DiscoveryType, Cluster_LbPolicy } from '../../src/gen/envoy/config/cluster/v3/cluster_pb.js';
import { HttpFilterSchema } from '../../src/gen/envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager_pb.js';
import { FilterSchema } from '../../src/gen/envoy/config/listener/v3/listener_components_pb.js';
import { HttpProtocolOptionsSchema } from '../../src/gen/envoy/extensions/upstreams/http/v3/http_protocol_options_pb.js';
import { ApiVersion } from '../../src/gen/envoy/config/core/v3/config_source_pb.js';
import { TrafficDirection } from '../../src/gen/envoy/config/core/v3/base_pb.js';
import { RouterSchema } from '../../src/gen/envoy/extensions/filters/http/router/v3/router_pb.js';
import { pack, unpack } from '../../src/envoy/types.js';
import { addr, hcmOf, listenerByName, svc, tcpClusterOf } from './envoy.js';
import { blackHoleCluster, buildInboundCluster, buildOutboundCluster, passthroughCluster } from '../../src/networking/cluster.js';
import { buildLoadAssignment } from '../../src/networking/endpoint.js';
import { buildIngressListeners, buildOutboundListeners, buildVirtualInbound, buildVirtualOutbound } from '../../src/networking/listener.js';
import { buildInboundRouteConfig, buildOutboundRouteConfig, nonServiceHosts, nonServiceVirtualHosts, serviceDomains, withPorts } from '../../src/networking/route.js';
import type { VirtualService } from '../../src/api/types.js';
import { inboundClusterName, outboundClusterName, parseClusterName } from '../../src/networking/names.js';
import { clusterPolicy } from '../../src/networking/traffic-policy.js';

const ECHO = svc({
  hostname: 'echo.foo.svc.cluster.local',
  addresses: ['10.96.0.10'],
  ports: [
    { name: 'http', port: 80, protocol: 'HTTP' },
    { name: 'grpc', port: 7070, protocol: 'GRPC' },
  ],
});
const DB = svc({ hostname: 'db.foo.svc.cluster.local', addresses: ['10.96.0.20'], ports: [{ name: 'tcp', port: 5432, protocol: 'TCP' }] });

test('cluster names', () => {
  assert.equal(outboundClusterName(80, 'echo.foo.svc.cluster.local'), 'outbound|80||echo.foo.svc.cluster.local');
  assert.equal(outboundClusterName(80, 'echo', 'v1'), 'outbound|80|v1|echo');
  assert.equal(inboundClusterName(8080), 'inbound|8080||');
  assert.deepEqual(parseClusterName('outbound|80|v1|echo.foo'), { direction: 'outbound', port: 80, subset: 'v1', hostname: 'echo.foo' });
  assert.equal(parseClusterName('outbound|x||echo'), undefined);
  assert.equal(parseClusterName('BlackHoleCluster'), undefined);
  assert.equal(parseClusterName('sideways|80||echo'), undefined);
});

test('outbound cluster of a STATIC service: EDS over ADS, named outbound|<port>||<host>, h2 for gRPC', () => {
  const http = buildOutboundCluster(ECHO, ECHO.ports[0]!, []);
  assert.equal(http.name, 'outbound|80||echo.foo.svc.cluster.local');
  assert.deepEqual(http.clusterDiscoveryType, { case: 'type', value: Cluster_DiscoveryType.EDS });
  assert.equal(http.edsClusterConfig?.serviceName, http.name);
  assert.equal(http.edsClusterConfig?.edsConfig?.configSourceSpecifier.case, 'ads');
  assert.equal(http.edsClusterConfig?.edsConfig?.resourceApiVersion, ApiVersion.V3);
  assert.equal(http.lbPolicy, Cluster_LbPolicy.LEAST_REQUEST, "the Go mesh's default balancer");
  assert.equal(buildOutboundCluster(ECHO, ECHO.ports[0]!, [], { proxyless: true }).lbPolicy, Cluster_LbPolicy.ROUND_ROBIN, "a proxyless gRPC client's: gRPC's default");
  // A proxyless client gets only what gRPC balances with, warmup never (as the Go mesh's gRPC generator).
  const proxyless = (loadBalancer: object) => buildOutboundCluster(ECHO, ECHO.ports[0]!, [], { proxyless: true }, { subset: '', policy: { loadBalancer } });
  assert.deepEqual([proxyless({ simple: 'RANDOM' }), proxyless({ simple: 'LEAST_REQUEST', warmupDurationSecs: '30s' })].map((c) => [c.lbPolicy, c.lbConfig.case]), [[Cluster_LbPolicy.ROUND_ROBIN, undefined], [Cluster_LbPolicy.LEAST_REQUEST, undefined]]);
  assert.equal(http.connectTimeout?.seconds, 10n);
  assert.deepEqual(Object.keys(http.typedExtensionProtocolOptions), []);
  const grpc = buildOutboundCluster(ECHO, ECHO.ports[1]!, [], { connectTimeout: 2.5 });
  assert.equal(grpc.connectTimeout?.seconds, 2n);
  assert.equal(grpc.connectTimeout?.nanos, 500_000_000);
  const opts = grpc.typedExtensionProtocolOptions['envoy.extensions.upstreams.http.v3.HttpProtocolOptions']!;
  const h2 = unpack(opts, HttpProtocolOptionsSchema);
  assert.equal(h2.upstreamProtocolOptions.case, 'explicitHttpConfig');
  assert.equal(h2.upstreamProtocolOptions.value.protocolConfig.case, 'http2ProtocolOptions');
});

test('outbound clusters by resolution: DNS inline, NONE original destination', () => {
  const ext = svc({ hostname: 'api.example.com', resolution: 'DNS', ports: [{ name: 'tls', port: 443, protocol: 'TLS' }] });
  const ep = { address: 'api.example.com', port: 443, locality: { region: '', zone: '', subZone: '' }, weight: 1 };
  const dns = buildOutboundCluster(ext, ext.ports[0]!, [ep]);
  assert.deepEqual(dns.clusterDiscoveryType, { case: 'type', value: Cluster_DiscoveryType.STRICT_DNS });
  assert.equal(dns.loadAssignment?.clusterName, 'outbound|443||api.example.com');
  const dnsEp = dns.loadAssignment?.endpoints[0]?.lbEndpoints[0]?.hostIdentifier;
  assert.equal(dnsEp?.case, 'endpoint');
  assert.equal(addr(dnsEp.value.address), 'api.example.com:443');
  const rr = buildOutboundCluster({ ...ext, resolution: 'DNS_ROUND_ROBIN' }, ext.ports[0]!, [ep, { ...ep, address: 'b.example.com' }]);
  assert.deepEqual(rr.clusterDiscoveryType, { case: 'type', value: Cluster_DiscoveryType.LOGICAL_DNS });
  assert.equal(rr.loadAssignment?.endpoints[0]?.lbEndpoints.length, 1, 'LOGICAL_DNS takes a single host');
  const none = buildOutboundCluster({ ...ext, resolution: 'NONE' }, ext.ports[0]!, []);
  assert.deepEqual(none.clusterDiscoveryType, { case: 'type', value: Cluster_DiscoveryType.ORIGINAL_DST });
  assert.equal(none.lbPolicy, Cluster_LbPolicy.CLUSTER_PROVIDED);
});

test('inbound, BlackHole and Passthrough clusters', () => {
  const inbound = buildInboundCluster(8080, { address: '127.0.0.1', port: 8080 }, 'HTTP');
  assert.equal(inbound.name, 'inbound|8080||');
  assert.deepEqual(inbound.clusterDiscoveryType, { case: 'type', value: Cluster_DiscoveryType.STATIC });
  assert.equal(inbound.loadAssignment?.clusterName, 'inbound|8080||');
  const lb = inbound.loadAssignment!.endpoints[0]!.lbEndpoints[0]!;
  assert.equal(lb.hostIdentifier.case, 'endpoint');
  assert.equal(addr(lb.hostIdentifier.value.address), '127.0.0.1:8080');
  const bh = blackHoleCluster();
  assert.equal(bh.name, 'BlackHoleCluster');
  assert.deepEqual(bh.clusterDiscoveryType, { case: 'type', value: Cluster_DiscoveryType.STATIC });
  assert.equal(bh.loadAssignment, undefined);
  const pt = passthroughCluster();
  assert.equal(pt.name, 'PassthroughCluster');
  assert.deepEqual(pt.clusterDiscoveryType, { case: 'type', value: Cluster_DiscoveryType.ORIGINAL_DST });
  assert.equal(pt.lbPolicy, Cluster_LbPolicy.CLUSTER_PROVIDED);
});

test('load assignment: endpoints grouped by locality, weights per endpoint and summed per locality, duplicates dropped', () => {
  const east = { region: 'us-east', zone: 'a', subZone: '' };
  const west = { region: 'us-west', zone: 'b', subZone: 'r1' };
  const cla = buildLoadAssignment('outbound|80||echo', [
    { address: '10.0.0.3', port: 8080, locality: west, weight: 1 },
    { address: '10.0.0.1', port: 8080, locality: east, weight: 3 },
    { address: '10.0.0.2', port: 8080, locality: east, weight: 2 },
    { address: '10.0.0.2', port: 8080, locality: east, weight: 2 },
  ]);
  assert.equal(cla.clusterName, 'outbound|80||echo');
  assert.equal(cla.endpoints.length, 2);
  const [e, w] = cla.endpoints as [(typeof cla.endpoints)[0], (typeof cla.endpoints)[0]];
  assert.deepEqual([e.locality?.region, e.locality?.zone, e.locality?.subZone], ['us-east', 'a', '']);
  assert.equal(e.loadBalancingWeight, 5);
  assert.deepEqual(
    e.lbEndpoints.map((l) => [l.hostIdentifier.case === 'endpoint' ? addr(l.hostIdentifier.value.address) : '', l.loadBalancingWeight]),
    [
      ['10.0.0.1:8080', 3],
      ['10.0.0.2:8080', 2],
    ],
  );
  assert.deepEqual([w.locality?.region, w.locality?.zone, w.locality?.subZone], ['us-west', 'b', 'r1']);
  assert.equal(w.loadBalancingWeight, 1);
  assert.deepEqual(buildLoadAssignment('empty', []).endpoints, []);
});

test('virtual host domains: FQDN, short names by namespace, VIPs, without port; a proxyless client adds the port variants', () => {
  assert.deepEqual(serviceDomains(ECHO, 'foo', 'cluster.local'), ['echo.foo.svc.cluster.local', 'echo.foo.svc', 'echo.foo', 'echo', '10.96.0.10']);
  assert.ok(!serviceDomains(ECHO, 'bar', 'cluster.local').includes('echo'), 'the bare name only from the same namespace');
  const other = svc({ hostname: 'echo.foo.svc.mesh.internal', ports: [] });
  assert.deepEqual(serviceDomains(other, 'foo', 'mesh.internal'), ['echo.foo.svc.mesh.internal', 'echo.foo.svc', 'echo.foo', 'echo']);
  assert.deepEqual(serviceDomains(other, 'foo', 'cluster.local'), ['echo.foo.svc.mesh.internal'], '--domain decides what is in-mesh');
  assert.deepEqual(withPorts(serviceDomains(svc({ hostname: 'api.example.com', ports: [] }), 'foo', 'cluster.local'), 443), ['api.example.com', 'api.example.com:443']);
});

test('virtual host domains: an IPv6 VIP in brackets, as a Host header carries it; a headless orchestrator Service also below each name', () => {
  const dual = svc({ hostname: 'dual.example.com', ports: [], addresses: ['10.96.0.11', 'fd00::11', '10.97.0.0/16'] });
  assert.deepEqual(serviceDomains(dual, 'foo', 'cluster.local'), ['dual.example.com', '10.96.0.11', '[fd00::11]']);
  assert.deepEqual(withPorts(['[fd00::11]'], 80), ['[fd00::11]', '[fd00::11]:80']);
  // A StatefulSet's Pods are `<pod>.db.foo.svc.cluster.local`: each name of the service as a wildcard too.
  const db = svc({ hostname: 'db.foo.svc.cluster.local', ports: [], resolution: 'NONE', registry: 'Orchestrator' });
  assert.deepEqual(serviceDomains(db, 'foo', 'cluster.local'), [
    'db.foo.svc.cluster.local', 'db.foo.svc', 'db.foo', 'db', '*.db.foo.svc.cluster.local', '*.db.foo.svc', '*.db.foo', '*.db',
  ]);
  // Not for a ServiceEntry without addresses, nor a headless Service given EDS (PILOT_ENABLE_EDS_FOR_HEADLESS_SERVICES).
  assert.deepEqual(serviceDomains({ ...db, registry: 'ServiceEntry' }, 'bar', 'cluster.local'), ['db.foo.svc.cluster.local', 'db.foo.svc', 'db.foo']);
  assert.deepEqual(serviceDomains({ ...db, resolution: 'STATIC' }, 'bar', 'cluster.local'), ['db.foo.svc.cluster.local', 'db.foo.svc', 'db.foo']);
});

test("VirtualService hosts that name no service on a port, as the Go mesh separates them", () => {
  const wiki = svc({ hostname: '*.wikipedia.org', ports: [{ name: 'http', port: 8080, protocol: 'HTTP' }] });
  const vs = (name: string, hosts: string[], http = true) => ({
    vs: { apiVersion: 'networking.mesh.io/v1', kind: 'VirtualService', metadata: { namespace: 'foo', name }, spec: { hosts, ...(http ? { http: [{ route: [{ destination: { host: 'echo' } }] }] } : {}) } } as unknown as VirtualService,
    hosts,
  });
  const hostsOf = (port: number, services: ReturnType<typeof svc>[], vss: ReturnType<typeof vs>[]) => nonServiceHosts(port, services, vss).map((g) => [g.vs.vs.metadata.name, g.hosts]);
  // An exact host a wildcard service matches names no service itself, but puts its VirtualService on the port.
  assert.deepEqual(hostsOf(8080, [wiki], [vs('en', ['en.wikipedia.org'])]), [['en', ['en.wikipedia.org']]]);
  // A VirtualService naming no service of the port counts on port 80 only.
  assert.deepEqual(hostsOf(8080, [wiki], [vs('api', ['api.example.com'])]), []);
  assert.deepEqual(hostsOf(80, [ECHO], [vs('api', ['api.example.com'])]), [['api', ['api.example.com']]]);
  // A wildcard host matching a service (either way round) is that service's; one matching none is a host of its own.
  assert.deepEqual(hostsOf(8080, [wiki], [vs('wild', ['*.org', '*.en.wikipedia.org', '*.example.net'])]), [['wild', ['*.example.net']]]);
  // Without HTTP routes a VirtualService gives no virtual host.
  assert.deepEqual(hostsOf(80, [ECHO], [vs('tcp-only', ['api.example.com'], false)]), []);
  // An IPv6 address as a host: in brackets, in the name and the domain.
  const v6 = nonServiceVirtualHosts(80, nonServiceHosts(80, [ECHO], [vs('v6', ['fd00::9'])]), { domain: 'cluster.local', proxyNamespace: 'foo', outboundTrafficPolicy: 'ALLOW_ANY' });
  assert.deepEqual(v6.map((h) => [h.name, h.domains]), [['[fd00::9]:80', ['[fd00::9]']]]);
});

test('outbound route config per port: a virtual host per service, duplicates dropped, catch-all last', () => {
  const twin = svc({ hostname: 'echo.foo.svc.cluster.local', namespace: 'foo', ports: ECHO.ports, addresses: ['10.96.0.10'] });
  const ext = svc({ hostname: 'web.example.com', ports: [{ name: 'http', port: 80, protocol: 'HTTP' }] });
  const rc = buildOutboundRouteConfig(80, [ECHO, ext, twin], { domain: 'cluster.local', proxyNamespace: 'foo', outboundTrafficPolicy: 'ALLOW_ANY' });
  assert.equal(rc.name, '80');
  assert.equal(rc.validateClusters, false);
  assert.equal(rc.ignorePortInHostMatching, true, 'as the Go mesh: the port of the host is ignored, the domains carry none');
  assert.equal(rc.maxDirectResponseBodySizeBytes, 1024 * 1024, "as the Go mesh: a direct response body up to 1 MiB, not Envoy's 4 KiB");
  assert.deepEqual(rc.virtualHosts.map((v) => v.name), ['echo.foo.svc.cluster.local:80', 'web.example.com:80', 'allow_any']);
  const vh = rc.virtualHosts[0]!;
  assert.ok(vh.domains.includes('echo') && vh.domains.includes('echo.foo.svc.cluster.local') && !vh.domains.some((d) => d.includes(':')));
  const route = vh.routes[0]!;
  assert.equal(route.match?.pathSpecifier.case, 'prefix');
  assert.equal(route.match?.pathSpecifier.value, '/');
  assert.equal(route.action.case, 'route');
  assert.deepEqual(route.action.value.clusterSpecifier, { case: 'cluster', value: 'outbound|80||echo.foo.svc.cluster.local' });
  assert.equal(route.action.value.timeout?.seconds, 0n);
  const allowAny = rc.virtualHosts[2]!;
  assert.deepEqual(allowAny.domains, ['*']);
  assert.deepEqual(allowAny.routes[0]!.action.value && (allowAny.routes[0]!.action.value as { clusterSpecifier: unknown }).clusterSpecifier, { case: 'cluster', value: 'PassthroughCluster' });
  const blocked = buildOutboundRouteConfig(80, [ECHO], { domain: 'cluster.local', proxyNamespace: 'foo', outboundTrafficPolicy: 'REGISTRY_ONLY' });
  const last = blocked.virtualHosts.at(-1)!;
  assert.equal(last.name, 'block_all');
  assert.equal(last.routes[0]!.action.case, 'directResponse');
  assert.equal(last.routes[0]!.action.case === 'directResponse' && last.routes[0]!.action.value.status, 502);
});

test('route timeouts as the Go mesh sets them: max_grpc_timeout = timeout on outbound routes, grpc-timeout as is inbound', () => {
  const action = (rc: ReturnType<typeof buildOutboundRouteConfig>, vh: number) => {
    const a = rc.virtualHosts[vh]!.routes[0]!.action;
    assert.equal(a.case, 'route');
    return a.value;
  };
  const noDefault = buildOutboundRouteConfig(80, [ECHO], { domain: 'cluster.local', proxyNamespace: 'foo', outboundTrafficPolicy: 'ALLOW_ANY' });
  for (const vh of [0, 1]) {
    const a = action(noDefault, vh);
    assert.deepEqual([a.timeout?.seconds, a.maxGrpcTimeout?.seconds, a.maxGrpcTimeout?.nanos], [0n, 0n, 0], 'no timeout: 0s, so grpc-timeout is not capped');
    assert.equal(a.maxStreamDuration, undefined);
  }
  const withDefault = action(buildOutboundRouteConfig(80, [ECHO], { domain: 'cluster.local', proxyNamespace: 'foo', outboundTrafficPolicy: 'ALLOW_ANY', defaultTimeout: 2.5 }), 0);
  assert.deepEqual([withDefault.maxGrpcTimeout?.seconds, withDefault.maxGrpcTimeout?.nanos], [2n, 500_000_000], 'the route timeout caps grpc-timeout');
  const inbound = buildInboundRouteConfig('inbound|8080||', 'inbound|8080||').virtualHosts[0]!.routes[0]!.action;
  assert.equal(inbound.case, 'route');
  assert.equal(inbound.value.timeout?.seconds, 0n);
  assert.equal(inbound.value.maxGrpcTimeout, undefined);
  assert.equal(inbound.value.maxStreamDuration?.maxStreamDuration?.seconds, 0n);
  assert.equal(inbound.value.maxStreamDuration?.grpcTimeoutHeaderMax?.seconds, 0n);
});

test('virtualOutbound and virtualInbound: 15001/15006, use_original_dst, catch-all by outbound policy, connections to 15001 itself blackholed', () => {
  const out = buildVirtualOutbound('ALLOW_ANY');
  assert.equal(out.name, 'virtualOutbound');
  assert.equal(addr(out.address), '0.0.0.0:15001');
  assert.equal(out.useOriginalDst, true);
  assert.equal(out.trafficDirection, TrafficDirection.OUTBOUND);
  // PILOT_ENABLE_LOOP_BLOCKER (on by default): a connection to 15001 would pass through to 15001 again, without end.
  assert.deepEqual(out.filterChains.map((c) => [c.name, c.filterChainMatch?.destinationPort, tcpClusterOf(c)]), [
    ['virtualOutbound-blackhole', 15001, 'BlackHoleCluster'],
    ['virtualOutbound-catchall-tcp', undefined, 'PassthroughCluster'],
  ]);
  assert.equal(tcpClusterOf(buildVirtualOutbound('REGISTRY_ONLY').filterChains[1]!), 'BlackHoleCluster');
  assert.deepEqual(buildVirtualOutbound('ALLOW_ANY', false, undefined, false).filterChains.map((c) => c.name), ['virtualOutbound-catchall-tcp'], 'PILOT_ENABLE_LOOP_BLOCKER=false');

  const fakeRbac = create(HttpFilterSchema, { name: 'envoy.filters.http.rbac', configType: { case: 'typedConfig', value: pack(RouterSchema, {}) } });
  const fakeJwt = create(HttpFilterSchema, { name: 'envoy.filters.http.jwt_authn', configType: { case: 'typedConfig', value: pack(RouterSchema, {}) } });
  const fakeNetworkRbac = create(FilterSchema, { name: 'envoy.filters.network.rbac', configType: { case: 'typedConfig', value: pack(RouterSchema, {}) } });
  const inb = buildVirtualInbound(
    [
      { port: 8080, protocol: 'HTTP', target: { address: '127.0.0.1', port: 8080 } },
      { port: 5432, protocol: 'TCP', target: { address: '127.0.0.1', port: 5432 } },
    ],
    { httpFilters: [fakeJwt, fakeRbac], networkFilters: [fakeNetworkRbac] },
  );
  assert.equal(inb.name, 'virtualInbound');
  assert.equal(addr(inb.address), '0.0.0.0:15006');
  assert.equal(inb.useOriginalDst, true);
  assert.equal(inb.trafficDirection, TrafficDirection.INBOUND);
  assert.deepEqual(inb.listenerFilters, []);
  assert.deepEqual(inb.filterChains.map((c) => [c.name, c.filterChainMatch?.destinationPort]), [
    ['0.0.0.0_8080', 8080],
    ['0.0.0.0_5432', 5432],
    ['virtualInbound-blackhole', 15006],
    ['virtualInbound-ipv4-passthrough', undefined],
    ['virtualInbound-ipv6-passthrough', undefined],
  ]);
  assert.equal(tcpClusterOf(inb.filterChains[2]!), 'BlackHoleCluster');
  assert.deepEqual(inb.filterChains[2]!.filters.map((f) => f.name), ['envoy.filters.network.tcp_proxy'], 'the loop guard has no policy');
  // The passthrough (sniffing off) is tcp_proxy behind the network rbac filters, as in the Go mesh.
  assert.equal(tcpClusterOf(inb.filterChains[3]!), 'PassthroughCluster');
  assert.deepEqual(inb.filterChains[3]!.filters.map((f) => f.name), ['envoy.filters.network.rbac', 'envoy.filters.network.tcp_proxy']);
  assert.deepEqual(inb.filterChains[4]!.filters.map((f) => f.name), ['envoy.filters.network.rbac', 'envoy.filters.network.tcp_proxy']);
  assert.deepEqual(inb.filterChains[1]!.filters.map((f) => f.name), ['envoy.filters.network.rbac', 'envoy.filters.network.tcp_proxy'], 'a declared TCP port too');
  assert.deepEqual(inb.filterChains[3]!.filterChainMatch?.prefixRanges.map((r) => [r.addressPrefix, r.prefixLen?.valueOf()]), [['0.0.0.0', 0]]);
  const hcm = hcmOf(inb.filterChains[0]!);
  assert.deepEqual(hcm.httpFilters.map((f) => f.name), ['envoy.filters.http.jwt_authn', 'envoy.filters.http.rbac', 'envoy.filters.http.router'], 'security filters in order, router last');
  assert.equal(hcm.statPrefix, 'inbound_0.0.0.0_8080');
  assert.equal(hcm.routeSpecifier.case, 'routeConfig');
  const rc = hcm.routeSpecifier.value;
  assert.equal(rc && 'virtualHosts' in rc && rc.virtualHosts[0]!.routes[0]!.action.case === 'route' && rc.virtualHosts[0]!.routes[0]!.action.value.clusterSpecifier.value, 'inbound|8080||');
  assert.equal(tcpClusterOf(inb.filterChains[1]!), 'inbound|5432||');
});

test('sniffed inbound ports get an HTTP chain on http_inspector protocols and a TCP chain', () => {
  const inb = buildVirtualInbound([{ port: 9000, protocol: 'UNSUPPORTED', target: { address: '127.0.0.1', port: 9000 } }], { sniffing: true, detectionTimeout: 1 });
  assert.deepEqual(inb.listenerFilters.map((f) => f.name), ['envoy.filters.listener.http_inspector']);
  assert.equal(inb.listenerFiltersTimeout?.seconds, 1n);
  assert.deepEqual(inb.filterChains.slice(0, 2).map((c) => [c.name, c.filterChainMatch?.destinationPort, c.filterChainMatch?.applicationProtocols]), [
    ['0.0.0.0_9000_http', 9000, ['http/1.0', 'http/1.1', 'h2c']],
    ['0.0.0.0_9000', 9000, []],
  ]);
  hcmOf(inb.filterChains[0]!);
  assert.equal(tcpClusterOf(inb.filterChains[1]!), 'inbound|9000||');
  // The passthrough is sniffed too, as the Go mesh's: HTTP to an undeclared port gets the HTTP filters.
  assert.deepEqual(inb.filterChains.slice(3).map((c) => [c.name, c.filterChainMatch?.applicationProtocols]), [
    ['virtualInbound-ipv4-passthrough_http', ['http/1.0', 'http/1.1', 'h2c']],
    ['virtualInbound-ipv4-passthrough', []],
    ['virtualInbound-ipv6-passthrough_http', ['http/1.0', 'http/1.1', 'h2c']],
    ['virtualInbound-ipv6-passthrough', []],
  ]);
  assert.equal(hcmOf(inb.filterChains[3]!).routeSpecifier.case, 'routeConfig');
  const plain = buildVirtualInbound([{ port: 9000, protocol: 'UNSUPPORTED', target: { address: '127.0.0.1', port: 9000 } }], { sniffing: false });
  assert.deepEqual(plain.filterChains.map((c) => c.name), ['0.0.0.0_9000', 'virtualInbound-blackhole', 'virtualInbound-ipv4-passthrough', 'virtualInbound-ipv6-passthrough']);
  // Without security filters the passthrough is plain TCP to the original destination.
  assert.equal(tcpClusterOf(plain.filterChains[2]!), 'PassthroughCluster');
  assert.deepEqual(plain.listenerFilters, []);
});

test('outbound listeners: HTTP ports share 0.0.0.0_<port> with RDS <port>; TCP by VIP; conflicts reported', () => {
  const other = svc({ hostname: 'web.foo.svc.cluster.local', ports: [{ name: 'http', port: 80, protocol: 'HTTP' }] });
  const novip = svc({ hostname: 'a.example.com', ports: [{ name: 'tcp', port: 80, protocol: 'TCP' }] });
  const { listeners, conflicts } = buildOutboundListeners([ECHO, DB, other, novip], { bind: '0.0.0.0', bindToPort: false });
  assert.deepEqual(listeners.map((l) => l.name), ['0.0.0.0_80', '0.0.0.0_7070', '10.96.0.20_5432']);
  assert.deepEqual(conflicts, [{ kind: 'tcp_over_http', listener: '0.0.0.0_80', service: 'a.example.com:80' }]);
  const tcpFirst = buildOutboundListeners([novip, other, svc({ hostname: 'b.example.com', ports: [{ name: 'tcp', port: 80, protocol: 'TCP' }] })], { bind: '0.0.0.0', bindToPort: false });
  assert.deepEqual(tcpFirst.conflicts.map((c) => c.kind), ['http_over_tcp', 'tcp_over_tcp']);
  const http = listenerByName(listeners, '0.0.0.0_80');
  assert.equal(addr(http.address), '0.0.0.0:80');
  assert.equal(http.bindToPort, false);
  assert.equal(http.trafficDirection, TrafficDirection.OUTBOUND);
  const hcm = hcmOf(http.filterChains[0]!);
  assert.equal(hcm.routeSpecifier.case, 'rds');
  assert.equal(hcm.routeSpecifier.value?.routeConfigName, '80');
  assert.equal(hcm.routeSpecifier.case === 'rds' && hcm.routeSpecifier.value.configSource?.configSourceSpecifier.case, 'ads');
  // The per-route configs of VirtualServices need the fault and CORS filters, before the router as the Go mesh places them.
  assert.deepEqual(hcm.httpFilters.map((f) => f.name), ['mesh.alpn', 'envoy.filters.http.fault', 'envoy.filters.http.cors', 'envoy.filters.http.router']);
  const db = listenerByName(listeners, '10.96.0.20_5432');
  assert.equal(addr(db.address), '10.96.0.20:5432');
  assert.equal(tcpClusterOf(db.filterChains[0]!), 'outbound|5432||db.foo.svc.cluster.local');
  const direct = buildOutboundListeners([DB], { bind: '127.0.0.1', bindToPort: true }).listeners;
  assert.deepEqual(direct.map((l) => [l.name, addr(l.address), l.bindToPort]), [['127.0.0.1_5432', '127.0.0.1:5432', true]]);
});

test('outbound ports of unknown protocol: sniffed (http_inspector, HTTP chain on RDS <port>, TCP fallback) when on, TCP when off', () => {
  const cache = svc({ hostname: 'cache.foo.svc.cluster.local', addresses: ['10.96.0.30'], ports: [{ name: 'cache', port: 6379, protocol: 'UNSUPPORTED' }] });
  const [on] = buildOutboundListeners([cache, DB], { bind: '0.0.0.0', bindToPort: false, sniffing: true }).listeners;
  assert.equal(on!.name, '10.96.0.30_6379');
  assert.deepEqual(on!.listenerFilters.map((f) => f.name), ['envoy.filters.listener.http_inspector']);
  assert.deepEqual(on!.filterChains.map((c) => [c.name, c.filterChainMatch?.applicationProtocols ?? []]), [
    ['10.96.0.30_6379_http', ['http/1.0', 'http/1.1', 'h2c']],
    ['10.96.0.30_6379', []],
  ]);
  const hcm = hcmOf(on!.filterChains[0]!);
  assert.equal(hcm.routeSpecifier.case === 'rds' && hcm.routeSpecifier.value.routeConfigName, '6379');
  assert.equal(tcpClusterOf(on!.filterChains[1]!), 'outbound|6379||cache.foo.svc.cluster.local');
  // Known protocols are not sniffed.
  const db = listenerByName(buildOutboundListeners([cache, DB], { bind: '0.0.0.0', bindToPort: false, sniffing: true }).listeners, '10.96.0.20_5432');
  assert.deepEqual(db.listenerFilters, []);
  assert.equal(db.filterChains.length, 1);
  const [off] = buildOutboundListeners([cache], { bind: '0.0.0.0', bindToPort: false, sniffing: false }).listeners;
  assert.deepEqual(off!.listenerFilters, []);
  assert.equal(off!.filterChains.length, 1);
  assert.equal(tcpClusterOf(off!.filterChains[0]!), 'outbound|6379||cache.foo.svc.cluster.local');
});

test('ingress listeners without capture: bound on the port, no destination match, to the target cluster', () => {
  const [l] = buildIngressListeners([{ port: 18080, protocol: 'HTTP', target: { address: '127.0.0.1', port: 8080 }, bind: '127.0.0.1' }]);
  assert.equal(l!.name, '127.0.0.1_18080');
  assert.equal(addr(l!.address), '127.0.0.1:18080');
  assert.equal(l!.useOriginalDst, undefined);
  assert.equal(l!.filterChains[0]!.filterChainMatch?.destinationPort, undefined);
  const [w] = buildIngressListeners([{ port: 15432, protocol: 'TCP', target: { address: '127.0.0.1', port: 5432 } }]);
  assert.equal(addr(w!.address), '0.0.0.0:15432');
  assert.equal(tcpClusterOf(w!.filterChains[0]!), 'inbound|15432||');
});

test("outlierDetection as the Go mesh sends it: a counter left out keeps Envoy's default, maxEjectionPercent 0 is Envoy's 10 %, the panic threshold is always set (minHealthPercent, default 0)", () => {
  const policy = (outlierDetection: object) => clusterPolicy({ outlierDetection } as Parameters<typeof clusterPolicy>[0], 'reviews.default.svc.cluster.local');
  const bare = policy({ baseEjectionTime: '30s', maxEjectionPercent: 0 });
  assert.deepEqual(bare.outlierDetection, { enforcingSuccessRate: 0, baseEjectionTime: { seconds: 30n, nanos: 0 } });
  assert.deepEqual(bare.commonLbConfig, { healthyPanicThreshold: { value: 0 } });
  const named = policy({ consecutive5xxErrors: 0, consecutiveGatewayErrors: 3, maxEjectionPercent: 40, minHealthPercent: 25 });
  assert.deepEqual(named.outlierDetection, {
    enforcingSuccessRate: 0,
    consecutive5xx: 0,
    enforcingConsecutive5xx: 0,
    consecutiveGatewayFailure: 3,
    enforcingConsecutiveGatewayFailure: 100,
    maxEjectionPercent: 40,
  });
  assert.deepEqual(named.commonLbConfig, { healthyPanicThreshold: { value: 25 } });
});
