// Who is calling the CA or the secured xDS port: a workload presenting its current certificate on
// the TLS connection (verified by TLS against the mesh roots; with federated trust domains, against
// theirs too, then against the CA of the certificate's own trust domain), or a JWT in the
// `authorization` metadata checked against TOKEN_ISSUER's key set (OIDC discovery), the accepted
// audiences (TOKEN_AUDIENCES) and JWT_POLICY / REQUIRE_3P_TOKEN. Fails closed: anything that
// cannot be checked is an authentication failure with the reason.
import 'reflect-metadata';
import * as x509 from '@peculiar/x509';
import { createRemoteJWKSet, decodeJwt, jwtVerify, type JWTPayload } from 'jose';
import { certificateUris } from './pki.js';
import { parseSpiffeId, type Identity } from '../spiffe.js';
import { signedBy, type PeerTrust } from '../federation/peer-trust.js';

export class AuthenticationError extends Error {}

export interface Caller {
  readonly identities: readonly Identity[];
  readonly method: 'certificate' | 'jwt';
}

/** What a gRPC call carries that can authenticate it. */
export interface CallCredentials {
  /** The `authorization` metadata value, if any. */
  readonly authorization?: string | undefined;
  /** DER of the client certificate TLS verified against the mesh roots, if any. */
  readonly peerCertificate?: Buffer | undefined;
}

export interface AuthenticatorOptions {
  readonly trustDomain: string;
  /** TOKEN_AUDIENCES. */
  readonly audiences: readonly string[];
  /** TOKEN_ISSUER; empty = no token can be checked (there is no orchestrator token review here). */
  readonly issuer: string;
  /** JWT_POLICY: `third-party-jwt` (audience required) or `first-party-jwt`. */
  readonly jwtPolicy: string;
  /** REQUIRE_3P_TOKEN: also under first-party-jwt, a token without audience is refused. */
  readonly require3p: boolean;
  /**
   * SPIFFE_BUNDLE_ENDPOINTS set: TLS trusted federated roots too, so a certificate's trust domain
   * must be one with roots here and the leaf signed by them. Unset: only TRUST_DOMAIN.
   */
  readonly peerTrust?: PeerTrust;
}

/** The orchestrator's service account subject: `system:serviceaccount:<namespace>:<name>`. */
const SA_SUBJECT = /^system:serviceaccount:([^:]+):([^:]+)$/;
const JWKS_DISCOVERY_TIMEOUT_MS = 5_000;

export class CallerAuthenticator {
  private jwks: ReturnType<typeof createRemoteJWKSet> | undefined;

  constructor(private readonly opts: AuthenticatorOptions) {
    if (opts.jwtPolicy !== 'third-party-jwt' && opts.jwtPolicy !== 'first-party-jwt') {
      throw new Error(`JWT_POLICY=${JSON.stringify(opts.jwtPolicy)}: expected third-party-jwt or first-party-jwt`);
    }
  }

  /** The certificate first (renewal), else the token; throws AuthenticationError. */
  async authenticate(creds: CallCredentials): Promise<Caller> {
    if (creds.peerCertificate) return this.fromCertificate(creds.peerCertificate);
    const auth = creds.authorization;
    if (!auth) throw new AuthenticationError('no credential: present a mesh certificate or a bearer token in the authorization metadata');
    const m = /^Bearer\s+(\S+)$/i.exec(auth.trim());
    if (!m) throw new AuthenticationError('authorization metadata is not "Bearer <token>"');
    return this.fromToken(m[1]!);
  }

  private async fromCertificate(der: Buffer): Promise<Caller> {
    let cert: x509.X509Certificate;
    try {
      cert = new x509.X509Certificate(der);
    } catch (e) {
      throw new AuthenticationError(`client certificate cannot be parsed: ${(e as Error).message}`);
    }
    const identities = certificateUris(cert).map(parseSpiffeId).filter((i): i is Identity => i !== undefined);
    if (identities.length === 0) throw new AuthenticationError('client certificate carries no SPIFFE identity');
    const trust = this.opts.peerTrust;
    if (!trust) {
      const foreign = identities.find((i) => i.trustDomain !== this.opts.trustDomain);
      if (foreign) throw new AuthenticationError(`client certificate is for trust domain ${foreign.trustDomain}, not ${this.opts.trustDomain}`);
      return { identities, method: 'certificate' };
    }
    const domains = [...new Set(identities.map((i) => i.trustDomain))];
    if (domains.length > 1) throw new AuthenticationError(`client certificate names several trust domains (${domains.join(', ')})`);
    const td = domains[0]!;
    const issuers = trust.issuersOf(td);
    if (!issuers) throw new AuthenticationError(`client certificate is for trust domain ${td}, which is neither ${this.opts.trustDomain} nor one of SPIFFE_BUNDLE_ENDPOINTS`);
    for (const issuer of issuers) if (await signedBy(cert, issuer)) return { identities, method: 'certificate' };
    throw new AuthenticationError(`client certificate for trust domain ${td} is not signed by a CA of ${td} (issuer "${cert.issuer}")`);
  }

  private async fromToken(token: string): Promise<Caller> {
    if (!this.opts.issuer) throw new AuthenticationError('tokens cannot be checked: TOKEN_ISSUER is not set (orchestrator token review is not implemented)');
    let unverified: JWTPayload;
    try {
      unverified = decodeJwt(token);
    } catch (e) {
      throw new AuthenticationError(`bearer token is not a JWT: ${(e as Error).message}`);
    }
    const hasAud = unverified.aud !== undefined && (typeof unverified.aud === 'string' || unverified.aud.length > 0);
    const needAud = this.opts.jwtPolicy === 'third-party-jwt' || this.opts.require3p || hasAud;
    if (!hasAud && needAud) {
      throw new AuthenticationError(`token has no audience: ${this.opts.require3p ? 'REQUIRE_3P_TOKEN is set' : `JWT_POLICY=${this.opts.jwtPolicy} requires one of ${this.opts.audiences.join(', ')}`}`);
    }
    let payload: JWTPayload;
    try {
      const verified = await jwtVerify(token, await this.keySet(), { issuer: this.opts.issuer, ...(needAud ? { audience: [...this.opts.audiences] } : {}) });
      payload = verified.payload;
    } catch (e) {
      throw new AuthenticationError(`token rejected: ${(e as Error).message}`);
    }
    const m = SA_SUBJECT.exec(payload.sub ?? '');
    if (!m) throw new AuthenticationError(`token subject ${JSON.stringify(payload.sub ?? '')} is not system:serviceaccount:<namespace>:<service account>`);
    return { identities: [{ trustDomain: this.opts.trustDomain, namespace: m[1]!, serviceAccount: m[2]! }], method: 'jwt' };
  }

  /** TOKEN_ISSUER's key set, found by OIDC discovery once (a failed discovery is retried next call). */
  private async keySet(): Promise<ReturnType<typeof createRemoteJWKSet>> {
    if (this.jwks) return this.jwks;
    const url = `${this.opts.issuer.replace(/\/$/, '')}/.well-known/openid-configuration`;
    let jwksUri: string;
    try {
      const res = await fetch(url, { signal: AbortSignal.timeout(JWKS_DISCOVERY_TIMEOUT_MS) });
      if (!res.ok) throw new Error(`HTTP ${res.status}`);
      const doc = (await res.json()) as { jwks_uri?: unknown };
      if (typeof doc.jwks_uri !== 'string') throw new Error('no jwks_uri');
      jwksUri = doc.jwks_uri;
    } catch (e) {
      throw new AuthenticationError(`cannot discover the key set of TOKEN_ISSUER at ${url}: ${(e as Error).message}`);
    }
    this.jwks = createRemoteJWKSet(new URL(jwksUri));
    return this.jwks;
  }
}
