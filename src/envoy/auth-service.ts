// envoy.service.auth.v3.Authorization: the external authorizer's gRPC API. A client per authorizer
// address (one channel each, shared by every compiled ext_authz config that names it).
import { credentials as grpcCredentials, type ServiceError } from '@grpc/grpc-js';
import { Authorization, type CheckRequest, type CheckResponse } from '../gen/envoy/service/auth/v3/external_auth_pb.js';
import { grpcClient } from './grpc-service.js';

interface AuthorizationGrpcClient {
  check(req: CheckRequest, options: { deadline: number }, cb: (err: ServiceError | null, res?: CheckResponse) => void): unknown;
}

/** Most authorizer channels kept open; the oldest is closed beyond that. */
const MAX_CHANNELS = 64;
const clients = new Map<string, AuthorizationGrpcClient & { close(): void }>();

function clientFor(address: string, authority: string): AuthorizationGrpcClient {
  const key = `${address}|${authority}`;
  let c = clients.get(key);
  if (!c) {
    if (clients.size >= MAX_CHANNELS) {
      const [oldest, old] = clients.entries().next().value as [string, { close(): void }];
      clients.delete(oldest);
      old.close();
    }
    c = grpcClient(Authorization, address, grpcCredentials.createInsecure(), authority ? { 'grpc.default_authority': authority } : {}) as unknown as AuthorizationGrpcClient & { close(): void };
    clients.set(key, c);
  }
  return c;
}

/** Calls Check on the authorizer at `address` (host:port); rejects on a transport error or the deadline. */
export function authorizationCheck(address: string, authority: string, req: CheckRequest, timeoutMs: number): Promise<CheckResponse> {
  return new Promise((resolve, reject) => {
    clientFor(address, authority).check(req, { deadline: Date.now() + timeoutMs }, (err, res) => {
      if (err || !res) reject(new Error(err ? `${err.code === 4 ? 'deadline exceeded' : `gRPC status ${err.code}`}: ${err.details}` : 'no response'));
      else resolve(res);
    });
  });
}
