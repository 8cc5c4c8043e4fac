// Route matching: a config.route.v3.RouteConfiguration compiled once into a table that picks the
// virtual host by the request's authority and the first route whose match holds, as Envoy does.
import type { RouteConfiguration } from '../gen/envoy/config/route/v3/route_pb.js';
import { RouteSchema, VirtualHostSchema, VirtualHost_TlsRequirementType, type VirtualHost } from '../gen/envoy/config/route/v3/route_components_pb.js';
import { scope } from '../common/log.js';
import { lowerCase } from '../common/lower-case.js';
import { ConfigError, unappliedFields } from '../envoy/config-error.js';
import type { Predicate } from '../envoy/matchers.js';
import type { RequestView } from '../envoy/request.js';
import { compileRouteMatch } from '../envoy/route-match.js';
import { compileRetryPolicy } from './retry-policy.js';
import { compilePerRouteConfig } from './filters/registry.js';
import { compileMutation, type HeaderMutation } from './header-mutations.js';
import { compileAction, type RouteActionSpec, type UnappliedNotes, type VhostDefaults } from './route-action.js';
import { RouteStats, type RouteStatsStore } from './route-stats.js';
import type { Any } from '@bufbuild/protobuf/wkt';

export { applyMutations, type HeaderMutation, type MutableHeaders } from './header-mutations.js';
export { DEFAULT_ROUTE_TIMEOUT_MS, type MirrorSpec, type RouteActionSpec } from './route-action.js';

const log = scope('router');

const UNAPPLIED_VHOST = ['retryPolicyTypedConfig', 'cors', 'rateLimits', 'virtualClusters', 'hedgePolicy', 'requestMirrorPolicies'];
const UNAPPLIED_ROUTE = ['decorator', 'tracing'];

/** Collects, per compile, the set fields the router does not apply yet, and logs them once. */
class Unapplied implements UnappliedNotes {
  private readonly seen = new Set<string>();
  note(fields: readonly string[], where: string): void {
    for (const f of fields) this.seen.add(`${where}.${f}`.replace(/\[\d+\]/g, '[]'));
  }
  report(name: string): void {
    if (this.seen.size > 0) log.warn(`route configuration ${JSON.stringify(name)}: accepted but not applied yet: ${[...this.seen].sort().join(', ')}`);
  }
}

/** What every route inherits from its route configuration. */
interface RootLevel {
  readonly maxDirectResponseBodyBytes: number;
  readonly req: HeaderMutation;
  readonly res: HeaderMutation;
  readonly perFilter: PerFilterConfigs;
  /** The route configuration's, the virtual host's and the route's mutations in the order they apply. */
  readonly byPrecedence: (levels: readonly HeaderMutation[]) => readonly HeaderMutation[];
  readonly stats: RouteStatsStore | undefined;
}

export interface CompiledRoute {
  readonly name: string;
  readonly virtualHost: string;
  readonly match: Predicate<RequestView>;
  /** The literal prefix the route matched on, for prefix_rewrite. */
  readonly matchedPrefix?: string;
  readonly action: RouteActionSpec;
  /** Compiled typed_per_filter_config by filter name, most specific level first. */
  readonly perFilter: ReadonlyMap<string, readonly unknown[]>;
  /** Request mutations in the order they apply: the later wins (route config last, unless most_specific_header_mutations_wins). */
  readonly requestHeaders: readonly HeaderMutation[];
  readonly responseHeaders: readonly HeaderMutation[];
  /** The route's stats when it has a stat_prefix (route-stats.ts). */
  readonly stats?: RouteStats;
}

export interface RouteTable {
  readonly name: string;
  /** The first matching route of the virtual host selected by the authority, or undefined (404). */
  route(req: RequestView): CompiledRoute | undefined;
}

export interface RouteTableOptions {
  /** HCM strip_any_host_port, or the listener port for strip_matching_host_port. */
  readonly stripPort?: 'any' | number;
  /** Where the stats of routes with a stat_prefix are kept; without it, routes keep none. */
  readonly stats?: RouteStatsStore;
}

interface CompiledVhost {
  readonly name: string;
  readonly routes: readonly CompiledRoute[];
  /** require_tls: the route a request that must use TLS and does not gets (a 301 to https). */
  readonly tlsRedirect?: (req: RequestView) => CompiledRoute | undefined;
}

const NO_MUTATION: HeaderMutation = { remove: [], add: [] };

/**
 * Envoy's require_tls: ALL redirects every request whose x-forwarded-proto is not https,
 * EXTERNAL_ONLY only external ones (x-envoy-internal not "true"); the redirect is a 301 to
 * `https://<host><path>` with the host and path as received.
 */
function compileRequireTls(vh: VirtualHost): CompiledVhost['tlsRedirect'] {
  if (vh.requireTls === VirtualHost_TlsRequirementType.NONE) return undefined;
  const externalOnly = vh.requireTls === VirtualHost_TlsRequirementType.EXTERNAL_ONLY;
  const route: CompiledRoute = {
    name: 'require_tls',
    virtualHost: vh.name,
    match: () => true,
    action: { kind: 'redirect', redirect: { status: 301, location: (req) => `https://${req.authority}${req.path}` } },
    requestHeaders: [NO_MUTATION],
    responseHeaders: [NO_MUTATION],
    perFilter: new Map(),
  };
  return (req) => {
    if (req.header('x-forwarded-proto') === 'https') return undefined;
    if (externalOnly && req.header('x-envoy-internal') === 'true') return undefined;
    return route;
  };
}

/** Virtual hosts indexed the way Envoy searches them: exact, *suffix, prefix*, then "*". */
class DomainIndex {
  private readonly exact = new Map<string, CompiledVhost>();
  private readonly suffixes: { suffix: string; vh: CompiledVhost }[] = [];
  private readonly prefixes: { prefix: string; vh: CompiledVhost }[] = [];
  private fallback: CompiledVhost | undefined;
  private readonly seen = new Set<string>();

  add(domain: string, vh: CompiledVhost, field: string): void {
    const d = domain.toLowerCase();
    if (this.seen.has(d)) throw new ConfigError(field, `domain ${JSON.stringify(domain)} appears in more than one virtual host`);
    this.seen.add(d);
    if (d === '*') this.fallback = vh;
    else if (d.startsWith('*')) this.suffixes.push({ suffix: d.slice(1), vh });
    else if (d.endsWith('*')) this.prefixes.push({ prefix: d.slice(0, -1), vh });
    else if (d.includes('*')) throw new ConfigError(field, `domain ${JSON.stringify(domain)}: a wildcard must be the first or last character`);
    else this.exact.set(d, vh);
  }

  seal(): void {
    // Longest wildcard first, so the most specific one wins.
    this.suffixes.sort((a, b) => b.suffix.length - a.suffix.length);
    this.prefixes.sort((a, b) => b.prefix.length - a.prefix.length);
  }

  find(host: string): CompiledVhost | undefined {
    const exact = this.exact.get(host);
    if (exact) return exact;
    // A wildcard stands for at least one character.
    for (const s of this.suffixes) if (host.length > s.suffix.length && host.endsWith(s.suffix)) return s.vh;
    for (const p of this.prefixes) if (host.length > p.prefix.length && host.startsWith(p.prefix)) return p.vh;
    return this.fallback;
  }
}

/** Removes a :port from a host (IPv6 literals keep their brackets). */
export function stripHostPort(host: string, only?: number): string {
  const m = /^(.*?)(?::(\d+))?$/.exec(host);
  if (!m || m[2] === undefined || (m[1].includes(':') && !m[1].endsWith(']'))) return host;
  if (only !== undefined && Number(m[2]) !== only) return host;
  return m[1];
}

/** typed_per_filter_config compiled by filter name (see filters/registry.ts). */
type PerFilterConfigs = ReadonlyMap<string, unknown>;

function compilePerFilterConfigs(config: Record<string, Any>, field: string): PerFilterConfigs {
  return new Map(Object.entries(config).map(([name, any]) => [name, compilePerRouteConfig(any, `${field}.typed_per_filter_config[${JSON.stringify(name)}]`)]));
}

/** Each filter name's configs of the levels that have one, most specific level first. */
function mergePerFilter(levels: readonly PerFilterConfigs[]): ReadonlyMap<string, readonly unknown[]> {
  const out = new Map<string, unknown[]>();
  for (const level of levels) for (const [name, c] of level) out.set(name, [...(out.get(name) ?? []), c]);
  return out;
}

function compileVirtualHost(vh: VirtualHost, root: RootLevel, field: string, unapplied: Unapplied): CompiledVhost {
  if (vh.matcher) throw new ConfigError(`${field}.matcher`, 'the generic matcher API is not supported; use routes');
  const vhFilters = compilePerFilterConfigs(vh.typedPerFilterConfig, field);
  unapplied.note(unappliedFields(VirtualHostSchema, vh, UNAPPLIED_VHOST), field);
  const vreq = compileMutation(vh.requestHeadersToAdd, vh.requestHeadersToRemove, `${field}.request_headers_to_add`);
  const vres = compileMutation(vh.responseHeadersToAdd, vh.responseHeadersToRemove, `${field}.response_headers_to_add`);
  const defaults: VhostDefaults = {
    ...(vh.retryPolicy ? { retry: compileRetryPolicy(vh.retryPolicy, `${field}.retry_policy`) } : {}),
    attemptCount: { request: vh.includeRequestAttemptCount, response: vh.includeAttemptCountInResponse },
    maxDirectResponseBodyBytes: root.maxDirectResponseBodyBytes,
  };
  const routes = vh.routes.map((r, i): CompiledRoute => {
    const rf = `${field}.routes[${i}]`;
    const perFilter = mergePerFilter([compilePerFilterConfigs(r.typedPerFilterConfig, rf), vhFilters, root.perFilter]);
    unapplied.note(unappliedFields(RouteSchema, r, UNAPPLIED_ROUTE), rf);
    const match = compileRouteMatch(r.match, `${rf}.match`);
    return {
      name: r.name,
      virtualHost: vh.name,
      match: match.test,
      ...(match.prefix !== undefined ? { matchedPrefix: match.prefix } : {}),
      action: compileAction(r, rf, unapplied, defaults),
      perFilter,
      requestHeaders: root.byPrecedence([root.req, vreq, compileMutation(r.requestHeadersToAdd, r.requestHeadersToRemove, `${rf}.request_headers_to_add`)]),
      responseHeaders: root.byPrecedence([root.res, vres, compileMutation(r.responseHeadersToAdd, r.responseHeadersToRemove, `${rf}.response_headers_to_add`)]),
      ...(r.statPrefix && root.stats ? { stats: new RouteStats(root.stats, vh.name, r.statPrefix) } : {}),
    };
  });
  const tlsRedirect = compileRequireTls(vh);
  return { name: vh.name, routes, ...(tlsRedirect ? { tlsRedirect } : {}) };
}

/** Envoy's limit on a direct response's body when the route configuration sets none. */
const DEFAULT_MAX_DIRECT_RESPONSE_BODY_BYTES = 4096;

/** Compiles a RouteConfiguration; throws ConfigError (-> NACK) on what it cannot honour. */
export function compileRouteConfiguration(rc: RouteConfiguration, opts: RouteTableOptions = {}): RouteTable {
  if (rc.vhds) throw new ConfigError('vhds', 'VHDS is not supported');
  const unapplied = new Unapplied();
  const root: RootLevel = {
    maxDirectResponseBodyBytes: rc.maxDirectResponseBodySizeBytes ?? DEFAULT_MAX_DIRECT_RESPONSE_BODY_BYTES,
    perFilter: compilePerFilterConfigs(rc.typedPerFilterConfig, 'route_configuration'),
    req: compileMutation(rc.requestHeadersToAdd, rc.requestHeadersToRemove, 'request_headers_to_add'),
    res: compileMutation(rc.responseHeadersToAdd, rc.responseHeadersToRemove, 'response_headers_to_add'),
    // As Envoy: the later level wins, and by default the later is the less specific (the route
    // configuration's); most_specific_header_mutations_wins makes the route's the later.
    byPrecedence: rc.mostSpecificHeaderMutationsWins ? (levels) => levels : (levels) => [...levels].reverse(),
    stats: opts.stats,
  };
  const index = new DomainIndex();
  rc.virtualHosts.forEach((vh, i) => {
    const field = `virtual_hosts[${i}]`;
    const compiled = compileVirtualHost(vh, root, field, unapplied);
    if (vh.domains.length === 0) throw new ConfigError(`${field}.domains`, 'at least one domain is required');
    for (const d of vh.domains) index.add(d, compiled, `${field}.domains`);
  });
  index.seal();
  unapplied.report(rc.name);
  const strip: 'any' | number | undefined = rc.ignorePortInHostMatching ? 'any' : opts.stripPort;
  return {
    name: rc.name,
    route(req) {
      let host = lowerCase(req.authority);
      if (strip !== undefined) host = stripHostPort(host, strip === 'any' ? undefined : strip);
      const vh = index.find(host);
      if (!vh) return undefined;
      const redirect = vh.tlsRedirect?.(req);
      if (redirect) return redirect;
      for (const r of vh.routes) if (r.match(req)) return r;
      return undefined;
    },
  };
}
