// config.route.v3.RouteMatch compiled into a predicate over a request: the routes of a route
// table and the rules of jwt_authn both select requests with it.
import type { QueryParameterMatcher, RouteMatch } from '../gen/envoy/config/route/v3/route_components_pb.js';
import { ConfigError } from './config-error.js';
import { compileHeaderMatcher, compileMetadataMatcher, compileRegex, compileStringMatcher, type Predicate } from './matchers.js';
import { pathOnly, type RequestView } from './request.js';

function compileQueryMatcher(q: QueryParameterMatcher, field: string): Predicate<URLSearchParams> {
  const name = q.name;
  const spec = q.queryParameterMatchSpecifier;
  if (spec.case === 'stringMatch') {
    const m = compileStringMatcher(spec.value, `${field}.string_match`);
    return (params) => {
      const v = params.get(name);
      return v !== null && m(v);
    };
  }
  if (spec.case === 'presentMatch') {
    const want = spec.value;
    return (params) => params.has(name) === want;
  }
  throw new ConfigError(field, 'string_match or present_match is required');
}

export interface CompiledRouteMatch {
  readonly test: Predicate<RequestView>;
  readonly prefix?: string;
}

/** config.route.v3.RouteMatch: path (prefix/path/safe_regex/path_separated_prefix) and headers etc. */
export function compileRouteMatch(m: RouteMatch | undefined, field: string): CompiledRouteMatch {
  if (!m) throw new ConfigError(field, 'a match is required');
  const caseSensitive = m.caseSensitive ?? true;
  const fold = (s: string): string => (caseSensitive ? s : s.toLowerCase());
  const ps = m.pathSpecifier;
  let path: Predicate<string>;
  let prefix: string | undefined;
  switch (ps.case) {
    case 'prefix': {
      const want = fold(ps.value);
      prefix = ps.value;
      path = (p) => fold(p).startsWith(want);
      break;
    }
    case 'path': {
      const want = fold(ps.value);
      path = (p) => fold(p) === want;
      break;
    }
    case 'safeRegex': {
      const re = compileRegex(ps.value.regex, `${field}.safe_regex.regex`);
      path = (p) => re.test(p);
      break;
    }
    case 'pathSeparatedPrefix': {
      const want = fold(ps.value);
      prefix = ps.value;
      path = (p) => {
        const f = fold(p);
        return f === want || f.startsWith(`${want}/`);
      };
      break;
    }
    default:
      throw new ConfigError(field, `path specifier ${ps.case ?? '(none)'} is not supported (expected prefix, path, safe_regex or path_separated_prefix)`);
  }
  if (m.runtimeFraction || m.tlsContext) {
    throw new ConfigError(field, 'runtime_fraction and tls_context matches are not supported');
  }
  const headers = m.headers.map((h, i) => compileHeaderMatcher(h, `${field}.headers[${i}]`));
  if (m.grpc) {
    headers.push((get) => (get('content-type') ?? '').startsWith('application/grpc'));
  }
  const query = m.queryParameters.map((q, i) => compileQueryMatcher(q, `${field}.query_parameters[${i}]`));
  const metadata = m.dynamicMetadata.map((d, i) => compileMetadataMatcher(d, `${field}.dynamic_metadata[${i}]`));
  const test: Predicate<RequestView> = (req) => {
    if (!path(pathOnly(req.path))) return false;
    for (const h of headers) if (!h(req.header)) return false;
    if (query.length > 0) {
      const q = req.path.indexOf('?');
      const params = new URLSearchParams(q < 0 ? '' : req.path.slice(q + 1));
      for (const t of query) if (!t(params)) return false;
    }
    for (const md of metadata) if (!md(req.metadata)) return false;
    return true;
  };
  return prefix === undefined ? { test } : { test, prefix };
}

