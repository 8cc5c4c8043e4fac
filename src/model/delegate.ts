// VirtualService delegation (PILOT_ENABLE_VIRTUAL_SERVICE_DELEGATE), merged as the Go mesh merges
// it: an HTTP route with `delegate` is replaced by the delegate VirtualService's HTTP routes, each
// match the conjunction of the root's and the delegate's (a delegate match that no root match
// contains is a conflict: that delegate route is dropped, with a warning). Root fields the delegate
// route leaves unset are inherited, in its matches too (a root match's statPrefix, for one). A
// delegate is a VirtualService without hosts: it is never used on its own. Its destinations are
// resolved in its own namespace. Pure.
import type { HttpRoute, VirtualService } from '../api/types.js';
import type { HttpMatchRequest, StringMatch } from '../networking/route-match.js';
import { exportedTo, resolveHost } from './traffic.js';

/** Root fields a delegate route inherits when it does not set them (the Go mesh's list). */
const INHERITED = ['rewrite', 'directResponse', 'timeout', 'retries', 'fault', 'mirror', 'mirrorPercent', 'mirrorPercentage', 'corsPolicy', 'mirrors', 'headers'] as const;

/** Match fields the Go mesh takes from the root when the delegate's is empty (not only absent). */
const ROOT_UNLESS_SET = ['port', 'sourceNamespace', 'gateways', 'statPrefix'] as const;
const isSet = (v: unknown): boolean => v !== undefined && v !== '' && v !== 0 && !(Array.isArray(v) && v.length === 0);

/** Whether `leaf` can only match requests `root` also matches (the Go mesh's rule per kind). */
function stringConflict(root: StringMatch | undefined, leaf: StringMatch | undefined): boolean {
  if (!root || !leaf) return false;
  if (root.regex || leaf.regex) return true;
  if (root.exact !== undefined) return leaf.exact !== root.exact;
  if (root.prefix !== undefined) {
    const l = leaf.prefix ?? leaf.exact;
    return l === undefined || !l.startsWith(root.prefix);
  }
  return true;
}

function mapConflict(root: Readonly<Record<string, StringMatch>> | undefined, leaf: Readonly<Record<string, StringMatch>> | undefined): boolean {
  return Object.entries(leaf ?? {}).some(([k, v]) => stringConflict(root?.[k], v));
}

function conflicts(root: HttpMatchRequest, leaf: HttpMatchRequest): boolean {
  if ((['uri', 'scheme', 'method', 'authority'] as const).some((k) => stringConflict(root[k], leaf[k]))) return true;
  if (mapConflict(root.headers, leaf.headers) || mapConflict(root.withoutHeaders, leaf.withoutHeaders) || mapConflict(root.queryParams, leaf.queryParams)) return true;
  if ((root.ignoreUriCase ?? false) !== (leaf.ignoreUriCase ?? false)) return true;
  if (root.port && leaf.port && root.port !== leaf.port) return true;
  if (root.sourceNamespace && leaf.sourceNamespace !== root.sourceNamespace) return true;
  if (Object.entries(leaf.sourceLabels ?? {}).some(([k, v]) => root.sourceLabels?.[k] !== undefined && root.sourceLabels[k] !== v)) return true;
  const rg = root.gateways ?? [];
  const lg = leaf.gateways ?? [];
  return rg.length > 0 && lg.length > 0 && lg.some((g) => !rg.includes(g));
}

const joinNames = (root: string | undefined, leaf: string | undefined) => (leaf ? (root ? `${root}-${leaf}` : leaf) : root);

function mergeMatch(root: HttpMatchRequest, leaf: HttpMatchRequest): HttpMatchRequest {
  const name = joinNames(root.name, leaf.name);
  // The delegate's own conditions win; the root's fill what it leaves unset; maps are united.
  const merged: Record<string, unknown> = { ...root, ...leaf };
  for (const k of ['headers', 'withoutHeaders', 'queryParams', 'sourceLabels'] as const) if (root[k] || leaf[k]) merged[k] = { ...root[k], ...leaf[k] };
  for (const k of ROOT_UNLESS_SET) if (!isSet(leaf[k]) && isSet(root[k])) merged[k] = root[k];
  if (name !== undefined) merged['name'] = name;
  return merged as HttpMatchRequest;
}

/** Every delegate match ANDed with each root match it does not conflict with; undefined = conflict. */
function mergeMatches(root: readonly HttpMatchRequest[], leaf: readonly HttpMatchRequest[]): HttpMatchRequest[] | undefined {
  if (root.length === 0) return [...leaf];
  if (leaf.length === 0) return [...root];
  const out: HttpMatchRequest[] = [];
  for (const l of leaf) {
    const fit = root.filter((r) => !conflicts(r, l));
    if (fit.length === 0) return undefined;
    out.push(...fit.map((r) => mergeMatch(r, l)));
  }
  return out;
}

/** A delegate's destinations (route, mirror) as FQDNs of its own namespace. */
function resolveDestinations(route: HttpRoute, ns: string, domain: string): HttpRoute {
  const dest = (d: { host: string }) => ({ ...d, host: resolveHost(d.host, ns, domain) });
  const out: HttpRoute = { ...route };
  if (route.route) out.route = route.route.map((r) => (r['destination'] ? { ...r, destination: dest(r['destination'] as { host: string }) } : r));
  if (route['mirror']) out['mirror'] = dest(route['mirror'] as { host: string });
  return out;
}

export interface DelegateOptions {
  /** PILOT_ENABLE_VIRTUAL_SERVICE_DELEGATE (default true). */
  readonly enabled: boolean;
  readonly domain: string;
  readonly warn: (message: string) => void;
  /** The mesh config's defaultVirtualServiceExportTo: a delegate without exportTo is visible where it says. */
  readonly exportTo?: readonly string[];
}

/** The root's HTTP routes with each delegating route replaced by the delegate's merged routes. */
function mergeRoot(root: VirtualService, delegates: ReadonlyMap<string, VirtualService>, opts: DelegateOptions): VirtualService {
  const where = `VirtualService ${root.metadata.namespace}/${root.metadata.name}`;
  const http = (root.spec.http ?? []).flatMap((route): HttpRoute[] => {
    const d = route.delegate;
    if (!d) return [route];
    if (!opts.enabled) {
      opts.warn(`${where}: http route ${route.name ?? ''} delegates to ${d.name} but PILOT_ENABLE_VIRTUAL_SERVICE_DELEGATE is false; the route is dropped`);
      return [];
    }
    const ns = d.namespace || root.metadata.namespace;
    const delegate = delegates.get(`${ns}/${d.name}`);
    if (!delegate) {
      opts.warn(`${where}: delegate VirtualService ${ns}/${d.name} not found; its route is dropped`);
      return [];
    }
    if (!exportedTo(delegate.spec.exportTo, ns, root.metadata.namespace, opts.exportTo)) {
      opts.warn(`${where}: delegate VirtualService ${ns}/${d.name} is not exported to ${root.metadata.namespace}; its route is dropped`);
      return [];
    }
    return (delegate.spec.http ?? []).flatMap((leaf): HttpRoute[] => {
      const match = mergeMatches((route.match ?? []) as HttpMatchRequest[], (leaf.match ?? []) as HttpMatchRequest[]);
      if (!match) {
        opts.warn(`${where}: route ${route.name ?? ''} and delegate ${ns}/${d.name} route ${leaf.name ?? ''} have conflicting matches; the delegate route is dropped`);
        return [];
      }
      const merged: HttpRoute = { ...resolveDestinations(leaf, ns, opts.domain), match: match as HttpRoute['match'] };
      const name = joinNames(route.name, leaf.name);
      if (name !== undefined) merged.name = name;
      for (const k of INHERITED) if (merged[k] === undefined && route[k] !== undefined) merged[k] = route[k];
      return [merged];
    });
  });
  return { ...root, spec: { ...root.spec, http } };
}

/**
 * The VirtualServices that apply: those with hosts, delegation merged in; delegates (no hosts) are
 * only reachable through a root.
 */
export function mergeDelegates(all: readonly VirtualService[], opts: DelegateOptions): VirtualService[] {
  const delegates = new Map(all.filter((v) => (v.spec.hosts ?? []).length === 0).map((v) => [`${v.metadata.namespace}/${v.metadata.name}`, v]));
  return all.filter((v) => (v.spec.hosts ?? []).length > 0).map((v) => ((v.spec.http ?? []).some((r) => r.delegate) ? mergeRoot(v, delegates, opts) : v));
}
