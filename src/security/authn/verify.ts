// Signature and time checks of a raw token against the key sets inlined in a jwt_authn config
// (those of the providers whose issuer is the token's `iss`). Used by /debug/authz_explain to turn
// a posted token into a TokenState, and usable by a data plane. Audiences and the requirement tree
// are evaluated afterwards (requirement.ts). No I/O: the keys are the ones in the config.
import { createLocalJWKSet, decodeJwt, decodeProtectedHeader, errors, jwtVerify, type JWTPayload } from 'jose';
import type { JwtAuthentication } from '../../gen/envoy/extensions/filters/http/jwt_authn/v3/config_pb.js';
import type { TokenState } from './requirement.js';

export type VerifiedToken = TokenState & {
  /** Set when no key of the issuer has the token's `kid`: the caller may ask the resolver to refresh. */
  readonly unknownKid?: { readonly issuer: string; readonly kid: string };
};

function keysOf(config: JwtAuthentication, issuer: string): string[] {
  return Object.values(config.providers).flatMap((p) =>
    p.issuer === issuer && p.jwksSourceSpecifier.case === 'localJwks' && p.jwksSourceSpecifier.value.specifier.case === 'inlineString'
      ? [p.jwksSourceSpecifier.value.specifier.value]
      : [],
  );
}

export async function verifyToken(config: JwtAuthentication, token: string | undefined, currentDate?: Date): Promise<VerifiedToken> {
  if (token === undefined || token === '') return { kind: 'missing' };
  let iss: string | undefined;
  let kid: string | undefined;
  try {
    iss = decodeJwt(token).iss;
    kid = decodeProtectedHeader(token).kid;
  } catch (e) {
    return { kind: 'invalid', reason: `malformed token (${(e as Error).message})` };
  }
  if (iss === undefined) return { kind: 'invalid', reason: 'the token has no iss claim' };
  const sets = keysOf(config, iss);
  // Nothing from an issuer no provider names is trusted, not even its claims: 401 like a bad token.
  if (sets.length === 0) return { kind: 'invalid', reason: `issuer ${JSON.stringify(iss)} is not configured` };
  let lastError = 'no key set';
  let noMatchingKid = false;
  for (const jwks of sets) {
    try {
      const { payload } = await jwtVerify(token, createLocalJWKSet(JSON.parse(jwks)), { issuer: iss, ...(currentDate ? { currentDate } : {}) });
      return { kind: 'verified', payload: payload as JWTPayload & Record<string, unknown> };
    } catch (e) {
      if (e instanceof errors.JWKSNoMatchingKey) noMatchingKid = true;
      lastError = (e as Error).message;
    }
  }
  return { kind: 'invalid', reason: lastError, ...(noMatchingKid && kid !== undefined ? { unknownKid: { issuer: iss, kid } } : {}) };
}
