// Route matching: a config.route.v3.RouteConfiguration compiled once into a table that picks the
// virtual host by the request's authority and the first route whose match holds, as Envoy does.
import type { HeaderValueOption } from '../gen/envoy/config/core/v3/base_pb.js';
import { HeaderValueOption_HeaderAppendAction } from '../gen/envoy/config/core/v3/base_pb.js';
import type { RouteConfiguration } from '../gen/envoy/config/route/v3/route_pb.js';
import {
  RouteActionSchema,
  RouteAction_ClusterNotFoundResponseCode,
  RouteSchema,
  VirtualHostSchema,
  VirtualHost_TlsRequirementType,
  type Route,
  type RouteAction,
  type RouteAction_RequestMirrorPolicy,
  type VirtualHost,
} from '../gen/envoy/config/route/v3/route_components_pb.js';
import { scope } from '../common/log.js';
import { ConfigError, unappliedFields } from '../envoy/config-error.js';
import { durationMs } from '../common/duration.js';
import { fractionOf, readDataSource, type Predicate } from '../envoy/matchers.js';
import type { RequestView } from '../envoy/request.js';
import { compileRouteMatch } from '../envoy/route-match.js';
import { compileRedirect, compileRegexRewrite, prefixRewrite, type PathRewrite, type RedirectSpec } from './redirect.js';
import { compileRetryPolicy, type RetrySpec } from './retry-policy.js';
import { compilePerRouteConfig } from './filters/registry.js';
import { compileHashPolicies, type RequestHasher } from './load-balancers.js';
import type { Any } from '@bufbuild/protobuf/wkt';

const log = scope('router');

const UNAPPLIED_ROUTE_ACTION = ['retryPolicyTypedConfig', 'rateLimits', 'cors', 'maxGrpcTimeout', 'grpcTimeoutOffset', 'idleTimeout', 'maxStreamDuration', 'hedgePolicy', 'metadataMatch', 'internalRedirectPolicy'];
const UNAPPLIED_VHOST = ['retryPolicyTypedConfig', 'cors', 'rateLimits', 'virtualClusters', 'hedgePolicy', 'requestMirrorPolicies'];
const UNAPPLIED_ROUTE = ['decorator', 'tracing'];

/** Collects, per compile, the set fields the router does not apply yet, and logs them once. */
class Unapplied {
  private readonly seen = new Set<string>();
  note(fields: readonly string[], where: string): void {
    for (const f of fields) this.seen.add(`${where}.${f}`.replace(/\[\d+\]/g, '[]'));
  }
  report(name: string): void {
    if (this.seen.size > 0) log.warn(`route configuration ${JSON.stringify(name)}: accepted but not applied yet: ${[...this.seen].sort().join(', ')}`);
  }
}

/** Envoy's route timeout when none is configured. */
export const DEFAULT_ROUTE_TIMEOUT_MS = 15_000;

/** Adds/removes headers; applied in the order route config -> virtual host -> route, like Envoy. */
export interface HeaderMutation {
  readonly remove: readonly string[];
  readonly add: readonly { name: string; value: string; action: HeaderValueOption_HeaderAppendAction }[];
}

/** The minimal header surface a mutation needs, satisfied by RequestHeaders and response maps. */
export interface MutableHeaders {
  has(name: string): boolean;
  add(name: string, value: string): void;
  set(name: string, value: string): void;
  remove(name: string): void;
}

export type RouteActionSpec =
  | {
      readonly kind: 'route';
      /** The upstream cluster for this request (weighted and header-named clusters resolved per call). */
      readonly cluster: (req: RequestView) => string;
      readonly clusterNotFoundStatus: number;
      /** 0 = no timeout. */
      readonly timeoutMs: number;
      /** prefix_rewrite or regex_rewrite. */
      readonly pathRewrite?: PathRewrite;
      readonly hostRewrite?: string;
      /** The route's retry policy, else its virtual host's. */
      readonly retry?: RetrySpec;
      /** request_mirror_policies: shadow copies sent fire and forget. */
      readonly mirrors: readonly MirrorSpec[];
      /** The virtual host's include_request_attempt_count / include_attempt_count_in_response. */
      readonly attemptCount: { readonly request: boolean; readonly response: boolean };
      /** Per-route upgrade overrides (upgrade type, lower case -> enabled) of the HCM's upgrade_configs. */
      readonly upgrades: ReadonlyMap<string, boolean>;
      /** hash_policy: the request's hash for RING_HASH / MAGLEV clusters. */
      readonly hash?: RequestHasher;
    }
  | { readonly kind: 'direct'; readonly status: number; readonly body: string }
  | { readonly kind: 'redirect'; readonly redirect: RedirectSpec };

/** A request_mirror_policies entry: the shadow cluster and the share of requests it sees. */
export interface MirrorSpec {
  readonly cluster: string;
  /** In [0, 1]: runtime_fraction's default value (100 % when unset). */
  readonly fraction: number;
}

function compileMirror(m: RouteAction_RequestMirrorPolicy, field: string): MirrorSpec {
  if (m.clusterHeader) throw new ConfigError(`${field}.cluster_header`, 'a mirror cluster from a header is not supported; use cluster');
  if (!m.cluster) throw new ConfigError(`${field}.cluster`, 'a cluster name is required');
  return { cluster: m.cluster, fraction: m.runtimeFraction ? fractionOf(m.runtimeFraction.defaultValue) : 1 };
}

/** What every route inherits from its route configuration. */
interface RootLevel {
  readonly req: HeaderMutation;
  readonly res: HeaderMutation;
  readonly perFilter: PerFilterConfigs;
}

/** What a route inherits from its virtual host. */
interface VhostDefaults {
  readonly retry?: RetrySpec;
  readonly attemptCount: { readonly request: boolean; readonly response: boolean };
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
  /** Request mutations, outermost (route config) first. */
  readonly requestHeaders: readonly HeaderMutation[];
  readonly responseHeaders: readonly HeaderMutation[];
}

export interface RouteTable {
  readonly name: string;
  /** The first matching route of the virtual host selected by the authority, or undefined (404). */
  route(req: RequestView): CompiledRoute | undefined;
}

export interface RouteTableOptions {
  /** HCM strip_any_host_port, or the listener port for strip_matching_host_port. */
  readonly stripPort?: 'any' | number;
}

function compileMutation(add: readonly HeaderValueOption[], remove: readonly string[], field: string): HeaderMutation {
  return {
    remove: remove.map((r) => r.toLowerCase()),
    add: add.map((o, i) => {
      if (!o.header?.key) throw new ConfigError(`${field}[${i}].header.key`, 'a header name is required');
      // The deprecated `append` flag, when set, wins over append_action (false = overwrite).
      const action =
        o.append === undefined
          ? o.appendAction
          : o.append
            ? HeaderValueOption_HeaderAppendAction.APPEND_IF_EXISTS_OR_ADD
            : HeaderValueOption_HeaderAppendAction.OVERWRITE_IF_EXISTS_OR_ADD;
      return { name: o.header.key.toLowerCase(), value: o.header.value, action };
    }),
  };
}

/** Applies mutations in order. Values are literal: Envoy's %VARIABLE% substitution is not supported. */
export function applyMutations(headers: MutableHeaders, mutations: readonly HeaderMutation[]): void {
  for (const m of mutations) {
    for (const r of m.remove) headers.remove(r);
    for (const a of m.add) {
      const exists = headers.has(a.name);
      switch (a.action) {
        case HeaderValueOption_HeaderAppendAction.APPEND_IF_EXISTS_OR_ADD:
          headers.add(a.name, a.value);
          break;
        case HeaderValueOption_HeaderAppendAction.ADD_IF_ABSENT:
          if (!exists) headers.add(a.name, a.value);
          break;
        case HeaderValueOption_HeaderAppendAction.OVERWRITE_IF_EXISTS_OR_ADD:
          headers.set(a.name, a.value);
          break;
        case HeaderValueOption_HeaderAppendAction.OVERWRITE_IF_EXISTS:
          if (exists) headers.set(a.name, a.value);
          break;
      }
    }
  }
}

const NOT_FOUND_STATUS: Record<RouteAction_ClusterNotFoundResponseCode, number> = {
  [RouteAction_ClusterNotFoundResponseCode.SERVICE_UNAVAILABLE]: 503,
  [RouteAction_ClusterNotFoundResponseCode.NOT_FOUND]: 404,
  [RouteAction_ClusterNotFoundResponseCode.INTERNAL_SERVER_ERROR]: 500,
};

function compileClusterSpecifier(a: RouteAction, field: string): (req: RequestView) => string {
  const cs = a.clusterSpecifier;
  switch (cs.case) {
    case 'cluster': {
      const name = cs.value;
      return () => name;
    }
    case 'clusterHeader': {
      const header = cs.value.toLowerCase();
      return (req) => req.header(header) ?? '';
    }
    case 'weightedClusters': {
      const entries = cs.value.clusters.map((c, i) => {
        if (!c.name) throw new ConfigError(`${field}.weighted_clusters.clusters[${i}].name`, 'a cluster name is required');
        return { name: c.name, weight: c.weight ?? 0 };
      });
      const total = entries.reduce((s, e) => s + e.weight, 0);
      if (total <= 0) throw new ConfigError(`${field}.weighted_clusters`, 'the cluster weights must add up to more than 0');
      return () => {
        let r = Math.random() * total;
        for (const e of entries) {
          r -= e.weight;
          if (r < 0) return e.name;
        }
        return entries[entries.length - 1].name;
      };
    }
    default:
      throw new ConfigError(field, `cluster specifier ${cs.case ?? '(none)'} is not supported (expected cluster, cluster_header or weighted_clusters)`);
  }
}

function compileAction(r: Route, field: string, unapplied: Unapplied, vhost: VhostDefaults): RouteActionSpec {
  const a = r.action;
  switch (a.case) {
    case 'route': {
      const ra = a.value;
      unapplied.note(unappliedFields(RouteActionSchema, ra, UNAPPLIED_ROUTE_ACTION), `${field}.route`);
      const host = ra.hostRewriteSpecifier;
      if (host.case !== undefined && host.case !== 'hostRewriteLiteral') {
        throw new ConfigError(`${field}.route`, `host rewrite ${host.case} is not supported (expected host_rewrite_literal)`);
      }
      if (ra.pathRewritePolicy) throw new ConfigError(`${field}.route.path_rewrite_policy`, 'path_rewrite_policy is not supported; use prefix_rewrite or regex_rewrite');
      if (ra.prefixRewrite && ra.regexRewrite) throw new ConfigError(`${field}.route`, 'prefix_rewrite and regex_rewrite are mutually exclusive');
      const pathRewrite = ra.regexRewrite ? compileRegexRewrite(ra.regexRewrite, `${field}.route.regex_rewrite`) : ra.prefixRewrite ? prefixRewrite(ra.prefixRewrite) : undefined;
      const retry = ra.retryPolicy ? compileRetryPolicy(ra.retryPolicy, `${field}.route.retry_policy`) : vhost.retry;
      const hash = compileHashPolicies(ra.hashPolicy, `${field}.route.hash_policy`);
      return {
        ...(hash ? { hash } : {}),
        kind: 'route',
        cluster: compileClusterSpecifier(ra, `${field}.route`),
        clusterNotFoundStatus: NOT_FOUND_STATUS[ra.clusterNotFoundResponseCode] ?? 503,
        timeoutMs: durationMs(ra.timeout, DEFAULT_ROUTE_TIMEOUT_MS),
        upgrades: new Map(
          ra.upgradeConfigs.map((u, i) => {
            if (u.connectConfig) throw new ConfigError(`${field}.route.upgrade_configs[${i}].connect_config`, 'CONNECT is not supported');
            return [u.upgradeType.toLowerCase(), u.enabled ?? true];
          }),
        ),
        ...(pathRewrite ? { pathRewrite } : {}),
        ...(retry ? { retry } : {}),
        mirrors: ra.requestMirrorPolicies.map((m, i) => compileMirror(m, `${field}.route.request_mirror_policies[${i}]`)),
        attemptCount: vhost.attemptCount,
        ...(host.case === 'hostRewriteLiteral' ? { hostRewrite: host.value } : {}),
      };
    }
    case 'directResponse': {
      const d = a.value;
      if (d.status < 200 || d.status > 599) throw new ConfigError(`${field}.direct_response.status`, `${d.status} is not in [200, 600)`);
      return { kind: 'direct', status: d.status, body: d.body ? readDataSource(d.body, `${field}.direct_response.body`) : '' };
    }
    case 'redirect':
      return { kind: 'redirect', redirect: compileRedirect(a.value, `${field}.redirect`) };
    default:
      throw new ConfigError(field, `action ${a.case ?? '(none)'} is not supported (expected route, redirect or direct_response)`);
  }
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
      requestHeaders: [root.req, vreq, compileMutation(r.requestHeadersToAdd, r.requestHeadersToRemove, `${rf}.request_headers_to_add`)],
      responseHeaders: [root.res, vres, compileMutation(r.responseHeadersToAdd, r.responseHeadersToRemove, `${rf}.response_headers_to_add`)],
    };
  });
  const tlsRedirect = compileRequireTls(vh);
  return { name: vh.name, routes, ...(tlsRedirect ? { tlsRedirect } : {}) };
}

/** Compiles a RouteConfiguration; throws ConfigError (-> NACK) on what it cannot honour. */
export function compileRouteConfiguration(rc: RouteConfiguration, opts: RouteTableOptions = {}): RouteTable {
  if (rc.vhds) throw new ConfigError('vhds', 'VHDS is not supported');
  const unapplied = new Unapplied();
  const root: RootLevel = {
    perFilter: compilePerFilterConfigs(rc.typedPerFilterConfig, 'route_configuration'),
    req: compileMutation(rc.requestHeadersToAdd, rc.requestHeadersToRemove, 'request_headers_to_add'),
    res: compileMutation(rc.responseHeadersToAdd, rc.responseHeadersToRemove, 'response_headers_to_add'),
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
      let host = req.authority.toLowerCase();
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
