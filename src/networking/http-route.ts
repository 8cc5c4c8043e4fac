// A VirtualService HTTP route as Envoy routes (one per applicable match condition, same action):
// weighted destinations, redirect, direct response, rewrite, timeout, retries, header mutation, and
// the per-route configs of the fault and CORS filters, mirroring, and the consistent-hash policy of
// the destination's DestinationRule.
import type { MessageInitShape } from '@bufbuild/protobuf';
import type { Any } from '@bufbuild/protobuf/wkt';
import { HeaderValueOption_HeaderAppendAction } from '../gen/envoy/config/core/v3/base_pb.js';
import { RedirectAction_RedirectResponseCode, type Route, type RouteAction_HashPolicy, type RouteSchema, type RouteAction_HashPolicySchema } from '../gen/envoy/config/route/v3/route_components_pb.js';
import { CorsPolicySchema } from '../gen/envoy/extensions/filters/http/cors/v3/cors_pb.js';
import { HTTPFaultSchema } from '../gen/envoy/extensions/filters/http/fault/v3/fault_pb.js';
import { PreviousHostsPredicateSchema } from '../gen/envoy/extensions/retry/host/previous_hosts/v3/previous_hosts_pb.js';
import { PreviousPrioritiesConfigSchema } from '../gen/envoy/extensions/retry/priority/previous_priorities/v3/previous_priorities_config_pb.js';
import { FractionalPercent_DenominatorType } from '../gen/envoy/type/v3/percent_pb.js';
import { parseDuration } from '../common/duration.js';
import { pack } from '../envoy/types.js';
import { duration, seconds } from './common.js';
import { CORS_FILTER_NAME, FAULT_FILTER_NAME } from '../envoy/names.js';
import { httpMatchApplies, routeMatch, type HttpMatchRequest, type MatchContext, type StringMatch } from './route-match.js';

export interface Destination {
  readonly host: string;
  readonly subset?: string;
  readonly port?: { readonly number?: number };
}

export interface HeaderOperations {
  readonly set?: Readonly<Record<string, string>>;
  readonly add?: Readonly<Record<string, string>>;
  readonly remove?: readonly string[];
}

type Percent = { readonly value?: number };

/** A route's or a destination's `headers`. */
export interface Headers {
  readonly request?: HeaderOperations;
  readonly response?: HeaderOperations;
}

/** A route's `retries` (HTTPRetry), also the mesh config's `defaultHttpRetryPolicy`. */
export interface HttpRetry {
  readonly attempts?: number;
  readonly perTryTimeout?: string;
  readonly retryOn?: string;
  readonly retryRemoteLocalities?: boolean;
  readonly retryIgnorePreviousHosts?: boolean;
  readonly backoff?: string;
}

/** The HTTPRoute fields this module reads (the API's names). */
export interface HttpRouteSpec {
  readonly name?: string;
  readonly match?: readonly HttpMatchRequest[];
  readonly route?: readonly { readonly destination: Destination; readonly weight?: number; readonly headers?: Headers }[];
  readonly redirect?: { readonly uri?: string; readonly authority?: string; readonly port?: number; readonly derivePort?: string; readonly scheme?: string; readonly redirectCode?: number };
  readonly directResponse?: { readonly status: number; readonly body?: { readonly string?: string; readonly bytes?: string } };
  readonly rewrite?: { readonly uri?: string; readonly authority?: string; readonly uriRegexRewrite?: { readonly match: string; readonly rewrite: string } };
  readonly timeout?: string;
  readonly retries?: HttpRetry;
  readonly fault?: {
    /** `percent`: the deprecated whole percent, read when percentage is unset. */
    readonly delay?: { readonly fixedDelay?: string; readonly percentage?: Percent; readonly percent?: number };
    readonly abort?: { readonly httpStatus?: number; readonly grpcStatus?: string; readonly percentage?: Percent };
  };
  readonly mirror?: Destination;
  readonly mirrorPercentage?: Percent;
  /** Deprecated for mirrorPercentage: a whole percent, read when mirrorPercentage is unset. */
  readonly mirrorPercent?: number;
  /** Several mirrors, each with its own share (unset: every request). */
  readonly mirrors?: readonly { readonly destination?: Destination; readonly percentage?: Percent }[];
  readonly headers?: Headers;
  readonly corsPolicy?: {
    readonly allowOrigins?: readonly StringMatch[];
    /** Deprecated for allowOrigins: exact origins, read when allowOrigins is unset. */
    readonly allowOrigin?: readonly string[];
    readonly allowMethods?: readonly string[];
    readonly allowHeaders?: readonly string[];
    readonly exposeHeaders?: readonly string[];
    readonly maxAge?: string;
    readonly allowCredentials?: boolean;
    readonly unmatchedPreflights?: string;
  };
}

export type HashPolicyInit = Exclude<MessageInitShape<typeof RouteAction_HashPolicySchema>, RouteAction_HashPolicy>;
export type RouteInit = Exclude<MessageInitShape<typeof RouteSchema>, Route>;

/** Where a destination goes: its cluster, and the hash policy its DestinationRule asks for. */
export interface ResolvedDestination {
  readonly cluster: string;
  readonly hashPolicy: readonly HashPolicyInit[];
}

export interface HttpRouteContext extends MatchContext {
  /** Resolves a destination (short host names in the VirtualService's namespace) to its cluster. */
  readonly resolve: (d: Destination) => ResolvedDestination;
  /** MESH_DEFAULT_REQUEST_TIMEOUT, seconds; 0 = none. */
  readonly defaultTimeout?: number;
  /** Mesh config defaultHttpRetryPolicy: the retries of routes that set none; unset: the Go mesh's default policy. */
  readonly defaultRetries?: HttpRetry;
  /** Routes generated from Ingresses: a Prefix matches whole path segments (see route-match.ts). */
  readonly segmentPrefix?: boolean;
  /** The routes serve a TLS server (a gateway's HTTPS one): a redirect's default scheme is https. */
  readonly tls?: boolean;
}

/** The Go mesh's retry policy for routes that do not set `retries`. */
const DEFAULT_RETRY_ON = 'connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes';
const DEFAULT_ATTEMPTS = 2;
/**
 * The Go mesh's retries prefer endpoints not tried yet (the previous_hosts predicate, picking up to
 * five more times), except toward a consistent-hash destination, whose retries stay on its host.
 */
const PREVIOUS_HOSTS = { name: 'envoy.retry_host_predicates.previous_hosts', configType: { case: 'typedConfig' as const, value: pack(PreviousHostsPredicateSchema, {}) } };
const HOST_SELECTION_RETRY_MAX_ATTEMPTS = 5n;
/** retryRemoteLocalities: a retry excludes the priority levels (localities) tried so far, after every second attempt, as the Go mesh configures it. */
const PREVIOUS_PRIORITIES = { name: 'envoy.retry_priorities.previous_priorities', configType: { case: 'typedConfig' as const, value: pack(PreviousPrioritiesConfigSchema, { updateFrequency: 2 }) } };

const REDIRECT_CODES: Readonly<Record<number, RedirectAction_RedirectResponseCode>> = {
  301: RedirectAction_RedirectResponseCode.MOVED_PERMANENTLY,
  302: RedirectAction_RedirectResponseCode.FOUND,
  303: RedirectAction_RedirectResponseCode.SEE_OTHER,
  307: RedirectAction_RedirectResponseCode.TEMPORARY_REDIRECT,
  308: RedirectAction_RedirectResponseCode.PERMANENT_REDIRECT,
};

/** The gRPC status names of the API, by code (abort.grpcStatus). */
const GRPC_CODES = ['OK', 'CANCELLED', 'UNKNOWN', 'INVALID_ARGUMENT', 'DEADLINE_EXCEEDED', 'NOT_FOUND', 'ALREADY_EXISTS', 'PERMISSION_DENIED', 'RESOURCE_EXHAUSTED', 'FAILED_PRECONDITION', 'ABORTED', 'OUT_OF_RANGE', 'UNIMPLEMENTED', 'INTERNAL', 'UNAVAILABLE', 'DATA_LOSS', 'UNAUTHENTICATED'];


/** A percentage (0-100, fractions allowed) in millionths, as the Go mesh writes it; unset = 100 %. */
function fraction(p: Percent | undefined): { numerator: number; denominator: FractionalPercent_DenominatorType } {
  const value = p?.value ?? 100;
  return { numerator: Math.round(value * 10_000), denominator: FractionalPercent_DenominatorType.MILLION };
}

/**
 * `mirror` (with `mirrorPercentage`, else the deprecated whole-percent `mirrorPercent`), then each of `mirrors`, as the Go mesh: a share left unset is
 * every request, one of 0 (or without a value) mirrors nothing and gets no policy.
 */
function mirrorPolicies(r: HttpRouteSpec, ctx: HttpRouteContext): NonNullable<Extract<RouteInit['action'], { case: 'route' }>['value']>['requestMirrorPolicies'] {
  const policy = (d: Destination | undefined, p: Percent | undefined) =>
    !d || (p !== undefined && !((p.value ?? 0) > 0)) ? [] : [{ cluster: ctx.resolve(d).cluster, runtimeFraction: { defaultValue: fraction(p) } }];
  const percentage = r.mirrorPercentage ?? (r.mirrorPercent !== undefined ? { value: r.mirrorPercent } : undefined);
  return [...policy(r.mirror, percentage), ...(r.mirrors ?? []).flatMap((m) => policy(m.destination, m.percentage))];
}

const isAuthorityHeader = (name: string): boolean => name.toLowerCase() === ':authority' || name.toLowerCase() === 'host';
/** Pseudo-headers and host are never mutated as headers (the authority becomes a host rewrite). */
const isInternalHeader = (name: string): boolean => name.startsWith(':') || name.toLowerCase() === 'host';

type HeaderOption = NonNullable<RouteInit['requestHeadersToAdd']>[number];

interface HeaderFields {
  readonly requestHeadersToAdd: HeaderOption[];
  readonly requestHeadersToRemove: string[];
  readonly responseHeadersToAdd: HeaderOption[];
  readonly responseHeadersToRemove: string[];
}

/**
 * `headers` as the Go mesh's TranslateHeadersOperations: `set` then `add`, each sorted by name,
 * then the removals; `:authority` or `host` in the request's set (else add) is the authority,
 * which the route turns into a host rewrite; no pseudo-header or host is mutated.
 */
function headerOps(h: Headers | undefined): { fields: HeaderFields; authority?: string } {
  const options = (ops: HeaderOperations | undefined) => {
    const entries = (map: Readonly<Record<string, string>> | undefined, appendAction: HeaderValueOption_HeaderAppendAction) =>
      Object.entries(map ?? {})
        .filter(([key]) => !isInternalHeader(key))
        .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
        .map(([key, value]) => ({ header: { key, value }, appendAction }));
    return [...entries(ops?.set, HeaderValueOption_HeaderAppendAction.OVERWRITE_IF_EXISTS_OR_ADD), ...entries(ops?.add, HeaderValueOption_HeaderAppendAction.APPEND_IF_EXISTS_OR_ADD)];
  };
  const authorityIn = (map: Readonly<Record<string, string>> | undefined) => Object.entries(map ?? {}).filter(([k]) => isAuthorityHeader(k)).at(-1)?.[1];
  const authority = authorityIn(h?.request?.set) ?? authorityIn(h?.request?.add);
  return {
    fields: {
      requestHeadersToAdd: options(h?.request),
      requestHeadersToRemove: (h?.request?.remove ?? []).filter((k) => !isInternalHeader(k)),
      responseHeadersToAdd: options(h?.response),
      responseHeadersToRemove: (h?.response?.remove ?? []).filter((k) => !isInternalHeader(k)),
    },
    ...(authority ? { authority } : {}),
  };
}

/**
 * A weighted destination: its cluster and weight, and its own `headers` as the cluster's mutations
 * and host rewrite (as the Go mesh's processWeightedDestination); the route's apply after them.
 */
function clusterWeight(cluster: string, d: NonNullable<HttpRouteSpec['route']>[number]) {
  const ops = d.headers ? headerOps(d.headers) : undefined;
  return {
    name: cluster,
    weight: d.weight ?? 0,
    ...ops?.fields,
    ...(ops?.authority ? { hostRewriteSpecifier: { case: 'hostRewriteLiteral' as const, value: ops.authority } } : {}),
  };
}

/** The route's own header operations, then its only destination's (weighted destinations carry their own: clusterWeight). */
function routeHeaders(r: HttpRouteSpec): { fields: HeaderFields; authority?: string } {
  const own = headerOps(r.headers);
  const dests = r.route ?? [];
  if (dests.length !== 1 || !dests[0]!.headers) return own;
  const dest = headerOps(dests[0]!.headers);
  const authority = own.authority ?? dest.authority;
  return {
    fields: {
      requestHeadersToAdd: [...own.fields.requestHeadersToAdd, ...dest.fields.requestHeadersToAdd],
      requestHeadersToRemove: [...own.fields.requestHeadersToRemove, ...dest.fields.requestHeadersToRemove],
      responseHeadersToAdd: [...own.fields.responseHeadersToAdd, ...dest.fields.responseHeadersToAdd],
      responseHeadersToRemove: [...own.fields.responseHeadersToRemove, ...dest.fields.responseHeadersToRemove],
    },
    ...(authority ? { authority } : {}),
  };
}

/**
 * A route's retry policy from its `retries` (undefined: the Go mesh's default policy, which the
 * default route of a service without a VirtualService carries too); undefined for `attempts: 0`.
 * `hashed`: the destination balances by consistent hash.
 */
export function retryPolicy(r: HttpRouteSpec['retries'], hashed: boolean): NonNullable<Extract<RouteInit['action'], { case: 'route' }>['value']>['retryPolicy'] | undefined {
  const attempts = r?.attempts ?? DEFAULT_ATTEMPTS;
  if (attempts === 0) return undefined;
  // Status codes in retryOn are retriable codes, the rest Envoy's retry conditions.
  const parts = (r?.retryOn ?? DEFAULT_RETRY_ON).split(',').map((p) => p.trim()).filter((p) => p !== '');
  const codes = parts.filter((p) => /^\d+$/.test(p)).map(Number);
  const conditions = parts.filter((p) => !/^\d+$/.test(p));
  if (codes.length > 0 && !conditions.includes('retriable-status-codes')) conditions.push('retriable-status-codes');
  return {
    retryOn: conditions.join(','),
    numRetries: attempts,
    ...(r?.perTryTimeout ? { perTryTimeout: duration(r.perTryTimeout) } : {}),
    retriableStatusCodes: r?.retryOn === undefined ? [503] : codes,
    // Retries avoid the hosts tried before unless the destination hashes, or the route says either way.
    ...((r?.retryIgnorePreviousHosts ?? !hashed) ? { retryHostPredicate: [PREVIOUS_HOSTS] } : {}),
    ...(r?.retryRemoteLocalities ? { retryPriority: PREVIOUS_PRIORITIES } : {}),
    ...(r?.backoff ? { retryBackOff: { baseInterval: duration(r.backoff) } } : {}),
    hostSelectionRetryMaxAttempts: HOST_SELECTION_RETRY_MAX_ATTEMPTS,
  };
}

/**
 * As the Go mesh's TranslateFault: a delay without `percentage` takes the deprecated whole
 * `percent` (0 when unset: no request is delayed), an abort without one aborts no request (as the
 * API documents both).
 */
function faultConfig(f: NonNullable<HttpRouteSpec['fault']>): Any {
  const grpc = f.abort?.grpcStatus !== undefined ? GRPC_CODES.indexOf(f.abort.grpcStatus) : -1;
  const delayShare = (d: NonNullable<NonNullable<HttpRouteSpec['fault']>['delay']>) => (d.percentage ? fraction(d.percentage) : { numerator: d.percent ?? 0, denominator: FractionalPercent_DenominatorType.HUNDRED });
  return pack(HTTPFaultSchema, {
    ...(f.delay?.fixedDelay ? { delay: { faultDelaySecifier: { case: 'fixedDelay', value: duration(f.delay.fixedDelay) }, percentage: delayShare(f.delay) } } : {}),
    ...(f.abort
      ? {
          abort: {
            errorType: grpc >= 0 ? { case: 'grpcStatus' as const, value: grpc } : { case: 'httpStatus' as const, value: f.abort.httpStatus ?? 0 },
            ...(f.abort.percentage ? { percentage: fraction(f.abort.percentage) } : {}),
          },
        }
      : {}),
  });
}

function corsConfig(c: NonNullable<HttpRouteSpec['corsPolicy']>): Any {
  return pack(CorsPolicySchema, {
    allowOriginStringMatch: (c.allowOrigins ?? c.allowOrigin?.map((exact): StringMatch => ({ exact })) ?? []).map((o) =>
      o.exact !== undefined
        ? { matchPattern: { case: 'exact' as const, value: o.exact } }
        : o.prefix !== undefined
          ? { matchPattern: { case: 'prefix' as const, value: o.prefix } }
          : { matchPattern: { case: 'safeRegex' as const, value: { regex: o.regex ?? '' } } },
    ),
    allowMethods: (c.allowMethods ?? []).join(','),
    allowHeaders: (c.allowHeaders ?? []).join(','),
    exposeHeaders: (c.exposeHeaders ?? []).join(','),
    maxAge: c.maxAge ? String(parseDuration(c.maxAge) / 1_000_000_000n) : '',
    ...(c.allowCredentials !== undefined ? { allowCredentials: c.allowCredentials } : {}),
    // As the Go mesh: a preflight no origin matches goes on to the app unless the policy says IGNORE.
    forwardNotMatchingPreflights: c.unmatchedPreflights !== 'IGNORE',
    filterEnabled: { defaultValue: { numerator: 100, denominator: FractionalPercent_DenominatorType.HUNDRED } },
  });
}

/**
 * A sidecar's or gateway's route timeout, as the Go mesh sets it: max_grpc_timeout equal to it, so
 * that a gRPC client's grpc-timeout is the deadline the proxy enforces, capped by the route
 * timeout unless that is 0.
 */
export function routeTimeouts(timeout: { seconds: bigint; nanos: number }): { timeout: typeof timeout; maxGrpcTimeout: typeof timeout } {
  return { timeout, maxGrpcTimeout: timeout };
}

function forwardAction(r: HttpRouteSpec, ctx: HttpRouteContext, headerAuthority: string | undefined): RouteInit['action'] {
  const dests = (r.route ?? []).map((d) => ({ ...ctx.resolve(d.destination), weight: d.weight }));
  const first = dests[0];
  const timeout = r.timeout !== undefined ? duration(r.timeout) : seconds(ctx.defaultTimeout ?? 0);
  const retries = retryPolicy(r.retries ?? ctx.defaultRetries, (first?.hashPolicy.length ?? 0) > 0);
  const rw = r.rewrite;
  // rewrite.authority, else the authority the headers set (the route's, else its destination's).
  const authority = rw?.authority || headerAuthority;
  return {
    case: 'route',
    value: {
      clusterSpecifier:
        dests.length === 1
          ? { case: 'cluster', value: first!.cluster }
          : { case: 'weightedClusters', value: { clusters: (r.route ?? []).map((d, i) => clusterWeight(dests[i]!.cluster, d)) } },
      ...routeTimeouts(timeout),
      ...(retries ? { retryPolicy: retries } : {}),
      ...(rw?.uri !== undefined ? { prefixRewrite: rw.uri } : {}),
      ...(rw?.uriRegexRewrite ? { regexRewrite: { pattern: { regex: rw.uriRegexRewrite.match }, substitution: rw.uriRegexRewrite.rewrite } } : {}),
      ...(authority ? { hostRewriteSpecifier: { case: 'hostRewriteLiteral' as const, value: authority } } : {}),
      // The hash policy of the first destination's rule: weighted targets hash alike.
      hashPolicy: [...(first?.hashPolicy ?? [])],
      requestMirrorPolicies: mirrorPolicies(r, ctx),
    },
  };
}

/**
 * A redirect's port, as the Go mesh's: `port`, or with `derivePort: FROM_REQUEST_PORT` the port
 * the routes serve (Envoy cannot derive it per request; FROM_PROTOCOL_DEFAULT is Envoy's own
 * behaviour, no port); none when it is the scheme's default (80 for http, 443 for https).
 */
function redirectPort(rd: NonNullable<HttpRouteSpec['redirect']>, ctx: HttpRouteContext): { portRedirect?: number } {
  const port = rd.port ?? (rd.derivePort === 'FROM_REQUEST_PORT' ? ctx.port : undefined);
  if (!port) return {};
  const scheme = rd.scheme || (ctx.tls ? 'https' : 'http');
  if ((port === 80 && scheme === 'http') || (port === 443 && scheme === 'https')) return {};
  return { portRedirect: port };
}

function action(r: HttpRouteSpec, ctx: HttpRouteContext, headerAuthority: string | undefined): RouteInit['action'] {
  if (r.redirect) {
    const rd = r.redirect;
    return {
      case: 'redirect',
      value: {
        ...(rd.uri ? { pathRewriteSpecifier: { case: 'pathRedirect' as const, value: rd.uri } } : {}),
        ...(rd.authority ? { hostRedirect: rd.authority } : {}),
        ...redirectPort(rd, ctx),
        ...(rd.scheme ? { schemeRewriteSpecifier: { case: 'schemeRedirect' as const, value: rd.scheme } } : {}),
        responseCode: REDIRECT_CODES[rd.redirectCode ?? 301] ?? RedirectAction_RedirectResponseCode.MOVED_PERMANENTLY,
      },
    };
  }
  if (r.directResponse) {
    const body = r.directResponse.body;
    const specifier = body?.string !== undefined ? { case: 'inlineString' as const, value: body.string } : body?.bytes !== undefined ? { case: 'inlineBytes' as const, value: Buffer.from(body.bytes, 'base64') } : undefined;
    return { case: 'directResponse', value: { status: r.directResponse.status, ...(specifier ? { body: { specifier } } : {}) } };
  }
  return forwardAction(r, ctx, headerAuthority);
}

/**
 * The Envoy routes of one HTTP route: one per match condition that applies here (none applying =
 * no route), or one matching everything when it has no conditions. Order is kept: first match wins.
 * Envoy answers 404 to a request no route matches, as it does for the Go mesh's routes. A
 * condition's statPrefix is its own route's stat_prefix, as the Go mesh's TranslateRoute sets it.
 */
export function buildHttpRoutes(r: HttpRouteSpec, ctx: HttpRouteContext): RouteInit[] {
  // Nothing to do (a `delegate`, not effective yet and reported): no route rather than an invalid one.
  if (!r.redirect && !r.directResponse && (r.route ?? []).length === 0) return [];
  const conditions = r.match && r.match.length > 0 ? r.match.filter((m) => httpMatchApplies(m, ctx)) : [undefined];
  if (conditions.length === 0) return [];
  const perFilter: Record<string, Any> = {
    ...(r.fault ? { [FAULT_FILTER_NAME]: faultConfig(r.fault) } : {}),
    ...(r.corsPolicy ? { [CORS_FILTER_NAME]: corsConfig(r.corsPolicy) } : {}),
  };
  const headers = routeHeaders(r);
  const shared: Omit<RouteInit, 'match' | 'name'> = {
    action: action(r, ctx, headers.authority),
    typedPerFilterConfig: perFilter,
    ...headers.fields,
  };
  return conditions.map((m) => ({
    name: m?.name ? `${r.name ?? ''}.${m.name}` : (r.name ?? ''),
    match: routeMatch(m, ctx.segmentPrefix),
    ...(m?.statPrefix ? { statPrefix: m.statPrefix } : {}),
    ...shared,
  }));
}
