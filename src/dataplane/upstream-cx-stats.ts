// How a cluster's upstream connections live and end, in its stats with Envoy's names and meanings:
// upstream_cx_total as a connection opens and the upstream_cx_active gauge until it closes,
// upstream_cx_connect_fail when it closes before it was ready, its bytes in
// upstream_cx_rx_bytes_total / upstream_cx_tx_bytes_total; as it closes, upstream_cx_destroy, then
// _local or _remote by who ended it (Envoy's LocalClose / RemoteClose: the proxy, or the upstream's
// FIN or reset), and the _with_active_rq counters when a request was in flight on it then. The
// proxy's own HTTP/1.1 client, the HTTP/2 pool, the TCP pool (tcp-pool.ts) and the connections
// lent to node:http and undici (lent-connections.ts) report all of these.
import type { Socket } from 'node:net';
import type { StatCounter } from './stats.js';
import type { OpenedUpstream, PoolCounters } from './upstream-pools.js';

/** Who ended a connection first: the proxy ('local') or the upstream ('remote'). */
export type CloseSide = 'local' | 'remote';

/** What a pool reports as each connection it counted opened closes (once). */
export interface ConnectionEnds {
  /** `activeRq`: whether a request was in flight on it. */
  destroyed(side: CloseSide, activeRq: boolean): void;
}

/** Errors by which the upstream ends a connection: a reset, a refused connect, a write to a connection it closed. */
const PEER_CODES = new Set(['ECONNRESET', 'ECONNREFUSED', 'EPIPE']);
/** OpenSSL's codes for an alert the peer sent (ERR_SSL_TLSV1_ALERT_UNKNOWN_CA, ...). */
const PEER_ALERT = /^ERR_SSL_.*_ALERT_/;

export function peerError(e: NodeJS.ErrnoException): boolean {
  const code = e.code ?? '';
  return PEER_CODES.has(code) || PEER_ALERT.test(code);
}

/**
 * Calls `ended` once, at the upstream's first sign that it ended the connection: its FIN or a
 * peerError. A socket the proxy destroyed reports neither afterwards, so this is "remote first".
 */
export function onPeerEnd(socket: Socket, ended: () => void): void {
  let seen = false;
  const peer = (e?: NodeJS.ErrnoException): void => {
    if (seen || (e && !peerError(e))) return;
    seen = true;
    ended();
  };
  socket.once('end', () => peer());
  socket.on('error', peer);
}

/** Bytes a cluster's connections have carried (upstream_cx_rx_bytes_total, upstream_cx_tx_bytes_total). */
export interface Bytes {
  rx: number;
  tx: number;
}

/**
 * A cluster's connection counters and its upstream_cx_active gauge, fed by all its pools. The
 * methods are bound: pools keep them as functions.
 */
export class UpstreamCxStats implements PoolCounters {
  /** Connections opened (connecting ones too, as Envoy) and not yet closed. */
  private readonly open = new Set<Socket>();
  private readonly total: StatCounter;
  private readonly failed: StatCounter;
  private readonly rx: StatCounter;
  private readonly tx: StatCounter;
  private readonly timedOut: StatCounter;
  private readonly idle: StatCounter;
  private readonly spent: StatCounter;
  private readonly aged: StatCounter;
  private readonly destroy: StatCounter;
  private readonly destroyBy: Readonly<Record<CloseSide, StatCounter>>;
  private readonly destroyActive: StatCounter;
  private readonly destroyActiveBy: Readonly<Record<CloseSide, StatCounter>>;

  constructor(counter: (stat: string) => StatCounter) {
    this.total = counter('upstream_cx_total');
    this.failed = counter('upstream_cx_connect_fail');
    this.rx = counter('upstream_cx_rx_bytes_total');
    this.tx = counter('upstream_cx_tx_bytes_total');
    this.timedOut = counter('upstream_cx_connect_timeout');
    this.idle = counter('upstream_cx_idle_timeout');
    this.spent = counter('upstream_cx_max_requests');
    this.aged = counter('upstream_cx_max_duration_reached');
    this.destroy = counter('upstream_cx_destroy');
    this.destroyBy = { local: counter('upstream_cx_destroy_local'), remote: counter('upstream_cx_destroy_remote') };
    this.destroyActive = counter('upstream_cx_destroy_with_active_rq');
    this.destroyActiveBy = { local: counter('upstream_cx_destroy_local_with_active_rq'), remote: counter('upstream_cx_destroy_remote_with_active_rq') };
  }

  /** upstream_cx_active */
  get active(): number {
    return this.open.size;
  }

  /**
   * The bytes the open connections carried so far. Envoy counts bytes as they pass; reading them
   * from the sockets when the stats are read costs the traffic nothing. A closed connection's are
   * in the counters.
   */
  openBytes(): Bytes {
    const b = { rx: 0, tx: 0 };
    for (const s of this.open) {
      b.rx += s.bytesRead;
      b.tx += s.bytesWritten;
    }
    return b;
  }

  readonly opened = (socket: Socket, ready: OpenedUpstream['ready']): void => {
    this.total.inc();
    this.open.add(socket);
    let connected = false;
    socket.once(ready, () => (connected = true));
    socket.once('close', () => {
      this.open.delete(socket);
      this.rx.inc(socket.bytesRead);
      this.tx.inc(socket.bytesWritten);
      if (!connected) this.failed.inc();
    });
  };

  readonly connectTimeout = (): void => this.timedOut.inc();
  readonly idleTimeout = (): void => this.idle.inc();
  readonly maxRequests = (): void => this.spent.inc();
  readonly maxDuration = (): void => this.aged.inc();

  readonly destroyed = (side: CloseSide, activeRq: boolean): void => {
    this.destroy.inc();
    this.destroyBy[side].inc();
    if (!activeRq) return;
    this.destroyActive.inc();
    this.destroyActiveBy[side].inc();
  };
}
