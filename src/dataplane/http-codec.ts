// What differs between HTTP/1.1 and HTTP/2 for the connection manager, so that one request path
// serves both: the downstream request/response of node:http or of node:http2's compatibility API,
// the upstream exchange over an HTTP/2 session (HTTP/1.1: http1-exchange.ts), trailers-only
// responses (gRPC errors) and the gRPC form of local replies.
import { ServerResponse, type IncomingHttpHeaders, type IncomingMessage, type OutgoingHttpHeaders } from 'node:http';
import { constants as h2, Http2ServerResponse, type ClientHttp2Stream, type Http2ServerRequest, type IncomingHttpHeaders as H2Headers } from 'node:http2';
import type { Readable, Writable } from 'node:stream';
import type { Endpoint, UpstreamOptions } from './upstream-pools.js';
import type { Http2Pool } from './http2-pool.js';
import type { RequestHeaders } from '../envoy/request.js';
import { lowerCase } from '../common/lower-case.js';
import { grpcStatusOfHttp } from '../envoy/grpc-status.js';
import type { LocalReply } from '../envoy/filter.js';
import type { StatCounter } from './stats.js';

export type DownstreamRequest = IncomingMessage | Http2ServerRequest;
export type DownstreamResponse = ServerResponse | Http2ServerResponse;
export type HeaderMap = Record<string, string | string[]>;

/** Headers that belong to one hop and are never forwarded (RFC 9110 7.6.1, plus Envoy's list). */
const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'upgrade', 'te', 'host']);

/**
 * Whether a header is forwarded: not hop-by-hop and not an HTTP/2 pseudo-header; `te: trailers`
 * is the one TE value that passes (gRPC needs it end to end), as in Envoy.
 */
export function isEndToEnd(name: string, value?: string): boolean {
  if (name.startsWith(':')) return false;
  if (name === 'te') return value?.trim().toLowerCase() === 'trailers';
  return !HOP_BY_HOP.has(name);
}

/** Adds every forwarded header of a downstream request to `into`, repeated ones as separate values. */
export function copyRequestHeaders(req: DownstreamRequest, into: RequestHeaders): void {
  if ('stream' in req) {
    // HTTP/2: node's header object, whose repeated cookie fields are already joined with '; '
    // as an HTTP/1.1 hop needs them (RFC 9113 8.2.3).
    for (const [k, v] of Object.entries(req.headers)) {
      if (v === undefined) continue;
      for (const one of Array.isArray(v) ? v : [String(v)]) if (isEndToEnd(k, one)) into.add(k, one);
    }
    return;
  }
  // HTTP/1.1: the name/value pairs as received, without building node's header objects.
  const raw = req.rawHeaders;
  for (let i = 0; i < raw.length; i += 2) {
    const name = lowerCase(raw[i]!);
    const value = raw[i + 1]!;
    if (isEndToEnd(name, value)) into.add(name, value);
  }
}

/** The request's authority: `host` (HTTP/1.1) or `:authority` (HTTP/2). */
export function requestAuthority(req: DownstreamRequest): string {
  const h = req.headers as IncomingHttpHeaders & H2Headers;
  const v = h.host ?? h[':authority'];
  return (Array.isArray(v) ? v[0] : v) ?? '';
}

/**
 * How the request body is framed: none (an HTTP/1.1 request without content-length or
 * transfer-encoding, an HTTP/2 request ended with its headers), a known length, or a stream of
 * unknown length (HTTP/1.1 chunked, which may end with trailers).
 */
export type BodyFraming = 'none' | 'length' | 'stream';

/**
 * Whether the whole request has arrived, as Envoy's codec sees it once the head is decoded. A
 * request without a body is whole with its head, though node's `complete` waits for its parser
 * (HTTP/1.1: after the 'request' handler returns) or for the empty body to be read (HTTP/2).
 */
export function requestComplete(req: DownstreamRequest): boolean {
  if (req.complete) return true;
  if ('stream' in req) return req.stream.endAfterHeaders;
  const h = req.headers;
  return h['transfer-encoding'] === undefined && (h['content-length'] === undefined || h['content-length'] === '0');
}

export function bodyFraming(req: DownstreamRequest): BodyFraming {
  const h = req.headers;
  if ('stream' in req) return h['content-length'] !== undefined ? 'length' : req.stream.endAfterHeaders ? 'none' : 'stream';
  if (h['transfer-encoding'] !== undefined) return 'stream';
  return h['content-length'] !== undefined ? 'length' : 'none';
}

/** A response's headers without hop-by-hop and pseudo-headers. */
export function endToEnd(h: IncomingHttpHeaders | H2Headers): HeaderMap {
  const out: HeaderMap = {};
  for (const [k, v] of Object.entries(h)) {
    if (v === undefined || !isEndToEnd(k, String(v))) continue;
    out[k] = Array.isArray(v) ? v : String(v);
  }
  return out;
}

export function writeHead(res: DownstreamResponse, status: number, headers: OutgoingHttpHeaders, message?: string): void {
  // HTTP/2 has no reason phrase.
  if (res instanceof Http2ServerResponse) res.writeHead(status, headers);
  else res.writeHead(status, message, headers);
}

/**
 * A response that is a header block only: on HTTP/2 one HEADERS frame with END_STREAM (gRPC's
 * trailers-only form, which clients read as the call's status); on HTTP/1.1 an empty body.
 */
export function respondHeadersOnly(res: DownstreamResponse, status: number, headers: OutgoingHttpHeaders): void {
  if (res instanceof Http2ServerResponse) {
    res.statusCode = status;
    res.stream.respond({ ...headers, ':status': status }, { endStream: true });
    return;
  }
  res.writeHead(status, { ...headers, 'content-length': 0 });
  res.end();
}

/** Made once: a regular expression literal is a new object each time it is evaluated. */
const GRPC_CONTENT_TYPE = /^application\/grpc(\+|;|$)/i;

export function isGrpc(contentType: string | undefined): boolean {
  return contentType !== undefined && GRPC_CONTENT_TYPE.test(contentType.trim());
}

/**
 * A local reply to a gRPC request, as Envoy sends it: HTTP 200 whose grpc-status is the HTTP
 * status's gRPC equivalent and whose grpc-message is the reply's body.
 */
export function grpcReply(reply: LocalReply): { status: number; headers: OutgoingHttpHeaders } {
  const headers: OutgoingHttpHeaders = { ...reply.headers, 'content-type': 'application/grpc', 'grpc-status': String(reply.grpcStatus ?? grpcStatusOfHttp(reply.status)) };
  if (reply.body) headers['grpc-message'] = grpcMessage(reply.body);
  return { status: 200, headers };
}

/** grpc-message is percent-encoded outside printable ASCII (and `%` itself). */
export function grpcMessage(text: string): string {
  let out = '';
  for (const b of Buffer.from(text, 'utf8')) out += b >= 0x20 && b <= 0x7e && b !== 0x25 ? String.fromCharCode(b) : `%${b.toString(16).toUpperCase().padStart(2, '0')}`;
  return out;
}

/** The socket an upstream exchange ran on, as far as its local address goes (a net.Socket or TLSSocket). */
export interface UpstreamConnection {
  readonly localAddress?: string | undefined;
  readonly localPort?: number | undefined;
  /** A TLSSocket's certificates, for the stats filter's principals. */
  getPeerCertificate?(): { subjectaltname?: string | undefined };
  getCertificate?(): { subjectaltname?: string | undefined } | null;
}

/** The upstream's response head. */
export interface UpstreamHead {
  readonly status: number;
  readonly message?: string;
  /** End-to-end headers, a map of its own that the receiver may change and send on. */
  readonly headers: HeaderMap;
  /** HTTP/2 HEADERS with END_STREAM: no body and no trailers follow (gRPC trailers-only). */
  readonly endStream: boolean;
  /** The connection it came on (the access log's %UPSTREAM_LOCAL_ADDRESS%). */
  readonly connection?: UpstreamConnection | undefined;
}

/** An upstream response's body, which the connection manager forwards or drops. */
export interface UpstreamBody {
  /** Writes the body into `out` with backpressure; `done` is told once it all arrived. */
  pipeTo(out: DownstreamResponse, done: BodyDone): void;
  /** The response is not wanted (already answered): it is read and dropped. */
  discard(): void;
}

/** Told that an upstream body was all written (an object, so a per-request state can be it: no closure). */
export interface BodyDone {
  /** The body's trailers, and its last bytes when the body held them back for the response's end. */
  bodyDone(trailers: HeaderMap | undefined, tail?: Buffer): void;
}

export interface UpstreamEvents {
  /** The response started. */
  head(h: UpstreamHead, body: UpstreamBody): void;
  /** The exchange failed before or during the response. */
  error(e: Error): void;
}

/** One request to an upstream, whatever the protocol. */
export interface UpstreamExchange {
  /** The request body goes here; absent when the request has none (it was sent whole). */
  readonly body?: Writable;
  /**
   * Whether any of the request may have reached the upstream: its connection had come up (TLS:
   * verified), so its bytes went out (retry_on reset-before-request retries only before).
   */
  readonly sent: boolean;
  /** Ends the request, with its trailers if it has any. */
  finish(trailers: HeaderMap | undefined): void;
  destroy(): void;
}

/**
 * One request to an upstream endpoint; its options (UpstreamOptions) are those its connection is
 * made with: original_src's source, the ALPN override of the request's upstream protocol
 * (`mesh.alpn`), the downstream connection a PROXY protocol header names.
 */
export interface UpstreamRequest extends UpstreamOptions {
  readonly endpoint: Endpoint;
  readonly method: string;
  readonly path: string;
  /** End-to-end headers plus `host`. */
  readonly headers: OutgoingHttpHeaders;
  readonly framing: BodyFraming;
  /** Its route's upstream_rq_total (route-stats.ts), counted with the cluster's as the request reaches a ready connection. */
  readonly routeTotal?: StatCounter;
}

export function trailerMap(t: NodeJS.Dict<string | string[]> | H2Headers): HeaderMap | undefined {
  const out = endToEnd(t);
  return Object.keys(out).length > 0 ? out : undefined;
}

/** The body of a response that node:http or node:http2 delivers as a stream. */
/**
 * Writes a response head that node:http still holds for the first body bytes, as Envoy forwards a
 * head as it arrives (node:http2 sends one at writeHead anyway).
 */
export function flushHead(res: DownstreamResponse): void {
  if (res instanceof ServerResponse) res.flushHeaders();
}

export function readableBody(stream: Readable, trailers: () => HeaderMap | undefined): UpstreamBody {
  return {
    pipeTo(out, done) {
      // Body bytes already here go out with the head; otherwise the head goes now.
      if (stream.readableLength === 0) flushHead(out);
      stream.pipe(out, { end: false });
      stream.on('end', () => done.bodyDone(trailers()));
      stream.on('error', () => out.destroy());
    },
    discard: () => stream.resume(),
  };
}

/** HTTP/2 on the endpoint's pooled session (a stream per request). Throws if no stream can be opened. */
export function http2Exchange(r: UpstreamRequest, pool: Http2Pool, ev: UpstreamEvents): UpstreamExchange {
  const headers: OutgoingHttpHeaders = {};
  for (const [k, v] of Object.entries(r.headers)) {
    if (v !== undefined && (k === 'host' || isEndToEnd(k, String(v)))) headers[k] = v;
  }
  const authority = String(headers.host ?? '');
  delete headers.host;
  Object.assign(headers, { ':method': r.method, ':path': r.path, ':scheme': 'http', ':authority': authority });
  // waitForTrailers: the request's trailers are only known once its body has ended.
  const stream: ClientHttp2Stream = pool.request(r.endpoint, r, headers, { waitForTrailers: true }, r.routeTotal);
  let requestTrailers: HeaderMap | undefined;
  let trailers: HeaderMap | undefined;
  let answered = false;
  let failed = false;
  const fail = (e: Error): void => {
    if (failed) return;
    failed = true;
    ev.error(e);
  };
  stream.on('wantTrailers', () => stream.sendTrailers(requestTrailers ?? {}));
  stream.on('trailers', (t) => (trailers = trailerMap(t)));
  stream.on('response', (h, flags) => {
    answered = true;
    const endStream = (flags & h2.NGHTTP2_FLAG_END_STREAM) !== 0;
    ev.head({ status: Number(h[':status'] ?? 502), headers: endToEnd(h), endStream, connection: stream.session?.socket }, readableBody(stream, () => trailers));
  });
  stream.on('error', fail);
  stream.on('close', () => {
    // A stream reset with NO_ERROR emits no 'error'; before a response it still failed.
    if (!answered) fail(new Error(`stream closed before a response (code ${stream.rstCode})`));
    else if (!stream.readableEnded) fail(new Error(`stream reset (code ${stream.rstCode})`));
  });
  return {
    body: stream,
    // A stream has its id, and its HEADERS went out, once its session is connected.
    get sent() {
      return !stream.pending;
    },
    finish(t) {
      requestTrailers = t;
      stream.end();
    },
    destroy: () => stream.destroy(),
  };
}

/** An HTTP/1.1 status line and header block, for replies written on a raw socket. */
export function rawHead(status: number, message: string, headers: OutgoingHttpHeaders): string {
  let out = `HTTP/1.1 ${status} ${message}\r\n`;
  for (const [k, v] of Object.entries(headers)) {
    if (v === undefined) continue;
    for (const one of Array.isArray(v) ? v : [v]) out += `${k}: ${one}\r\n`;
  }
  return `${out}\r\n`;
}
