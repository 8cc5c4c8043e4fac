// The connection manager's own answers (Envoy's sendLocalReply), and what any response head owes
// a request that has not all arrived: as in Envoy, the stream ends with that response
// (request-guards.ts closeUnreadRequest), counted as downstream_rq_response_before_rq_complete.
import { STATUS_CODES, type OutgoingHttpHeaders } from 'node:http';
import type { Duplex } from 'node:stream';
import { scope } from '../common/log.js';
import type { LocalReply } from '../envoy/filter.js';
import { grpcReply, rawHead, requestComplete, respondHeadersOnly, writeHead, type DownstreamResponse } from './http-codec.js';
import { closeUnreadRequest, type RequestLimits } from './request-guards.js';
import type { StatCounter } from './stats.js';

const log = scope('http');

export interface LocalReplyOptions {
  /** The HCM's server_name (default mesh-proxy). */
  readonly serverName: string;
  readonly alwaysSetRequestIdInResponse: boolean;
  readonly limits: RequestLimits;
  /** downstream_rq_response_before_rq_complete, when the HCM's counters are kept. */
  readonly beforeRequestComplete?: StatCounter;
}

export interface LocalReplies {
  /** A local reply; to a gRPC request it is a gRPC status (headers only, no body). */
  sendLocal(res: DownstreamResponse, reply: LocalReply, requestId: string | undefined, grpc: boolean): void;
  /** The reply alone, for a stream whose end the caller has arranged (a head the codec refused). */
  writeLocal(res: DownstreamResponse, reply: LocalReply, requestId: string | undefined, grpc: boolean): void;
  /** A local reply on the raw socket of an upgrade request, which has no ServerResponse. */
  sendLocalRaw(socket: Duplex, reply: LocalReply, requestId?: string): void;
  /** A response head is about to go downstream: one that starts before its request has all arrived ends the stream with it. */
  responseStarts(res: DownstreamResponse): void;
}

export function localReplies(o: LocalReplyOptions): LocalReplies {
  const { serverName, alwaysSetRequestIdInResponse, limits, beforeRequestComplete } = o;

  /** The headers of a local reply: text/plain body, server, request id. */
  function localHeaders(reply: LocalReply, body: Buffer, requestId: string | undefined): OutgoingHttpHeaders {
    const headers: OutgoingHttpHeaders = { ...reply.headers, 'content-length': body.length, server: serverName };
    if (body.length > 0) headers['content-type'] = 'text/plain';
    if (requestId && alwaysSetRequestIdInResponse) headers['x-request-id'] = requestId;
    log.debug(`local reply ${reply.status} (${reply.details})`);
    return headers;
  }

  function responseStarts(res: DownstreamResponse): void {
    const req = res.req;
    if (requestComplete(req)) return;
    beforeRequestComplete?.inc();
    closeUnreadRequest(req, res, limits);
  }

  function writeLocal(res: DownstreamResponse, reply: LocalReply, requestId: string | undefined, grpc: boolean): void {
    if (grpc) {
      const g = grpcReply(reply);
      const headers: OutgoingHttpHeaders = { ...g.headers, server: serverName };
      if (requestId && alwaysSetRequestIdInResponse) headers['x-request-id'] = requestId;
      log.debug(`local reply ${reply.status} as grpc-status ${String(g.headers['grpc-status'])} (${reply.details})`);
      respondHeadersOnly(res, g.status, headers);
      return;
    }
    const body = Buffer.from(reply.body);
    writeHead(res, reply.status, localHeaders(reply, body, requestId));
    res.end(body);
  }

  return {
    sendLocal(res, reply, requestId, grpc) {
      if (res.headersSent) {
        res.destroy();
        return;
      }
      responseStarts(res);
      writeLocal(res, reply, requestId, grpc);
    },
    writeLocal,
    sendLocalRaw(socket, reply, requestId) {
      const body = Buffer.from(reply.body);
      const headers = { ...localHeaders(reply, body, requestId), connection: 'close' };
      socket.end(Buffer.concat([Buffer.from(rawHead(reply.status, STATUS_CODES[reply.status] ?? '', headers)), body]));
    },
    responseStarts,
  };
}
