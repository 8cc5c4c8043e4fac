// The VirtualServices generated from the Ingresses the mesh serves, as the Go mesh generates them:
// one per rule host (`*` for a rule without host) merging the rules of every Ingress for that host
// (older Ingresses first, then by name, namespace and rule index), routes ordered longest path
// first and, at equal length, Exact before Prefix. It lives in the namespace of the first rule's
// Ingress, is bound to that Ingress's generated Gateway and is marked for Ingress route semantics
// (a Prefix path matches whole path segments; see networking/route-match.ts).
import { compareText } from '../../common/compare.js';
import { NETWORKING_GROUP, type HttpRoute, type VirtualService } from '../../api/types.js';
import type { StringMatch } from '../../networking/route-match.js';
import { ingressName, type HttpIngressPath, type IngressRule, type OrchIngress } from './class.js';
import { INGRESS_GATEWAY_SUFFIX, ingressGatewayName } from './gateways.js';

/** The annotation that gives a VirtualService the Ingress route semantics (Go: internal.istio.io/route-semantics). */
export const ROUTE_SEMANTICS_ANNOTATION = 'internal.mesh.io/route-semantics';
export const ROUTE_SEMANTICS_INGRESS = 'ingress';

/** Whether a VirtualService was generated from Ingresses (its Prefix matches are segment-wise). */
export function usesIngressSemantics(vs: Pick<VirtualService, 'metadata'>): boolean {
  return vs.metadata.annotations?.[ROUTE_SEMANTICS_ANNOTATION] === ROUTE_SEMANTICS_INGRESS;
}

/** A service's named ports, for a backend that names its port; undefined when the service is not known. */
export type ServicePortsLookup = (namespace: string, name: string) => readonly { readonly name: string; readonly port: number }[] | undefined;

export interface VirtualServiceOptions {
  /** The namespace of the generated Gateways (ORCH_INGRESS_NS). */
  readonly ingressNamespace: string;
  /** `--domain`. */
  readonly domain: string;
  readonly servicePorts: ServicePortsLookup;
}

interface HostRule {
  readonly ingress: OrchIngress;
  readonly index: number;
  readonly rule: IngressRule;
}

export interface VirtualServiceTranslation {
  readonly virtualServices: VirtualService[];
  /** Per Ingress (`namespace/name`), what of it is not routed, one sentence each. */
  readonly notices: ReadonlyMap<string, readonly string[]>;
}

function compareRules(a: HostRule, b: HostRule): number {
  const ta = Date.parse(a.ingress.metadata.creationTimestamp ?? '') || 0;
  const tb = Date.parse(b.ingress.metadata.creationTimestamp ?? '') || 0;
  if (ta !== tb) return ta - tb;
  return compareText(a.ingress.metadata.name, b.ingress.metadata.name) || compareText(a.ingress.metadata.namespace, b.ingress.metadata.namespace) || a.index - b.index;
}

/** ImplementationSpecific (and absent) paths, as the Go mesh reads them: `/x/*` and `/x.*` are prefixes, `/*` and `` everything, others exact. */
function implementationSpecific(path: string): StringMatch | undefined {
  if (path === '' || path === '/*') return undefined;
  if (path.endsWith('.*')) return { prefix: path.slice(0, -2) };
  if (path.endsWith('/*')) return { prefix: path.slice(0, -2) };
  return { exact: path };
}

type UriResult = { readonly ok: true; readonly uri: StringMatch | undefined } | { readonly ok: false; readonly error: string };

function uriMatch(p: HttpIngressPath): UriResult {
  const path = p.path ?? '';
  if (path !== '' && !path.startsWith('/')) return { ok: false, error: `path ${JSON.stringify(path)} must start with "/"` };
  switch (p.pathType) {
    case 'Exact':
    case 'Prefix':
      if (path === '') return { ok: false, error: `path is required with pathType ${p.pathType}` };
      return { ok: true, uri: p.pathType === 'Exact' ? { exact: path } : { prefix: path } };
    case undefined:
    case 'ImplementationSpecific':
      return { ok: true, uri: implementationSpecific(path) };
    default:
      return { ok: false, error: `pathType ${JSON.stringify(p.pathType)} is not one of Exact, Prefix, ImplementationSpecific` };
  }
}

type PortResult = { readonly ok: true; readonly port: number } | { readonly ok: false; readonly error: string };

function backendPort(service: string, namespace: string, port: { number?: number; name?: string } | undefined, lookup: ServicePortsLookup): PortResult {
  if (port?.number !== undefined && port.number > 0) return { ok: true, port: port.number };
  if (!port?.name) return { ok: false, error: 'backend.service.port needs a number or a name' };
  const ports = lookup(namespace, service);
  if (ports === undefined) return { ok: false, error: `backend.service.port.name ${JSON.stringify(port.name)}: service ${namespace}/${service} is not known, so its port cannot be resolved` };
  const found = ports.find((p) => p.name === port.name);
  if (!found) return { ok: false, error: `backend.service.port.name ${JSON.stringify(port.name)} is not a port of service ${namespace}/${service} (ports: ${ports.map((p) => p.name).join(', ') || 'none named'})` };
  return { ok: true, port: found.port };
}

/** The routes of one rule; what cannot be routed goes to `notices`. */
function ruleRoutes(r: HostRule, opts: VirtualServiceOptions, notices: string[]): HttpRoute[] {
  const ns = r.ingress.metadata.namespace;
  const routes: HttpRoute[] = [];
  for (const [j, p] of (r.rule.http?.paths ?? []).entries()) {
    const at = `spec.rules[${r.index}].http.paths[${j}]`;
    const uri = uriMatch(p);
    const service = p.backend?.service;
    const port = service?.name ? backendPort(service.name, ns, service.port, opts.servicePorts) : undefined;
    if (!uri.ok) notices.push(`${at}: ${uri.error}; the path is not routed`);
    else if (!service?.name) notices.push(`${at}.backend.service is missing (only service backends are routed); the path is not routed`);
    else if (!port?.ok) notices.push(`${at}.${port?.error}; the path is not routed`);
    else {
      if (opts.servicePorts(ns, service.name) === undefined) notices.push(`${at}.backend.service.name: service ${ns}/${service.name} is not known: requests for this path fail until it exists`);
      routes.push({
        ...(uri.uri ? { match: [{ uri: uri.uri }] } : {}),
        route: [{ destination: { host: `${service.name}.${ns}.svc.${opts.domain}`, port: { number: port.port } }, weight: 100 }],
      });
    }
  }
  return routes;
}

/** The matched path's length, and whether it is exact; a route without match counts as length 0. */
function matchLength(r: HttpRoute): [number, boolean] {
  const uri = (r.match?.[0] as { uri?: StringMatch } | undefined)?.uri;
  if (uri?.exact !== undefined) return [uri.exact.length, true];
  if (uri?.prefix !== undefined) return [uri.prefix.length, false];
  return [0, false];
}

/** Longest path first; at equal length Exact first; otherwise the order stays (Array.sort is stable). */
function sortRoutes(routes: HttpRoute[]): HttpRoute[] {
  return routes.sort((a, b) => {
    const [la, ea] = matchLength(a);
    const [lb, eb] = matchLength(b);
    if (la !== lb) return lb - la;
    return Number(eb) - Number(ea);
  });
}

export function ingressVirtualServices(ingresses: readonly OrchIngress[], opts: VirtualServiceOptions): VirtualServiceTranslation {
  const notices = new Map<string, string[]>();
  const byHost = new Map<string, HostRule[]>();
  for (const ingress of ingresses) {
    const own = notices.get(ingressName(ingress)) ?? [];
    notices.set(ingressName(ingress), own);
    if (ingress.spec?.defaultBackend !== undefined) own.push('spec.defaultBackend is not effective (nor in the Go mesh): route `*` with a VirtualService bound to a Gateway instead');
    for (const [index, rule] of (ingress.spec?.rules ?? []).entries()) {
      const host = rule.host || '*';
      if (!rule.http) own.push(`spec.rules[${index}] (host ${JSON.stringify(host)}) has no http paths; it is not routed`);
      else byHost.set(host, [...(byHost.get(host) ?? []), { ingress, index, rule }]);
    }
  }
  const virtualServices: VirtualService[] = [];
  for (const [host, rules] of [...byHost].sort(([a], [b]) => compareText(a, b))) {
    rules.sort(compareRules);
    const first = rules[0]!.ingress;
    const http = sortRoutes(rules.flatMap((r) => ruleRoutes(r, opts, notices.get(ingressName(r.ingress))!)));
    virtualServices.push({
      apiVersion: `${NETWORKING_GROUP}/v1`,
      kind: 'VirtualService',
      metadata: {
        name: `${host.replaceAll('.', '-')}-${first.metadata.name}-${INGRESS_GATEWAY_SUFFIX}`,
        namespace: first.metadata.namespace,
        annotations: { [ROUTE_SEMANTICS_ANNOTATION]: ROUTE_SEMANTICS_INGRESS },
      },
      spec: { hosts: [host], gateways: [`${opts.ingressNamespace}/${ingressGatewayName(first)}`], http },
    });
  }
  const named = new Map([...notices].filter(([, n]) => n.length > 0).map(([k, n]) => [k, n.map((m) => `Ingress ${k}: ${m}`)]));
  return { virtualServices, notices: named };
}
