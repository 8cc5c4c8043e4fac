// An AuthorizationPolicy's requestPrincipals (`<issuer>/<subject>`) whose issuer no
// RequestAuthentication of its namespace or the root namespace trusts: no request ever carries
// such a principal, so an ALLOW rule never allows and a DENY rule never denies.
import { message, type AnalysisInput, type AnalysisMessage, type Analyzer } from './types.js';

/** The issuer part of a principal, or undefined when a wildcard leaves it open. */
export function issuerOf(principal: string): string | undefined {
  const slash = principal.lastIndexOf('/');
  if (slash <= 0) return undefined;
  const issuer = principal.slice(0, slash);
  return issuer.includes('*') ? undefined : issuer;
}

export const requestPrincipalIssuer: Analyzer = {
  name: 'authorizationpolicy.issuer',
  analyze(input: AnalysisInput): AnalysisMessage[] {
    const trusted = (ns: string) =>
      new Set(input.list('RequestAuthentication').filter((ra) => ra.metadata.namespace === ns || ra.metadata.namespace === input.rootNamespace).flatMap((ra) => (ra.spec.jwtRules ?? []).map((r) => r.issuer)));
    const out: AnalysisMessage[] = [];
    for (const ap of input.list('AuthorizationPolicy')) {
      const issuers = trusted(ap.metadata.namespace);
      (ap.spec.rules ?? []).forEach((rule, i) =>
        (rule.from ?? []).forEach((from, j) =>
          (from.source.requestPrincipals ?? []).forEach((p, k) => {
            const issuer = issuerOf(p);
            if (issuer === undefined || issuers.has(issuer)) return;
            out.push(message('UntrustedRequestPrincipalIssuer', ap, `spec.rules[${i}].from[${j}].source.requestPrincipals[${k}]`, `request principal "${p}" names issuer "${issuer}", which no RequestAuthentication in namespace ${ap.metadata.namespace} or ${input.rootNamespace} trusts; this rule can never match`));
          }),
        ),
      );
    }
    return out;
  },
};
