// Trust domains and their aliases (mesh config `trustDomainAliases`): a workload renamed into a new
// trust domain keeps being recognised under the old one, as in the Go mesh. Pure.
import type { AuthorizationPolicy, Condition, Rule } from '../../api/types.js';
import { parseSpiffeId, spiffeId } from '../spiffe.js';

export interface TrustDomains {
  /** The mesh's trust domain (mesh config trustDomain, else TRUST_DOMAIN). */
  readonly trustDomain: string;
  /** Mesh config trustDomainAliases. */
  readonly aliases: readonly string[];
  /** PILOT_SKIP_VALIDATE_TRUST_DOMAIN: servers accept any peer the roots verify, whatever its trust domain. */
  readonly skipValidation: boolean;
}

const dedup = (list: readonly string[]) => [...new Set(list.filter((s) => s !== ''))];

/** The trust domains a server accepts peers from; empty when the check is skipped. */
export function trustDomainsForValidation(t: TrustDomains): string[] {
  return t.skipValidation ? [] : dedup([t.trustDomain, ...t.aliases]);
}

/** SPIFFE ids with the same workload under each alias too (the client's SAN list). */
export function expandWithAliases(ids: readonly string[], aliases: readonly string[]): string[] {
  const out = [...ids];
  for (const id of ids) {
    const parsed = parseSpiffeId(id);
    if (!parsed) continue;
    for (const td of aliases) out.push(spiffeId({ ...parsed, trustDomain: td }));
  }
  return dedup(out);
}

/** `cluster.local`: what a principal written for "this mesh" names, whatever the mesh's trust domain is. */
const LOCAL_TRUST_DOMAIN = 'cluster.local';

/** A trust domain pattern's match, as the Go mesh's trustdomain package: `x*` a prefix, `*x` a suffix. */
const prefixMatch = (a: string, pattern: string) => pattern.endsWith('*') && a.startsWith(pattern.slice(0, -1));
const suffixMatch = (a: string, pattern: string) => pattern.startsWith('*') && a.endsWith(pattern.slice(1));
/** Either side may be the pattern: a principal's `*-td` covers the alias `old-td`, an alias `*` covers all. */
const trustDomainMatch = (a: string, s: string) => a === s || s === '*' || prefixMatch(a, s) || prefixMatch(s, a) || suffixMatch(a, s) || suffixMatch(s, a);

/** A principal whose trust domain is a pattern (`*-td`, `td-*`; not `*` alone): it may need rewriting even in a cluster.local mesh. */
const patterned = (principal: string): boolean => {
  const td = principal.split('/')[0]!;
  return td !== '*' && td.includes('*');
};

/** Nothing to rewrite: the mesh is cluster.local and has no aliases. */
const unchanged = (t: TrustDomains): boolean => t.aliases.length === 0 && t.trustDomain === LOCAL_TRUST_DOMAIN;

/**
 * An AuthorizationPolicy principal (`<td>/ns/<ns>/sa/<sa>`) whose trust domain is the mesh's, one of
 * its aliases, `cluster.local` (always the mesh's own) or a pattern matching one of them becomes one
 * principal per trust domain, so it matches the workload whichever of them its certificate names;
 * a `*x` pattern stays as written for the domains it covers (the Go mesh's
 * ReplaceTrustDomainAliases). `*` trust domains, other forms and foreign trust domains are kept.
 */
export function principalsWithAliases(principal: string, t: TrustDomains): string[] {
  const parts = principal.split('/');
  if (parts.length !== 5 || parts[0] === '*' || (unchanged(t) && !patterned(principal))) return [principal];
  const td = parts[0]!;
  const all = dedup([t.trustDomain, ...t.aliases]);
  if (!all.some((d) => trustDomainMatch(td, d)) && td !== LOCAL_TRUST_DOMAIN) return [principal];
  return dedup(all.map((d) => (suffixMatch(d, td) ? principal : [d, ...parts.slice(1)].join('/'))));
}

const expand = (values: string[] | undefined, t: TrustDomains) => (values ? [...new Set(values.flatMap((v) => principalsWithAliases(v, t)))] : undefined);
const withValues = <T extends object, K extends keyof T>(obj: T, key: K, values: T[K] | undefined): T => (values === undefined ? obj : { ...obj, [key]: values });

/** Every principal value a policy names (sources and source.principal conditions). */
function principalsOf(policy: AuthorizationPolicy): string[] {
  return (policy.spec.rules ?? []).flatMap((r) => [
    ...(r.from ?? []).flatMap((f) => [...(f.source.principals ?? []), ...(f.source.notPrincipals ?? [])]),
    ...(r.when ?? []).flatMap((c) => (c.key === 'source.principal' ? [...(c.values ?? []), ...(c.notValues ?? [])] : [])),
  ]);
}

/** The policy with every `principals`, `notPrincipals` and `source.principal` value expanded to the aliases. */
export function policyWithAliases(policy: AuthorizationPolicy, t: TrustDomains): AuthorizationPolicy {
  if (!policy.spec.rules || (unchanged(t) && !principalsOf(policy).some(patterned))) return policy;
  const rules = policy.spec.rules.map((r): Rule => ({
    ...r,
    ...(r.from ? { from: r.from.map((f) => ({ source: withValues(withValues(f.source, 'principals', expand(f.source.principals, t)), 'notPrincipals', expand(f.source.notPrincipals, t)) })) } : {}),
    ...(r.when
      ? { when: r.when.map((c): Condition => (c.key === 'source.principal' ? withValues(withValues(c, 'values', expand(c.values, t)), 'notValues', expand(c.notValues, t)) : c)) }
      : {}),
  }));
  return { ...policy, spec: { ...policy.spec, rules } };
}
