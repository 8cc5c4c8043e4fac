// RDS for gateways: the route configuration of one gateway route name (`http.<port>`, or
// `https.<port>.<portName>.<gateway>.<namespace>`), a virtual host per host where a server's hosts
// and a bound VirtualService's hosts meet, with that VirtualService's HTTP routes (translated as for
// sidecars, by http-route.ts). `httpsRedirect` makes the virtual host require TLS (a 301 to https).
import { create, type MessageInitShape } from '@bufbuild/protobuf';
import { RouteConfigurationSchema, type RouteConfiguration } from '../gen/envoy/config/route/v3/route_pb.js';
import { VirtualHost_TlsRequirementType, type VirtualHostSchema } from '../gen/envoy/config/route/v3/route_components_pb.js';
import { hostsForNamespace, resolveGatewayName, type BoundServer, type GatewayVirtualService } from '../model/gateway.js';
import { hostMatches } from '../model/selection.js';
import { buildHttpRoutes, type HashPolicyInit, type HttpRetry, type HttpRouteSpec, type RouteInit } from './http-route.js';
import { destinationResolver } from './route.js';
import { MAX_DIRECT_RESPONSE_BODY_BYTES } from './common.js';
import { usesIngressSemantics } from '../model/ingress/virtual-services.js';

type VirtualHostInit = Omit<Exclude<MessageInitShape<typeof VirtualHostSchema>, { $typeName: string }>, 'routes'> & { routes?: RouteInit[] };

export interface GatewayRouteOptions {
  /** `--domain`. */
  readonly domain: string;
  /** The gateway proxy's namespace and labels (match `sourceNamespace`, `sourceLabels`). */
  readonly proxyNamespace: string;
  readonly proxyLabels: Readonly<Record<string, string>>;
  /** VirtualServices bound to a Gateway (`<namespace>/<name>`) and visible to the proxy. */
  readonly virtualServicesFor: (gateway: string) => readonly GatewayVirtualService[];
  /** Ports of every service the proxy sees, by hostname (a destination without port). */
  readonly servicePorts?: Readonly<Record<string, readonly number[]>>;
  /** Route hash policies of consistent-hash clusters, by cluster name. */
  readonly hashPolicies?: Readonly<Record<string, readonly HashPolicyInit[]>>;
  /** MESH_DEFAULT_REQUEST_TIMEOUT, seconds; 0 = none. */
  readonly defaultTimeout?: number;
  /** Mesh config defaultHttpRetryPolicy; unset: the Go mesh's default policy. */
  readonly defaultRetries?: HttpRetry;
}

/**
 * The hosts two host lists share, wildcards included: `*.example.com` and `a.example.com` share
 * `a.example.com`, the narrower of the two; the first list's order is kept.
 */
export function intersectHosts(a: readonly string[], b: readonly string[]): string[] {
  const out: string[] = [];
  for (const x of a) {
    for (const y of b) {
      const shared = hostMatches(y, x) ? x : hostMatches(x, y) ? y : undefined;
      if (shared !== undefined && !out.includes(shared)) out.push(shared);
    }
  }
  return out;
}

function vsRoutes(v: GatewayVirtualService, server: BoundServer, opts: GatewayRouteOptions): RouteInit[] {
  const port = server.server.port.number;
  const ctx = {
    port,
    proxyNamespace: opts.proxyNamespace,
    proxyLabels: opts.proxyLabels,
    resolve: destinationResolver(v.vs.metadata.namespace, port, opts),
    gateway: (entry: string) => resolveGatewayName(entry, v.vs.metadata.namespace) === server.gateway,
    ...(opts.defaultTimeout ? { defaultTimeout: opts.defaultTimeout } : {}),
    ...(opts.defaultRetries ? { defaultRetries: opts.defaultRetries } : {}),
    ...(usesIngressSemantics(v.vs) ? { segmentPrefix: true } : {}),
    ...(server.tls ? { tls: true } : {}),
  };
  return (v.vs.spec.http ?? []).flatMap((r) => buildHttpRoutes(r as HttpRouteSpec, ctx));
}

/** A route matching every request (prefix `/`, no header or query condition). */
function catchAll(r: RouteInit): boolean {
  const m = r.match;
  if (!m || m.pathSpecifier?.case !== 'prefix' || m.pathSpecifier.value !== '/') return false;
  return (m.headers ?? []).length === 0 && (m.queryParameters ?? []).length === 0;
}

/**
 * The routes several VirtualServices gave one host, with the catch-all ones moved last (others keep
 * their order), as the Go mesh sorts a gateway's virtual host: one VirtualService's catch-all must
 * not hide another's narrower routes.
 */
function sortRoutes(routes: readonly RouteInit[]): RouteInit[] {
  return [...routes.filter((r) => !catchAll(r)), ...routes.filter(catchAll)];
}

/**
 * The route configuration `name` for `servers` (those of the name). Several VirtualServices for
 * one host add their routes in namespace/name order; a route configuration without any host gets
 * the Go mesh's `blackhole:<port>` virtual host, which answers 404.
 */
export function buildGatewayRouteConfig(name: string, servers: readonly BoundServer[], opts: GatewayRouteOptions): RouteConfiguration {
  const vhosts = new Map<string, VirtualHostInit>();
  for (const server of servers) {
    const port = server.server.port.number;
    const redirect = server.tls?.httpsRedirect === true;
    for (const v of opts.virtualServicesFor(server.gateway)) {
      const shared = intersectHosts(hostsForNamespace(server.hosts, v.vs.metadata.namespace), v.hosts);
      if (shared.length === 0) continue;
      const routes = vsRoutes(v, server, opts);
      for (const h of shared.map((x) => x.toLowerCase())) {
        const vh = vhosts.get(h);
        if (vh) vh.routes = [...(vh.routes ?? []), ...routes];
        else vhosts.set(h, { name: `${h}:${port}`, domains: [h], routes: [...routes] });
        if (redirect) vhosts.get(h)!.requireTls = VirtualHost_TlsRequirementType.ALL;
      }
    }
    // A redirecting server answers for its hosts even where no VirtualService routes them.
    if (!redirect) continue;
    for (const h of server.hosts.map((x) => x.slice(x.indexOf('/') + 1).toLowerCase())) {
      const vh = vhosts.get(h);
      if (vh) vh.requireTls = VirtualHost_TlsRequirementType.ALL;
      else vhosts.set(h, { name: `${h}:${port}`, domains: [h], requireTls: VirtualHost_TlsRequirementType.ALL });
    }
  }
  for (const vh of vhosts.values()) vh.routes = sortRoutes(vh.routes ?? []);
  const port = servers[0]?.server.port.number ?? 0;
  const virtualHosts = vhosts.size > 0 ? [...vhosts.values()].sort((a, b) => (a.name! < b.name! ? -1 : a.name! > b.name! ? 1 : 0)) : [{ name: `blackhole:${port}`, domains: ['*'] }];
  return create(RouteConfigurationSchema, { name, virtualHosts, validateClusters: false, maxDirectResponseBodySizeBytes: MAX_DIRECT_RESPONSE_BODY_BYTES, ignorePortInHostMatching: true });
}

/** The route configuration a proxy asks for but no server has any more: no virtual host (404 for all). */
export function emptyGatewayRouteConfig(name: string): RouteConfiguration {
  return create(RouteConfigurationSchema, { name, virtualHosts: [], validateClusters: false });
}
