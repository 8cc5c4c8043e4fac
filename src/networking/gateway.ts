// LDS for gateways: one listener per merged port (`<bind>_<port>`, 0.0.0.0 unless the server binds
// an address). HTTP servers: one HTTP connection manager on RDS `http.<port>`. Terminating HTTPS
// servers: a chain per server, matched by SNI, with its DownstreamTlsContext and RDS
// `https.<port>.<portName>.<gateway>.<namespace>`. TLS PASSTHROUGH: a chain per VirtualService tls
// route, matched by its sniHosts, proxying TCP. AUTO_PASSTHROUGH: a chain per cluster name as SNI
// (gateway-sni.ts). TCP (and terminated TLS) servers: the first VirtualService tcp route that
// matches, proxying TCP. As the Go mesh builds them.
import { create, type MessageInitShape } from '@bufbuild/protobuf';
import { TrafficDirection } from '../gen/envoy/config/core/v3/base_pb.js';
import { ListenerSchema, type Listener } from '../gen/envoy/config/listener/v3/listener_pb.js';
import { FilterSchema, type FilterChainSchema, type Filter } from '../gen/envoy/config/listener/v3/listener_components_pb.js';
import { TlsInspectorSchema } from '../gen/envoy/extensions/filters/listener/tls_inspector/v3/tls_inspector_pb.js';
import type { HttpFilter } from '../gen/envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager_pb.js';
import { TcpProxySchema } from '../gen/envoy/extensions/filters/network/tcp_proxy/v3/tcp_proxy_pb.js';
import { hostOf, isPassthrough, resolveGatewayName, sniHosts, terminatesHttps, type BoundServer, type GatewayVirtualService, type MergedGateway, type MergedPort } from '../model/gateway.js';
import { hostMatches } from '../model/selection.js';
import { resolveHost } from '../model/traffic.js';
import { isHttpProtocol } from '../model/service.js';
import { TCP_PROXY_FILTER_NAME, TLS_INSPECTOR_FILTER_NAME } from '../envoy/names.js';
import { pack } from '../envoy/types.js';
import { alpnFilter } from './alpn-filter.js';
import { EDGE_HCM, hcmFilter, routeConfiguredFilters, socketAddress, tcpProxyTimeouts, tunnelingConfig, type PathNormalization, type TcpProxyPolicy } from './common.js';
import { autoPassthroughChains, type SniTarget } from './gateway-sni.js';
import { gatewayTransportSocket } from './gateway-tls.js';
import { accessLogField, type AccessLogs } from './access-log.js';
import { withHttpTelemetry, withTcpTelemetry, type ListenerTelemetry } from './telemetry-filters.js';
import type { Destination } from './http-route.js';
import { listenerName, WILDCARD_ADDRESS } from './names.js';
import { destinationResolver } from './route.js';

type ChainInit = Exclude<MessageInitShape<typeof FilterChainSchema>, { $typeName: string }>;

export interface GatewayListenerOptions {
  /** `--domain`. */
  readonly domain: string;
  /** VirtualServices bound to a Gateway (`<namespace>/<name>`) and visible to the proxy. */
  readonly virtualServicesFor: (gateway: string) => readonly GatewayVirtualService[];
  /** Ports of every service the proxy sees, by hostname (a destination without port). */
  readonly servicePorts?: Readonly<Record<string, readonly number[]>>;
  /** The security filters of the gateway's HTTP connection managers (jwt_authn, rbac), in order. */
  readonly httpFilters?: readonly HttpFilter[];
  /** Network filters before tcp_proxy on TCP and TLS-passthrough chains (network rbac), as on a sidecar's TCP chains. */
  readonly networkFilters?: readonly Filter[];
  /** Mesh config pathNormalization; default BASE. */
  readonly pathNormalization?: PathNormalization;
  /** Servers that end up with no chain (no VirtualService routes them), one sentence each. */
  readonly onProblem?: (message: string) => void;
  /** The service ports (and subsets) the proxy sees, for AUTO_PASSTHROUGH servers. */
  readonly sniTargets?: readonly SniTarget[];
  /** What TCP proxies take from a service's DestinationRule (tcp limits, tunnels), by hostname: a route's TCP proxy takes its first destination's, as the Go mesh. */
  readonly tcpPolicies?: (hostname: string) => TcpProxyPolicy | undefined;
  /** The mesh config's access logs (access-log.ts); unset: none. */
  readonly accessLogs?: AccessLogs;
  /** The gateway class's metadata exchange and stats filters (telemetry-filters.ts); unset: none. */
  readonly telemetry?: ListenerTelemetry;
}

/** An L4 route of a VirtualService (`tcp[]`, `tls[]`), the fields read here. */
interface L4Route {
  readonly match?: readonly { readonly port?: number; readonly gateways?: readonly string[]; readonly sniHosts?: readonly string[] }[];
  readonly route?: readonly { readonly destination: Destination; readonly weight?: number }[];
}

function httpFilter(statPrefix: string, routeName: string, opts: GatewayListenerOptions): Filter {
  return hcmFilter(statPrefix, { rds: routeName }, withHttpTelemetry(opts.telemetry, [...(opts.httpFilters ?? []), alpnFilter(), ...routeConfiguredFilters()]), opts.pathNormalization, { ...EDGE_HCM, ...accessLogField(opts.accessLogs, 'http') });
}

/** The workload's network filters (the policies selecting the gateway), the stats filters, then the route's tcp_proxy. */
function tcpProxy(route: L4Route, v: GatewayVirtualService, port: number, opts: GatewayListenerOptions): Filter[] {
  const resolve = destinationResolver(v.vs.metadata.namespace, port, opts);
  const dests = (route.route ?? []).map((d) => ({ name: resolve(d.destination).cluster, weight: d.weight ?? 0 }));
  const single = dests.length === 1 ? dests[0]!.name : undefined;
  const first = route.route?.[0]?.destination;
  // The first destination's rule, as the Go mesh's buildOutboundNetworkFilters (tunnel included; AUTO_PASSTHROUGH chains have none).
  const policy = first ? opts.tcpPolicies?.(resolveHost(first.host, v.vs.metadata.namespace, opts.domain)) : undefined;
  const proxy = create(FilterSchema, {
    name: TCP_PROXY_FILTER_NAME,
    configType: {
      case: 'typedConfig',
      value: pack(TcpProxySchema, {
        statPrefix: single ?? dests.map((d) => d.name).join(','),
        clusterSpecifier: single ? { case: 'cluster', value: single } : { case: 'weightedClusters', value: { clusters: dests } },
        ...tcpProxyTimeouts(policy),
        ...tunnelingConfig(policy, single ? (first?.subset ?? '') : ''),
        ...accessLogField(opts.accessLogs, 'tcp'),
      }),
    },
  });
  return withTcpTelemetry(opts.telemetry, opts.networkFilters ?? [], proxy);
}

/** Whether a VirtualService's hosts meet the server's (`ns/host` entries only for its own namespace). */
function routesServer(v: GatewayVirtualService, server: BoundServer): boolean {
  return server.hosts.some((h) => {
    const slash = h.indexOf('/');
    if (slash >= 0 && h.slice(0, slash) !== v.vs.metadata.namespace) return false;
    const host = hostOf(h);
    return v.hosts.some((x) => hostMatches(host, x) || hostMatches(x, host));
  });
}

/** An L4 match condition applying to this server: its port (when set) and its gateways (when set). */
function l4Applies(m: NonNullable<L4Route['match']>[number], server: BoundServer, vsNamespace: string): boolean {
  if (m.port !== undefined && m.port !== server.server.port.number) return false;
  return !m.gateways || m.gateways.length === 0 || m.gateways.some((g) => resolveGatewayName(g, vsNamespace) === server.gateway);
}

/** The first tcp route of a bound VirtualService that applies to the server, as a TCP proxy. */
function tcpRouteFilter(server: BoundServer, opts: GatewayListenerOptions): Filter[] | undefined {
  for (const v of opts.virtualServicesFor(server.gateway)) {
    if (!routesServer(v, server)) continue;
    for (const r of (v.vs.spec.tcp ?? []) as L4Route[]) {
      if ((r.route ?? []).length === 0) continue;
      const match = r.match ?? [];
      if (match.length === 0 || match.some((m) => l4Applies(m, server, v.vs.metadata.namespace))) return tcpProxy(r, v, server.server.port.number, opts);
    }
  }
  return undefined;
}

/** A `*` SNI host matches every name: no server_names at all. */
function serverNames(hosts: readonly string[]): { serverNames?: string[] } {
  return hosts.length === 0 || hosts.includes('*') ? {} : { serverNames: [...hosts] };
}

/** PASSTHROUGH: one chain per tls route match of a bound VirtualService, by its SNI hosts; a host claimed twice is dropped. */
function passthroughChains(server: BoundServer, claimed: Set<string>, opts: GatewayListenerOptions): ChainInit[] {
  const chains: ChainInit[] = [];
  for (const v of opts.virtualServicesFor(server.gateway)) {
    if (!routesServer(v, server)) continue;
    ((v.vs.spec.tls ?? []) as L4Route[]).forEach((r, i) => {
      if ((r.route ?? []).length === 0) return;
      for (const m of r.match ?? []) {
        if (!l4Applies(m, server, v.vs.metadata.namespace)) continue;
        const snis = [...(m.sniHosts ?? [])];
        const dups = snis.filter((h) => claimed.has(h));
        if (dups.length > 0) {
          opts.onProblem?.(`VirtualService ${v.vs.metadata.namespace}/${v.vs.metadata.name}: tls[${i}] on port ${server.server.port.number} of Gateway ${server.gateway} repeats SNI host ${dups.join(', ')}; the rule is ignored`);
          continue;
        }
        snis.forEach((h) => claimed.add(h));
        chains.push({ name: `${v.vs.metadata.namespace}/${v.vs.metadata.name}:tls[${i}]`, filterChainMatch: serverNames(snis), filters: tcpProxy(r, v, server.server.port.number, opts) });
      }
    });
  }
  return chains;
}

function serverChains(mp: MergedPort, name: string, claimed: Set<string>, opts: GatewayListenerOptions): ChainInit[] {
  if (mp.protocol !== undefined && isHttpProtocol(mp.protocol)) {
    return [{ name, filters: [httpFilter(`outbound_${name}`, mp.servers[0]!.routeName, opts)] }];
  }
  return mp.servers.flatMap((s): ChainInit[] => {
    if (terminatesHttps(s)) {
      return [{ name: s.routeName, filterChainMatch: serverNames(sniHosts(s)), transportSocket: gatewayTransportSocket(s.tls!), filters: [httpFilter(s.server.name || `outbound_${name}`, s.routeName, opts)] }];
    }
    if (s.tls?.mode === 'AUTO_PASSTHROUGH') return autoPassthroughChains(sniHosts(s), opts.sniTargets ?? [], claimed, opts.accessLogs, opts.telemetry);
    if (isPassthrough(s.tls)) return passthroughChains(s, claimed, opts);
    const tcp = tcpRouteFilter(s, opts);
    if (!tcp) {
      opts.onProblem?.(`Gateway ${s.gateway}: no VirtualService tcp route for the ${s.server.port.protocol ?? ''} server on port ${s.server.port.number}; it gets no listener chain`);
      return [];
    }
    return [{ name: `${name}:${s.gateway}:${mp.servers.indexOf(s)}`, ...(s.tls ? { filterChainMatch: serverNames(sniHosts(s)), transportSocket: gatewayTransportSocket(s.tls) } : {}), filters: tcp }];
  });
}

/** The listeners of a merged gateway; a port whose servers give no chain has none. */
export function buildGatewayListeners(merged: MergedGateway, opts: GatewayListenerOptions): Listener[] {
  const byName = new Map<string, { port: MergedPort; chains: ChainInit[]; claimed: Set<string> }>();
  for (const mp of merged.ports) {
    const name = listenerName(mp.bind || WILDCARD_ADDRESS, mp.port);
    const entry = byName.get(name) ?? { port: mp, chains: [], claimed: new Set<string>() };
    byName.set(name, entry);
    entry.chains.push(...serverChains(mp, name, entry.claimed, opts));
  }
  const listeners: Listener[] = [];
  for (const [name, { port, chains }] of byName) {
    if (chains.length === 0) continue;
    const inspect = chains.some((c) => (c.filterChainMatch?.serverNames?.length ?? 0) > 0 || c.transportSocket !== undefined);
    listeners.push(
      create(ListenerSchema, {
        name,
        address: socketAddress(port.bind || WILDCARD_ADDRESS, port.port),
        trafficDirection: TrafficDirection.OUTBOUND,
        ...(inspect ? { listenerFilters: [{ name: TLS_INSPECTOR_FILTER_NAME, configType: { case: 'typedConfig', value: pack(TlsInspectorSchema, {}) } }] } : {}),
        filterChains: chains,
        ...accessLogField(opts.accessLogs, 'listener'),
      }),
    );
  }
  return listeners;
}
