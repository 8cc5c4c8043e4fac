// The connection manager's stream timeouts on the hosting servers, with Envoy's semantics:
// stream_idle_timeout (default 5 min, 0s none) ends a stream that has gone that long without a
// byte either way, request_timeout (default none) one whose request has not all arrived that long
// after its first byte unless the response started, request_headers_timeout (default none) one
// whose request head has not. The stream ends as the connection manager's timeout() says: the
// timeout's local reply (504 once the request is complete, else 408) or, once the response has
// started, a reset. Counted as Envoy's http.<stat_prefix>.downstream_rq_{idle_timeout,timeout,
// header_timeout}.
//
// A route's own idle_timeout and max stream duration (route-timeouts.ts) are the only per-request
// timers, armed only for streams whose route (or HCM max_stream_duration) asks for them. The HCM's
// own timeouts cost no timer, closure or object per request:
// - HTTP/1.1 stream idle: the socket's own timeout, one timer per connection that node refreshes
//   on every read and write; when it fires the connection's request in progress (or a head half
//   sent) has been idle that long, otherwise it is ignored.
// - HTTP/1.1 request and request head: node's own tracking (its parser notes when each message
//   began; one sweep per server every connectionsCheckingInterval), its headersTimeout and
//   requestTimeout set to Envoy's values instead of node's 60 s and 300 s, answered through
//   'clientError'.
// - HTTP/2 stream idle: the session's timeout, which node refreshes on every frame of any of its
//   streams: the open streams are ended once the whole session has been idle that long (Envoy
//   times each stream on its own; here a stalled stream lives on while others of its session
//   are busy).
// - HTTP/2 request: one timer per session, refreshed while streams wait, sweeping their start
//   times. Request head: node:http2 hands a stream over only once its header block is whole, so
//   there is no head in progress to time.
import { ServerResponse, type ServerOptions } from 'node:http';
import { Http2ServerResponse, type ServerHttp2Session, type ServerHttp2Stream } from 'node:http2';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { requestComplete, type DownstreamResponse } from '../http-codec.js';
import type { HttpConnectionManagerHandler } from '../http-connection-manager.js';
import type { RequestLimits, StreamTimeout } from '../request-guards.js';
import type { StatCounter } from '../stats.js';
import type { StreamTimerHost, StreamTimers } from '../route-timeouts.js';
import type { DownstreamConnections } from './downstream-limits.js';

export type StreamTimeoutLimits = Pick<RequestLimits, 'streamIdleTimeoutMs' | 'requestTimeoutMs' | 'requestHeadersTimeoutMs'>;

/** Envoy's counter of each timeout, under http.<stat_prefix>. */
export const TIMEOUT_STATS: Readonly<Record<StreamTimeout, string>> = {
  stream_idle_timeout: 'downstream_rq_idle_timeout',
  request_overall_timeout: 'downstream_rq_timeout',
  request_header_timeout: 'downstream_rq_header_timeout',
  max_duration_timeout: 'downstream_rq_max_duration_reached',
};

const CHECKS_PER_TIMEOUT = 8;
const MIN_CHECK_MS = 10;
const MAX_CHECK_MS = 30_000;

/**
 * node:http's own request timeouts as Envoy's: headersTimeout is request_headers_timeout and
 * requestTimeout request_timeout, both counted from the request's first byte as Envoy's are, and
 * 0 (none) when unset instead of node's 60 s and 300 s. node refuses a header timeout longer than
 * the request timeout: it could not fire first anyway, so it is cut to it.
 */
export function http1ServerTimeouts(limits: StreamTimeoutLimits): Pick<ServerOptions, 'headersTimeout' | 'requestTimeout' | 'connectionsCheckingInterval'> {
  const { requestTimeoutMs: request, requestHeadersTimeoutMs: headers } = limits;
  const headersTimeout = request > 0 && headers > request ? request : headers;
  const shortest = headersTimeout > 0 ? headersTimeout : request;
  if (shortest === 0) return { headersTimeout: 0, requestTimeout: 0 };
  return { headersTimeout, requestTimeout: request, connectionsCheckingInterval: checkMs(shortest) };
}

/** How often to look for requests past a timeout of `ms`: often enough to be late by an eighth of it at most. */
function checkMs(ms: number): number {
  return Math.min(Math.max(Math.floor(ms / CHECKS_PER_TIMEOUT), MIN_CHECK_MS), MAX_CHECK_MS);
}

/** The stream timeouts of one connection manager's servers. */
export class StreamTimeouts implements StreamTimerHost {
  private readonly counters: Readonly<Record<StreamTimeout, StatCounter>>;
  /** Which of node's request timeouts fires first on a head in progress. */
  private readonly headFirst: StreamTimeout;
  /** HTTP/2 streams timed by their route's idle_timeout instead of the session's. */
  private readonly ownIdle = new WeakSet<Http2ServerResponse>();

  constructor(
    private readonly handler: HttpConnectionManagerHandler,
    private readonly connections: DownstreamConnections,
    counter: (stat: string) => StatCounter,
  ) {
    this.counters = {
      stream_idle_timeout: counter(TIMEOUT_STATS.stream_idle_timeout),
      request_overall_timeout: counter(TIMEOUT_STATS.request_overall_timeout),
      request_header_timeout: counter(TIMEOUT_STATS.request_header_timeout),
      max_duration_timeout: counter(TIMEOUT_STATS.max_duration_timeout),
    };
    const { requestHeadersTimeoutMs: headers, requestTimeoutMs: request } = handler.limits;
    this.headFirst = headers > 0 && (request === 0 || headers <= request) ? 'request_header_timeout' : 'request_overall_timeout';
  }

  /** HTTP/1.1: arms a connection's stream idle timer (node refreshes it on every read and write). */
  openHttp1(socket: Socket): void {
    const ms = this.handler.limits.streamIdleTimeoutMs;
    if (ms > 0) socket.setTimeout(ms);
  }

  /** The HTTP/1.1 server's 'timeout': the connection has been idle for stream_idle_timeout. */
  onHttp1Idle(socket: Duplex): void {
    const conn = this.connections.of(socket);
    if (conn?.response) this.expire('stream_idle_timeout', conn.response);
    else if (conn?.headPending()) this.expireHead('stream_idle_timeout', socket);
  }

  /**
   * An upgrade request (WebSocket) stays one stream on its socket, timed by the socket's idle
   * timer (the HCM's stream_idle_timeout, or its route's idle_timeout).
   */
  openUpgrade(socket: Duplex): void {
    const before = written(socket);
    socket.once('timeout', () => this.expireUpgrade('stream_idle_timeout', socket, before));
  }

  /** An upgrade's route timers: its idle_timeout on the socket, its max duration. */
  private armUpgrade(socket: Duplex, timers: StreamTimers): void {
    const { durationMs, idleMs } = timers;
    if (idleMs !== undefined) (socket as Socket).setTimeout(idleMs);
    if (durationMs === undefined) return;
    const before = written(socket);
    const timer = setTimeout(() => this.expireUpgrade('max_duration_timeout', socket, before), durationMs);
    socket.once('close', () => clearTimeout(timer));
  }

  /**
   * Before the upstream's 101 (nothing written since the request came) the timeout's local reply,
   * 408 (an upgrade's request never ends), then the close; after it, a reset.
   */
  private expireUpgrade(kind: StreamTimeout, socket: Duplex, before: number): void {
    if (socket.destroyed) return;
    this.counters[kind].inc();
    if (written(socket) === before) this.handler.timeoutHead(kind, socket);
    else socket.destroy();
  }

  /**
   * The HTTP/1.1 server's 'clientError': node's request timeouts become Envoy's; anything else
   * its parser refused is the connection manager's protocol error (its reply and log line), unless
   * a response is already on the wire.
   */
  onClientError(e: NodeJS.ErrnoException, socket: Duplex): void {
    const res = this.connections.of(socket)?.response;
    if (e.code !== 'ERR_HTTP_REQUEST_TIMEOUT') {
      if (socket.writable && !res?.headersSent) this.handler.protocolError(e.code, socket);
      else socket.destroy(e);
      return;
    }
    if (res === undefined) this.expireHead(this.headFirst, socket);
    // Envoy disarms request_timeout once the response starts; node stopped the socket's idle timer.
    else if (res.headersSent) this.openHttp1(socket as Socket);
    else this.expire('request_overall_timeout', res);
  }

  /**
   * HTTP/2: the stream idle and request timeouts of a session's streams; undefined when neither is
   * set (the mesh's HCMs), so that its streams are not tracked at all.
   */
  openSession(session: ServerHttp2Session): SessionStreams | undefined {
    const { streamIdleTimeoutMs: idle, requestTimeoutMs } = this.handler.limits;
    if (idle === 0 && requestTimeoutMs === 0) return undefined;
    const streams = new SessionStreams(requestTimeoutMs, (res) => this.expire('request_overall_timeout', res));
    session.once('close', () => streams.stop());
    if (idle > 0) {
      // Not setTimeout's callback, which node calls once only.
      session.setTimeout(idle);
      session.on('timeout', () => {
        for (const res of streams.responses.values()) if (!this.ownIdle.has(res)) this.expire('stream_idle_timeout', res);
      });
    }
    return streams;
  }

  /**
   * A stream's own timers, from its route: its max duration (a timer for the stream) and its route
   * idle_timeout, which replaces stream_idle_timeout: on HTTP/1.1 the connection's idle timer is
   * set to it for this request, on HTTP/2 the stream gets node's own idle timer and the session's
   * sweep leaves it alone.
   */
  arm(stream: DownstreamResponse | Duplex, timers: StreamTimers): void {
    if (stream instanceof ServerResponse || stream instanceof Http2ServerResponse) this.armResponse(stream, timers);
    else this.armUpgrade(stream, timers);
  }

  private armResponse(res: DownstreamResponse, timers: StreamTimers): void {
    const { durationMs, idleMs } = timers;
    if (durationMs !== undefined) {
      const timer = setTimeout(() => this.expire('max_duration_timeout', res), durationMs);
      res.once('close', () => clearTimeout(timer));
    }
    if (idleMs === undefined) return;
    if (res instanceof Http2ServerResponse) {
      this.ownIdle.add(res);
      if (idleMs > 0) res.stream.setTimeout(idleMs, () => this.expire('stream_idle_timeout', res));
      return;
    }
    const socket = res.socket;
    if (!socket) return;
    socket.setTimeout(idleMs);
    res.once('close', () => socket.setTimeout(this.handler.limits.streamIdleTimeoutMs));
  }

  private expire(kind: StreamTimeout, res: ServerResponse | Http2ServerResponse): void {
    this.counters[kind].inc();
    this.handler.timeout(kind, res);
  }

  private expireHead(kind: StreamTimeout, socket: Duplex): void {
    this.counters[kind].inc();
    this.handler.timeoutHead(kind, socket);
  }
}

/** Bytes written on a connection so far (0 for a stream that does not count them). */
function written(socket: Duplex): number {
  return (socket as Partial<Socket>).bytesWritten ?? 0;
}

/** The open streams of one HTTP/2 session, by their responses, and request_timeout's sweep of them. */
export class SessionStreams {
  readonly responses = new Map<ServerHttp2Stream, Http2ServerResponse>();
  /** When each waiting stream began, in that order (with request_timeout only). */
  private readonly started = new Map<ServerHttp2Stream, number>();
  /** One timer for the session, re-armed (not re-created) while streams wait. */
  private sweep: NodeJS.Timeout | undefined;
  private armed = false;

  constructor(
    private readonly requestTimeoutMs: number,
    private readonly expire: (res: Http2ServerResponse) => void,
  ) {}

  /** A stream's request head arrived. */
  begin(res: Http2ServerResponse): void {
    this.responses.set(res.stream, res);
    if (this.requestTimeoutMs === 0) return;
    this.started.set(res.stream, Date.now());
    if (this.armed) return;
    this.armed = true;
    if (this.sweep) this.sweep.refresh();
    else this.sweep = setTimeout(() => this.expireRequests(), checkMs(this.requestTimeoutMs)).unref();
  }

  closed(stream: ServerHttp2Stream): void {
    this.responses.delete(stream);
    this.started.delete(stream);
  }

  stop(): void {
    clearTimeout(this.sweep);
  }

  /** Streams whose request has not all arrived within request_timeout, unless their response started. */
  private expireRequests(): void {
    const due = Date.now() - this.requestTimeoutMs;
    for (const [stream, at] of this.started) {
      if (at > due) break;
      this.started.delete(stream);
      const res = this.responses.get(stream);
      if (res && !res.headersSent && !requestComplete(res.req)) this.expire(res);
    }
    this.armed = this.started.size > 0;
    if (this.armed) this.sweep!.refresh();
  }
}
