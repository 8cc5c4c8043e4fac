// The agent's client of mesh.v1.auth.MeshCertificateService (proto/mesh/v1/ca.proto): TLS to the
// CA verified against the expected root, a bearer token or the current mesh certificate as the
// credential. One request per call; the caller schedules retries.
import { create } from '@bufbuild/protobuf';
import { credentials, Metadata, type ChannelCredentials, type Client, type ServiceError } from '@grpc/grpc-js';
import { counter } from '../../common/metrics.js';
import { MeshCertificateRequestSchema, MeshCertificateService, type MeshCertificateRequest, type MeshCertificateResponse } from '../../gen/mesh/v1/ca_pb.js';
import { grpcClient } from '../../envoy/grpc-service.js';

interface CaGrpcClient extends Client {
  createCertificate(req: MeshCertificateRequest, md: Metadata, options: { deadline: number }, cb: (err: ServiceError | null, res?: MeshCertificateResponse) => void): unknown;
}

export interface CaClientOptions {
  /** host:port of the CA (CA_ADDR, default the discovery address). */
  readonly address: string;
  /** PEM of the root(s) the CA's serving certificate must chain to. */
  readonly rootPem: string;
  /** The name the serving certificate must carry; default the address's host. */
  readonly serverName?: string;
  readonly deadlineMs?: number;
}

/** The credential of one request: a token, or a certificate and its key (renewal, provisioned certs). */
export type CaCredential = { readonly token: string } | { readonly keyPem: string; readonly chainPem: string };

export class CaError extends Error {
  constructor(
    readonly code: number,
    message: string,
  ) {
    super(message);
  }
}

export async function requestCertificate(opts: CaClientOptions, cred: CaCredential, csrPem: string, ttlSeconds: number): Promise<string[]> {
  const tls: ChannelCredentials =
    'token' in cred ? credentials.createSsl(Buffer.from(opts.rootPem)) : credentials.createSsl(Buffer.from(opts.rootPem), Buffer.from(cred.keyPem), Buffer.from(cred.chainPem));
  const channelOptions = opts.serverName ? { 'grpc.ssl_target_name_override': opts.serverName, 'grpc.default_authority': opts.serverName } : {};
  const client = grpcClient(MeshCertificateService, opts.address, tls, channelOptions) as CaGrpcClient;
  const md = new Metadata();
  if ('token' in cred) md.set('authorization', `Bearer ${cred.token}`);
  counter('num_outgoing_requests').inc({ request_type: 'csr' });
  const started = Date.now();
  try {
    return await new Promise<string[]>((resolve, reject) => {
      const req = create(MeshCertificateRequestSchema, { csr: csrPem, validityDuration: BigInt(Math.round(ttlSeconds)) });
      client.createCertificate(req, md, { deadline: Date.now() + (opts.deadlineMs ?? 10_000) }, (err, res) => {
        if (err) reject(new CaError(err.code, `CA ${opts.address}: ${err.details || err.message}`));
        else if (!res || res.certChain.length === 0) reject(new CaError(13, `CA ${opts.address}: empty certificate chain`));
        else resolve(res.certChain);
      });
    });
  } catch (e) {
    counter('num_failed_outgoing_requests').inc({ request_type: 'csr' });
    throw e;
  } finally {
    counter('outgoing_latency').inc({ request_type: 'csr' }, Date.now() - started);
    client.close();
  }
}
