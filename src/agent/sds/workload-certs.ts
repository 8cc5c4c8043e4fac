// The agent's workload certificates from its settings: where they come from (the CA at CA_ADDR,
// or mounted files), the SDS server that hands them to the proxy, and the TLS credentials of the
// agent's own xDS connection (its workload certificate, renewed in place, trusting XDS_ROOT_CA and
// the mesh roots of the latest secret, so a CA root rollover does not cut the connection).
import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { experimental, type ChannelCredentials } from '@grpc/grpc-js';
import { setting } from '../../common/env.js';
import { scope } from '../../common/log.js';
import type { KeyAlgorithm } from '../../security/ca/pki.js';
import { spiffeId, workloadIdentity } from '../../security/spiffe.js';
import { splitHostPort } from '../bootstrap.js';
import { CERT_FILES, SecretManager, type SecretSource, type WorkloadSecret } from './secret-manager.js';
import { SDS_SOCKET_PATH, SdsServer } from './server.js';
import { FederatedBundles } from '../../security/federation/bundle-fetcher.js';
import { parseBundleEndpoints } from '../../security/federation/bundle-format.js';

const log = scope('sds');

/** Where the workload's token is mounted, per JWT_POLICY (relative to the agent's work directory). */
export const TOKEN_PATHS: Record<string, string> = {
  'third-party-jwt': './var/run/secrets/tokens/mesh-token',
  'first-party-jwt': './var/run/secrets/orchestrator.io/serviceaccount/token',
};
/** FILE_MOUNTED_CERTS reads key.pem, cert-chain.pem and root-cert.pem from here. */
export const MOUNTED_CERTS_DIR = './etc/certs';

export interface WorkloadCerts {
  readonly secrets: SecretManager;
  readonly sds: SdsServer;
  /** Credentials for the discovery server's TLS port; undefined when XDS_ROOT_CA is not set. */
  readonly xdsCredentials: ChannelCredentials | undefined;
  close(): void;
}

export interface WorkloadCertsInputs {
  readonly discoveryAddress: string;
  readonly namespace: string;
  readonly serviceAccount: string | undefined;
}

function readRoot(path: string, what: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch (e) {
    throw new Error(`${what}=${JSON.stringify(path)}: cannot read the root certificate: ${(e as Error).message}`);
  }
}

function keyAlgorithm(): KeyAlgorithm {
  const v = setting('ECC_SIGNATURE_ALGORITHM');
  if (v === '') return { kind: 'RSA', bits: 2048 };
  if (v === 'ECDSA') return { kind: 'ECDSA', curve: 'P-256' };
  throw new Error(`ECC_SIGNATURE_ALGORITHM=${JSON.stringify(v)}: expected ECDSA or empty (RSA)`);
}

/** The root the CA's certificate must chain to: CA_ROOT_CA, else XDS_ROOT_CA, else PROV_CERT's root. */
function caRoot(): string | undefined {
  const ca = setting('CA_ROOT_CA');
  if (ca) return readRoot(ca, 'CA_ROOT_CA');
  const xds = setting('XDS_ROOT_CA');
  if (xds && xds !== 'SYSTEM') return readRoot(xds, 'XDS_ROOT_CA');
  const prov = setting('PROV_CERT');
  if (prov && existsSync(join(prov, CERT_FILES.root))) return readRoot(join(prov, CERT_FILES.root), 'PROV_CERT');
  return undefined;
}

function source(inputs: WorkloadCertsInputs): SecretSource | undefined {
  if (setting('FILE_MOUNTED_CERTS')) return { kind: 'files', dir: resolve(MOUNTED_CERTS_DIR) };
  const provider = setting('CA_PROVIDER');
  if (provider !== 'Authority') throw new Error(`CA_PROVIDER=${JSON.stringify(provider)}: only Authority (the mesh CA) is implemented`);
  const rootPem = caRoot();
  if (rootPem === undefined) return undefined;
  const address = setting('CA_ADDR') || inputs.discoveryAddress;
  const policy = setting('JWT_POLICY');
  const tokenPath = resolve(TOKEN_PATHS[policy] ?? TOKEN_PATHS['third-party-jwt']!);
  const prov = setting('PROV_CERT');
  return {
    kind: 'ca',
    ca: { address, rootPem, serverName: splitHostPort(address, 'CA_ADDR').host },
    spiffeId: spiffeId(workloadIdentity(setting('TRUST_DOMAIN'), inputs.namespace, inputs.serviceAccount)),
    token: () => {
      try {
        return readFileSync(tokenPath, 'utf8').trim();
      } catch (e) {
        throw new Error(`no workload token at ${tokenPath} (JWT_POLICY=${policy}): ${(e as Error).message}`);
      }
    },
    ...(prov ? { provisionedDir: prov } : {}),
    keyAlgorithm: keyAlgorithm(),
    pkcs8: setting('PKCS8_KEY'),
    ttlMs: setting('SECRET_TTL'),
  };
}

/** A grpc-js certificate provider fed by the secret manager (identity) and the trusted roots. */
class SecretCertificateProvider implements experimental.CertificateProvider {
  private readonly ca = new Set<experimental.CaCertificateUpdateListener>();
  private readonly identity = new Set<experimental.IdentityCertificateUpdateListener>();
  private latest: WorkloadSecret | undefined;

  constructor(
    private readonly xdsRoot: string,
    secrets: SecretManager,
  ) {
    this.latest = secrets.secret;
    secrets.on('update', (s) => {
      this.latest = s;
      for (const l of this.ca) l(this.caUpdate());
      for (const l of this.identity) l(this.identityUpdate());
    });
  }

  private caUpdate(): experimental.CaCertificateUpdate {
    return { caCertificate: Buffer.from(this.xdsRoot + '\n' + (this.latest?.rootPem ?? '')) };
  }

  private identityUpdate(): experimental.IdentityCertificateUpdate | null {
    return this.latest ? { certificate: Buffer.from(this.latest.chainPem), privateKey: Buffer.from(this.latest.keyPem) } : null;
  }

  addCaCertificateListener(l: experimental.CaCertificateUpdateListener): void {
    this.ca.add(l);
    l(this.caUpdate());
  }

  removeCaCertificateListener(l: experimental.CaCertificateUpdateListener): void {
    this.ca.delete(l);
  }

  addIdentityCertificateListener(l: experimental.IdentityCertificateUpdateListener): void {
    this.identity.add(l);
    l(this.identityUpdate());
  }

  removeIdentityCertificateListener(l: experimental.IdentityCertificateUpdateListener): void {
    this.identity.delete(l);
  }
}

/**
 * Starts the certificates and the SDS server when the agent has a way to get them; undefined (and
 * a log line saying why) when it has none, which is the plaintext local path.
 */
export async function startWorkloadCerts(inputs: WorkloadCertsInputs): Promise<WorkloadCerts | undefined> {
  const endpoints = parseBundleEndpoints(setting('SPIFFE_BUNDLE_ENDPOINTS'));
  const src = source(inputs);
  if (!src) {
    if (endpoints.length > 0) log.warn('SPIFFE_BUNDLE_ENDPOINTS has no effect: without a workload certificate there is no SDS server to serve the federated roots');
    log.info('no workload certificate: no CA root is known (CA_ROOT_CA, XDS_ROOT_CA or PROV_CERT) and FILE_MOUNTED_CERTS is off; no SDS server');
    return undefined;
  }
  const authProvider = setting('XDS_AUTH_PROVIDER');
  if (authProvider) log.warn(`XDS_AUTH_PROVIDER=${authProvider} is not implemented: the agent authenticates to the discovery server with its workload certificate`);
  const output = setting('OUTPUT_CERTS');
  const secrets = new SecretManager({ source: src, graceRatio: setting('SECRET_GRACE_PERIOD_RATIO'), ...(output ? { outputDir: output } : {}) });
  await secrets.start();
  const federated = endpoints.length > 0 ? new FederatedBundles({ endpoints, caPem: () => secrets.secret!.rootPem }) : undefined;
  await federated?.start();
  const sds = new SdsServer(secrets, resolve(SDS_SOCKET_PATH), federated);
  await sds.start();
  const xdsRoot = setting('XDS_ROOT_CA');
  const xdsCredentials =
    xdsRoot && xdsRoot !== 'SYSTEM'
      ? (() => {
          const provider = new SecretCertificateProvider(readRoot(xdsRoot, 'XDS_ROOT_CA'), secrets);
          return experimental.createCertificateProviderChannelCredentials(provider, provider);
        })()
      : undefined;
  return {
    secrets,
    sds,
    xdsCredentials,
    close: () => {
      sds.close();
      federated?.close();
      secrets.close();
    },
  };
}
