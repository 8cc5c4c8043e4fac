// RDS: an outbound route configuration per HTTP port, a virtual host per service with every name a
// client may use for it (FQDN, short names by namespace, VIPs) and one per VirtualService host that
// names no service, and the inline route of inbound HTTP chains.
import { clone, create } from '@bufbuild/protobuf';
import { RouteConfigurationSchema, type RouteConfiguration } from '../gen/envoy/config/route/v3/route_pb.js';
import { RouteActionSchema, VirtualHostSchema, type VirtualHost } from '../gen/envoy/config/route/v3/route_components_pb.js';
import type { MessageInitShape } from '@bufbuild/protobuf';
import type { OutboundTrafficMode } from '../model/push-context.js';
import { isHeadless, ORCHESTRATOR_REGISTRY, type Service } from '../model/service.js';
import { outboundClusterName, outboundRouteName, PASSTHROUGH_CLUSTER } from './names.js';
import { MAX_DIRECT_RESPONSE_BODY_BYTES, seconds } from './common.js';
import type { ResolvedVirtualService } from '../model/traffic.js';
import { resolveHost } from '../model/traffic.js';
import { hostMatches } from '../model/selection.js';
import { buildHttpRoutes, retryPolicy, routeTimeouts, type Destination, type HashPolicyInit, type HttpRetry, type HttpRouteSpec, type ResolvedDestination } from './http-route.js';

type VirtualHostInit = MessageInitShape<typeof VirtualHostSchema>;

export interface OutboundRouteOptions {
  /** `--domain`, e.g. `cluster.local`. */
  readonly domain: string;
  /** The proxy's namespace: bare service names resolve only there. */
  readonly proxyNamespace: string;
  readonly outboundTrafficPolicy: OutboundTrafficMode;
  /** The proxy's labels (VirtualService `sourceLabels`). */
  readonly proxyLabels?: Readonly<Record<string, string>>;
  /** VirtualServices bound to the mesh and visible to the proxy, in precedence order. */
  readonly virtualServices?: readonly ResolvedVirtualService[];
  /** Ports of every service the proxy sees, by hostname: a destination without a port uses the only one. */
  readonly servicePorts?: Readonly<Record<string, readonly number[]>>;
  /** Route hash policies of clusters whose DestinationRule asks for consistent hashing, by cluster name. */
  readonly hashPolicies?: Readonly<Record<string, readonly HashPolicyInit[]>>;
  /** MESH_DEFAULT_REQUEST_TIMEOUT, seconds; 0 or unset = none. */
  readonly defaultTimeout?: number;
  /** Mesh config defaultHttpRetryPolicy; unset: the Go mesh's default policy. */
  readonly defaultRetries?: HttpRetry;
}

/**
 * Every host a client may use for `service`: the host, and for in-mesh services
 * (`<name>.<ns>.svc.<domain>`) `<name>.<ns>.svc`, `<name>.<ns>`, and `<name>` from the same
 * namespace; plus the service's VIPs. A headless orchestrator Service's Pods have names of their
 * own below it (a StatefulSet's `<pod>.<name>.<ns>.svc.<domain>`), so each name also matches as
 * `*.<name>`, as the Go mesh's. Without ports: a sidecar's outbound route configuration ignores the
 * port in host matching, as the Go mesh's (see outboundRouteConfig); a proxyless client's adds
 * them (withPorts).
 */
export function serviceDomains(service: Service, proxyNamespace: string, domain: string): string[] {
  const names = [service.hostname];
  const short = inMeshName(service.hostname, domain);
  if (short) {
    names.push(`${short.name}.${short.namespace}.svc`, `${short.name}.${short.namespace}`);
    if (short.namespace === proxyNamespace) names.push(short.name);
  }
  if (service.registry === ORCHESTRATOR_REGISTRY && isHeadless(service)) names.push(...names.map((n) => `*.${n}`));
  names.push(...service.addresses.filter((a) => !a.includes('/')).map(hostDomain));
  return names;
}

/** A host as a Host header carries it: an IPv6 address in brackets (RFC 3986), which is what stripping the port leaves. */
export function hostDomain(host: string): string {
  return host.includes(':') ? `[${host}]` : host;
}

/** Each domain with and without `:<port>`, for a route configuration that matches the port too. */
export function withPorts(domains: readonly string[], port: number): string[] {
  return domains.flatMap((n) => [n, `${n}:${port}`]);
}

/** `<name>.<ns>.svc.<domain>` as its name and namespace; undefined for other hosts. */
export function inMeshName(hostname: string, domain: string): { name: string; namespace: string } | undefined {
  const suffix = `.svc.${domain}`;
  if (!hostname.endsWith(suffix)) return undefined;
  const short = hostname.slice(0, -suffix.length);
  const dot = short.indexOf('.');
  return dot > 0 ? { name: short.slice(0, dot), namespace: short.slice(dot + 1) } : undefined;
}

type RouteActionInit = MessageInitShape<typeof RouteActionSchema>;

function routeAction(cluster: string, hashPolicy: readonly HashPolicyInit[] = [], defaultTimeout = 0, retry?: ReturnType<typeof retryPolicy>): RouteActionInit {
  // No route timeout unless MESH_DEFAULT_REQUEST_TIMEOUT: long-lived streams (gRPC, websockets)
  // must not be cut at Envoy's 15s default.
  return { clusterSpecifier: { case: 'cluster', value: cluster }, ...routeTimeouts(seconds(defaultTimeout)), hashPolicy: [...hashPolicy], ...(retry ? { retryPolicy: retry } : {}) };
}

function defaultRoute(action: RouteActionInit): VirtualHostInit['routes'] {
  return [{ name: 'default', match: { pathSpecifier: { case: 'prefix', value: '/' } }, action: { case: 'route', value: action } }];
}

/** The VirtualService claiming `hostname`: an exact host before a wildcard one, then precedence order. */
function virtualServiceFor(hostname: string, vss: readonly ResolvedVirtualService[]): ResolvedVirtualService | undefined {
  return vss.find((v) => v.hosts.includes(hostname)) ?? vss.find((v) => v.hosts.some((h) => hostMatches(h, hostname)));
}

/** Resolves a destination of a VirtualService in `vsNamespace` on `port` to its cluster (also for tcp/tls routes). */
export function destinationResolver(vsNamespace: string, port: number, opts: Pick<OutboundRouteOptions, 'domain' | 'servicePorts' | 'hashPolicies'>): (d: Destination) => ResolvedDestination {
  return (d) => {
    const host = resolveHost(d.host, vsNamespace, opts.domain);
    const ports = opts.servicePorts?.[host] ?? [];
    // The Go mesh's choice for a destination without a port: the service's only port, else the route's.
    const p = d.port?.number ?? (ports.length === 1 ? ports[0]! : port);
    const cluster = outboundClusterName(p, host, d.subset ?? '');
    return { cluster, hashPolicy: opts.hashPolicies?.[cluster] ?? [] };
  };
}

/** A service's routes on `port`: its VirtualService's HTTP routes when one claims it, else the default route. */
function serviceRoutes(s: Service, port: number, opts: OutboundRouteOptions): VirtualHostInit['routes'] {
  const vs = virtualServiceFor(s.hostname, opts.virtualServices ?? []);
  const cluster = outboundClusterName(port, s.hostname);
  if (!vs || !vs.vs.spec.http) {
    // The Go mesh's default outbound route: the mesh's default retry policy, as a VirtualService route without `retries`.
    const hashPolicy = opts.hashPolicies?.[cluster] ?? [];
    return defaultRoute(routeAction(cluster, hashPolicy, opts.defaultTimeout, retryPolicy(opts.defaultRetries, hashPolicy.length > 0)));
  }
  return virtualServiceRoutes(vs, port, opts);
}

/** A VirtualService's HTTP routes on `port`, as the proxy sees them (its labels, its namespace). */
function virtualServiceRoutes(vs: ResolvedVirtualService, port: number, opts: OutboundRouteOptions): VirtualHostInit['routes'] {
  const ctx = {
    port,
    proxyNamespace: opts.proxyNamespace,
    proxyLabels: opts.proxyLabels ?? {},
    resolve: destinationResolver(vs.vs.metadata.namespace, port, opts),
    ...(opts.defaultTimeout ? { defaultTimeout: opts.defaultTimeout } : {}),
    ...(opts.defaultRetries ? { defaultRetries: opts.defaultRetries } : {}),
  };
  // The API keeps HTTP routes structurally checked only; this is where they are read as such.
  return (vs.vs.spec.http ?? []).flatMap((r) => buildHttpRoutes(r as HttpRouteSpec, ctx));
}

/** Hosts of a VirtualService that name no service on a port. */
export interface NonServiceHosts {
  readonly vs: ResolvedVirtualService;
  readonly hosts: readonly string[];
}

/**
 * The hosts of the VirtualServices with HTTP routes that name no service of `services` (those of
 * one port), as the Go mesh's "non-service-registry hosts" (`api.example.com` with no
 * ServiceEntry, say): an exact host that is no service's, a wildcard that matches none. On port 80
 * every such VirtualService counts; on another port only one that also names a service of the
 * port (an exact host, a wildcard matching one, or a host a wildcard service matches).
 */
export function nonServiceHosts(port: number, services: readonly Service[], vss: readonly ResolvedVirtualService[]): NonServiceHosts[] {
  // Without HTTP VirtualServices (the common push) the port's services are not even indexed.
  if (!vss.some((vs) => vs.vs.spec.http)) return [];
  const names = new Set(services.map((s) => s.hostname));
  const wildcardServices = services.filter((s) => s.hostname.startsWith('*'));
  const isService = (h: string): boolean => (h.startsWith('*') ? services.some((s) => hostMatches(h, s.hostname) || hostMatches(s.hostname, h)) : names.has(h));
  const out: NonServiceHosts[] = [];
  for (const vs of vss) {
    if (!vs.vs.spec.http) continue;
    const hosts = vs.hosts.filter((h) => !isService(h));
    if (hosts.length === 0) continue;
    const onPort = port === 80 || vs.hosts.some((h) => isService(h) || wildcardServices.some((s) => hostMatches(s.hostname, h)));
    if (onPort) out.push({ vs, hosts });
  }
  return out;
}

/**
 * A virtual host `<host>:<port>` per non-service host, the host its only domain (the configuration
 * ignores ports; an IPv6 address in brackets), with its VirtualService's routes; none where no route is left for this proxy.
 */
export function nonServiceVirtualHosts(port: number, groups: readonly NonServiceHosts[], opts: OutboundRouteOptions): VirtualHost[] {
  return groups.flatMap(({ vs, hosts }) => {
    const routes = virtualServiceRoutes(vs, port, opts);
    return routes?.length ? hosts.map((h) => create(VirtualHostSchema, { name: `${hostDomain(h)}:${port}`, domains: [hostDomain(h)], routes })) : [];
  });
}

function catchAll(mode: OutboundTrafficMode): VirtualHostInit {
  if (mode === 'ALLOW_ANY') return { name: 'allow_any', domains: ['*'], routes: defaultRoute(routeAction(PASSTHROUGH_CLUSTER)) };
  return {
    name: 'block_all',
    domains: ['*'],
    routes: [{ name: 'block_all', match: { pathSpecifier: { case: 'prefix', value: '/' } }, action: { case: 'directResponse', value: { status: 502 } } }],
  };
}

/** A service's virtual host on `port`: every domain a client may use for it, and its routes. */
export function serviceVirtualHost(s: Service, port: number, opts: OutboundRouteOptions): VirtualHost {
  return create(VirtualHostSchema, { name: `${s.hostname}:${port}`, domains: serviceDomains(s, opts.proxyNamespace, opts.domain), routes: serviceRoutes(s, port, opts) });
}

/**
 * Whether a VirtualService with HTTP routes claims the service: its virtual host then depends on
 * that VirtualService, the proxy's labels and the other services' ports, not only on the service.
 */
export function routedByVirtualService(s: Service, opts: Pick<OutboundRouteOptions, 'virtualServices'>): boolean {
  return !!virtualServiceFor(s.hostname, opts.virtualServices ?? [])?.vs.spec.http;
}

/**
 * The route configuration named `<port>` from the services' virtual hosts, in order, then the
 * catch-all (`allow_any` to PassthroughCluster, or `block_all` answering 502). A domain already
 * claimed by an earlier host is not repeated (Envoy rejects duplicates); a host left without
 * domains is left out. Hosts are expected in service order, so the outcome is stable. As the Go
 * mesh's for Envoy sidecars, the configuration ignores the port of a request's host
 * (ignore_port_in_host_matching) and its domains carry none: the route configuration is the
 * listener port's already, and half the domains keep every push of it smaller.
 */
export function outboundRouteConfig(port: number, hosts: readonly VirtualHost[], mode: OutboundTrafficMode): RouteConfiguration {
  const claimed = new Set<string>();
  const out: VirtualHost[] = [];
  for (const host of hosts) {
    let kept = host;
    if (host.domains.some((d) => claimed.has(d))) {
      kept = clone(VirtualHostSchema, host);
      kept.domains = host.domains.filter((d) => !claimed.has(d));
      if (kept.domains.length === 0) continue;
    }
    kept.domains.forEach((d) => claimed.add(d));
    out.push(kept);
  }
  out.push(create(VirtualHostSchema, catchAll(mode)));
  return create(RouteConfigurationSchema, { name: outboundRouteName(port), virtualHosts: out, validateClusters: false, maxDirectResponseBodySizeBytes: MAX_DIRECT_RESPONSE_BODY_BYTES, ignorePortInHostMatching: true });
}

/**
 * The route configuration named `<port>`: the VirtualServices' non-service hosts first (in the Go
 * mesh a VirtualService's hosts come before the services without one, and a domain goes to the
 * first host claiming it), one virtual host per service having that port (sorted), then the catch-all.
 */
export function buildOutboundRouteConfig(port: number, services: readonly Service[], opts: OutboundRouteOptions): RouteConfiguration {
  const others = nonServiceVirtualHosts(port, nonServiceHosts(port, services, opts.virtualServices ?? []), opts);
  return outboundRouteConfig(port, [...others, ...services.map((s) => serviceVirtualHost(s, port, opts))], opts.outboundTrafficPolicy);
}

/**
 * An inbound route's action, as the Go mesh's: no timeout, and MaxStreamDuration with no maximum
 * but grpc_timeout_header_max 0, so that a gRPC client's grpc-timeout bounds its stream as is.
 */
const INBOUND_ACTION = (cluster: string): RouteActionInit => ({
  clusterSpecifier: { case: 'cluster', value: cluster },
  timeout: seconds(0),
  maxStreamDuration: { maxStreamDuration: seconds(0), grpcTimeoutHeaderMax: seconds(0) },
});

/** The inline route of an inbound HTTP chain: everything to the local application's cluster. */
export function buildInboundRouteConfig(name: string, cluster: string): RouteConfiguration {
  return create(RouteConfigurationSchema, {
    name,
    virtualHosts: [{ name: `inbound|http|${name}`, domains: ['*'], routes: defaultRoute(INBOUND_ACTION(cluster)) }],
    validateClusters: false,
  });
}
