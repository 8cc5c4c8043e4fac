// Names shared by the jwt_authn builder, the RBAC builder and the listener builder: the RBAC
// metadata matchers find the token payload where the jwt_authn filter writes it.

/**
 * Every provider writes the verified payload under this one fixed key (`payload_in_metadata`), so
 * a policy on `request.auth.claims[...]` needs no knowledge of which issuers a workload trusts.
 */
export const JWT_PAYLOAD_METADATA_KEY = 'jwt_payload';

/** Provider names as the production mesh spells them: `origins-<index of the jwtRule>`. */
export function providerName(index: number): string {
  return `origins-${index}`;
}
