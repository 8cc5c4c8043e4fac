// JwksService on grpc-js: the server each hop installs (the discovery server decides, the agent
// relays), and the transport of the agent's client over its channel to the discovery server,
// which carries TLS when XDS_ROOT_CA is set. The client itself is in jwks-service.ts.
import { create } from '@bufbuild/protobuf';
import { credentials as grpcCredentials, status, type ChannelCredentials, type Client, type Server, type ServerUnaryCall, type sendUnaryData, type ServiceError } from '@grpc/grpc-js';
import { JwksService, RequestRefreshResponseSchema, type RequestRefreshRequest, type RequestRefreshResponse } from '../gen/mesh/v1/jwks_pb.js';
import { grpcClient, grpcServiceDefinition } from './grpc-service.js';
import { malformedRefresh, type RefreshHandler, type RefreshTransport } from './jwks-service.js';

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

/** RequestRefresh on a grpc-js channel: the agent's, whose channel to the discovery server may be TLS. */
export function grpcRefreshTransport(address: string, credentials: ChannelCredentials = grpcCredentials.createInsecure()): RefreshTransport {
  const grpc = grpcClient(JwksService, address, credentials) as JwksGrpcClient;
  return {
    call: (req, deadlineMs) =>
      new Promise((resolve, reject) =>
        grpc.requestRefresh(req, { deadline: Date.now() + deadlineMs }, (err, res) => (err || !res ? reject(new Error(err ? `${err.code} ${err.details}` : 'no response')) : resolve(res))),
      ),
    close: () => grpc.close(),
  };
}
