// A small evaluator of Envoy's RBAC config tree (envoy.config.rbac.v3), with the semantics Envoy
// documents: a policy matches when one permission and one principal match; policies are tried in
// lexicographic order of name; ALLOW allows iff a policy matches, DENY denies iff one matches, LOG
// never denies. It evaluates the generated messages themselves, so an explanation cannot drift from
// what a proxy enforces, and the data plane can reuse it as its rbac filter.
import { BlockList, isIP } from 'node:net';
import type { Permission, Policy, Principal, RBAC as RbacRules } from '../../gen/envoy/config/rbac/v3/rbac_pb.js';
import { RBAC_Action } from '../../gen/envoy/config/rbac/v3/rbac_pb.js';
import type { RBAC } from '../../gen/envoy/extensions/filters/http/rbac/v3/rbac_pb.js';
import type { StringMatcher } from '../../gen/envoy/type/matcher/v3/string_pb.js';
import type { PathMatcher } from '../../gen/envoy/type/matcher/v3/path_pb.js';
import type { ValueMatcher } from '../../gen/envoy/type/matcher/v3/value_pb.js';
import type { MetadataMatcher } from '../../gen/envoy/type/matcher/v3/metadata_pb.js';
import type { HeaderMatcher } from '../../gen/envoy/config/route/v3/route_components_pb.js';
import type { CidrRange } from '../../gen/envoy/config/core/v3/address_pb.js';

/** What the rbac filter sees of a request. */
export interface RequestContext {
  /** Lower-case names, with the pseudo-headers `:method`, `:path` (with query) and `:authority`. */
  readonly headers: Readonly<Record<string, string | readonly string[]>>;
  /** The peer address of the connection (direct_remote_ip). */
  readonly sourceIp?: string;
  /** The original client address (remote_ip); the peer address when not behind another proxy. */
  readonly remoteIp?: string;
  readonly destinationIp?: string;
  readonly destinationPort?: number;
  readonly sni?: string;
  /** URI SAN of the verified peer certificate (`spiffe://...`); absent without mTLS. */
  readonly peerPrincipal?: string;
  /** Dynamic metadata by namespace, e.g. the jwt_authn payload. */
  readonly metadata: Readonly<Record<string, unknown>>;
}

export interface Outcome {
  readonly match: boolean;
  /** The condition that decided, in words. */
  readonly because: string;
}

const yes = (because: string): Outcome => ({ match: true, because });
const no = (because: string): Outcome => ({ match: false, because });

const regexCache = new Map<string, RegExp>();
function fullMatch(regex: string, s: string): boolean {
  let re = regexCache.get(regex);
  if (!re) {
    re = new RegExp(`^(?:${regex})$`);
    regexCache.set(regex, re);
  }
  return re.test(s);
}

export function describeString(m: StringMatcher): string {
  const ic = m.ignoreCase ? ' (ignoring case)' : '';
  const p = m.matchPattern;
  switch (p.case) {
    case 'safeRegex':
      return `regex ${JSON.stringify(p.value.regex)}`;
    case undefined:
      return 'nothing';
    case 'custom':
      return 'a custom matcher';
    default:
      return `${p.case} ${JSON.stringify(p.value)}${ic}`;
  }
}

export function matchString(m: StringMatcher, s: string): boolean {
  const p = m.matchPattern;
  const fold = (x: string) => (m.ignoreCase ? x.toLowerCase() : x);
  switch (p.case) {
    case 'exact':
      return fold(s) === fold(p.value);
    case 'prefix':
      return fold(s).startsWith(fold(p.value));
    case 'suffix':
      return fold(s).endsWith(fold(p.value));
    case 'contains':
      return fold(s).includes(fold(p.value));
    case 'safeRegex':
      return fullMatch(p.value.regex, s);
    default:
      return false;
  }
}

function inCidr(range: CidrRange | undefined, ip: string | undefined): boolean {
  if (!range || !ip) return false;
  const family = isIP(range.addressPrefix) === 6 ? 'ipv6' : 'ipv4';
  if (isIP(ip) !== (family === 'ipv6' ? 6 : 4)) return false;
  const list = new BlockList();
  list.addSubnet(range.addressPrefix, range.prefixLen ?? (family === 'ipv6' ? 128 : 32), family);
  return list.check(ip, family);
}

function cidrOutcome(what: string, range: CidrRange | undefined, ip: string | undefined): Outcome {
  const text = `${range?.addressPrefix}/${range?.prefixLen}`;
  if (!ip) return no(`${what} is unknown, required in ${text}`);
  return inCidr(range, ip) ? yes(`${what} ${ip} is in ${text}`) : no(`${what} ${ip} is not in ${text}`);
}

function headerValue(req: RequestContext, name: string): string | undefined {
  const lower = name.toLowerCase();
  const v = req.headers[lower];
  if (v === undefined) return undefined;
  return typeof v === 'string' ? v : v.join(',');
}

function matchHeader(h: HeaderMatcher, req: RequestContext): Outcome {
  const value = headerValue(req, h.name);
  const s = h.headerMatchSpecifier;
  let matched: boolean;
  let expected: string;
  if (s.case === 'presentMatch') {
    matched = (value !== undefined) === s.value;
    expected = s.value ? 'present' : 'absent';
  } else if (value === undefined) {
    matched = false;
    expected = s.case === 'stringMatch' ? `to match ${describeString(s.value)}` : 'present';
  } else {
    switch (s.case) {
      case 'stringMatch':
        matched = matchString(s.value, value);
        expected = `to match ${describeString(s.value)}`;
        break;
      case 'exactMatch':
      case 'prefixMatch':
      case 'suffixMatch':
      case 'containsMatch': {
        const kind = s.case.replace('Match', '');
        matched = matchString({ matchPattern: { case: kind, value: s.value }, ignoreCase: false } as StringMatcher, value);
        expected = `to match ${kind} ${JSON.stringify(s.value)}`;
        break;
      }
      case 'safeRegexMatch':
        matched = fullMatch(s.value.regex, value);
        expected = `to match regex ${JSON.stringify(s.value.regex)}`;
        break;
      default:
        matched = false;
        expected = 'a matcher this evaluator does not support';
    }
  }
  if (h.invertMatch) matched = !matched;
  const shown = value === undefined ? 'absent' : JSON.stringify(value);
  return { match: matched, because: `header ${h.name} ${shown}${h.invertMatch ? ' (inverted)' : ''} ${matched ? 'satisfies' : 'fails'} ${expected}` };
}

function lookupPath(root: unknown, keys: readonly string[]): unknown {
  let v = root;
  for (const k of keys) {
    if (typeof v !== 'object' || v === null || Array.isArray(v) || !Object.hasOwn(v, k)) return undefined;
    v = (v as Record<string, unknown>)[k];
  }
  return v;
}

export function matchValue(m: ValueMatcher, v: unknown): boolean {
  const p = m.matchPattern;
  switch (p.case) {
    case 'nullMatch':
      return v === null;
    case 'doubleMatch': {
      const d = p.value.matchPattern;
      if (typeof v !== 'number') return false;
      if (d.case === 'exact') return v === d.value;
      if (d.case === 'range') return v >= Number(d.value.start) && v < Number(d.value.end);
      return false;
    }
    case 'stringMatch':
      return typeof v === 'string' && matchString(p.value, v);
    case 'boolMatch':
      return v === p.value;
    case 'presentMatch':
      return (v !== undefined) === p.value;
    case 'listMatch': {
      const one = p.value.matchPattern;
      return Array.isArray(v) && one.case === 'oneOf' && v.some((e) => matchValue(one.value, e));
    }
    case 'orMatch':
      return p.value.valueMatchers.some((x) => matchValue(x, v));
    default:
      return false;
  }
}

export function describeValue(m: ValueMatcher): string {
  const p = m.matchPattern;
  switch (p.case) {
    case 'stringMatch':
      return describeString(p.value);
    case 'listMatch':
      return p.value.matchPattern.case === 'oneOf' ? `a list containing ${describeValue(p.value.matchPattern.value)}` : 'a list';
    case 'orMatch':
      return p.value.valueMatchers.map(describeValue).join(' or ');
    case 'presentMatch':
      return p.value ? 'present' : 'absent';
    default:
      return String(p.case);
  }
}

function matchMetadata(m: MetadataMatcher, req: RequestContext): Outcome {
  const keys = m.path.map((s) => (s.segment.case === 'key' ? s.segment.value : ''));
  const v = lookupPath(req.metadata[m.filter], keys);
  const matched = m.value !== undefined && matchValue(m.value, v) !== m.invert;
  const where = `metadata ${m.filter}[${keys.join('.')}]`;
  const shown = v === undefined ? 'is absent' : `= ${JSON.stringify(v)}`;
  return { match: matched, because: `${where} ${shown}, ${matched ? 'matches' : 'required'} ${m.invert ? 'not ' : ''}${m.value ? describeValue(m.value) : 'nothing'}` };
}

function all<T>(items: readonly T[], f: (x: T) => Outcome): Outcome {
  const why: string[] = [];
  for (const x of items) {
    const o = f(x);
    if (!o.match) return o;
    why.push(o.because);
  }
  return yes(why.join(' and '));
}

function some<T>(items: readonly T[], f: (x: T) => Outcome): Outcome {
  const why: string[] = [];
  for (const x of items) {
    const o = f(x);
    if (o.match) return o;
    why.push(o.because);
  }
  return no(why.length === 1 ? why[0]! : `none of: ${why.join(' | ')}`);
}

function not(o: Outcome): Outcome {
  return { match: !o.match, because: `not (${o.because})` };
}

function pathOnly(req: RequestContext): string {
  const full = headerValue(req, ':path') ?? '';
  const q = full.search(/[?#]/);
  return q === -1 ? full : full.slice(0, q);
}

function stringOutcome(what: string, value: string | undefined, m: StringMatcher | undefined): Outcome {
  const ok = value !== undefined && m !== undefined && matchString(m, value);
  return { match: ok, because: `${what} ${value === undefined ? 'is unknown' : JSON.stringify(value)}, ${ok ? 'matches' : 'required'} ${m ? describeString(m) : 'nothing'}` };
}

function matchUrlPath(m: PathMatcher, req: RequestContext): Outcome {
  return stringOutcome('path', pathOnly(req), m.rule.case === 'path' ? m.rule.value : undefined);
}

export function matchPermission(p: Permission, req: RequestContext): Outcome {
  const r = p.rule;
  switch (r.case) {
    case 'any':
      return yes('any request');
    case 'andRules':
      return all(r.value.rules, (x) => matchPermission(x, req));
    case 'orRules':
      return some(r.value.rules, (x) => matchPermission(x, req));
    case 'notRule':
      return not(matchPermission(r.value, req));
    case 'header':
      return matchHeader(r.value, req);
    case 'urlPath':
      return matchUrlPath(r.value, req);
    case 'destinationIp':
      return cidrOutcome('destination ip', r.value, req.destinationIp);
    case 'destinationPort':
      return req.destinationPort === r.value ? yes(`destination port is ${r.value}`) : no(`destination port ${req.destinationPort ?? 'unknown'} is not ${r.value}`);
    case 'destinationPortRange': {
      const port = req.destinationPort;
      const ok = port !== undefined && port >= r.value.start && port < r.value.end;
      return { match: ok, because: `destination port ${port ?? 'unknown'} ${ok ? 'is' : 'is not'} in [${r.value.start}, ${r.value.end})` };
    }
    case 'metadata':
      return matchMetadata(r.value, req);
    case 'requestedServerName':
      return stringOutcome('SNI', req.sni, r.value);
    default:
      return no(`permission ${String(r.case)} is not supported by this evaluator`);
  }
}

export function matchPrincipal(p: Principal, req: RequestContext): Outcome {
  const id = p.identifier;
  switch (id.case) {
    case 'any':
      return yes('any client');
    case 'andIds':
      return all(id.value.ids, (x) => matchPrincipal(x, req));
    case 'orIds':
      return some(id.value.ids, (x) => matchPrincipal(x, req));
    case 'notId':
      return not(matchPrincipal(id.value, req));
    case 'authenticated': {
      const peer = req.peerPrincipal;
      const m = id.value.principalName;
      if (peer === undefined) return no(`the peer has no certificate identity, required ${m ? describeString(m) : 'any'}`);
      return m === undefined ? yes(`peer identity ${JSON.stringify(peer)}`) : stringOutcome('peer identity', peer, m);
    }
    case 'sourceIp':
    case 'directRemoteIp':
      return cidrOutcome('source ip', id.value, req.sourceIp);
    case 'remoteIp':
      return cidrOutcome('remote ip', id.value, req.remoteIp ?? req.sourceIp);
    case 'header':
      return matchHeader(id.value, req);
    case 'urlPath':
      return matchUrlPath(id.value, req);
    case 'metadata':
      return matchMetadata(id.value, req);
    default:
      return no(`principal ${String(id.case)} is not supported by this evaluator`);
  }
}

export function matchPolicy(policy: Policy, req: RequestContext): Outcome {
  const perm = some(policy.permissions, (x) => matchPermission(x, req));
  if (!perm.match) return perm;
  const princ = some(policy.principals, (x) => matchPrincipal(x, req));
  if (!princ.match) return princ;
  return yes(`${perm.because}; ${princ.because}`);
}

export interface RbacDecision {
  readonly allowed: boolean;
  /** The first policy (by name) that matched, if any. */
  readonly matchedPolicy?: string;
  readonly because: string;
  /** For every policy that did not match: why not. */
  readonly misses: readonly { readonly policy: string; readonly because: string }[];
}

/** Evaluates an envoy.config.rbac.v3.RBAC (the `rules` of an rbac filter). */
export function evaluateRules(rules: RbacRules, req: RequestContext): RbacDecision {
  const misses: { policy: string; because: string }[] = [];
  for (const name of Object.keys(rules.policies).sort()) {
    const o = matchPolicy(rules.policies[name]!, req);
    if (o.match) {
      return { allowed: rules.action !== RBAC_Action.DENY, matchedPolicy: name, because: o.because, misses };
    }
    misses.push({ policy: name, because: o.because });
  }
  const allowed = rules.action !== RBAC_Action.ALLOW;
  const because = rules.action === RBAC_Action.ALLOW ? (misses.length ? 'no ALLOW rule matched' : 'the ALLOW filter has no rules: nothing is allowed') : 'no rule matched';
  return { allowed, because, misses };
}

/** Evaluates an rbac HTTP filter config; a filter without `rules` (shadow only) allows. */
export function evaluateRbacFilter(filter: RBAC, req: RequestContext): RbacDecision {
  if (!filter.rules) return { allowed: true, because: 'no enforced rules', misses: [] };
  return evaluateRules(filter.rules, req);
}
