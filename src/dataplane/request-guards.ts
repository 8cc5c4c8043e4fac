// What Envoy's downstream codec and connection manager settle before any HTTP filter sees a
// request: header limits (431), a repeated Host (400), the absolute-form request target
// (`GET http://host/path`: the path is the path, the host the authority), an `h2c` upgrade (served
// as a plain HTTP/1.1 request), and the connection of a local reply sent before the request body
// was read (closed, not drained), and the stream timeouts' values and local replies (applied by
// listener/stream-timeouts.ts). Pure decisions plus the one socket action each needs.
import { ServerResponse, type IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import type { ServerHttp2Stream } from 'node:http2';
import type { Duplex } from 'node:stream';
import type { HttpConnectionManager } from '../gen/envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager_pb.js';
import { durationMs, timerMs } from '../common/duration.js';
import type { LocalReply } from '../envoy/filter.js';
import { ResponseFlag } from '../envoy/response-flags.js';
import { requestComplete, type DownstreamRequest, type DownstreamResponse } from './http-codec.js';
import { connectionLimitsOf } from './connection-limits.js';
import { lowerCase } from '../common/lower-case.js';

/** Envoy's defaults: max_request_headers_kb 60, common_http_protocol_options.max_headers_count 100. */
const DEFAULT_MAX_HEADERS_KB = 60;
const DEFAULT_MAX_HEADERS_COUNT = 100;
/** Envoy's default delayed_close_timeout: how long a closing connection's last bytes may take. */
const DEFAULT_DELAYED_CLOSE_MS = 1000;
/** Envoy's stream_idle_timeout when none is set: five minutes (request_timeout and request_headers_timeout: none). */
export const DEFAULT_STREAM_IDLE_TIMEOUT_MS = 300_000;

export interface RequestLimits {
  /** Bytes of request headers (node's maxHeaderSize / HTTP/2 SETTINGS_MAX_HEADER_LIST_SIZE). */
  readonly maxHeaderBytes: number;
  /** Header fields, pseudo-headers not counted. */
  readonly maxHeadersCount: number;
  /** After a local reply to a request whose body is still coming: how long until the close. */
  readonly delayedCloseMs: number;
  /** http_protocol_options.accept_http_10: without it an HTTP/1.0 request gets 426, as in Envoy. */
  readonly acceptHttp10: boolean;
  /**
   * common_http_protocol_options.idle_timeout: how long a downstream connection may have no
   * request in progress before it is closed (HTTP/2: drained). 0: never.
   */
  readonly idleTimeoutMs: number;
  /** common_http_protocol_options.max_requests_per_connection; 0: no limit. */
  readonly maxRequestsPerConnection: number;
  /** stream_idle_timeout: how long a stream may go without a byte either way. 0: never. */
  readonly streamIdleTimeoutMs: number;
  /** request_timeout: how long the whole request may take to arrive, unless the response starts first. 0: no limit. */
  readonly requestTimeoutMs: number;
  /** request_headers_timeout: how long the request head may take, from its first byte. 0: no limit. */
  readonly requestHeadersTimeoutMs: number;
  /** common_http_protocol_options.max_stream_duration: how long a stream may last, unless its route says otherwise. 0: no limit. */
  readonly maxStreamDurationMs: number;
}

export function requestLimits(hcm: HttpConnectionManager): RequestLimits {
  const connection = connectionLimitsOf(hcm.commonHttpProtocolOptions);
  return {
    maxHeaderBytes: (hcm.maxRequestHeadersKb ?? DEFAULT_MAX_HEADERS_KB) * 1024,
    maxHeadersCount: hcm.commonHttpProtocolOptions?.maxHeadersCount ?? DEFAULT_MAX_HEADERS_COUNT,
    delayedCloseMs: durationMs(hcm.delayedCloseTimeout, DEFAULT_DELAYED_CLOSE_MS),
    acceptHttp10: hcm.httpProtocolOptions?.acceptHttp10 ?? false,
    idleTimeoutMs: connection.idleTimeoutMs,
    maxRequestsPerConnection: connection.maxRequests,
    streamIdleTimeoutMs: timerMs(hcm.streamIdleTimeout, DEFAULT_STREAM_IDLE_TIMEOUT_MS),
    requestTimeoutMs: timerMs(hcm.requestTimeout, 0),
    requestHeadersTimeoutMs: timerMs(hcm.requestHeadersTimeout, 0),
    maxStreamDurationMs: timerMs(hcm.commonHttpProtocolOptions?.maxStreamDuration, 0),
  };
}

/** The connection manager's stream timeouts, by the response code details Envoy gives them. */
export type StreamTimeout = 'stream_idle_timeout' | 'request_overall_timeout' | 'request_header_timeout' | 'max_duration_timeout';

const TIMEOUT_BODIES: Readonly<Record<StreamTimeout, string>> = {
  stream_idle_timeout: 'stream timeout',
  request_overall_timeout: 'request timeout',
  request_header_timeout: 'request header timeout',
  max_duration_timeout: 'downstream duration timeout',
};

/** gRPC's DEADLINE_EXCEEDED: what Envoy tells a gRPC client whose stream outlived its max duration. */
const DEADLINE_EXCEEDED = 4;

/**
 * Envoy's local reply to a stream that timed out: 504 once the whole request has arrived (what it
 * waited for was the upstream), 408 while the request was still coming.
 */
export function timeoutReply(kind: StreamTimeout, requestComplete: boolean): LocalReply {
  const r = { ...reply(requestComplete ? 504 : 408, TIMEOUT_BODIES[kind], kind), responseFlag: timeoutFlag(kind) };
  return kind === 'max_duration_timeout' ? { ...r, grpcStatus: DEADLINE_EXCEEDED } : r;
}

/** The response flag of a stream timeout: SI for the idle timeout, DT for max_stream_duration, none for the request timeouts (as Envoy). */
export function timeoutFlag(kind: StreamTimeout): number {
  return kind === 'stream_idle_timeout' ? ResponseFlag.StreamIdleTimeout : kind === 'max_duration_timeout' ? ResponseFlag.DurationTimeout : 0;
}

/**
 * What Envoy's HTTP/1.1 codec answers to a head node's parser refused (its 'clientError' code): 431
 * for a head over the size limit, else 400, flagged DPE (node's own chunk-extension limit: 413).
 */
export function codecErrorReply(code: string | undefined): LocalReply {
  const r =
    code === 'HPE_HEADER_OVERFLOW'
      ? reply(431, 'Request Header Fields Too Large', 'http1.headers_too_large')
      : code === 'HPE_CHUNK_EXTENSIONS_OVERFLOW'
        ? reply(413, 'Payload Too Large', 'http1.codec_error')
        : reply(400, 'Bad Request', 'http1.codec_error');
  return { ...r, responseFlag: ResponseFlag.DownstreamProtocolError };
}

function reply(status: number, body: string, details: string): LocalReply {
  return { status, body, headers: {}, details };
}

/**
 * The codec's refusal of a request head, as Envoy answers it: more header fields than allowed is
 * 431 (node's servers are told to keep one more than the limit, so the excess is seen), a second
 * Host is 400. Undefined when the head is acceptable.
 */
export function refuseHead(req: DownstreamRequest, limits: RequestLimits): LocalReply | undefined {
  if (req.httpVersion === '1.0' && !limits.acceptHttp10) return reply(426, '', 'low_version');
  // The fields as received, pseudo-headers left out, counted in place (no array of names).
  const raw = req.rawHeaders;
  let fields = 0;
  let hosts = 0;
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!;
    if (name.startsWith(':')) continue;
    fields++;
    if (name.length === 4 && lowerCase(name) === 'host') hosts++;
  }
  if (fields > limits.maxHeadersCount) return reply(431, 'Request Header Fields Too Large', 'http1.too_many_headers');
  if (hosts > 1) return reply(400, 'Bad Request', 'http1.multiple_host_headers');
  return undefined;
}

/** Made once: a regular expression literal is a new object each time it is evaluated. */
const ABSOLUTE_FORM = /^https?:\/\//i;

/**
 * The request target in absolute form (RFC 9112 3.2.2: `http://host/path?q`): its path and its
 * authority, which replaces Host, as Envoy's codec does. Undefined for the origin form.
 */
export function absoluteTarget(url: string): { path: string; authority: string } | undefined {
  if (!ABSOLUTE_FORM.test(url)) return undefined;
  const rest = url.slice(url.indexOf('//') + 2);
  const slash = rest.search(/[/?]/);
  const authority = slash < 0 ? rest : rest.slice(0, slash);
  const path = slash < 0 ? '/' : rest[slash] === '?' ? `/${rest.slice(slash)}` : rest.slice(slash);
  return { path, authority };
}

/**
 * An HTTP/1.1 `Upgrade: h2c` request: Envoy does not switch protocols, it serves the request as
 * an ordinary one without the upgrade headers.
 */
export function isH2cUpgrade(req: IncomingMessage): boolean {
  return String(req.headers.upgrade ?? '').toLowerCase().split(',').map((s) => s.trim()).includes('h2c');
}

/** Removes an h2c upgrade's headers (Upgrade, HTTP2-Settings and their Connection tokens). */
export function dropH2cUpgrade(req: IncomingMessage): void {
  const hop = new Set(['upgrade', 'http2-settings']);
  const raw = req.rawHeaders;
  const kept: string[] = [];
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!.toLowerCase();
    if (hop.has(name)) continue;
    if (name === 'connection') {
      const tokens = raw[i + 1]!.split(',').map((s) => s.trim()).filter((t) => !hop.has(t.toLowerCase()));
      if (tokens.length > 0) kept.push(raw[i]!, tokens.join(', '));
      continue;
    }
    kept.push(raw[i]!, raw[i + 1]!);
  }
  raw.splice(0, raw.length, ...kept);
  delete req.headers.upgrade;
  delete req.headers['http2-settings'];
  if (req.headers.connection !== undefined) {
    const c = kept.findIndex((v, i) => i % 2 === 0 && v.toLowerCase() === 'connection');
    if (c < 0) delete req.headers.connection;
    else req.headers.connection = kept[c + 1];
  }
}

/**
 * Serves an `h2c` upgrade request that node:http handed over as an upgrade (its parser let go of
 * the socket) as the plain HTTP/1.1 request Envoy makes of it: without the upgrade headers, on a
 * response of its own that closes the connection once written. A body can only come in `head`,
 * so a request announcing one gets `400` (h2c upgrades are body-less GET/OPTIONS in practice).
 */
export function serveH2cAsHttp1(req: IncomingMessage, socket: Duplex, head: Buffer, serve: (req: IncomingMessage, res: ServerResponse) => void): void {
  dropH2cUpgrade(req);
  const res = new ServerResponse(req);
  res.shouldKeepAlive = false;
  res.assignSocket(socket as Socket);
  res.once('finish', () => socket.end());
  const length = Number(req.headers['content-length'] ?? 0);
  if (req.headers['transfer-encoding'] !== undefined || length > head.length) {
    res.writeHead(400, { 'content-type': 'text/plain', connection: 'close' });
    res.end('h2c upgrade request with a body is not supported');
    return;
  }
  serve(req, res);
}

/**
 * A response that starts before its request has all arrived (a local reply to an upload, an
 * upstream that answers early, or a head the codec refused): as in Envoy, the stream ends with the
 * response, and the rest of the request is not read (a denied upload could be anything). On
 * HTTP/1.1 the response says `connection: close`; once it is flushed the proxy stops reading,
 * half-closes, and closes the socket when the delayed close timeout ends (Envoy's
 * FlushWriteAndDelay: no reads meanwhile, the wait lets the client read the response before a
 * reset). On HTTP/2 the stream is reset (NO_ERROR) once the response's END_STREAM is sent, if the
 * request has still not ended then. Call before the response head is written.
 */
export function closeUnreadRequest(req: DownstreamRequest, res: DownstreamResponse, limits: RequestLimits, always = false): void {
  if (requestComplete(req) && !always) return;
  if ('stream' in req) {
    // The stream's own 'finish' (the compatibility response's waits for the stream to close).
    const stream = req.stream;
    stream.once('finish', () => resetOnceSent(stream, () => always || !requestComplete(req)));
    return;
  }
  const socket = req.socket;
  res.setHeader('connection', 'close');
  res.once('finish', () => {
    // node:http would read and discard the rest of the body, then destroy the socket as soon as
    // the reply is written (a reset that can lose the reply): instead, read nothing more.
    socket.off('finish', socket.destroy);
    req.pause();
    closeAfterReply(socket, limits);
  });
}

/** How often a reset waiting for its stream's END_STREAM to leave looks again. */
const RESET_POLL_MS = 5;

/**
 * Resets an HTTP/2 stream (NO_ERROR) once its response's END_STREAM has been written, if `still()`
 * holds then. node defers a reset submitted while the session is writing and may then never send
 * it (the client, its window full, sends nothing that would flush it), and nghttp2 would put a
 * reset before frames still queued; so it waits for the stream's local side to be closed.
 */
function resetOnceSent(stream: ServerHttp2Stream, still: () => boolean): void {
  if (stream.closed || stream.destroyed || !still()) return;
  if (stream.state.localClose) stream.close();
  else setTimeout(resetOnceSent, RESET_POLL_MS, stream, still).unref();
}

/**
 * Stops reading a connection whose last reply is written and closes it once the delayed close
 * timeout has given the client time to read that reply (Envoy's flush-write-and-delay close).
 */
export function closeAfterReply(socket: Duplex, limits: RequestLimits): void {
  socket.pause();
  socket.end();
  setTimeout(() => socket.destroy(), limits.delayedCloseMs).unref();
}
