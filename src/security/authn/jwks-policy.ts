// When the discovery server fetches JWKS: which key sets to fetch before a push, which to stop
// fetching, and whether a proxy's "unknown kid" report may trigger a refetch. Pure decisions over the
// RequestAuthentications in the store; the discovery server applies them to its JWKS resolver.
import type { RequestAuthentication } from '../../api/types.js';
import { jwksFetchesInUse, type JwksFetch } from './builder.js';

export interface JwksPrefetch {
  /** The jwksUris some policy still references: the resolver forgets the others. */
  readonly inUse: ReadonlySet<string>;
  /**
   * Started at once. A proxy that a policy with a first fetch still running selects is pushed when
   * that fetch ends or its bound passes (JwksResolver.firstFetches), so that its first push carries
   * the keys rather than the fail-closed set; every other proxy is pushed at once, and an
   * unreachable issuer still fails closed.
   */
  readonly fetches: readonly JwksFetch[];
}

export function jwksPrefetch(policies: readonly RequestAuthentication[]): JwksPrefetch {
  const fetches = jwksFetchesInUse(policies);
  return { inUse: new Set(fetches.map((f) => f.jwksUri)), fetches };
}

export type KidRefreshDecision = { readonly refetch: true } | { readonly refetch: false; readonly reason: string };

/**
 * A proxy saw a token whose kid its issuer's key set lacks. Only an issuer some RequestAuthentication
 * trusts may be refetched (fail closed: a made-up issuer costs nothing); the resolver then allows one
 * unknown-kid refetch per issuer per cooldown, so a flood of forged kids costs the issuer at most that.
 */
export function unknownKidRefresh(policies: readonly RequestAuthentication[], issuer: string): KidRefreshDecision {
  const trusted = policies.some((p) => (p.spec.jwtRules ?? []).some((r) => r.issuer === issuer));
  return trusted ? { refetch: true } : { refetch: false, reason: 'no RequestAuthentication trusts this issuer' };
}
