// JwksService on grpc-js: the server each hop installs (the discovery server decides, the agent
// relays), and the agent's client over its channel to the discovery server, which carries TLS
// when XDS_ROOT_CA is set. The proxy's client is in jwks-service.ts.
import { create } from '@bufbuild/protobuf';
import { credentials as grpcCredentials, status, type ChannelCredentials, type Client, type Server, type ServerUnaryCall, type sendUnaryData, type ServiceError } from '@grpc/grpc-js';
import { JwksService, RequestRefreshRequestSchema, RequestRefreshResponseSchema, type RequestRefreshRequest, type RequestRefreshResponse } from '../gen/mesh/v1/jwks_pb.js';
import { grpcClient, grpcServiceDefinition } from './grpc-service.js';
import { JWKS_REFRESH_DEADLINE_MS, malformedRefresh, verdictOf, type RefreshHandler, type RefreshVerdict } from './jwks-service.js';

/**
 * Adds JwksService to a grpc-js server (before it binds). Malformed requests (empty or oversized
 * issuer/kid) are INVALID_ARGUMENT; the handler's refusals are answers, not errors.
 */
export function serveJwksService(server: Server, handler: RefreshHandler): void {
  server.addService(grpcServiceDefinition(JwksService), {
    requestRefresh: (call: ServerUnaryCall<RequestRefreshRequest, RequestRefreshResponse>, done: sendUnaryData<RequestRefreshResponse>) => {
      const malformed = malformedRefresh(call.request);
      if (malformed) {
        done({ code: status.INVALID_ARGUMENT, details: malformed });
        return;
      }
      Promise.resolve()
        .then(() => handler(call.request))
        .then(
          (v) => done(null, create(RequestRefreshResponseSchema, v)),
          (e: unknown) => done({ code: status.INTERNAL, details: (e as Error).message }),
        );
    },
  });
}

interface JwksGrpcClient extends Client {
  requestRefresh(req: RequestRefreshRequest, options: { deadline: number }, cb: (err: ServiceError | null, res?: RequestRefreshResponse) => void): unknown;
}

/** A JwksService client on a grpc-js channel; one channel, reused for every request. */
export class JwksRefreshGrpcClient {
  private readonly grpc: JwksGrpcClient;

  constructor(
    readonly address: string,
    credentials: ChannelCredentials = grpcCredentials.createInsecure(),
  ) {
    this.grpc = grpcClient(JwksService, address, credentials) as JwksGrpcClient;
  }

  /** The answer of the server; rejects on a transport or server error, or after the deadline. */
  requestRefresh(issuer: string, kid: string, deadlineMs = JWKS_REFRESH_DEADLINE_MS): Promise<RefreshVerdict> {
    return new Promise((resolve, reject) => {
      this.grpc.requestRefresh(create(RequestRefreshRequestSchema, { issuer, kid }), { deadline: Date.now() + deadlineMs }, (err, res) => {
        if (err) reject(new Error(`JwksService at ${this.address}: ${err.code} ${err.details}`));
        else resolve(verdictOf(res));
      });
    });
  }

  close(): void {
    this.grpc.close();
  }
}
