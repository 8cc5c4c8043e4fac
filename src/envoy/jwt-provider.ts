// A jwt_authn provider compiled: its issuer, audiences, keys and token locations, what it forwards
// of a verified token (claims to headers, the payload in a header or in metadata) and its cache
// of verified tokens; with the claim and audience rules Envoy applies to a token it accepts.
import type { JsonObject, JsonValue } from '@bufbuild/protobuf';
import type { JwtProvider } from '../gen/envoy/extensions/filters/http/jwt_authn/v3/config_pb.js';
import { ConfigError } from './config-error.js';
import { compileStringMatcher, readDataSource } from './matchers.js';
import { durationMs } from '../common/duration.js';
import { JwtCache } from './jwt-cache.js';
import type { LocationSpec } from './jwt-locations.js';
import { parseJwks, type Key } from './jwt-token.js';

/** Envoy's default clock skew for exp/nbf. */
const DEFAULT_CLOCK_SKEW_S = 60;
/** Envoy's default JWT cache size per provider. */
const DEFAULT_JWT_CACHE_SIZE = 100;

export interface Provider {
  readonly name: string;
  readonly issuer: string;
  readonly audiences: ReadonlySet<string> | undefined;
  readonly keys: readonly Key[] | undefined; // undefined: the JWKS could not be used (fail closed)
  readonly kids: ReadonlySet<string>;
  readonly forward: boolean;
  readonly forwardPayloadHeader: string;
  readonly padForwardPayloadHeader: boolean;
  readonly claimToHeaders: readonly { header: string; claim: string }[];
  readonly payloadInMetadata: string;
  readonly headerInMetadata: string;
  readonly spaceDelimitedClaims: readonly string[];
  readonly clockSkew: number;
  /** Longest remaining lifetime accepted, in seconds (Infinity: any, but exp is required). */
  readonly maxLifetime: number | undefined;
  readonly subject: ((sub: string) => boolean) | undefined;
  readonly cache: JwtCache;
  readonly locations: readonly LocationSpec[];
}

/** Audience check with Envoy's normalization: scheme prefix and trailing slash do not count. */
function normalizeAudience(a: string): string {
  let s = a.replace(/^https?:\/\//, '');
  if (s.endsWith('/')) s = s.slice(0, -1);
  return s;
}

/** The allowed audiences, normalized; undefined = any audience. */
export function audienceSet(allowed: readonly string[]): ReadonlySet<string> | undefined {
  return allowed.length === 0 ? undefined : new Set(allowed.map(normalizeAudience));
}

export function audiencesAllowed(allowed: ReadonlySet<string> | undefined, jwtAuds: readonly string[]): boolean {
  return allowed === undefined || jwtAuds.some((a) => allowed.has(normalizeAudience(a)));
}

/** A claim as a header value: strings, numbers (integers without a fraction) and booleans only. */
export function claimValue(payload: JsonObject, claim: string): string | undefined {
  let v: JsonValue | undefined = payload;
  for (const part of claim.split('.')) {
    if (v === null || typeof v !== 'object' || Array.isArray(v)) return undefined;
    v = (v as JsonObject)[part];
  }
  if (typeof v === 'string') return v === '' ? undefined : v;
  if (typeof v === 'number') return String(v);
  if (typeof v === 'boolean') return v ? 'true' : 'false';
  return undefined;
}

/** The payload for payload_in_metadata: the space-delimited claims as lists of their words. */
export function normalizePayload(payload: JsonObject, spaceDelimited: readonly string[]): JsonObject {
  if (spaceDelimited.length === 0) return payload;
  const out: JsonObject = { ...payload };
  for (const c of spaceDelimited) {
    const v = out[c];
    if (typeof v === 'string') out[c] = v.split(' ').filter(Boolean);
  }
  return out;
}

export function compileProvider(name: string, p: JwtProvider): Provider {
  const field = `providers[${name}]`;
  const src = p.jwksSourceSpecifier;
  if (src.case === 'remoteJwks') {
    throw new ConfigError(`${field}.remote_jwks`, 'remote JWKS are not fetched by the proxy; the discovery server inlines them as local_jwks');
  }
  if (src.case !== 'localJwks') throw new ConfigError(field, 'local_jwks is required');
  const keys = parseJwks(readDataSource(src.value, `${field}.local_jwks`), `${field}.local_jwks`);
  const locations: LocationSpec[] = [
    ...p.fromHeaders.map((h, i): LocationSpec => {
      if (!h.name) throw new ConfigError(`${field}.from_headers[${i}].name`, 'a header name is required');
      return { kind: 'header', name: h.name.toLowerCase(), prefix: h.valuePrefix };
    }),
    ...p.fromParams.map((n): LocationSpec => ({ kind: 'param', name: n })),
    ...p.fromCookies.map((n): LocationSpec => ({ kind: 'cookie', name: n })),
  ];
  if (locations.length === 0) {
    locations.push({ kind: 'header', name: 'authorization', prefix: 'Bearer ' }, { kind: 'param', name: 'access_token' });
  }
  const clockSkew = p.clockSkewSeconds > 0 ? p.clockSkewSeconds : DEFAULT_CLOCK_SKEW_S;
  return {
    name,
    issuer: p.issuer,
    audiences: audienceSet(p.audiences),
    keys,
    kids: new Set((keys ?? []).flatMap((k) => (k.kid === undefined ? [] : [k.kid]))),
    forward: p.forward,
    forwardPayloadHeader: p.forwardPayloadHeader.toLowerCase(),
    padForwardPayloadHeader: p.padForwardPayloadHeader,
    claimToHeaders: p.claimToHeaders.map((c) => ({ header: c.headerName.toLowerCase(), claim: c.claimName })),
    payloadInMetadata: p.payloadInMetadata,
    headerInMetadata: p.headerInMetadata,
    spaceDelimitedClaims: p.normalizePayloadInMetadata?.spaceDelimitedClaims ?? [],
    clockSkew,
    // max_lifetime takes precedence over require_expiration, as in Envoy.
    maxLifetime: p.maxLifetime ? durationMs(p.maxLifetime, 0) / 1000 : p.requireExpiration ? Infinity : undefined,
    subject: p.subjects ? compileStringMatcher(p.subjects, `${field}.subjects`) : undefined,
    cache: new JwtCache(p.jwtCacheConfig?.jwtCacheSize || DEFAULT_JWT_CACHE_SIZE, clockSkew),
    locations,
  };
}
