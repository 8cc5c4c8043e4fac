// Envoy's common matchers (envoy.type.matcher.v3 and config.route.v3.HeaderMatcher), compiled once
// per config into plain predicates. The RBAC filter and the router share them, so a header or a
// path matches the same way wherever it appears.
import { readFileSync } from 'node:fs';
import { BlockList, isIPv4, isIPv6 } from 'node:net';
import type { JsonObject, JsonValue } from '@bufbuild/protobuf';
import type { RE2JS } from 're2js';
import { onFirstUse } from '../common/lazy-require.js';
import type { FractionalPercent } from '../gen/envoy/type/v3/percent_pb.js';
import type { CidrRange } from '../gen/envoy/config/core/v3/address_pb.js';
import type { DataSource } from '../gen/envoy/config/core/v3/base_pb.js';
import type { HeaderMatcher } from '../gen/envoy/config/route/v3/route_components_pb.js';
import type { MetadataMatcher } from '../gen/envoy/type/matcher/v3/metadata_pb.js';
import type { RegexMatcher } from '../gen/envoy/type/matcher/v3/regex_pb.js';
import type { StringMatcher } from '../gen/envoy/type/matcher/v3/string_pb.js';
import type { ValueMatcher } from '../gen/envoy/type/matcher/v3/value_pb.js';
import { ConfigError } from './config-error.js';

/** Dynamic metadata of a request: filter name -> struct (google.protobuf.Struct as JSON). */
export type DynamicMetadata = Record<string, JsonObject>;

/** Returns all values of a header joined with ',' (Envoy's view of a repeated header), or undefined. */
export type HeaderGetter = (lowerCaseName: string) => string | undefined;

export type Predicate<T> = (value: T) => boolean;

const DENOMINATORS = [100, 10_000, 1_000_000];

/** A FractionalPercent as a share in [0, 1] (0 when unset, its proto default). */
export function fractionOf(p: FractionalPercent | undefined): number {
  if (!p) return 0;
  return Math.min(1, p.numerator / (DENOMINATORS[p.denominator] ?? 100));
}

/** A compiled RE2 pattern: whole-input matching (Envoy's safe_regex) and substitution. */
export interface SafeRegex {
  /** Whether the pattern matches the whole input. */
  test(input: string): boolean;
  /** Every match in `input` replaced by `substitution`, whose `\N` names capture group N (RE2's spelling). */
  replaceAll(input: string, substitution: string): string;
}

/** RE2's `\N` group references as the engine's `$N`; a literal `$` is escaped. */
function re2Substitution(s: string): string {
  return s.replace(/\\(\d)|\\\\|\$/g, (m, d: string | undefined) => (d !== undefined ? `$${d}` : m === '$' ? '$$' : '\\'));
}

/**
 * What the Go mesh writes for "present" (`.+`) and "anything" (`.*`), decided without running the
 * engine: RE2's `.` is any character but a newline, and a match is of the whole input.
 */
const WHOLE_LINE: ReadonlyMap<string, Predicate<string>> = new Map([
  ['.+', (s: string) => s.length > 0 && !s.includes('\n')],
  ['.*', (s: string) => !s.includes('\n')],
]);

const re2js = onFirstUse((req) => (req('re2js') as { RE2JS: typeof RE2JS }).RE2JS);

/**
 * An RE2 pattern compiled by re2js, a pure-JavaScript port of RE2. re2js is loaded by the first
 * pattern that needs the engine (about 0.5 MiB of heap and 2.7 MiB of RSS in a bare Node): a
 * proxy whose config has none, or only the Go mesh's `.+` and `.*`, never loads it.
 */
function re2Compile(pattern: string, field: string): RE2JS {
  try {
    return re2js().compile(pattern);
  } catch (e) {
    throw new ConfigError(field, `invalid regex ${JSON.stringify(pattern)}: ${(e as Error).message}`);
  }
}

/**
 * An RE2 pattern: matching is linear in the input, so no pattern or request can make the proxy
 * backtrack for ever (ReDoS), and the syntax is RE2's own (as Envoy's), not JavaScript's.
 */
export function compileRegex(pattern: string, field: string): SafeRegex {
  const whole = WHOLE_LINE.get(pattern);
  let re = whole ? undefined : re2Compile(pattern, field);
  const engine = (): RE2JS => (re ??= re2Compile(pattern, field));
  return {
    test: whole ?? ((input) => engine().matches(input)),
    replaceAll: (input, substitution) => engine().matcher(input).replaceAll(re2Substitution(substitution)),
  };
}

function regexOf(m: RegexMatcher | undefined, field: string): SafeRegex {
  if (!m) throw new ConfigError(field, 'safe_regex is required');
  return compileRegex(m.regex, `${field}.regex`);
}

/** envoy.type.matcher.v3.StringMatcher; ignore_case applies to all but safe_regex. */
export function compileStringMatcher(m: StringMatcher | undefined, field: string): Predicate<string> {
  if (!m) throw new ConfigError(field, 'a StringMatcher is required');
  const p = m.matchPattern;
  const fold = m.ignoreCase && p.case !== 'safeRegex';
  const norm = (s: string): string => (fold ? s.toLowerCase() : s);
  switch (p.case) {
    case 'exact': {
      const want = norm(p.value);
      return (s) => norm(s) === want;
    }
    case 'prefix': {
      const want = norm(p.value);
      return (s) => norm(s).startsWith(want);
    }
    case 'suffix': {
      const want = norm(p.value);
      return (s) => norm(s).endsWith(want);
    }
    case 'contains': {
      const want = norm(p.value);
      return (s) => norm(s).includes(want);
    }
    case 'safeRegex': {
      const re = regexOf(p.value, `${field}.safe_regex`);
      return (s) => re.test(s);
    }
    default:
      throw new ConfigError(field, `match pattern ${p.case ?? '(none)'} is not supported (expected exact, prefix, suffix, contains or safe_regex)`);
  }
}

/** config.route.v3.HeaderMatcher with Envoy's rules for a missing header, invert_match and ranges. */
export function compileHeaderMatcher(h: HeaderMatcher, field: string): Predicate<HeaderGetter> {
  const name = h.name.toLowerCase();
  if (!name) throw new ConfigError(`${field}.name`, 'a header name is required');
  const spec = h.headerMatchSpecifier;
  const isPresent = spec.case === 'presentMatch' || spec.case === undefined;
  const present = spec.case === 'presentMatch' ? spec.value : true;
  let test: Predicate<string>;
  switch (spec.case) {
    case undefined:
    case 'presentMatch':
      test = () => present;
      break;
    case 'exactMatch': {
      const want = spec.value;
      test = (v) => want === '' || v === want;
      break;
    }
    case 'prefixMatch': {
      const want = spec.value;
      test = (v) => v.startsWith(want);
      break;
    }
    case 'suffixMatch': {
      const want = spec.value;
      test = (v) => v.endsWith(want);
      break;
    }
    case 'containsMatch': {
      const want = spec.value;
      test = (v) => v.includes(want);
      break;
    }
    case 'safeRegexMatch': {
      const re = regexOf(spec.value, `${field}.safe_regex_match`);
      test = (v) => re.test(v);
      break;
    }
    case 'stringMatch':
      test = compileStringMatcher(spec.value, `${field}.string_match`);
      break;
    case 'rangeMatch': {
      const { start, end } = spec.value;
      test = (v) => /^[+-]?\d+$/.test(v) && BigInt(v) >= start && BigInt(v) < end;
      break;
    }
    default:
      throw new ConfigError(field, `header match ${(spec as { case: string }).case} is not supported`);
  }
  const { invertMatch, treatMissingHeaderAsEmpty } = h;
  return (get) => {
    const value = get(name);
    if (value === undefined && !treatMissingHeaderAsEmpty) {
      // A missing header only ever satisfies a presence test (present_match: false, or inverted true).
      return isPresent && (invertMatch ? present : !present);
    }
    return test(value ?? '') !== invertMatch;
  };
}

/** Follows `path` (struct keys) into the metadata of `filter`; undefined when any step is missing. */
export function metadataValue(md: DynamicMetadata, filter: string, path: readonly string[]): JsonValue | undefined {
  // Own properties only: a claim named `constructor` or `__proto__` must not find Object's.
  if (!Object.hasOwn(md, filter)) return undefined;
  let cur: JsonValue | undefined = md[filter];
  for (const key of path) {
    if (cur === null || typeof cur !== 'object' || Array.isArray(cur) || !Object.hasOwn(cur, key)) return undefined;
    cur = (cur as JsonObject)[key];
  }
  return cur;
}

/** envoy.type.matcher.v3.ValueMatcher against a JSON value (undefined = not set). */
export function compileValueMatcher(m: ValueMatcher | undefined, field: string): Predicate<JsonValue | undefined> {
  if (!m) throw new ConfigError(field, 'a ValueMatcher is required');
  const p = m.matchPattern;
  switch (p.case) {
    case 'nullMatch':
      return (v) => v === null;
    case 'doubleMatch': {
      const d = p.value.matchPattern;
      if (d.case === 'exact') {
        const want = d.value;
        return (v) => typeof v === 'number' && v === want;
      }
      if (d.case === 'range') {
        const { start, end } = d.value;
        return (v) => typeof v === 'number' && v >= start && v < end;
      }
      throw new ConfigError(`${field}.double_match`, 'exact or range is required');
    }
    case 'stringMatch': {
      const s = compileStringMatcher(p.value, `${field}.string_match`);
      return (v) => typeof v === 'string' && s(v);
    }
    case 'boolMatch': {
      const want = p.value;
      return (v) => v === want;
    }
    case 'presentMatch': {
      const want = p.value;
      return (v) => want && v !== undefined;
    }
    case 'listMatch': {
      const lm = p.value.matchPattern;
      if (lm.case !== 'oneOf') throw new ConfigError(`${field}.list_match`, 'one_of is required');
      const one = compileValueMatcher(lm.value, `${field}.list_match.one_of`);
      return (v) => Array.isArray(v) && v.some((e) => one(e));
    }
    case 'orMatch': {
      const any = p.value.valueMatchers.map((vm, i) => compileValueMatcher(vm, `${field}.or_match.value_matchers[${i}]`));
      return (v) => any.some((f) => f(v));
    }
    default:
      throw new ConfigError(field, 'a match pattern is required');
  }
}

/** envoy.type.matcher.v3.MetadataMatcher against the request's dynamic metadata. */
export function compileMetadataMatcher(m: MetadataMatcher, field: string): Predicate<DynamicMetadata> {
  if (!m.filter) throw new ConfigError(`${field}.filter`, 'a filter name is required');
  const path = m.path.map((seg, i) => {
    if (seg.segment.case !== 'key') throw new ConfigError(`${field}.path[${i}]`, 'a key is required');
    return seg.segment.value;
  });
  const value = compileValueMatcher(m.value, `${field}.value`);
  const { filter, invert } = m;
  return (md) => value(metadataValue(md, filter, path)) !== invert;
}

/** Strips the IPv4-mapped IPv6 form Node reports on dual-stack sockets (::ffff:10.0.0.1). */
export function normalizeIp(ip: string): string {
  return ip.startsWith('::ffff:') && isIPv4(ip.slice(7)) ? ip.slice(7) : ip;
}

/** config.core.v3.CidrRange; an unset prefix_len is 0 (the whole address family), as in Envoy. */
export function compileCidr(c: CidrRange | undefined, field: string): Predicate<string> {
  if (!c) throw new ConfigError(field, 'a CidrRange is required');
  const prefix = normalizeIp(c.addressPrefix);
  const family = isIPv4(prefix) ? 'ipv4' : isIPv6(prefix) ? 'ipv6' : undefined;
  if (!family) throw new ConfigError(`${field}.address_prefix`, `${JSON.stringify(c.addressPrefix)} is not an IP address`);
  const len = c.prefixLen ?? 0;
  const max = family === 'ipv4' ? 32 : 128;
  if (len > max) throw new ConfigError(`${field}.prefix_len`, `${len} is larger than ${max}`);
  const list = new BlockList();
  list.addSubnet(prefix, len, family);
  return (ip) => {
    const addr = normalizeIp(ip);
    const fam = isIPv4(addr) ? 'ipv4' : isIPv6(addr) ? 'ipv6' : undefined;
    return fam === family && list.check(addr, fam);
  };
}

/** The bytes of a config.core.v3.DataSource, as text. */
export function readDataSource(ds: DataSource | undefined, field: string): string {
  const s = ds?.specifier;
  switch (s?.case) {
    case 'inlineString':
      return s.value;
    case 'inlineBytes':
      return Buffer.from(s.value).toString('utf8');
    case 'filename':
      try {
        return readFileSync(s.value, 'utf8');
      } catch (e) {
        throw new ConfigError(`${field}.filename`, `cannot read ${s.value}: ${(e as Error).message}`);
      }
    case 'environmentVariable': {
      const v = process.env[s.value];
      if (v === undefined) throw new ConfigError(`${field}.environment_variable`, `${s.value} is not set`);
      return v;
    }
    default:
      throw new ConfigError(field, 'a data source (inline_string, inline_bytes, filename or environment_variable) is required');
  }
}
