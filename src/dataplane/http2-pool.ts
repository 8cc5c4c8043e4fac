// A cluster's HTTP/2 (h2c with prior knowledge, or TLS) sessions, per endpoint and upstream
// options (original source, ALPN override, a PROXY header's downstream connection): one, unless
// every open one carries the cluster's max_concurrent_streams (or the upstream's
// SETTINGS_MAX_CONCURRENT_STREAMS), when another opens beside them, as Envoy's pool does; a session
// is replaced once it received GOAWAY, closed or failed. A session is drained (node's close():
// open streams finish, no new ones) after it has had no open stream for the cluster's
// idle_timeout, once it has carried max_requests_per_connection streams, max_connection_duration
// after it opened, or after the upstream's GOAWAY, as Envoy's pool does. A session's end is
// counted by who ended it first: the pool (drain, including after GOAWAY, retire, destroy), node
// (a protocol error) or a connect timeout are local; the upstream's FIN or reset remote. It ended
// with active requests when streams were open as its socket closed, or as the pool destroyed it.
import { connect as h2connect, type ClientHttp2Session, type ClientHttp2Stream, type ClientSessionRequestOptions, type OutgoingHttpHeaders } from 'node:http2';
import { durationTimer, IdleTimer } from './connection-limits.js';
import { ClusterPool, hostPort, openUpstream, optionsFor, poolKey, type Endpoint, type UpstreamOptions } from './upstream-pools.js';
import { onPeerEnd, type CloseSide } from './upstream-cx-stats.js';
import type { StatCounter } from './stats.js';

/** A pooled session and what it has carried. */
interface PooledSession {
  readonly session: ClientHttp2Session;
  readonly idle: IdleTimer;
  /** Streams open now. */
  open: number;
  /** The session is connected; until then its streams are pending in the request gauges. */
  connected: boolean;
  /** Streams it carried. */
  served: number;
  /** Out of the pool: it closes once its last stream ends. */
  draining: boolean;
  /** Who ended it first; undefined while neither has. */
  endedBy?: CloseSide;
  /** Streams were open as the pool destroyed it. */
  cutShort: boolean;
}

export class Http2Pool extends ClusterPool {
  /** The sessions that take new streams, by pool key. */
  private readonly sessions = new Map<string, PooledSession[]>();
  private retired = false;

  /** A new stream on the session to `ep` made with `upstream` options; throws if the session can take no stream. `routeTotal`: its route's upstream_rq_total. */
  request(ep: Endpoint, upstream: UpstreamOptions, headers: OutgoingHttpHeaders, options: ClientSessionRequestOptions, routeTotal?: StatCounter): ClientHttp2Stream {
    const o = optionsFor(this.transportOf(ep), upstream);
    const key = poolKey(ep, o);
    const pooled = this.pooled(key, ep, o);
    const stream = pooled.session.request(headers, options);
    pooled.open++;
    pooled.served++;
    pooled.idle.busy();
    if (pooled.connected) this.requests.start(routeTotal);
    else {
      this.requests.wait();
      // Counted with the cluster's as the session connects (the attach in `pooled`), if the stream is still there.
      if (routeTotal) {
        pooled.session.once('connect', () => {
          if (!stream.destroyed) routeTotal.inc();
        });
      }
    }
    stream.once('close', () => {
      if (pooled.connected) this.requests.active--;
      else this.requests.pending--;
      if (--pooled.open > 0) return;
      if (pooled.draining) close(pooled);
      else pooled.idle.start(this.settings().connection.idleTimeoutMs);
    });
    const { maxRequests } = this.settings().connection;
    if (maxRequests > 0 && pooled.served >= maxRequests) {
      this.count.maxRequests();
      this.drain(key, pooled);
    }
    return stream;
  }

  /** In-flight streams finish; no session is kept or opened for reuse. */
  retire(): void {
    this.retired = true;
    for (const p of this.all()) {
      p.idle.stop();
      close(p);
    }
    this.sessions.clear();
  }

  private *all(): Iterable<PooledSession> {
    for (const list of this.sessions.values()) yield* list;
  }

  /** Streams a session may carry at once: the cluster's limit and the upstream's, the lower. */
  private capacity(p: PooledSession): number {
    const ours = this.settings().maxConcurrentStreams || Infinity;
    const theirs = p.connected ? (p.session.remoteSettings.maxConcurrentStreams ?? Infinity) : Infinity;
    return Math.min(ours, theirs);
  }

  /** Takes `pooled` out of the sessions new streams go to. */
  private unlist(key: string, pooled: PooledSession): void {
    const list = this.sessions.get(key);
    const i = list?.indexOf(pooled) ?? -1;
    if (i < 0) return;
    list!.splice(i, 1);
    if (list!.length === 0) this.sessions.delete(key);
  }

  destroy(): void {
    for (const p of this.all()) {
      p.idle.stop();
      p.endedBy ??= 'local';
      p.cutShort = p.open > 0;
      p.session.destroy();
    }
    this.sessions.clear();
  }

  /** An open session of `key` with room for a stream, or a new one. */
  private pooled(key: string, ep: Endpoint, o: UpstreamOptions): PooledSession {
    const existing = this.sessions.get(key)?.find((p) => !p.session.closed && !p.session.destroyed && p.open < this.capacity(p));
    if (existing) return existing;
    const socket = openUpstream(ep, this.transportOf(ep), this.settings(), this.count, {}, o).socket;
    const session = h2connect(`http://${hostPort(ep)}`, { createConnection: () => socket });
    const pooled: PooledSession = {
      session,
      open: 0,
      connected: false,
      served: 0,
      draining: false,
      cutShort: false,
      idle: new IdleTimer(() => {
        this.count.idleTimeout();
        this.drain(key, pooled);
      }),
    };
    const aged = durationTimer(this.settings().connection.maxDurationMs, () => {
      this.count.maxDuration();
      this.drain(key, pooled);
    });
    const forget = (): void => {
      pooled.idle.stop();
      clearTimeout(aged);
      this.unlist(key, pooled);
    };
    session.once('connect', () => {
      pooled.connected = true;
      // The streams that waited for the session are sent.
      for (let i = 0; i < pooled.open; i++) this.requests.attach();
    });
    onPeerEnd(socket, () => (pooled.endedBy ??= 'remote'));
    socket.once('close', () => this.count.destroyed(pooled.endedBy ?? 'local', pooled.cutShort || pooled.open > 0));
    // After GOAWAY the session finishes its streams but takes no new ones (the next request opens a
    // new one), and the pool closes it then, as Envoy's does: so Envoy counts such an end as local.
    session.on('goaway', () => this.drain(key, pooled));
    session.on('close', forget);
    // Errors reach the streams that were open; the session itself only needs replacing.
    session.on('error', forget);
    // An idle pooled session must not keep the process alive.
    session.unref();
    // A retired pool serves the request it is asked for, then lets the session wind down.
    if (this.retired) setImmediate(() => close(pooled));
    else {
      const list = this.sessions.get(key);
      if (list) list.push(pooled);
      else this.sessions.set(key, [pooled]);
    }
    return pooled;
  }

  /**
   * No new streams on the session; it closes once its open ones have ended (closing it earlier
   * would refuse streams not yet sent).
   */
  private drain(key: string, pooled: PooledSession): void {
    pooled.idle.stop();
    pooled.draining = true;
    this.unlist(key, pooled);
    if (pooled.open === 0) close(pooled);
  }
}

/**
 * The pool closes the session: open streams finish, none start. Without open streams its socket
 * goes at once: node's close() would half-close it and wait for the upstream's FIN, which an
 * upstream that sent GOAWAY and kept the connection may never send.
 */
function close(pooled: PooledSession): void {
  pooled.endedBy ??= 'local';
  if (pooled.open === 0) pooled.session.destroy();
  else pooled.session.close();
}
