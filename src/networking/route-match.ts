// A VirtualService HTTP match condition as an Envoy RouteMatch: uri (path, prefix or safe_regex,
// `ignoreUriCase`), authority/method/scheme as pseudo-headers, headers and withoutHeaders (inverted),
// queryParams. `port`, `gateways`, `sourceLabels` and `sourceNamespace` do not become Envoy matchers:
// they decide at generation time whether the condition applies to this route configuration and proxy;
// `statPrefix` is the stat_prefix of the condition's Envoy route (http-route.ts).
import type { MessageInitShape } from '@bufbuild/protobuf';
import type { HeaderMatcherSchema, QueryParameterMatcherSchema, RouteMatchSchema } from '../gen/envoy/config/route/v3/route_components_pb.js';
import type { StringMatcherSchema } from '../gen/envoy/type/matcher/v3/string_pb.js';
import { labelsMatch } from '../model/selection.js';

/** `{exact}`, `{prefix}` or `{regex}`; an empty one means "present". */
export interface StringMatch {
  readonly exact?: string;
  readonly prefix?: string;
  readonly regex?: string;
}

export interface HttpMatchRequest {
  readonly name?: string;
  readonly uri?: StringMatch;
  readonly scheme?: StringMatch;
  readonly method?: StringMatch;
  readonly authority?: StringMatch;
  readonly headers?: Readonly<Record<string, StringMatch>>;
  readonly withoutHeaders?: Readonly<Record<string, StringMatch>>;
  readonly queryParams?: Readonly<Record<string, StringMatch>>;
  readonly ignoreUriCase?: boolean;
  readonly port?: number;
  readonly sourceLabels?: Readonly<Record<string, string>>;
  readonly sourceNamespace?: string;
  /** Where the condition applies (`mesh`, Gateway names), instead of the VirtualService's `gateways`. */
  readonly gateways?: readonly string[];
  /** The stat_prefix of the condition's route: the proxy keeps route-level stats for it. */
  readonly statPrefix?: string;
}

/** Who asks: the proxy the route configuration is for, and the port it is built for. */
export interface MatchContext {
  readonly port: number;
  readonly proxyNamespace: string;
  readonly proxyLabels: Readonly<Record<string, string>>;
  /** Whether a match's `gateways` entry names what is built (a gateway's server); absent: a sidecar's, named `mesh`. */
  readonly gateway?: (entry: string) => boolean;
}

type RouteMatchInit = MessageInitShape<typeof RouteMatchSchema>;
type HeaderMatcherInit = MessageInitShape<typeof HeaderMatcherSchema>;
type StringMatcherInit = MessageInitShape<typeof StringMatcherSchema>;
type QueryMatcherInit = MessageInitShape<typeof QueryParameterMatcherSchema>;

/** Whether the condition can match on this port for this proxy (port, sourceLabels, sourceNamespace). */
export function matchApplies(m: HttpMatchRequest, ctx: MatchContext): boolean {
  if (m.port !== undefined && m.port !== ctx.port) return false;
  if (m.sourceNamespace !== undefined && m.sourceNamespace !== ctx.proxyNamespace) return false;
  return labelsMatch(m.sourceLabels, ctx.proxyLabels);
}

/**
 * Whether an HTTP condition applies, as the Go mesh decides: its port, then, when it names
 * `gateways`, only those (source labels and namespace are then not read), else its source.
 */
export function httpMatchApplies(m: HttpMatchRequest, ctx: MatchContext): boolean {
  if (m.port !== undefined && m.port !== ctx.port) return false;
  if (m.gateways && m.gateways.length > 0) return m.gateways.some((g) => (ctx.gateway ? ctx.gateway(g) : g === 'mesh'));
  return matchApplies(m, ctx);
}

function stringMatcher(m: StringMatch, ignoreCase = false): StringMatcherInit | undefined {
  const ic = ignoreCase ? { ignoreCase: true } : {};
  if (m.exact !== undefined) return { matchPattern: { case: 'exact', value: m.exact }, ...ic };
  if (m.prefix !== undefined) return { matchPattern: { case: 'prefix', value: m.prefix }, ...ic };
  if (m.regex !== undefined) return { matchPattern: { case: 'safeRegex', value: { regex: m.regex } } };
  return undefined;
}

function headerMatcher(name: string, m: StringMatch, invert: boolean): HeaderMatcherInit {
  const sm = stringMatcher(m);
  return {
    name,
    ...(invert ? { invertMatch: true } : {}),
    headerMatchSpecifier: sm ? { case: 'stringMatch', value: sm } : { case: 'presentMatch', value: true },
  };
}

function queryMatcher(name: string, m: StringMatch): QueryMatcherInit {
  const sm = stringMatcher(m);
  return { name, queryParameterMatchSpecifier: sm ? { case: 'stringMatch', value: sm } : { case: 'presentMatch', value: true } };
}

function pathSpecifier(uri: StringMatch | undefined, segmentPrefix: boolean): RouteMatchInit['pathSpecifier'] {
  if (uri?.exact !== undefined) return { case: 'path', value: uri.exact };
  if (uri?.regex !== undefined) return { case: 'safeRegex', value: { regex: uri.regex } };
  const prefix = uri?.prefix ?? '/';
  // An Ingress Prefix path matches element-wise (`/foo` matches `/foo` and `/foo/bar`, not `/foobar`), as the Go mesh translates it.
  if (segmentPrefix && prefix !== '/') return { case: 'pathSeparatedPrefix', value: prefix.replace(/\/+$/, '') };
  return { case: 'prefix', value: prefix };
}

/**
 * The Envoy match of one condition; no condition matches every request (prefix `/`).
 * `segmentPrefix`: the Ingress route semantics (a prefix matches whole path segments).
 */
export function routeMatch(m: HttpMatchRequest | undefined, segmentPrefix = false): RouteMatchInit {
  const headers: HeaderMatcherInit[] = [];
  const pseudo: Array<[string, StringMatch | undefined]> = [
    [':authority', m?.authority],
    [':method', m?.method],
    [':scheme', m?.scheme],
  ];
  for (const [name, sm] of pseudo) if (sm) headers.push(headerMatcher(name, sm, false));
  for (const [name, sm] of Object.entries(m?.headers ?? {})) headers.push(headerMatcher(name, sm, false));
  for (const [name, sm] of Object.entries(m?.withoutHeaders ?? {})) headers.push(headerMatcher(name, sm, true));
  const query = Object.entries(m?.queryParams ?? {}).map(([name, sm]) => queryMatcher(name, sm));
  return {
    pathSpecifier: pathSpecifier(m?.uri, segmentPrefix),
    ...(m?.ignoreUriCase ? { caseSensitive: false } : {}),
    headers,
    queryParameters: query,
  };
}
