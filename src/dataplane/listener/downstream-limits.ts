// The downstream connection's lifetime under the connection manager's common_http_protocol_options,
// with Envoy's semantics: idle_timeout ends a connection that has had no request in progress for
// that long (HTTP/1.1: closed; HTTP/2: drained, GOAWAY then close), max_requests_per_connection
// ends it after that many requests (HTTP/1.1: the last response says `connection: close` and the
// connection closes after it; HTTP/2: GOAWAY, the streams already open finish). Each connection
// also knows its requests in progress, for the stream timeouts (stream-timeouts.ts).
//
// node:http's own keepAliveTimeout / maxRequestsPerSocket are not used: the first closes a second
// later than asked (Node 20.20 adds a 1 s buffer) and advertises `Keep-Alive: timeout=<floor(s)>`,
// which under 2 s makes node's Agent stop reusing the connection; the second only says
// `connection: close` without closing, and answers a further request with a 503 of its own.
//
// One IdleTimer per connection (connection-limits.ts), re-armed when its last request ends. Per
// request: counters and a reference (on HTTP/2 a listener for the stream's close).
import type { ServerHttp2Session, ServerHttp2Stream } from 'node:http2';
import type { ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { IdleTimer } from '../connection-limits.js';
import type { RequestLimits } from '../request-guards.js';

export type DownstreamLimits = Pick<RequestLimits, 'idleTimeoutMs' | 'maxRequestsPerConnection'>;

/** One downstream HTTP/1.1 connection: its request in progress and its requests so far, and its idle timer. */
export class DownstreamConnection {
  /** The response of the request in progress (its head has arrived), if any. */
  response: ServerResponse | undefined;
  /** The connection's bytes read when its last request ended: more since then is the next request's head. */
  private readAtEnd = 0;
  private active = 0;
  private requests = 0;
  private readonly idle: IdleTimer;

  constructor(
    private readonly socket: Socket,
    private readonly maxRequests: number,
    private readonly idleTimeoutMs: number,
  ) {
    this.idle = new IdleTimer(() => socket.destroy());
    // Idle from the start: a connection that never sends a request closes too.
    this.idle.start(idleTimeoutMs);
    socket.once('close', () => this.stop());
  }

  /** A request begins; true when it is the last the connection carries (answer `connection: close`). */
  begin(res: ServerResponse): boolean {
    this.active++;
    this.response = res;
    this.idle.busy();
    return this.maxRequests > 0 && ++this.requests >= this.maxRequests;
  }

  /** A request's response is done. */
  end(): void {
    this.response = undefined;
    // Only a stream idle timer (the socket's timeout) asks whether a next head is pending.
    if (this.socket.timeout) this.readAtEnd = this.socket.bytesRead;
    if (--this.active === 0) this.idle.start(this.idleTimeoutMs);
  }

  /** Whether bytes of a request head that has not all arrived are waiting (none is in progress). */
  headPending(): boolean {
    return this.response === undefined && this.socket.bytesRead > this.readAtEnd;
  }

  stop(): void {
    this.idle.stop();
  }
}

/** The HTTP/1.1 connections of a server, by socket. */
export class DownstreamConnections {
  private readonly bySocket = new WeakMap<Duplex, DownstreamConnection>();

  constructor(private readonly limits: DownstreamLimits) {}

  /** A connection handed to the server: its idle time starts now. */
  open(socket: Socket): void {
    this.bySocket.set(socket, new DownstreamConnection(socket, this.limits.maxRequestsPerConnection, this.limits.idleTimeoutMs));
  }

  of(socket: Duplex): DownstreamConnection | undefined {
    return this.bySocket.get(socket);
  }

  /** The connection stops being HTTP/1.1 (an upgrade took the socket): no limits apply any more. */
  release(socket: Duplex): void {
    this.bySocket.get(socket)?.stop();
    this.bySocket.delete(socket);
  }
}

/**
 * Applies the limits to an HTTP/2 session: session.close() is the drain (GOAWAY, open streams
 * finish). `onStreamClose`, when given, hears of each stream's end.
 */
export function limitSession(session: ServerHttp2Session, limits: DownstreamLimits, onStreamClose?: (stream: ServerHttp2Stream) => void): void {
  const { idleTimeoutMs, maxRequestsPerConnection: max } = limits;
  let open = 0;
  let streams = 0;
  const idle = new IdleTimer(() => session.close());
  idle.start(idleTimeoutMs);
  session.on('stream', (stream: ServerHttp2Stream) => {
    open++;
    idle.busy();
    if (max > 0 && ++streams >= max) session.close();
    stream.once('close', () => {
      onStreamClose?.(stream);
      if (--open === 0 && !session.closed) idle.start(idleTimeoutMs);
    });
  });
  session.once('close', () => idle.stop());
}
