// The CORS HTTP filter (envoy.filters.http.cors), driven by the CorsPolicy per-route configs of the
// request's route and virtual host, as Envoy's: each field comes from the most specific policy that
// sets it, enablement from the most specific one. A request with an allowed Origin gets
// Access-Control-Allow-Origin (and credentials, expose headers) on its response; a preflight
// (OPTIONS with Access-Control-Request-Method) is answered 200 by the proxy itself.
import { CorsPolicySchema, CorsSchema, type CorsPolicy } from '../../gen/envoy/extensions/filters/http/cors/v3/cors_pb.js';
import { CONTINUE, type FilterOutcome, type ResponseHeaderMap } from '../../envoy/filter.js';
import { compileStringMatcher, fractionOf, type Predicate } from '../../envoy/matchers.js';
import type { StreamRequest } from '../../envoy/request.js';
import { registerHttpFilter, registerPerRouteConfig } from './registry.js';

export interface CorsStats {
  origin_valid: number;
  origin_invalid: number;
}

declare module './registry.js' {
  interface HttpFilterStatsByGroup {
    cors: CorsStats;
  }
}

/** A compiled CorsPolicy; unset fields stay undefined so that a less specific policy can give them. */
interface Policy {
  readonly origins: readonly Predicate<string>[];
  readonly methods: string;
  readonly headers: string;
  readonly expose: string;
  readonly maxAge: string;
  readonly credentials?: boolean;
  readonly privateNetwork?: boolean;
  readonly forwardNotMatchingPreflights?: boolean;
  /** Share of requests the policy is enforced for (filter_enabled, 100 % when unset). */
  readonly enabled: number;
  /** Share evaluated but not enforced (shadow_enabled, 0 when unset). */
  readonly shadow: number;
}

function compilePolicy(p: CorsPolicy, field: string): Policy {
  return {
    origins: p.allowOriginStringMatch.map((m, i) => compileStringMatcher(m, `${field}.allow_origin_string_match[${i}]`)),
    methods: p.allowMethods,
    headers: p.allowHeaders,
    expose: p.exposeHeaders,
    maxAge: p.maxAge,
    ...(p.allowCredentials !== undefined ? { credentials: p.allowCredentials } : {}),
    ...(p.allowPrivateNetworkAccess !== undefined ? { privateNetwork: p.allowPrivateNetworkAccess } : {}),
    ...(p.forwardNotMatchingPreflights !== undefined ? { forwardNotMatchingPreflights: p.forwardNotMatchingPreflights } : {}),
    enabled: p.filterEnabled ? fractionOf(p.filterEnabled.defaultValue) : 1,
    shadow: p.shadowEnabled ? fractionOf(p.shadowEnabled.defaultValue) : 0,
  };
}

/** The first policy (most specific first) giving a field. */
function first<T>(policies: readonly Policy[], get: (p: Policy) => T | undefined, unset: (v: T) => boolean = () => false): T | undefined {
  for (const p of policies) {
    const v = get(p);
    if (v !== undefined && !unset(v)) return v;
  }
  return undefined;
}

const empty = (s: string | readonly unknown[]) => s.length === 0;

function decide(policies: readonly Policy[], req: StreamRequest, stats: CorsStats): FilterOutcome {
  if (policies.length === 0) return CONTINUE;
  const enabled = Math.random() < policies[0]!.enabled;
  const shadow = Math.random() < policies[0]!.shadow;
  if (!enabled && !shadow) return CONTINUE;
  const origin = req.header('origin');
  if (!origin) return CONTINUE;
  // A matcher accepting the literal "*" allows every origin, as in Envoy.
  const allowed = (first(policies, (p) => p.origins, empty) ?? []).some((m) => m('*') || m(origin));
  if (allowed) stats.origin_valid++;
  else stats.origin_invalid++;
  if (!enabled) return CONTINUE;
  const credentials = first(policies, (p) => p.credentials) ?? false;
  const isPreflight = req.method === 'OPTIONS' && !!req.header('access-control-request-method');
  if (!isPreflight) {
    if (!allowed) return CONTINUE;
    const expose = first(policies, (p) => p.expose, empty);
    return {
      kind: 'continue',
      encodeHeaders(h: ResponseHeaderMap) {
        h['access-control-allow-origin'] = origin;
        if (credentials) h['access-control-allow-credentials'] = 'true';
        if (expose) h['access-control-expose-headers'] = expose;
      },
    };
  }
  if (!allowed && (first(policies, (p) => p.forwardNotMatchingPreflights) ?? true)) return CONTINUE;
  const headers: Record<string, string> = {};
  if (allowed) headers['access-control-allow-origin'] = origin;
  if (credentials) headers['access-control-allow-credentials'] = 'true';
  const methods = first(policies, (p) => p.methods, empty);
  if (methods) headers['access-control-allow-methods'] = methods === '*' ? (req.header('access-control-request-method') ?? '') : methods;
  const allowHeaders = first(policies, (p) => p.headers, empty);
  if (allowHeaders) headers['access-control-allow-headers'] = allowHeaders === '*' ? (req.header('access-control-request-headers') ?? '') : allowHeaders;
  const maxAge = first(policies, (p) => p.maxAge, empty);
  if (maxAge) headers['access-control-max-age'] = maxAge;
  if (first(policies, (p) => p.privateNetwork) && req.header('access-control-request-private-network') === 'true') headers['access-control-allow-private-network'] = 'true';
  return { kind: 'reply', reply: { status: 200, body: '', headers, details: 'cors_response' } };
}

registerHttpFilter({
  schema: CorsSchema,
  compile(_config, name) {
    const stats: CorsStats = { origin_valid: 0, origin_invalid: 0 };
    return { filter: { name, decodeHeaders: (req, perRoute) => decide(perRoute as readonly Policy[], req, stats) }, stats: { name, cors: stats } };
  },
});

registerPerRouteConfig({ schema: CorsPolicySchema, compile: (config, field): Policy => compilePolicy(config, field) });
