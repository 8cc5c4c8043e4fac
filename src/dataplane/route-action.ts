// A route's action compiled: where a matched request goes (its cluster, fixed, from a header or
// weighted; rewrites, timeout, retries, mirrors, upgrades, hash policy), or the direct response
// or redirect it gets instead.
import {
  RouteActionSchema,
  RouteAction_ClusterNotFoundResponseCode,
  WeightedClusterSchema,
  WeightedCluster_ClusterWeightSchema,
  type WeightedCluster_ClusterWeight,
  type Route,
  type RouteAction,
  type RouteAction_RequestMirrorPolicy,
} from '../gen/envoy/config/route/v3/route_components_pb.js';
import { ConfigError, unappliedFields } from '../envoy/config-error.js';
import { durationMs } from '../common/duration.js';
import { fractionOf, readDataSource } from '../envoy/matchers.js';
import type { RequestView } from '../envoy/request.js';
import { compileRedirect, compileRegexRewrite, prefixRewrite, type PathRewrite, type RedirectSpec } from './redirect.js';
import { compileRetryPolicy, type RetrySpec } from './retry-policy.js';
import { compileHashPolicies, type RequestHasher } from './load-balancers.js';
import { compileRouteTimeouts, type RouteTimeouts } from './route-timeouts.js';
import { compileMutation, type HeaderMutation } from './header-mutations.js';

const UNAPPLIED_CLUSTER_WEIGHT = ['metadataMatch', 'typedPerFilterConfig'];
const UNAPPLIED_WEIGHTED_CLUSTER = ['runtimeKeyPrefix', 'headerName', 'useHashPolicy', 'totalWeight'];
const UNAPPLIED_ROUTE_ACTION = ['retryPolicyTypedConfig', 'rateLimits', 'cors', 'hedgePolicy', 'metadataMatch', 'internalRedirectPolicy'];

/** Where a compile notes the set fields it does not apply yet (logged once per route configuration). */
export interface UnappliedNotes {
  note(fields: readonly string[], where: string): void;
}

/** Envoy's route timeout when none is configured. */
export const DEFAULT_ROUTE_TIMEOUT_MS = 15_000;

export type RouteActionSpec =
  | {
      readonly kind: 'route';
      /** The upstream cluster for this request (weighted and header-named clusters resolved per call). */
      readonly cluster: (req: RequestView) => ClusterChoice;
      readonly clusterNotFoundStatus: number;
      /** 0 = no timeout (also with MaxStreamDuration set: Envoy's router then leaves `timeout` aside). */
      readonly timeoutMs: number;
      /** max_grpc_timeout, MaxStreamDuration, idle_timeout; undefined when none is set. */
      readonly timeouts?: RouteTimeouts;
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

/**
 * The cluster a request goes to and, for a weighted cluster, its own header mutations and host
 * rewrite. As Envoy's WeightedClusterEntry they apply before the route's, so the route's (and its
 * virtual host's and route configuration's) win, and the route's host rewrite wins over this one.
 */
export interface ClusterChoice {
  readonly name: string;
  readonly requestHeaders?: readonly HeaderMutation[];
  readonly responseHeaders?: readonly HeaderMutation[];
  readonly hostRewrite?: string;
}

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

/** What a route inherits from its virtual host. */
export interface VhostDefaults {
  readonly retry?: RetrySpec;
  readonly attemptCount: { readonly request: boolean; readonly response: boolean };
  /** The route configuration's max_direct_response_body_size_bytes (Envoy's default 4096). */
  readonly maxDirectResponseBodyBytes: number;
}

const NOT_FOUND_STATUS: Record<RouteAction_ClusterNotFoundResponseCode, number> = {
  [RouteAction_ClusterNotFoundResponseCode.SERVICE_UNAVAILABLE]: 503,
  [RouteAction_ClusterNotFoundResponseCode.NOT_FOUND]: 404,
  [RouteAction_ClusterNotFoundResponseCode.INTERNAL_SERVER_ERROR]: 500,
};

function compileClusterWeight(c: WeightedCluster_ClusterWeight, field: string, unapplied: UnappliedNotes): ClusterChoice & { weight: number } {
  if (c.clusterHeader) throw new ConfigError(`${field}.cluster_header`, 'a weighted cluster named by a header is not supported; use name');
  if (!c.name) throw new ConfigError(`${field}.name`, 'a cluster name is required');
  unapplied.note(unappliedFields(WeightedCluster_ClusterWeightSchema, c, UNAPPLIED_CLUSTER_WEIGHT), field);
  const mutation = (add: typeof c.requestHeadersToAdd, remove: readonly string[], f: string) => (add.length + remove.length > 0 ? [compileMutation(add, remove, `${field}.${f}`)] : undefined);
  const requestHeaders = mutation(c.requestHeadersToAdd, c.requestHeadersToRemove, 'request_headers_to_add');
  const responseHeaders = mutation(c.responseHeadersToAdd, c.responseHeadersToRemove, 'response_headers_to_add');
  const host = c.hostRewriteSpecifier;
  return {
    name: c.name,
    weight: c.weight ?? 0,
    ...(requestHeaders ? { requestHeaders } : {}),
    ...(responseHeaders ? { responseHeaders } : {}),
    ...(host.case === 'hostRewriteLiteral' && host.value ? { hostRewrite: host.value } : {}),
  };
}

function compileClusterSpecifier(a: RouteAction, field: string, unapplied: UnappliedNotes): (req: RequestView) => ClusterChoice {
  const cs = a.clusterSpecifier;
  switch (cs.case) {
    case 'cluster': {
      const choice = { name: cs.value };
      return () => choice;
    }
    case 'clusterHeader': {
      const header = cs.value.toLowerCase();
      return (req) => ({ name: req.header(header) ?? '' });
    }
    case 'weightedClusters': {
      const wf = `${field}.weighted_clusters`;
      unapplied.note(unappliedFields(WeightedClusterSchema, cs.value, UNAPPLIED_WEIGHTED_CLUSTER), wf);
      const entries = cs.value.clusters.map((c, i) => compileClusterWeight(c, `${wf}.clusters[${i}]`, unapplied));
      const total = entries.reduce((s, e) => s + e.weight, 0);
      if (total <= 0) throw new ConfigError(wf, 'the cluster weights must add up to more than 0');
      return () => {
        let r = Math.random() * total;
        for (const e of entries) {
          r -= e.weight;
          if (r < 0) return e;
        }
        return entries[entries.length - 1]!;
      };
    }
    default:
      throw new ConfigError(field, `cluster specifier ${cs.case ?? '(none)'} is not supported (expected cluster, cluster_header or weighted_clusters)`);
  }
}

export function compileAction(r: Route, field: string, unapplied: UnappliedNotes, vhost: VhostDefaults): RouteActionSpec {
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
      const timeouts = compileRouteTimeouts(ra);
      return {
        ...(hash ? { hash } : {}),
        ...(timeouts ? { timeouts } : {}),
        kind: 'route',
        cluster: compileClusterSpecifier(ra, `${field}.route`, unapplied),
        clusterNotFoundStatus: NOT_FOUND_STATUS[ra.clusterNotFoundResponseCode] ?? 503,
        timeoutMs: ra.maxStreamDuration ? 0 : durationMs(ra.timeout, DEFAULT_ROUTE_TIMEOUT_MS),
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
      const body = d.body ? readDataSource(d.body, `${field}.direct_response.body`) : '';
      const size = Buffer.byteLength(body);
      if (size > vhost.maxDirectResponseBodyBytes) {
        throw new ConfigError(`${field}.direct_response.body`, `response body size is ${size} bytes; maximum is ${vhost.maxDirectResponseBodyBytes} (max_direct_response_body_size_bytes)`);
      }
      return { kind: 'direct', status: d.status, body };
    }
    case 'redirect':
      return { kind: 'redirect', redirect: compileRedirect(a.value, `${field}.redirect`) };
    default:
      throw new ConfigError(field, `action ${a.case ?? '(none)'} is not supported (expected route, redirect or direct_response)`);
  }
}
