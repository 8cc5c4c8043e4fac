// JWKS documents: the one parser (JSON, the `keys` list, each key imported as a KeyObject) that
// the proxy's jwt_authn filter verifies with and the control plane validates fetched or inline key
// sets with, the one list of signature algorithms, and the fail-closed key set. Pure and
// synchronous, so the jwt_authn builder can check an inline `jwks` without I/O.
import { createPublicKey, createSecretKey, type KeyObject } from 'node:crypto';

/**
 * Put in place of a key set that could not be fetched or is invalid: a well-formed JWKS holding one
 * RSA public key whose private key was discarded when it was generated, so no token verifies.
 * (An empty key set is not used: a proxy may reject it as a configuration error.)
 */
export const FAIL_CLOSED_JWKS = JSON.stringify({
  keys: [
    {
      kty: 'RSA',
      kid: 'mesh-fail-closed',
      alg: 'RS256',
      use: 'sig',
      e: 'AQAB',
      n:
        'vUq-3h4Pi1UW4zG4UdJrfdXI_5hAVUkNTyTU5JGMmGFz4GZFL3CPJR2Nnid35F24ONEQj_aLjCKV5McwkUTkNfrbDUS6Q8_hRWdo4Q0TyDPXCBkbeucEH1VOdOMm7IC5RQpcHHDwzDjrDHoH7CbcxxyXc9LvviVMhGObCLe8yKMQDyCxjqCd6gsg9KB7EFU9k4d7QVIw48Su1m-GLa937X2ftUQndwjiiqj2vD6m0zVsWkzNL2Wgcz3i-VVuf5JN8o50u2GK6bBzntm5HtJ0cFGmKUG9RI3aIytfnNL4DmUl75fG_qVDkPOCL28jqe1sQb_3Kh8bjBUPLXBvix0_5w',
    },
  ],
});

export type JwksCheck =
  | { readonly ok: true; /** The usable keys only, re-serialized: what is inlined. */ readonly jwks: string; readonly kids: readonly string[] }
  | { readonly ok: false; readonly reason: string };

/** Signature algorithms the proxy verifies (Envoy's list); a key restricted to another `alg` is unusable. */
export const JWT_SIGNING_ALGS: ReadonlySet<string> = new Set([
  'RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512', 'ES256', 'ES384', 'ES512', 'HS256', 'HS384', 'HS512', 'EdDSA',
]);

/** Private members of a JWK: never part of a verification key. */
const PRIVATE_MEMBERS = new Set(['d', 'p', 'q', 'dp', 'dq', 'qi']);

/** The `keys` list of a JWKS text, or why the text is not a JWKS. */
export function jwksKeys(text: string): { readonly keys: readonly unknown[] } | { readonly error: 'json' | 'keys'; readonly message: string } {
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch (e) {
    return { error: 'json', message: (e as Error).message };
  }
  const keys = typeof doc === 'object' && doc !== null ? (doc as { keys?: unknown }).keys : undefined;
  return Array.isArray(keys) ? { keys } : { error: 'keys', message: 'no "keys" list' };
}

/** Imports one JWK as a verification key (public part only); throws naming what is wrong. */
export function importJwk(jwk: Record<string, unknown>): KeyObject {
  const kty = jwk.kty;
  if (kty === 'oct') {
    if (typeof jwk.k !== 'string') throw new Error('[k] field is missing for an HMAC key');
    return createSecretKey(Buffer.from(jwk.k, 'base64url'));
  }
  if (kty === 'RSA' || kty === 'EC' || kty === 'OKP') {
    if (kty === 'OKP' && jwk.crv !== 'Ed25519') throw new Error('[crv] field is not supported for an OKP key');
    const pub = Object.fromEntries(Object.entries(jwk).filter(([k]) => !PRIVATE_MEMBERS.has(k)));
    return createPublicKey({ key: pub, format: 'jwk' });
  }
  throw new Error('[kty] is not supported in [keys]');
}

function unusable(key: Record<string, unknown>): string | undefined {
  if (key.use !== undefined && key.use !== 'sig') return `use "${String(key.use)}" is not "sig"`;
  if (key.alg !== undefined && !JWT_SIGNING_ALGS.has(String(key.alg))) return `alg "${String(key.alg)}" is not a supported signature algorithm`;
  if (key.kty !== 'oct' && key.kty !== 'RSA' && key.kty !== 'EC' && key.kty !== 'OKP') return `kty "${String(key.kty)}" is not RSA, EC, OKP or oct`;
  if (key.kty === 'oct' && typeof key.k !== 'string') return 'empty symmetric key';
  let imported: KeyObject;
  try {
    imported = importJwk(key);
  } catch (e) {
    return `cannot be imported (${(e as Error).message})`;
  }
  if (key.kty === 'oct' && imported.symmetricKeySize === 0) return 'empty symmetric key';
  const bits = imported.asymmetricKeyDetails?.modulusLength;
  // Verifiers (the proxy's jws-verify.ts, jose) refuse RSA keys below 2048 bits.
  if (key.kty === 'RSA' && (bits === undefined || bits < 2048)) return `RSA modulus of ${bits ?? 0} bits is below 2048`;
  return undefined;
}

/** A JWKS is valid when it is a JSON object with a `keys` list holding at least one usable key. */
export function checkJwks(text: string): JwksCheck {
  const doc = jwksKeys(text);
  if ('error' in doc) {
    return { ok: false, reason: doc.error === 'json' ? `not JSON (${doc.message})` : 'not a JWKS (expected an object with a "keys" list)' };
  }
  const { keys } = doc;
  const usable: Record<string, unknown>[] = [];
  const problems: string[] = [];
  for (const [i, key] of keys.entries()) {
    if (typeof key !== 'object' || key === null) {
      problems.push(`keys[${i}]: not an object`);
      continue;
    }
    const problem = unusable(key as Record<string, unknown>);
    if (problem) problems.push(`keys[${i}]: ${problem}`);
    else usable.push(key as Record<string, unknown>);
  }
  if (usable.length === 0) return { ok: false, reason: `no usable key${problems.length ? ` (${problems.join('; ')})` : ' (empty "keys")'}` };
  return {
    ok: true,
    jwks: JSON.stringify({ keys: usable }),
    kids: usable.flatMap((k) => (typeof k.kid === 'string' ? [k.kid] : [])),
  };
}
