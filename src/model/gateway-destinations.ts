// The services a gateway's routes lead to, for PILOT_FILTER_GATEWAY_CLUSTER_CONFIG: the destination
// hosts of every VirtualService naming one of its Gateways, as the Go mesh indexes them per Gateway
// (exportTo is not consulted there, a VirtualService not exported to the gateway routes nothing).
import type { VirtualService } from '../api/types.js';
import { resolveHost } from './traffic.js';

interface RouteDestination {
  readonly destination?: { readonly host?: string };
}

interface HttpRouteFields {
  readonly match?: readonly { readonly sourceNamespace?: string }[];
  readonly route?: readonly RouteDestination[];
  readonly mirror?: { readonly host?: string };
  readonly mirrors?: readonly RouteDestination[];
}

/**
 * Whether an HTTP route can apply to proxies of `namespace`: with no `sourceNamespace` anywhere in
 * its matches, or one of them naming it.
 */
function fromNamespace(r: HttpRouteFields, namespace: string): boolean {
  const named = (r.match ?? []).map((m) => m.sourceNamespace).filter((n): n is string => n !== undefined && n !== '');
  return named.length === 0 || named.includes(namespace);
}

/**
 * The hosts (fully qualified) of a VirtualService's destinations: HTTP routes and mirrors, tcp and
 * tls routes. With `sourceNamespace`, HTTP routes whose matches name other source namespaces only
 * are left out (PILOT_SCOPE_GATEWAY_TO_NAMESPACE, as the Go mesh filters them).
 */
export function virtualServiceDestinations(vs: VirtualService, domain: string, sourceNamespace?: string): Set<string> {
  const out = new Set<string>();
  const add = (host: string | undefined) => {
    if (host) out.add(resolveHost(host, vs.metadata.namespace, domain));
  };
  for (const r of (vs.spec.http ?? []) as HttpRouteFields[]) {
    if (sourceNamespace !== undefined && !fromNamespace(r, sourceNamespace)) continue;
    (r.route ?? []).forEach((d) => add(d.destination?.host));
    add(r.mirror?.host);
    (r.mirrors ?? []).forEach((d) => add(d.destination?.host));
  }
  for (const kind of ['tcp', 'tls'] as const) {
    for (const r of (vs.spec[kind] ?? []) as { route?: readonly RouteDestination[] }[]) (r.route ?? []).forEach((d) => add(d.destination?.host));
  }
  return out;
}
