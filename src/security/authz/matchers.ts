// Envoy matchers for the policy value syntax shared by every AuthorizationPolicy field:
// `exact`, `prefix*`, `*suffix` and `*` (any non-empty value), as a production mesh interprets it.
import { create, type MessageInitShape } from '@bufbuild/protobuf';
import { isIP } from 'node:net';
import { StringMatcherSchema, type StringMatcher } from '../../gen/envoy/type/matcher/v3/string_pb.js';
import { MetadataMatcherSchema, type MetadataMatcher } from '../../gen/envoy/type/matcher/v3/metadata_pb.js';
import type { ValueMatcherSchema } from '../../gen/envoy/type/matcher/v3/value_pb.js';
import { CidrRangeSchema, type CidrRange } from '../../gen/envoy/config/core/v3/address_pb.js';
import { HeaderMatcherSchema, type HeaderMatcher } from '../../gen/envoy/config/route/v3/route_components_pb.js';
import { TypedExtensionConfigSchema, type TypedExtensionConfig } from '../../gen/envoy/config/core/v3/extension_pb.js';
import { UriTemplateMatchConfigSchema } from '../../gen/envoy/extensions/path/match/uri_template/v3/uri_template_match_pb.js';
import { JWT_AUTHN_FILTER_NAME } from '../../envoy/names.js';
import { pack } from '../../envoy/types.js';
import { uriTemplateRegex } from '../../envoy/uri-template.js';
import { JWT_PAYLOAD_METADATA_KEY } from '../authn/names.js';

/** A policy value that cannot be translated; the message names the value and what is expected. */
export class TranslationError extends Error {}

/** Escapes a literal for RE2 (Envoy's safe_regex); the result is also a valid JavaScript pattern. */
export function quoteRegex(literal: string): string {
  return literal.replace(/[\\.+*?()|[\]{}^$]/g, '\\$&');
}

function sm(pattern: MessageInitShape<typeof StringMatcherSchema>['matchPattern'], ignoreCase = false): StringMatcher {
  return create(StringMatcherSchema, { matchPattern: pattern, ignoreCase });
}

export function regexMatcher(regex: string): StringMatcher {
  return sm({ case: 'safeRegex', value: { regex } });
}

/**
 * The value syntax as a StringMatcher. `prefix` is prepended to the value (e.g. `spiffe://` for
 * principals) so that `*suffix` and `prefix*` still require it.
 */
export function stringMatcher(value: string, opts: { prefix?: string; ignoreCase?: boolean } = {}): StringMatcher {
  const prefix = opts.prefix ?? '';
  const ignoreCase = opts.ignoreCase ?? false;
  // `*` is any non-empty value; the prefix is not required (the production mesh does the same).
  if (value === '*') return regexMatcher('.+');
  if (value.startsWith('*')) {
    const suffix = value.slice(1);
    return prefix === '' ? sm({ case: 'suffix', value: suffix }, ignoreCase) : regexMatcher(`${quoteRegex(prefix)}.*${quoteRegex(suffix)}`);
  }
  if (value.endsWith('*')) return sm({ case: 'prefix', value: prefix + value.slice(0, -1) }, ignoreCase);
  return sm({ case: 'exact', value: prefix + value }, ignoreCase);
}

/** A header matcher: `*` means "present" (any value, even empty), as for request headers. */
export function headerMatcher(name: string, value: string, ignoreCase = false): HeaderMatcher {
  if (value === '*') return create(HeaderMatcherSchema, { name, headerMatchSpecifier: { case: 'presentMatch', value: true } });
  return create(HeaderMatcherSchema, { name, headerMatchSpecifier: { case: 'stringMatch', value: stringMatcher(value, { ignoreCase }) } });
}

/** `10.0.0.0/8`, `10.1.2.3` (a /32) or an IPv6 equivalent. */
export function cidrRange(value: string): CidrRange {
  const [address, len, extra] = value.split('/');
  const family = isIP(address ?? '');
  const max = family === 4 ? 32 : 128;
  const prefixLen = len === undefined ? max : Number(len);
  if (family === 0 || extra !== undefined || !Number.isInteger(prefixLen) || prefixLen < 0 || prefixLen > max || len === '') {
    throw new TranslationError(`"${value}" is not an IP address or CIDR range (expected e.g. 10.0.0.0/8 or 10.0.0.1)`);
  }
  return create(CidrRangeSchema, { addressPrefix: address!, prefixLen });
}

export function port(value: string): number {
  const n = Number(value);
  if (!/^\d+$/.test(value) || n < 0 || n > 65535) throw new TranslationError(`"${value}" is not a port (expected an integer 0-65535)`);
  return n;
}

/** A matcher on the jwt_authn payload in dynamic metadata, at `path` below the payload. */
export function payloadMatcher(path: readonly string[], value: MessageInitShape<typeof ValueMatcherSchema>['matchPattern']): MetadataMatcher {
  return create(MetadataMatcherSchema, {
    filter: JWT_AUTHN_FILTER_NAME,
    path: [JWT_PAYLOAD_METADATA_KEY, ...path].map((key) => ({ segment: { case: 'key' as const, value: key } })),
    value: { matchPattern: value },
  });
}

/** A claim that is either a string or a list of strings matches when it (or one element) matches. */
export function claimMatcher(path: readonly string[], value: string): MetadataMatcher {
  const str = stringMatcher(value);
  return payloadMatcher(path, {
    case: 'orMatch',
    value: {
      valueMatchers: [
        { matchPattern: { case: 'listMatch', value: { matchPattern: { case: 'oneOf', value: { matchPattern: { case: 'stringMatch', value: str } } } } } },
        { matchPattern: { case: 'stringMatch', value: str } },
      ],
    },
  });
}

/** Principals are SPIFFE identities without the scheme: `<trust-domain>/ns/<ns>/sa/<sa>`. */
export function spiffePrincipalMatcher(value: string): StringMatcher {
  return stringMatcher(value, { prefix: 'spiffe://' });
}

/**
 * A namespace inside the peer's identity, as the production mesh matches it: the regex
 * `.*` + `/ns/<ns>/` + `.*`, each `*` of the value as `.*`, so SPIFFE ids with extra path segments
 * (`spiffe://td/ns/prod/sa/x/extra`, `spiffe://td/cluster/c1/ns/prod/sa/x`) match too.
 */
export function spiffeNamespaceMatcher(value: string): StringMatcher {
  return regexMatcher(`.*/ns/${value.split('*').map(quoteRegex).join('.*')}/.*`);
}

/** A request principal `<iss>/<sub>` as matchers for the token's `iss` and `sub`. */
export interface IssSub {
  iss: StringMatcher;
  sub: StringMatcher;
}

const ANY = regexMatcher('.+');
const exact = (v: string) => sm({ case: 'exact', value: v });

/**
 * The value is split at its LAST `/` (issuers are URLs, subjects have no `/`): issuer before,
 * subject after. `*` is a wildcard only as the whole value, a leading `*` (a suffix of the issuer
 * when there is a `/`, of the subject otherwise) or a trailing `*` (a prefix of the subject when
 * there is a `/`, of the issuer otherwise); anywhere else it is a literal character. Without a `/`
 * the subject is empty, which no token has, so such a value matches nothing.
 */
export function requestPrincipalMatchers(value: string): IssSub {
  const idx = value.lastIndexOf('/');
  const found = idx >= 0;
  const iss = found ? value.slice(0, idx) : value;
  const sub = found ? value.slice(idx + 1) : '';
  if (value === '*') return { iss: ANY, sub: ANY };
  if (value.startsWith('*')) {
    if (!found) return { iss: ANY, sub: sm({ case: 'suffix', value: value.slice(1) }) };
    return { iss: iss === '*' ? ANY : sm({ case: 'suffix', value: iss.slice(1) }), sub: exact(sub) };
  }
  if (value.endsWith('*')) {
    if (!found) return { iss: sm({ case: 'prefix', value: value.slice(0, -1) }), sub: ANY };
    return { iss: exact(iss), sub: sub === '*' ? ANY : sm({ case: 'prefix', value: sub.slice(0, -1) }) };
  }
  return { iss: exact(iss), sub: exact(sub) };
}

const MATCH_ONE = '{*}';
const MATCH_ANY = '{**}';

/** Whether a path value is a template (`{*}` one segment, `{**}` any number), not the value syntax. */
export function isPathTemplate(value: string): boolean {
  return value.includes(MATCH_ONE) || value.includes(MATCH_ANY);
}

/**
 * A path template as Envoy's uri_template matcher, as the production mesh emits it: `{*}` -> `*`,
 * `{**}` -> `**`. `{**}` must be the last operator, and every other segment a literal (no other
 * `{` or `}`).
 */
export function pathTemplateMatcher(value: string): TypedExtensionConfig {
  for (const segment of value.split('/')) {
    if (segment !== MATCH_ONE && segment !== MATCH_ANY && /[{}]/.test(segment)) {
      throw new TranslationError(`"${value}" is not a path template: segment "${segment}" mixes {*} or {**} with other characters (expected whole segments {*} or {**})`);
    }
  }
  const pathTemplate = value.replaceAll(MATCH_ANY, '**').replaceAll(MATCH_ONE, '*');
  try {
    uriTemplateRegex(pathTemplate);
  } catch (e) {
    throw new TranslationError(`"${value}": ${(e as Error).message.replace(/^path template "[^"]*"(: )?/, '')}`);
  }
  return create(TypedExtensionConfigSchema, { name: 'uri-template', typedConfig: pack(UriTemplateMatchConfigSchema, { pathTemplate }) });
}
