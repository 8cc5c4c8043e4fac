// Keys, tokens and Envoy configs shaped like the ones the discovery server emits, for the
// data-plane tests. Everything is generated in-process: no key or token is checked in.
import { create, type MessageInitShape } from '@bufbuild/protobuf';
import { exportJWK, generateKeyPair, SignJWT, type CryptoKey, type JWK, type JWTPayload } from 'jose';
import {
  JwtAuthenticationSchema,
  type JwtAuthentication,
  type JwtProvider,
} from '../../src/gen/envoy/extensions/filters/http/jwt_authn/v3/config_pb.js';

export const ISSUER = 'https://issuer.example.com';
export const OTHER_ISSUER = 'https://other.example.com';

export interface TestKey {
  readonly alg: 'RS256' | 'ES256' | 'EdDSA';
  readonly kid: string;
  readonly privateKey: CryptoKey;
  readonly jwk: JWK;
}

export async function testKey(alg: TestKey['alg'], kid: string): Promise<TestKey> {
  const { privateKey, publicKey } = await generateKeyPair(alg, { extractable: true, ...(alg === 'EdDSA' ? { crv: 'Ed25519' } : {}) });
  return { alg, kid, privateKey, jwk: { ...(await exportJWK(publicKey)), kid, alg } };
}

export function jwks(...keys: TestKey[]): string {
  return JSON.stringify({ keys: keys.map((k) => k.jwk) });
}

export interface MintOptions {
  iss?: string;
  sub?: string;
  /** Seconds from now; default one hour. */
  expIn?: number;
  nbfIn?: number;
  aud?: string | string[];
  kid?: string;
  claims?: JWTPayload;
  now?: number;
}

export async function mint(key: TestKey, o: MintOptions = {}): Promise<string> {
  const now = o.now ?? Math.floor(Date.now() / 1000);
  const jwt = new SignJWT({ ...o.claims })
    .setProtectedHeader({ alg: key.alg, kid: o.kid ?? key.kid, typ: 'JWT' })
    .setIssuer(o.iss ?? ISSUER)
    .setSubject(o.sub ?? 'alice')
    .setIssuedAt(now)
    .setExpirationTime(now + (o.expIn ?? 3600));
  if (o.nbfIn !== undefined) jwt.setNotBefore(now + o.nbfIn);
  if (o.aud !== undefined) jwt.setAudience(o.aud);
  return jwt.sign(key.privateKey);
}

export function b64(json: unknown): string {
  return Buffer.from(JSON.stringify(json)).toString('base64url');
}

export type ProviderInit = MessageInitShape<typeof JwtAuthenticationSchema>['providers'] extends infer M
  ? M extends Record<string, infer P>
    ? P
    : never
  : never;

/** A provider the way the mesh emits it: inlined JWKS, payload in metadata under the issuer, default locations. */
export function meshProvider(issuer: string, keySet: string, extra: Partial<ProviderInit> = {}): ProviderInit {
  return {
    issuer,
    jwksSourceSpecifier: { case: 'localJwks', value: { specifier: { case: 'inlineString', value: keySet } } },
    payloadInMetadata: issuer,
    forward: true,
    ...extra,
  } as ProviderInit;
}

/** The mesh's filter: one rule, requires_any of every provider plus allow_missing. */
export function meshJwtAuthn(providers: Record<string, ProviderInit>): JwtAuthentication {
  return create(JwtAuthenticationSchema, {
    providers: providers as Record<string, JwtProvider>,
    rules: [
      {
        match: { pathSpecifier: { case: 'prefix', value: '/' } },
        requirementType: {
          case: 'requires',
          value: {
            requiresType: {
              case: 'requiresAny',
              value: {
                requirements: [
                  ...Object.keys(providers).map((name) => ({ requiresType: { case: 'providerName' as const, value: name } })),
                  { requiresType: { case: 'allowMissing' as const, value: {} } },
                ],
              },
            },
          },
        },
      },
    ],
  });
}
