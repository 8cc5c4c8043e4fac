// The discovery server's security side, from its settings: the mesh CA and its gRPC service, the
// TLS credentials of the secured port and the xDS stream authorizer. What the settings ask for
// and this mesh cannot do is said at startup.
import { setting } from '../../common/env.js';
import { scope } from '../../common/log.js';
import type { Server } from '@grpc/grpc-js';
import { CallerAuthenticator } from './authenticate.js';
import type { PeerTrust } from '../federation/peer-trust.js';
import type { MeshFederation } from './federation.js';
import { MeshAuthority } from './authority.js';
import { SecurePortCredentials, servingHosts } from './secure-port.js';
import { CertificateService } from './service.js';
import { XdsAuthorizer } from './xds-auth.js';

const log = scope('ca');

export interface MeshCa {
  readonly authority: MeshAuthority;
  /** Credentials of the secured port. */
  readonly securePort: SecurePortCredentials;
  close(): void;
}

export interface MeshSecurityOptions {
  /** The discovery server's namespace (its certificate is for meshd.<namespace>.svc). */
  readonly namespace: string;
  /** The mesh's trust domain (mesh config trustDomain, else TRUST_DOMAIN): the self-signed root's. */
  readonly trustDomain: string;
  /** Mesh config trustDomainAliases: a CSR may still name one (a renamed mesh), as cluster.local. */
  readonly trustDomainAliases?: readonly string[];
  /** SPIFFE_BUNDLE_ENDPOINTS: fetched once the CA exists, trusted on the secured port. */
  readonly federation?: MeshFederation | undefined;
}

/** The CA's directory of a self-signed root (ours; empty = memory only). */
export function selfSignedDir(): string | undefined {
  return setting('AUTHORITY_SELF_SIGNED_CA_DIR') || undefined;
}

/** Who calls (CA and xDS alike): a token's identity is in `trustDomain`; TOKEN_* and JWT_POLICY; synchronous, so no stream is ever unchecked. */
export function callerAuthenticator(trustDomain: string, peerTrust?: PeerTrust): CallerAuthenticator {
  if (!setting('TOKEN_ISSUER')) log.info('TOKEN_ISSUER is not set: tokens cannot be checked (orchestrator token review is not implemented); callers need a mesh certificate');
  return new CallerAuthenticator({
    trustDomain,
    audiences: setting('TOKEN_AUDIENCES').split(',').map((a) => a.trim()).filter(Boolean),
    issuer: setting('TOKEN_ISSUER'),
    jwtPolicy: setting('JWT_POLICY'),
    require3p: setting('REQUIRE_3P_TOKEN'),
    ...(peerTrust ? { peerTrust } : {}),
  });
}

export function xdsAuthorizer(authenticator: CallerAuthenticator): XdsAuthorizer {
  return new XdsAuthorizer({
    enabled: setting('XDS_AUTH'),
    plaintext: setting('XDS_AUTH_PLAINTEXT'),
    identityCheck: setting('PILOT_ENABLE_XDS_IDENTITY_CHECK'),
    authenticator,
  });
}

/**
 * Builds the CA, installs its service on `grpc` (grpc-js takes services after binding too) and the
 * secured port's credentials; undefined when there is no CA (ENABLE_CA_SERVER=false, EXTERNAL_CA).
 */
export async function startMeshCa(grpc: Server, authenticator: CallerAuthenticator, opts: MeshSecurityOptions): Promise<MeshCa | undefined> {
  const authority = await createAuthority(opts.trustDomain);
  const federation = opts.federation;
  if (!authority) {
    if (federation) log.warn('SPIFFE_BUNDLE_ENDPOINTS has no effect: without the CA server there is no secured port to trust the federated roots on');
    return undefined;
  }
  if (federation) {
    try {
      await federation.start(authority);
    } catch (e) {
      authority.close();
      throw e;
    }
  }
  const formerTrustDomains = [...new Set([...(opts.trustDomainAliases ?? []), 'cluster.local'])].filter((td) => td !== opts.trustDomain);
  new CertificateService({ authority, authenticator, defaultTtlMs: setting('DEFAULT_WORKLOAD_CERT_TTL'), maxTtlMs: setting('MAX_WORKLOAD_CERT_TTL'), formerTrustDomains }).install(grpc);
  authority.startRotator();
  const provider = setting('PILOT_CERT_PROVIDER');
  if (provider !== 'meshd') log.warn(`PILOT_CERT_PROVIDER=${provider} is not implemented; the mesh CA issues the discovery server's certificate`);
  const hosts = servingHosts(opts.namespace, setting('MESHD_CUSTOM_HOST'));
  const securePort = await SecurePortCredentials.create({ authority, hosts, ...(federation ? { federatedPem: () => federation.bundles.pem } : {}) });
  federation?.bundles.on('update', () => securePort.retrust());
  return {
    authority,
    securePort,
    close: () => {
      authority.close();
      securePort.close();
    },
  };
}

async function createAuthority(trustDomain: string): Promise<MeshAuthority | undefined> {
  if (!setting('ENABLE_CA_SERVER')) {
    log.info('ENABLE_CA_SERVER=false: no CA server and no secured gRPC port');
    return undefined;
  }
  const external = setting('EXTERNAL_CA');
  if (external) {
    log.error(`EXTERNAL_CA=${external} is not implemented (no registration authority towards the orchestrator or another mesh CA): the CA server is off, and so is the secured gRPC port`);
    return undefined;
  }
  if (setting('ORCH_SIGNER')) log.warn(`ORCH_SIGNER=${setting('ORCH_SIGNER')} is not implemented: it only applies with EXTERNAL_CA; the mesh CA signs`);
  return MeshAuthority.create({
    trustDomain,
    pluggedInDir: setting('ROOT_CA_DIR'),
    selfSignedDir: selfSignedDir(),
    selfSignedTtlMs: setting('AUTHORITY_SELF_SIGNED_CA_CERT_TTL'),
    rsaKeySize: setting('AUTHORITY_SELF_SIGNED_CA_RSA_KEY_SIZE'),
    checkIntervalMs: setting('AUTHORITY_SELF_SIGNED_ROOT_CERT_CHECK_INTERVAL'),
    gracePercentile: setting('AUTHORITY_SELF_SIGNED_ROOT_CERT_GRACE_PERIOD_PERCENTILE'),
    jitter: setting('AUTHORITY_ENABLE_JITTER_FOR_ROOT_CERT_ROTATOR'),
  });
}
