// Envoy matchers for the policy value syntax shared by every AuthorizationPolicy field:
// `exact`, `prefix*`, `*suffix` and `*` (any non-empty value), as a production mesh interprets it.
import { create, type MessageInitShape } from '@bufbuild/protobuf';
import { isIP } from 'node:net';
import { StringMatcherSchema, type StringMatcher } from '../../gen/envoy/type/matcher/v3/string_pb.js';
import { MetadataMatcherSchema, type MetadataMatcher } from '../../gen/envoy/type/matcher/v3/metadata_pb.js';
import type { ValueMatcherSchema } from '../../gen/envoy/type/matcher/v3/value_pb.js';
import { CidrRangeSchema, type CidrRange } from '../../gen/envoy/config/core/v3/address_pb.js';
import { HeaderMatcherSchema, type HeaderMatcher } from '../../gen/envoy/config/route/v3/route_components_pb.js';
import { JWT_AUTHN_FILTER_NAME } from '../../envoy/names.js';
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
 * principals) so that `*` and `*suffix` still require it.
 */
export function stringMatcher(value: string, opts: { prefix?: string; ignoreCase?: boolean } = {}): StringMatcher {
  const prefix = opts.prefix ?? '';
  const ignoreCase = opts.ignoreCase ?? false;
  if (value === '*') return regexMatcher(`${quoteRegex(prefix)}.+`);
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

/** A namespace (with the value syntax) inside the peer's SPIFFE identity. */
export function spiffeNamespaceMatcher(value: string): StringMatcher {
  const segment = '[^/]+';
  const ns =
    value === '*' ? segment
    : value.startsWith('*') ? `[^/]*${quoteRegex(value.slice(1))}`
    : value.endsWith('*') ? `${quoteRegex(value.slice(0, -1))}[^/]*`
    : quoteRegex(value);
  return regexMatcher(`spiffe://${segment}/ns/${ns}/sa/${segment}`);
}

/** One way a request principal `<iss>/<sub>` can be split: matchers for `iss` and for `sub`. */
export interface IssSub {
  iss: StringMatcher;
  sub: StringMatcher;
}

function slashes(s: string): number[] {
  const out: number[] = [];
  for (let i = s.indexOf('/'); i !== -1; i = s.indexOf('/', i + 1)) out.push(i);
  return out;
}

const ANY = '.+';

/**
 * The request principal is `iss + "/" + sub`. Issuers are usually URLs and themselves contain `/`,
 * so splitting at one fixed `/` would misread `https://issuer.example/alice`; instead every `/` of
 * the literal part is a candidate split, and the request matches when one candidate matches. For
 * a principal with a single `/` this is exactly "split at the first `/`".
 */
export function requestPrincipalSplits(value: string): IssSub[] {
  if (value === '*') return [{ iss: regexMatcher(ANY), sub: regexMatcher(ANY) }];
  const exact = (s: string) => stringMatcher(s);
  if (value.endsWith('*')) {
    // iss + "/" + sub starts with p: either iss alone starts with p, or p = iss + "/" + (start of sub).
    const p = value.slice(0, -1);
    return [
      { iss: stringMatcher(`${p}*`), sub: regexMatcher(ANY) },
      ...slashes(p).map((k) => ({ iss: exact(p.slice(0, k)), sub: p.slice(k + 1) === '' ? regexMatcher(ANY) : stringMatcher(`${p.slice(k + 1)}*`) })),
    ];
  }
  if (value.startsWith('*')) {
    const s = value.slice(1);
    return [
      { iss: regexMatcher(ANY), sub: stringMatcher(`*${s}`) },
      ...slashes(s).map((k) => ({ iss: s.slice(0, k) === '' ? regexMatcher(ANY) : stringMatcher(`*${s.slice(0, k)}`), sub: exact(s.slice(k + 1)) })),
    ];
  }
  const splits = slashes(value).map((k) => ({ iss: exact(value.slice(0, k)), sub: exact(value.slice(k + 1)) }));
  if (splits.length === 0) throw new TranslationError(`"${value}" is not a request principal (expected <issuer>/<subject>, or * for any)`);
  return splits;
}
