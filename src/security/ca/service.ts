// mesh.v1.auth.MeshCertificateService/CreateCertificate on grpc-js (proto/mesh/v1/ca.proto).
// Order of checks and what each failure counts: every request is a CSR received; then the caller
// is authenticated (UNAUTHENTICATED), the CSR parsed and verified (INVALID_ARGUMENT), its identity
// extracted (INVALID_ARGUMENT) and matched to the caller's (PERMISSION_DENIED), and signed.
import { create } from '@bufbuild/protobuf';
import { status, type sendUnaryData, type Server, type ServerUnaryCall, type ServiceError } from '@grpc/grpc-js';
import { scope } from '../../common/log.js';
import { counter } from '../../common/metrics.js';
import { MeshCertificateResponseSchema, MeshCertificateService, type MeshCertificateRequest, type MeshCertificateResponse } from '../../gen/mesh/v1/ca_pb.js';
import { grpcServiceDefinition } from '../../envoy/grpc-service.js';
import { parseSpiffeId, spiffeId, type Identity } from '../spiffe.js';
import { AuthenticationError, type CallCredentials, type CallerAuthenticator } from './authenticate.js';
import type { MeshAuthority } from './authority.js';
import { readCsr, type CsrNames } from './pki.js';

const log = scope('serverca');

export interface CertificateServiceOptions {
  readonly authority: MeshAuthority;
  readonly authenticator: CallerAuthenticator;
  /** DEFAULT_WORKLOAD_CERT_TTL, ms. */
  readonly defaultTtlMs: number;
  /** MAX_WORKLOAD_CERT_TTL, ms. */
  readonly maxTtlMs: number;
  /**
   * Trust domains a workload may still name after the mesh's changed (trustDomainAliases and
   * cluster.local): a CSR for the caller's namespace and account under one of them gets the
   * caller's identity, as the Go mesh's CA signs the caller's identities whatever the CSR says.
   */
  readonly formerTrustDomains?: readonly string[];
}

/** The credentials a grpc-js call carries: its bearer token and the client certificate TLS verified. */
export function callCredentials(call: Pick<ServerUnaryCall<unknown, unknown>, 'metadata' | 'getAuthContext'>): CallCredentials {
  const auth = call.metadata.get('authorization')[0];
  const cert = call.getAuthContext().sslPeerCertificate;
  return { authorization: typeof auth === 'string' ? auth : undefined, peerCertificate: cert?.raw };
}

function refuse(code: status, details: string): ServiceError {
  return Object.assign(new Error(details), { code, details, metadata: undefined as never });
}

export class CertificateService {
  constructor(private readonly opts: CertificateServiceOptions) {}

  /** Adds the service to a grpc-js server (before it binds). */
  install(server: Server): void {
    server.addService(grpcServiceDefinition(MeshCertificateService), {
      createCertificate: (call: ServerUnaryCall<MeshCertificateRequest, MeshCertificateResponse>, done: sendUnaryData<MeshCertificateResponse>) => {
        this.createCertificate(call.request, callCredentials(call)).then(
          (chain) => done(null, create(MeshCertificateResponseSchema, { certChain: chain })),
          (e: ServiceError) => done(e),
        );
      },
    });
  }

  /** The signed chain (PEM per certificate), or a ServiceError with the status and reason. */
  async createCertificate(req: MeshCertificateRequest, creds: CallCredentials): Promise<string[]> {
    counter('authority_server_csr_count').inc();
    let caller;
    try {
      caller = await this.opts.authenticator.authenticate(creds);
    } catch (e) {
      if (!(e instanceof AuthenticationError)) throw e;
      counter('authority_server_authentication_failure_count').inc();
      log.warn(`CSR refused: authentication failed: ${e.message}`);
      throw refuse(status.UNAUTHENTICATED, `authentication failed: ${e.message}`);
    }
    let csr: CsrNames;
    try {
      csr = await readCsr(req.csr);
    } catch (e) {
      counter('authority_server_csr_parsing_err_count').inc();
      throw refuse(status.INVALID_ARGUMENT, `CSR: ${(e as Error).message}`);
    }
    const allowed = new Set(caller.identities.map(spiffeId));
    const asked = csr.uris.filter((u) => parseSpiffeId(u) !== undefined);
    if (asked.length === 0 || asked.length !== csr.uris.length || csr.dnsNames.length > 0) {
      counter('authority_server_id_extraction_err_count').inc();
      throw refuse(status.INVALID_ARGUMENT, `CSR: expected exactly SPIFFE URI subject alternative names (spiffe://<trust domain>/ns/<namespace>/sa/<service account>), got ${JSON.stringify([...csr.uris, ...csr.dnsNames])}`);
    }
    const issued = asked.map((u) => (allowed.has(u) ? u : this.renamed(u, caller.identities)));
    const foreign = asked.filter((_, i) => !allowed.has(issued[i]!));
    if (foreign.length > 0) {
      counter('authority_server_authentication_failure_count').inc();
      const reason = `the CSR asks for ${foreign.join(', ')} but the caller (${caller.method}) is ${[...allowed].join(', ')}`;
      log.warn(`CSR refused: ${reason}`);
      throw refuse(status.PERMISSION_DENIED, reason);
    }
    const ttlMs = this.ttl(Number(req.validityDuration) * 1000);
    try {
      const uris = [...new Set(issued)];
      const chain = await this.opts.authority.issue({ publicKey: csr.publicKey, uris, dnsNames: [], ttlMs });
      counter('authority_server_success_cert_issuance_count').inc();
      if (issued.some((u, i) => u !== asked[i])) log.info(`the CSR asks for ${asked.join(', ')}, a former trust domain: issued ${uris.join(', ')} (${caller.method})`);
      log.debug(`issued a certificate for ${uris.join(', ')} (${caller.method}), valid ${Math.round(ttlMs / 1000)}s`);
      return chain.map((c) => c.toString('pem') + '\n');
    } catch (e) {
      counter('authority_server_csr_sign_err_count').inc();
      log.error(`signing failed: ${(e as Error).message}`);
      throw refuse(status.INTERNAL, `signing failed: ${(e as Error).message}`);
    }
  }

  /** The caller's identity a CSR names under a former trust domain; else the id as asked. */
  private renamed(uri: string, identities: readonly Identity[]): string {
    const id = parseSpiffeId(uri);
    if (!id || !this.opts.formerTrustDomains?.includes(id.trustDomain)) return uri;
    const same = identities.find((c) => c.namespace === id.namespace && c.serviceAccount === id.serviceAccount);
    return same ? spiffeId(same) : uri;
  }

  /** Non-positive = the default; above the maximum = the maximum. */
  private ttl(askedMs: number): number {
    if (!(askedMs > 0)) return this.opts.defaultTtlMs;
    return Math.min(askedMs, this.opts.maxTtlMs);
  }
}
