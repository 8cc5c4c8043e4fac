// The downstream connection's lifetime under the connection manager's common_http_protocol_options,
// with Envoy's semantics: idle_timeout ends a connection that has had no request in progress for
// that long (HTTP/1.1: closed; HTTP/2: drained, GOAWAY then close), max_requests_per_connection
// ends it after that many requests (HTTP/1.1: the last response says `connection: close` and the
// connection closes after it; HTTP/2: GOAWAY, the streams already open finish).
//
// node:http's own keepAliveTimeout / maxRequestsPerSocket are not used: the first closes a second
// later than asked (Node 20.20 adds a 1 s buffer) and advertises `Keep-Alive: timeout=<floor(s)>`,
// which under 2 s makes node's Agent stop reusing the connection; the second only says
// `connection: close` without closing, and answers a further request with a 503 of its own.
//
// One IdleTimer per connection (connection-limits.ts), re-armed when its last request ends. Per
// request: counters (and on HTTP/2 a listener for the stream's close).
import type { ServerHttp2Session } from 'node:http2';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { IdleTimer } from '../connection-limits.js';
import type { RequestLimits } from '../request-guards.js';

export type DownstreamLimits = Pick<RequestLimits, 'idleTimeoutMs' | 'maxRequestsPerConnection'>;

/** One downstream HTTP/1.1 connection: its requests in progress and so far, and its idle timer. */
export class DownstreamConnection {
  private active = 0;
  private requests = 0;
  private readonly idle: IdleTimer;

  constructor(
    socket: Socket,
    private readonly maxRequests: number,
    private readonly idleTimeoutMs: number,
  ) {
    this.idle = new IdleTimer(() => socket.destroy());
    // Idle from the start: a connection that never sends a request closes too.
    this.idle.start(idleTimeoutMs);
    socket.once('close', () => this.stop());
  }

  /** A request begins; true when it is the last the connection carries (answer `connection: close`). */
  begin(): boolean {
    this.active++;
    this.idle.busy();
    return this.maxRequests > 0 && ++this.requests >= this.maxRequests;
  }

  /** A request's response is done. */
  end(): void {
    if (--this.active === 0) this.idle.start(this.idleTimeoutMs);
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
    const { idleTimeoutMs, maxRequestsPerConnection } = this.limits;
    if (idleTimeoutMs > 0 || maxRequestsPerConnection > 0) this.bySocket.set(socket, new DownstreamConnection(socket, maxRequestsPerConnection, idleTimeoutMs));
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

/** Applies the limits to an HTTP/2 session: session.close() is the drain (GOAWAY, open streams finish). */
export function limitSession(session: ServerHttp2Session, limits: DownstreamLimits): void {
  const { idleTimeoutMs, maxRequestsPerConnection: max } = limits;
  if (idleTimeoutMs === 0 && max === 0) return;
  let open = 0;
  let streams = 0;
  const idle = new IdleTimer(() => session.close());
  idle.start(idleTimeoutMs);
  session.on('stream', (stream) => {
    open++;
    idle.busy();
    if (max > 0 && ++streams >= max) session.close();
    stream.once('close', () => {
      if (--open === 0 && !session.closed) idle.start(idleTimeoutMs);
    });
  });
  session.once('close', () => idle.stop());
}
