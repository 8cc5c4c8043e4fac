// The connection manager's side of its access logs: the record of each request, made only when
// the HCM has access logs, reachable from the request (filters, router) and from the response
// (the connection manager's local replies and stream timeouts), and logged once when the
// response closes: completed, reset by the proxy, or ended by the client (DC).
import { Http2ServerResponse } from 'node:http2';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import type { LocalReply } from '../../envoy/filter.js';
import type { StreamRequest } from '../../envoy/request.js';
import { ResponseFlag } from '../../envoy/response-flags.js';
import { requestComplete, type DownstreamRequest, type DownstreamResponse } from '../http-codec.js';
import type { AccessLogs } from './access-logs.js';
import { StreamInfo, type DownstreamInfo } from './record.js';
import { connectionInfo } from './connection.js';
import { normalizeIp } from '../../envoy/matchers.js';
import { connectionDestination } from '../original-dst.js';

const STREAM_INFO = Symbol('streamInfo');

/** A response (or an upgrade's socket) of a logging connection manager carries its record. */
interface Logged {
  [STREAM_INFO]?: StreamInfo;
}

/** The record of the stream answered through `res` (a response, or an upgrade's socket), if its connection manager logs. */
export function streamInfoOf(res: DownstreamResponse | Duplex): StreamInfo | undefined {
  return (res as Logged)[STREAM_INFO];
}

function downstreamOf(sreq: StreamRequest, socket: Socket): DownstreamInfo {
  return { socket, directRemote: sreq.source, remote: sreq.remote, local: sreq.destination, requestedServerName: sreq.requestedServerName, peer: sreq.peer };
}

function byteLength(chunk: unknown): number {
  return typeof chunk === 'string' ? Buffer.byteLength(chunk) : chunk instanceof Uint8Array ? chunk.byteLength : 0;
}

/**
 * %BYTES_SENT%: the response body bytes, counted as they are written. node:http2's end() writes
 * its chunk through write(); node:http's does not.
 */
function countBytesSent(res: DownstreamResponse, info: StreamInfo): void {
  const write = res.write;
  res.write = function (this: DownstreamResponse, chunk: unknown, ...rest: unknown[]): boolean {
    info.bytesSent += byteLength(chunk);
    return Reflect.apply(write, this, [chunk, ...rest]) as boolean;
  } as typeof res.write;
  if (res instanceof Http2ServerResponse) return;
  const end = res.end;
  res.end = function (this: DownstreamResponse, chunk?: unknown, ...rest: unknown[]): DownstreamResponse {
    if (typeof chunk !== 'function') info.bytesSent += byteLength(chunk);
    return Reflect.apply(end, this, [chunk, ...rest]) as DownstreamResponse;
  } as typeof res.end;
}

/** Starts the record of a request; its line is written when the response closes. */
export function logHttpStream(logs: AccessLogs, sreq: StreamRequest, req: DownstreamRequest, res: DownstreamResponse, socket: Socket): void {
  const info = new StreamInfo(downstreamOf(sreq, socket), sreq, req.httpVersionMajor === 2 ? 'HTTP/2' : `HTTP/${req.httpVersion}`);
  sreq.streamInfo = info;
  (res as Logged)[STREAM_INFO] = info;
  countBytesSent(res, info);
  if (requestComplete(req)) info.requestComplete();
  else req.once('end', () => info.requestComplete());
  res.once('close', () => {
    info.ended();
    // What went downstream: a gRPC request's local reply is HTTP 200.
    if (res.headersSent) info.responseCode = res.statusCode;
    if (!res.writableFinished && !info.resetByProxy) {
      info.setResponseFlag(ResponseFlag.DownstreamConnectionTermination);
      info.responseCodeDetails ??= 'downstream_remote_disconnect';
    }
    logs.log(info);
  });
}

/**
 * The line of an HTTP/1.1 request answered before it was parsed (a codec error, a head that never
 * all arrived): only the connection is known, so the request's operators show `-`.
 */
export function logUnparsedRequest(logs: AccessLogs, socket: Duplex, reply: LocalReply): void {
  const s = socket as Socket;
  const info = connectionInfo(s, { address: normalizeIp(s.remoteAddress ?? ''), port: s.remotePort ?? 0 }, connectionDestination(s), 'HTTP/1.1');
  info.localReply(reply);
  info.bytesSent = Buffer.byteLength(reply.body);
  info.ended();
  logs.log(info);
}

/** Starts the record of an upgrade request (WebSocket); its line is written when the connection closes. */
export function logUpgradeStream(logs: AccessLogs, sreq: StreamRequest, req: DownstreamRequest, socket: Duplex): void {
  const connection = req.socket as Socket;
  const info = new StreamInfo(downstreamOf(sreq, connection), sreq, `HTTP/${req.httpVersion}`);
  sreq.streamInfo = info;
  (socket as Logged)[STREAM_INFO] = info;
  info.requestComplete();
  socket.once('close', () => {
    info.ended();
    // The connection is the upgrade's own: its bytes, the handshake's included.
    info.bytesReceived = connection.bytesRead;
    info.bytesSent = connection.bytesWritten;
    logs.log(info);
  });
}

/** A local reply of the connection manager or the router, recorded before it is sent; one to a response already begun is a reset. */
export function recordLocalReply(res: DownstreamResponse | Duplex, reply: LocalReply): void {
  const info = streamInfoOf(res);
  if (!info) return;
  if ('headersSent' in res && res.headersSent) info.proxyReset(reply.responseFlag ?? 0, reply.details);
  else info.localReply(reply);
}
