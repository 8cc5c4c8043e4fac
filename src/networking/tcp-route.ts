// VirtualService `tcp` and `tls` routes as the filter chains of a sidecar's outbound TCP/TLS
// listener, the way the Go mesh builds them: a TLS port gets one chain per distinct (sniHosts,
// destinationSubnets) match, matched on server_names behind tls_inspector; a TCP port gets chains
// for matches with destinationSubnets and stops at the first route that applies to every
// destination. A port no route covers keeps the service's own chain. Each chain's tcp_proxy goes
// to the route's destination, or splits connections by weight (weighted_clusters).
import { create, type MessageInitShape } from '@bufbuild/protobuf';
import { FilterSchema, type FilterChainSchema, type Filter } from '../gen/envoy/config/listener/v3/listener_components_pb.js';
import { TcpProxySchema } from '../gen/envoy/extensions/filters/network/tcp_proxy/v3/tcp_proxy_pb.js';
import { TCP_PROXY_FILTER_NAME } from '../envoy/names.js';
import { pack } from '../envoy/types.js';
import { hostMatches } from '../model/selection.js';
import type { ResolvedVirtualService } from '../model/traffic.js';
import type { Service } from '../model/service.js';
import type { Destination, ResolvedDestination } from './http-route.js';
import { matchApplies, type MatchContext } from './route-match.js';
import { outboundClusterName } from './names.js';
import { tcpProxyFilter, tcpProxyTimeouts, tunnelingConfig, type TcpProxyPolicy } from './common.js';
import { accessLogField, type AccessLogs } from './access-log.js';
import { withTcpTelemetry, type ListenerTelemetry } from './telemetry-filters.js';
import { resolveHost } from '../model/traffic.js';
import { destinationResolver } from './route.js';

export type FilterChainInit = MessageInitShape<typeof FilterChainSchema>;

/** L4MatchAttributes / TLSMatchAttributes: the fields this module reads (the API's names). */
interface L4Match {
  readonly destinationSubnets?: readonly string[];
  readonly port?: number;
  readonly sourceLabels?: Readonly<Record<string, string>>;
  readonly sourceNamespace?: string;
  readonly gateways?: readonly string[];
  readonly sniHosts?: readonly string[];
}

interface L4Route {
  readonly match?: readonly L4Match[];
  readonly route?: readonly { readonly destination: Destination; readonly weight?: number }[];
}

export interface L4RouteContext extends MatchContext {
  /** VirtualServices bound to the mesh and visible to the proxy, in precedence order. */
  readonly virtualServices: readonly ResolvedVirtualService[];
  /** `--domain`: short destination hosts resolve to `<name>.<vs namespace>.svc.<domain>`. */
  readonly domain: string;
  /** Ports of every service the proxy sees, by hostname: a destination without a port uses the only one. */
  readonly servicePorts: Readonly<Record<string, readonly number[]>>;
  /** The listener's service's DestinationRule tcp limits: its own chain (no route covers the port) takes them. */
  readonly limits?: TcpProxyPolicy;
  /** By hostname: what TCP proxies take from a service's DestinationRule; a route's limits and tunnel are its first destination's. */
  readonly policies?: Readonly<Record<string, TcpProxyPolicy>>;
  /** The mesh config's access logs, on every TCP proxy. */
  readonly accessLogs?: AccessLogs;
  /** The stats filters before every TCP proxy (telemetry-filters.ts). */
  readonly telemetry?: ListenerTelemetry;
}

/** The Go mesh's TLS protocols: their ports are routed by `tls` routes, the others by `tcp` routes. */
export function isTlsProtocol(protocol: string): boolean {
  return protocol === 'HTTPS' || protocol === 'TLS';
}

/** Whether a match applies to this sidecar: its port, source and, when it names gateways, `mesh`. */
function applies(m: L4Match, ctx: MatchContext): boolean {
  if (m.gateways && m.gateways.length > 0 && !m.gateways.includes('mesh')) return false;
  return matchApplies(m, ctx);
}

function cidr(subnet: string): { addressPrefix: string; prefixLen: number } {
  const [address, len] = subnet.split('/');
  return { addressPrefix: address!, prefixLen: len === undefined ? (address!.includes(':') ? 128 : 32) : Number(len) };
}

/**
 * tcp_proxy to the route's only destination, or weighted_clusters over several. The idle timeout,
 * connection duration and tunnel are the first destination's DestinationRule's, as the Go mesh's
 * buildOutboundNetworkFilters reads them (not the listener's service's): the tunnel its subset's for
 * a single destination, the rule's for weighted ones (a tunnel is the listener's, not a cluster's).
 */
function tcpProxyTo(route: L4Route, resolve: (d: Destination) => ResolvedDestination, ctx: L4TcpProxyContext): Filter {
  const dests = (route.route ?? []).map((r) => ({ name: resolve(r.destination).cluster, weight: r.weight ?? 0 }));
  const first = route.route?.[0]?.destination;
  const policy = first ? ctx.policies?.[resolveHost(first.host, ctx.namespace, ctx.domain)] : undefined;
  const clusterSpecifier =
    dests.length === 1
      ? ({ case: 'cluster', value: dests[0]!.name } as const)
      : ({ case: 'weightedClusters', value: { clusters: dests } } as const);
  const tunnel = tunnelingConfig(policy, dests.length === 1 ? (first?.subset ?? '') : '');
  return create(FilterSchema, {
    name: TCP_PROXY_FILTER_NAME,
    configType: { case: 'typedConfig', value: pack(TcpProxySchema, { statPrefix: dests.length === 1 ? dests[0]!.name : 'weighted_clusters', clusterSpecifier, ...tcpProxyTimeouts(policy), ...tunnel, ...accessLogField(ctx.accessLogs, 'tcp') }) },
  });
}

/** What tcpProxyTo reads of the context: the policies, and the VirtualService's namespace (short hosts). */
type L4TcpProxyContext = Pick<L4RouteContext, 'policies' | 'domain' | 'accessLogs'> & { readonly namespace: string };

/** The VirtualServices naming `hostname` (exactly or by wildcard), in precedence order. */
function forHost(hostname: string, vss: readonly ResolvedVirtualService[]): ResolvedVirtualService[] {
  return vss.filter((v) => v.hosts.some((h) => h === hostname || hostMatches(h, hostname)));
}

function tlsChains(vss: readonly ResolvedVirtualService[], name: string, ctx: L4RouteContext): FilterChainInit[] {
  const out: FilterChainInit[] = [];
  const handled = new Set<string>();
  for (const { vs } of vss) {
    const resolve = destinationResolver(vs.metadata.namespace, ctx.port, ctx);
    const proxyCtx = { ...ctx, namespace: vs.metadata.namespace };
    for (const route of (vs.spec.tls ?? []) as L4Route[]) {
      if (!route.route || route.route.length === 0) continue;
      for (const m of route.match ?? []) {
        if (!applies(m, ctx)) continue;
        // The first route for a given (SNI, subnets) pair wins, as in the Go mesh.
        const key = `${(m.sniHosts ?? []).join(',')}|${(m.destinationSubnets ?? []).join(',')}`;
        if (handled.has(key)) continue;
        handled.add(key);
        out.push({
          name: `${name}_${out.length}`,
          filterChainMatch: { serverNames: [...(m.sniHosts ?? [])], prefixRanges: (m.destinationSubnets ?? []).map(cidr) },
          filters: withTcpTelemetry(ctx.telemetry, [], tcpProxyTo(route, resolve, proxyCtx)),
        });
      }
    }
  }
  return out;
}

/** The chains of `tcp` routes, and whether one of them takes every connection (no default needed). */
function tcpChains(vss: readonly ResolvedVirtualService[], name: string, ctx: L4RouteContext): { chains: FilterChainInit[]; complete: boolean } {
  const chains: FilterChainInit[] = [];
  const seenSubnets = new Set<string>();
  for (const { vs } of vss) {
    const resolve = destinationResolver(vs.metadata.namespace, ctx.port, ctx);
    const proxyCtx = { ...ctx, namespace: vs.metadata.namespace };
    for (const route of (vs.spec.tcp ?? []) as L4Route[]) {
      if (!route.route || route.route.length === 0) continue;
      const matches = route.match ?? [];
      // A route without match, or with an applying match without subnets, takes the rest.
      if (matches.length === 0 || matches.some((m) => applies(m, ctx) && (m.destinationSubnets ?? []).length === 0)) {
        chains.push({ name, filters: withTcpTelemetry(ctx.telemetry, [], tcpProxyTo(route, resolve, proxyCtx)) });
        return { chains, complete: true };
      }
      const subnets = [...new Set(matches.filter((m) => applies(m, ctx)).flatMap((m) => m.destinationSubnets ?? []))].sort();
      // A chain for subnets an earlier route already took would match the same connections.
      if (subnets.length === 0 || seenSubnets.has(subnets.join(','))) continue;
      seenSubnets.add(subnets.join(','));
      chains.push({ name: `${name}_${chains.length}`, filterChainMatch: { prefixRanges: subnets.map(cidr) }, filters: withTcpTelemetry(ctx.telemetry, [], tcpProxyTo(route, resolve, proxyCtx)) });
    }
  }
  return { chains, complete: false };
}

/**
 * The outbound chains of a service's TCP or TLS port under its VirtualServices' `tcp`/`tls` routes,
 * or undefined when none applies (the caller keeps its default chain). `sniHosts` is what the
 * default chain of a TLS port matches: the service's host when the listener is not its own VIP.
 */
export function l4RouteChains(service: Service, port: number, name: string, ownAddress: boolean, ctx: L4RouteContext): { chains: FilterChainInit[]; tls: boolean } | undefined {
  const vss = forHost(service.hostname, ctx.virtualServices);
  const p = service.ports.find((x) => x.port === port);
  if (!p || vss.length === 0) return undefined;
  const only = service.ports.length === 1 ? service.ports[0]!.port : port;
  const fallback = { name, filters: withTcpTelemetry(ctx.telemetry, [], tcpProxyFilter(outboundClusterName(only, service.hostname), ctx.limits, '', ctx.accessLogs)) };
  if (isTlsProtocol(p.protocol)) {
    const chains = tlsChains(vss, name, ctx);
    if (chains.length === 0) return undefined;
    return { tls: true, chains: [...chains, ownAddress ? fallback : { ...fallback, filterChainMatch: { serverNames: [service.hostname] } }] };
  }
  const { chains, complete } = tcpChains(vss, name, ctx);
  if (chains.length === 0) return undefined;
  return { tls: false, chains: complete ? chains : [...chains, fallback] };
}
