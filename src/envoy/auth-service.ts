// envoy.service.auth.v3.Authorization: the external authorizer's gRPC API. A channel per authorizer
// address (one connection each, shared by every compiled ext_authz config that names it).
import { Authorization, type CheckRequest, type CheckResponse } from '../gen/envoy/service/auth/v3/external_auth_pb.js';
import { GrpcChannel, GrpcError, GrpcStatus } from './grpc-call.js';

/** Most authorizer channels kept open; the oldest is closed beyond that. */
const MAX_CHANNELS = 64;
const channels = new Map<string, GrpcChannel>();

function channelFor(address: string, authority: string): GrpcChannel {
  const key = `${address}|${authority}`;
  let c = channels.get(key);
  if (!c) {
    if (channels.size >= MAX_CHANNELS) {
      const [oldest, old] = channels.entries().next().value as [string, GrpcChannel];
      channels.delete(oldest);
      old.close();
    }
    c = new GrpcChannel(address, authority || undefined);
    channels.set(key, c);
  }
  return c;
}

/** Calls Check on the authorizer at `address` (host:port); rejects on a transport error or the deadline. */
export async function authorizationCheck(address: string, authority: string, req: CheckRequest, timeoutMs: number): Promise<CheckResponse> {
  try {
    return await channelFor(address, authority).unary(Authorization.method.check, req, timeoutMs);
  } catch (e) {
    if (!(e instanceof GrpcError)) throw e;
    throw new Error(`${e.code === GrpcStatus.DEADLINE_EXCEEDED ? 'deadline exceeded' : `gRPC status ${e.code}`}: ${e.details}`);
  }
}
