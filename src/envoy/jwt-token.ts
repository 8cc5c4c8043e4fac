// JWTs for the jwt_authn evaluator: Envoy's status strings, a compact JWS parsed with Envoy's
// checks (each failure is the status Envoy names), a provider's JWKS as verification keys, and
// which key may verify which token.
import type { KeyObject } from 'node:crypto';
import type { JsonObject, JsonValue } from '@bufbuild/protobuf';
import { scope } from '../common/log.js';
import { importJwk, jwksKeys, JWT_SIGNING_ALGS } from './jwks.js';

const log = scope('jwt');

/** Statuses, spelled as Envoy's response bodies spell them. */
export const JwtStatus = {
  Ok: 'OK',
  JwtMissed: 'Jwt is missing',
  JwtNotYetValid: 'Jwt not yet valid',
  JwtExpired: 'Jwt is expired',
  JwtBadFormat: 'Jwt is not in the form of Header.Payload.Signature with two dots and 3 sections',
  JwtHeaderParseErrorBadBase64: 'Jwt header is an invalid Base64url encoded',
  JwtHeaderParseErrorBadJson: 'Jwt header is an invalid JSON',
  JwtHeaderBadAlg: 'Jwt header [alg] field is required and must be a string',
  JwtHeaderNotImplementedAlg: 'Jwt header [alg] is not supported',
  JwtHeaderBadKid: 'Jwt header [kid] field is not a string',
  JwtPayloadParseErrorBadBase64: 'Jwt payload is an invalid Base64url encoded',
  JwtPayloadParseErrorBadJson: 'Jwt payload is an invalid JSON',
  JwtPayloadParseErrorIssNotString: 'Jwt payload [iss] field is not a string',
  JwtPayloadParseErrorSubNotString: 'Jwt payload [sub] field is not a string',
  JwtPayloadParseErrorIatNotInteger: 'Jwt payload [iat] field is not an integer',
  JwtPayloadParseErrorNbfNotInteger: 'Jwt payload [nbf] field is not an integer',
  JwtPayloadParseErrorExpNotInteger: 'Jwt payload [exp] field is not an integer',
  JwtPayloadParseErrorJtiNotString: 'Jwt payload [jti] field is not a string',
  JwtPayloadParseErrorAudNotString: 'Jwt payload [aud] field is not a string or string list',
  JwtSignatureParseErrorBadBase64: 'Jwt signature is an invalid Base64url encoded',
  JwtUnknownIssuer: 'Jwt issuer is not configured',
  JwtAudienceNotAllowed: 'Audiences in Jwt are not allowed',
  JwtVerificationFail: 'Jwt verification fails',
  JwksNoValidKeys: "Jwks doesn't have any valid public key",
  JwksKidAlgMismatch: "Jwks doesn't have key to match kid or alg from Jwt",
} as const;
export type JwtStatus = (typeof JwtStatus)[keyof typeof JwtStatus];

const EC_CURVE: Record<string, string> = { ES256: 'P-256', ES384: 'P-384', ES512: 'P-521' };

export interface Jwt {
  readonly header: JsonObject;
  readonly payload: JsonObject;
  readonly headerB64: string;
  readonly payloadB64: string;
  readonly signatureB64: string;
  readonly alg: string;
  readonly kid: string | undefined;
  readonly iss: string;
  readonly audiences: readonly string[];
  readonly exp: number;
  readonly nbf: number;
}

export interface Key {
  readonly kid: string | undefined;
  readonly alg: string | undefined;
  readonly kty: string;
  readonly crv: string | undefined;
  readonly key: KeyObject;
}

const B64URL = /^[A-Za-z0-9_-]*$/;

function b64urlDecode(s: string): Buffer | undefined {
  if (!B64URL.test(s) || s.length % 4 === 1) return undefined;
  return Buffer.from(s, 'base64url');
}

function jsonObject(buf: Buffer): JsonObject | undefined {
  try {
    const v: unknown = JSON.parse(buf.toString('utf8'));
    return v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as JsonObject) : undefined;
  } catch {
    return undefined;
  }
}

const UINT64_LIMIT = 2 ** 64;

/**
 * A time claim as Envoy reads it: a JSON number in [0, 2^64), its fraction dropped. Anything else
 * (a string, a negative or an out-of-range number such as 1e300) makes the token invalid.
 */
function timeClaim(v: JsonValue | undefined): number | undefined {
  return typeof v === 'number' && v >= 0 && v < UINT64_LIMIT ? Math.trunc(v) : undefined;
}

/** Parses a compact JWS into a Jwt, or returns the status naming what is wrong with it. */
export function parseJwt(token: string): Jwt | JwtStatus {
  const parts = token.split('.');
  if (parts.length !== 3) return JwtStatus.JwtBadFormat;
  const [headerB64, payloadB64, signatureB64] = parts as [string, string, string];
  const hb = b64urlDecode(headerB64);
  if (!hb || hb.length === 0) return JwtStatus.JwtHeaderParseErrorBadBase64;
  const header = jsonObject(hb);
  if (!header) return JwtStatus.JwtHeaderParseErrorBadJson;
  const alg = header.alg;
  if (typeof alg !== 'string') return JwtStatus.JwtHeaderBadAlg;
  if (!JWT_SIGNING_ALGS.has(alg)) return JwtStatus.JwtHeaderNotImplementedAlg;
  const kid = header.kid;
  if (kid !== undefined && typeof kid !== 'string') return JwtStatus.JwtHeaderBadKid;
  const pb = b64urlDecode(payloadB64);
  if (!pb || pb.length === 0) return JwtStatus.JwtPayloadParseErrorBadBase64;
  const payload = jsonObject(pb);
  if (!payload) return JwtStatus.JwtPayloadParseErrorBadJson;
  const { iss, sub, iat, nbf, exp, jti, aud } = payload;
  if (iss !== undefined && typeof iss !== 'string') return JwtStatus.JwtPayloadParseErrorIssNotString;
  if (sub !== undefined && typeof sub !== 'string') return JwtStatus.JwtPayloadParseErrorSubNotString;
  if (iat !== undefined && timeClaim(iat) === undefined) return JwtStatus.JwtPayloadParseErrorIatNotInteger;
  if (nbf !== undefined && timeClaim(nbf) === undefined) return JwtStatus.JwtPayloadParseErrorNbfNotInteger;
  if (exp !== undefined && timeClaim(exp) === undefined) return JwtStatus.JwtPayloadParseErrorExpNotInteger;
  if (jti !== undefined && typeof jti !== 'string') return JwtStatus.JwtPayloadParseErrorJtiNotString;
  let audiences: string[] = [];
  if (typeof aud === 'string') audiences = [aud];
  else if (Array.isArray(aud) && aud.every((a) => typeof a === 'string')) audiences = aud as string[];
  else if (aud !== undefined) return JwtStatus.JwtPayloadParseErrorAudNotString;
  if (b64urlDecode(signatureB64) === undefined) return JwtStatus.JwtSignatureParseErrorBadBase64;
  return {
    header,
    payload,
    headerB64,
    payloadB64,
    signatureB64,
    alg,
    kid,
    iss: iss ?? '',
    audiences,
    exp: timeClaim(exp) ?? 0,
    nbf: timeClaim(nbf) ?? 0,
  };
}

export function parseJwks(text: string, field: string): Key[] | undefined {
  const doc = jwksKeys(text);
  if ('error' in doc) {
    log.warn(`${field}: ${doc.error === 'json' ? 'the JWKS is not valid JSON' : 'the JWKS has no [keys] array'}; tokens of this provider will be rejected`);
    return undefined;
  }
  const out: Key[] = [];
  doc.keys.forEach((entry, i) => {
    const jwk = (entry ?? {}) as Record<string, unknown>;
    const kty = typeof jwk.kty === 'string' ? jwk.kty : '';
    try {
      const key = importJwk(jwk);
      out.push({
        kid: typeof jwk.kid === 'string' ? jwk.kid : undefined,
        alg: typeof jwk.alg === 'string' ? jwk.alg : undefined,
        kty,
        crv: typeof jwk.crv === 'string' ? jwk.crv : undefined,
        key,
      });
    } catch (e) {
      log.warn(`${field}: skipping key ${i} of the JWKS: ${(e as Error).message}`);
    }
  });
  if (out.length === 0) {
    log.warn(`${field}: the JWKS has no usable key; tokens of this provider will be rejected`);
    return undefined;
  }
  return out;
}

/** Whether a key can verify a token signed with `alg` (Envoy's kid/alg/key-type selection). */
export function keyFits(k: Key, jwt: Jwt): boolean {
  if (jwt.kid !== undefined && k.kid !== undefined && k.kid !== jwt.kid) return false;
  if (k.alg !== undefined && k.alg !== jwt.alg) return false;
  const fam = jwt.alg.slice(0, 2);
  if (fam === 'RS' || fam === 'PS') return k.kty === 'RSA';
  if (fam === 'ES') return k.kty === 'EC' && (k.crv === undefined || k.crv === EC_CURVE[jwt.alg]);
  if (fam === 'HS') return k.kty === 'oct';
  return jwt.alg === 'EdDSA' && k.kty === 'OKP';
}
