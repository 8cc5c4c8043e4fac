// Envoy's uri_template path matcher (envoy.extensions.path.match.uri_template.v3), which RBAC
// permissions use for AuthorizationPolicy path templates: `*` is one path segment, `**` zero or
// more segments (the last operator), `{name}` / `{name=*}` / `{name=**}` the same, named.
import type { TypedExtensionConfig } from '../gen/envoy/config/core/v3/extension_pb.js';
import { UriTemplateMatchConfigSchema } from '../gen/envoy/extensions/path/match/uri_template/v3/uri_template_match_pb.js';
import { ConfigError } from './config-error.js';
import type { Predicate } from './matchers.js';
import { typeUrlOf, unpack } from './types.js';

/** RFC 3986 pchar, which a literal and a matched segment consist of. */
const PCHAR = "[a-zA-Z0-9\\-._~%!$&'()+,;:@=]";
const ONE_SEGMENT = `${PCHAR}+`;
const ANY_SEGMENTS = `(?:${PCHAR}|/)*`;
const LITERAL = new RegExp(`^${PCHAR}*$`);

function operator(op: string): string | undefined {
  const named = /^\{[a-zA-Z][a-zA-Z0-9_]*(?:=(\*\*?))?\}$/.exec(op);
  const glob = named ? (named[1] ?? '*') : op;
  return glob === '*' ? ONE_SEGMENT : glob === '**' ? ANY_SEGMENTS : undefined;
}

/** A path template as a whole-path regular expression; throws a message naming what is wrong. */
export function uriTemplateRegex(template: string): RegExp {
  if (!template.startsWith('/') || template.length > 256) throw new Error(`path template ${JSON.stringify(template)} must start with "/" and be at most 256 characters`);
  let sawAny = false;
  const parts = template.slice(1).split('/').map((segment) => {
    const op = operator(segment);
    if (op !== undefined) {
      if (sawAny) throw new Error(`path template ${JSON.stringify(template)}: "**" must be the last operator`);
      sawAny = op === ANY_SEGMENTS;
      return op;
    }
    if (!LITERAL.test(segment)) throw new Error(`path template ${JSON.stringify(template)}: segment ${JSON.stringify(segment)} is neither a literal nor an operator`);
    return segment.replace(/[.+()$]/g, '\\$&');
  });
  return new RegExp(`^/${parts.join('/')}$`);
}

/** The uri_template extension of an RBAC permission, compiled into a predicate on the path (query excluded). */
export function compileUriTemplate(ext: TypedExtensionConfig, field: string): Predicate<string> {
  const any = ext.typedConfig;
  if (!any || any.typeUrl !== typeUrlOf(UriTemplateMatchConfigSchema)) {
    throw new ConfigError(`${field}.typed_config`, `expected ${typeUrlOf(UriTemplateMatchConfigSchema)}`);
  }
  const { pathTemplate } = unpack(any, UriTemplateMatchConfigSchema);
  let re: RegExp;
  try {
    re = uriTemplateRegex(pathTemplate);
  } catch (e) {
    throw new ConfigError(`${field}.typed_config.path_template`, (e as Error).message);
  }
  return (path) => re.test(path);
}
