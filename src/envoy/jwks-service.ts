// The mesh's JwksService (proto/mesh/v1/jwks.proto) on grpc-js: the server side each hop installs
// (the discovery server decides, the agent relays), the client the proxy and the agent call, and
// the per-issuer cooldown both the agent and the proxy apply before asking.
//
// A refresh request is advisory: it carries an issuer and a kid, returns no keys, and changes no
// decision. Whatever it causes reaches the proxy as an ordinary xDS push.
import { create } from '@bufbuild/protobuf';
import { credentials as grpcCredentials, status, type ChannelCredentials, type Client, type Server, type ServerUnaryCall, type sendUnaryData, type ServiceError } from '@grpc/grpc-js';
import {
  JwksService,
  RequestRefreshRequestSchema,
  RequestRefreshResponseSchema,
  type RequestRefreshRequest,
  type RequestRefreshResponse,
} from '../gen/mesh/v1/jwks_pb.js';
import { grpcClient, grpcServiceDefinition } from './grpc-service.js';

export type { RequestRefreshRequest, RequestRefreshResponse };

/** What one hop answers for a refresh request. */
export type RefreshVerdict = { readonly accepted: boolean; readonly reason: string };
export type RefreshHandler = (req: RequestRefreshRequest) => RefreshVerdict | Promise<RefreshVerdict>;

/** Longest issuer or kid accepted; both are names, and a kid comes from a token header. */
const MAX_FIELD_LENGTH = 1024;

/** How long a caller waits for an answer before giving up (the request is advisory). */
export const JWKS_REFRESH_DEADLINE_MS = 5_000;

/**
 * Adds JwksService to a grpc-js server (before it binds). Malformed requests (empty or oversized
 * issuer/kid) are INVALID_ARGUMENT; the handler's refusals are answers, not errors.
 */
export function serveJwksService(server: Server, handler: RefreshHandler): void {
  server.addService(grpcServiceDefinition(JwksService), {
    requestRefresh: (call: ServerUnaryCall<RequestRefreshRequest, RequestRefreshResponse>, done: sendUnaryData<RequestRefreshResponse>) => {
      const { issuer, kid } = call.request;
      const bad = !issuer || issuer.length > MAX_FIELD_LENGTH ? 'issuer' : !kid || kid.length > MAX_FIELD_LENGTH ? 'kid' : undefined;
      if (bad) {
        done({ code: status.INVALID_ARGUMENT, details: `${bad}: required, at most ${MAX_FIELD_LENGTH} characters` });
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
  requestRefresh(
    req: RequestRefreshRequest,
    options: { deadline: number },
    cb: (err: ServiceError | null, res?: RequestRefreshResponse) => void,
  ): unknown;
}

/** A JwksService client; one channel, reused for every request. */
export class JwksRefreshClient {
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
        else resolve({ accepted: res?.accepted ?? false, reason: res?.reason ?? '' });
      });
    });
  }

  close(): void {
    this.grpc.close();
  }
}

/**
 * At most one pass per key (issuer) per window. Keys are bounded: the map is pruned of expired
 * entries once it grows, so a caller naming many issuers cannot grow it without bound either.
 */
export class IssuerCooldown {
  private readonly last = new Map<string, number>();

  constructor(
    readonly windowMs: number,
    private readonly now: () => number = Date.now,
    private readonly maxKeys = 1024,
  ) {}

  /** True (and the window starts) when `key` has not passed within the window. */
  take(key: string): boolean {
    const now = this.now();
    const at = this.last.get(key);
    if (at !== undefined && now - at < this.windowMs) return false;
    if (this.last.size >= this.maxKeys) {
      for (const [k, t] of this.last) if (now - t >= this.windowMs) this.last.delete(k);
      if (this.last.size >= this.maxKeys) return false;
    }
    this.last.set(key, now);
    return true;
  }
}
