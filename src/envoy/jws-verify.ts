// A JWS signature check with node:crypto, for jwt_authn's signature step. jose's check (WebCrypto)
// cost each proxy with a JWT policy about 8 MiB of RSS on the first token (issue 17, RSS;
// docs/dataplane.md); the keys are already node:crypto KeyObjects (jwks.ts imports them), and the
// check is one call per algorithm family. The discovery server keeps jose for what it verifies.
import { constants, createHmac, timingSafeEqual, verify, type KeyObject } from 'node:crypto';

/** The hash of an algorithm's size suffix (RS256 -> sha256). */
const HASH: Record<string, string> = { '256': 'sha256', '384': 'sha384', '512': 'sha512' };

/** The curve an ES algorithm requires (node's names) and its signature's length (r || s). */
const EC: Record<string, { curve: string; bytes: number }> = {
  ES256: { curve: 'prime256v1', bytes: 64 },
  ES384: { curve: 'secp384r1', bytes: 96 },
  ES512: { curve: 'secp521r1', bytes: 132 },
};

/** RSA keys below this many bits verify nothing (RFC 7518 3.3 and 3.5; jose refused them too). */
const MIN_RSA_BITS = 2048;

/**
 * True when `signature` is `alg`'s signature of `signingInput` (the token's `header.payload`) by
 * `key`. False for anything else: a key of another type or curve, a short RSA key, a signature of
 * the wrong length or encoding, an algorithm not in Envoy's list. A token header with `crit` never
 * verifies (RFC 7515 4.1.11: this verifier understands no extension).
 */
export function verifyJws(alg: string, key: KeyObject, header: Readonly<Record<string, unknown>>, signingInput: string, signature: Buffer): boolean {
  if (header.crit !== undefined) return false;
  const hash = HASH[alg.slice(2)];
  const data = Buffer.from(signingInput, 'latin1');
  try {
    if (alg === 'EdDSA') return key.asymmetricKeyType === 'ed25519' && verify(null, data, key, signature);
    if (!hash) return false;
    switch (alg.slice(0, 2)) {
      case 'HS': {
        if (key.type !== 'secret') return false;
        const mac = createHmac(hash, key).update(data).digest();
        return mac.length === signature.length && timingSafeEqual(mac, signature);
      }
      case 'RS':
        return rsaKey(key) && verify(hash, data, key, signature);
      case 'PS':
        return rsaKey(key) && verify(hash, data, { key, padding: constants.RSA_PKCS1_PSS_PADDING, saltLength: constants.RSA_PSS_SALTLEN_DIGEST }, signature);
      case 'ES': {
        const ec = EC[alg];
        if (!ec || key.asymmetricKeyType !== 'ec' || key.asymmetricKeyDetails?.namedCurve !== ec.curve || signature.length !== ec.bytes) return false;
        return verify(hash, data, { key, dsaEncoding: 'ieee-p1363' }, signature);
      }
      default:
        return false;
    }
  } catch {
    // node:crypto throws for a key it cannot use with this algorithm: not a valid signature.
    return false;
  }
}

function rsaKey(key: KeyObject): boolean {
  return key.asymmetricKeyType === 'rsa' && (key.asymmetricKeyDetails?.modulusLength ?? 0) >= MIN_RSA_BITS;
}
