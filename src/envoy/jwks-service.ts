// The mesh's JwksService (proto/mesh/v1/jwks.proto): the client (on node:http2, grpc-call.ts, so a
// proxy loads no grpc-js; the agent gives it a grpc-js transport), the request check every server
// applies, and the per-issuer cooldown both the agent and the proxy apply before asking. The
// servers, and the agent's transport over its channel to the discovery server, are on grpc-js
// (jwks-grpc.ts).
//
// A refresh request is advisory: it carries an issuer and a kid, returns no keys, and changes no
// decision. Whatever it causes reaches the proxy as an ordinary xDS push.
import { create } from '@bufbuild/protobuf';
import { JwksService, RequestRefreshRequestSchema, type RequestRefreshRequest, type RequestRefreshResponse } from '../gen/mesh/v1/jwks_pb.js';
import { GrpcChannel } from './grpc-call.js';

export type { RequestRefreshRequest, RequestRefreshResponse };

/** What one hop answers for a refresh request. */
export type RefreshVerdict = { readonly accepted: boolean; readonly reason: string };
export type RefreshHandler = (req: RequestRefreshRequest) => RefreshVerdict | Promise<RefreshVerdict>;

/** Longest issuer or kid accepted; both are names, and a kid comes from a token header. */
const MAX_FIELD_LENGTH = 1024;

/** How long a caller waits for an answer before giving up (the request is advisory). */
export const JWKS_REFRESH_DEADLINE_MS = 5_000;

/** Why a request is malformed (`issuer: ...` or `kid: ...`), or undefined. */
export function malformedRefresh({ issuer, kid }: RequestRefreshRequest): string | undefined {
  const bad = !issuer || issuer.length > MAX_FIELD_LENGTH ? 'issuer' : !kid || kid.length > MAX_FIELD_LENGTH ? 'kid' : undefined;
  return bad && `${bad}: required, at most ${MAX_FIELD_LENGTH} characters`;
}

/** How a client makes one RequestRefresh call; rejects with the transport's `<code> <details>`. */
export interface RefreshTransport {
  call(req: RequestRefreshRequest, deadlineMs: number): Promise<RequestRefreshResponse>;
  close(): void;
}

/** The call on node:http2, plaintext: the proxy's, to the agent or the discovery server. */
function http2Transport(address: string): RefreshTransport {
  const channel = new GrpcChannel(address);
  return { call: (req, deadlineMs) => channel.unary(JwksService.method.requestRefresh, req, deadlineMs), close: () => channel.close() };
}

/** A JwksService client; one connection, reused for every request. */
export class JwksRefreshClient {
  constructor(
    readonly address: string,
    private readonly transport: RefreshTransport = http2Transport(address),
  ) {}

  /** The answer of the server; rejects on a transport or server error, or after the deadline. */
  async requestRefresh(issuer: string, kid: string, deadlineMs = JWKS_REFRESH_DEADLINE_MS): Promise<RefreshVerdict> {
    let res: RequestRefreshResponse;
    try {
      res = await this.transport.call(create(RequestRefreshRequestSchema, { issuer, kid }), deadlineMs);
    } catch (e) {
      throw new Error(`JwksService at ${this.address}: ${(e as Error).message}`);
    }
    return { accepted: res.accepted, reason: res.reason };
  }

  close(): void {
    this.transport.close();
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
