// config.route.v3.RedirectAction and the route's path rewrites (prefix_rewrite, regex_rewrite),
// compiled once: a redirect answers with a Location built from the request, as Envoy does.
import type { RedirectAction } from '../gen/envoy/config/route/v3/route_components_pb.js';
import type { RegexMatchAndSubstitute } from '../gen/envoy/type/matcher/v3/regex_pb.js';
import { ConfigError } from '../envoy/config-error.js';
import { compileRegex } from '../envoy/matchers.js';
import { pathOnly, type RequestView } from '../envoy/request.js';

/** Rewrites a request path (query included) after the route matched; `matchedPrefix` for prefix_rewrite. */
export type PathRewrite = (path: string, matchedPrefix: string | undefined) => string;

/** regex_rewrite: every match in the path (not the query) substituted, the query kept. */
export function compileRegexRewrite(r: RegexMatchAndSubstitute, field: string): PathRewrite {
  if (!r.pattern) throw new ConfigError(`${field}.pattern`, 'a pattern is required');
  const re = compileRegex(r.pattern.regex, `${field}.pattern.regex`);
  const substitution = r.substitution;
  return (path) => {
    const p = pathOnly(path);
    return re.replaceAll(p, substitution) + path.slice(p.length);
  };
}

/** prefix_rewrite: the literal prefix the route matched replaced. */
export function prefixRewrite(prefix: string): PathRewrite {
  return (path, matched) => (matched === undefined ? path : prefix + path.slice(matched.length));
}

const REDIRECT_STATUS = [301, 302, 303, 307, 308];

export interface RedirectSpec {
  readonly status: number;
  /** The Location of a request's redirect. */
  location(req: RequestView, matchedPrefix: string | undefined): string;
}

function splitHostPort(authority: string): { host: string; port: string | undefined } {
  const m = /^(\[[^\]]*\]|[^:]*)(?::(\d+))?$/.exec(authority);
  return m ? { host: m[1]!, port: m[2] } : { host: authority, port: undefined };
}

export function compileRedirect(r: RedirectAction, field: string): RedirectSpec {
  const status = REDIRECT_STATUS[r.responseCode];
  if (status === undefined) throw new ConfigError(`${field}.response_code`, `unknown response code ${r.responseCode}`);
  const s = r.schemeRewriteSpecifier;
  const scheme = s.case === 'httpsRedirect' ? (s.value ? 'https' : undefined) : s.case === 'schemeRedirect' ? s.value.toLowerCase() : undefined;
  const p = r.pathRewriteSpecifier;
  let rewrite: PathRewrite | undefined;
  let pathRedirect: string | undefined;
  if (p.case === 'pathRedirect') pathRedirect = p.value;
  else if (p.case === 'prefixRewrite') rewrite = prefixRewrite(p.value);
  else if (p.case === 'regexRewrite') rewrite = compileRegexRewrite(p.value, `${field}.regex_rewrite`);
  return {
    status,
    location(req, matchedPrefix) {
      const finalScheme = scheme ?? req.scheme;
      const original = splitHostPort(req.authority);
      const target = r.hostRedirect ? splitHostPort(r.hostRedirect) : original;
      let port = r.portRedirect ? String(r.portRedirect) : r.hostRedirect ? target.port : original.port;
      // A scheme change drops the old scheme's default port, as Envoy does.
      if (!r.portRedirect && scheme !== undefined && ((finalScheme === 'https' && port === '80') || (finalScheme === 'http' && port === '443'))) port = undefined;
      let path = req.path;
      if (pathRedirect !== undefined) {
        // A path_redirect with its own query replaces the request's; without one, it keeps it.
        const q = path.indexOf('?');
        path = pathRedirect.includes('?') || q < 0 ? pathRedirect : pathRedirect + path.slice(q);
      } else if (rewrite) path = rewrite(path, matchedPrefix);
      if (r.stripQuery) path = pathOnly(path);
      return `${finalScheme}://${target.host}${port ? `:${port}` : ''}${path}`;
    },
  };
}
