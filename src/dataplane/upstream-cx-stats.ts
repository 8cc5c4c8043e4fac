// How a cluster's upstream connections live and end, in its stats with Envoy's names and meanings:
// upstream_cx_total as a connection opens and the upstream_cx_active gauge until it closes; as it
// closes, upstream_cx_destroy, then _local or _remote by who ended it first (Envoy's LocalClose /
// RemoteClose: the proxy, or the upstream's FIN or reset), and the _with_active_rq counters when a
// request was in flight on it then. The proxy's own HTTP/1.1 client and the HTTP/2 pool know their
// requests and report all of these. node:http's agent and undici only lend the pool their sockets:
// `countEnd` tells local from remote from the socket's events, but which request was in flight is
// theirs alone, so their connections never count in the _with_active_rq counters.
import type { Socket } from 'node:net';
import type { StatCounter } from './stats.js';
import type { PoolCounters } from './upstream-pools.js';

/** Who ended a connection first: the proxy ('local') or the upstream ('remote'). */
export type CloseSide = 'local' | 'remote';

/** What a pool reports as each connection it counted opened closes (once). */
export interface ConnectionEnds {
  /** `activeRq`: whether a request was in flight on it; undefined when the pool cannot tell. */
  destroyed(side: CloseSide, activeRq: boolean | undefined): void;
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

/** Counts the end of a connection whose requests the pool does not see (node:http's agent, undici): its side only. */
export function countEnd(socket: Socket, count: ConnectionEnds): void {
  let side: CloseSide = 'local';
  onPeerEnd(socket, () => (side = 'remote'));
  socket.once('close', () => count.destroyed(side, undefined));
}

/**
 * A cluster's connection counters and its upstream_cx_active gauge, fed by all its pools. The
 * methods are bound: pools keep them as functions.
 */
export class UpstreamCxStats implements PoolCounters {
  /** upstream_cx_active: connections opened (connecting ones too, as Envoy) and not yet closed. */
  active = 0;
  private readonly total: StatCounter;
  private readonly timedOut: StatCounter;
  private readonly idle: StatCounter;
  private readonly spent: StatCounter;
  private readonly destroy: StatCounter;
  private readonly destroyBy: Readonly<Record<CloseSide, StatCounter>>;
  private readonly destroyActive: StatCounter;
  private readonly destroyActiveBy: Readonly<Record<CloseSide, StatCounter>>;

  constructor(counter: (stat: string) => StatCounter) {
    this.total = counter('upstream_cx_total');
    this.timedOut = counter('upstream_cx_connect_timeout');
    this.idle = counter('upstream_cx_idle_timeout');
    this.spent = counter('upstream_cx_max_requests');
    this.destroy = counter('upstream_cx_destroy');
    this.destroyBy = { local: counter('upstream_cx_destroy_local'), remote: counter('upstream_cx_destroy_remote') };
    this.destroyActive = counter('upstream_cx_destroy_with_active_rq');
    this.destroyActiveBy = { local: counter('upstream_cx_destroy_local_with_active_rq'), remote: counter('upstream_cx_destroy_remote_with_active_rq') };
  }

  readonly connection = (): void => {
    this.total.inc();
    this.active++;
  };

  readonly connectTimeout = (): void => this.timedOut.inc();
  readonly idleTimeout = (): void => this.idle.inc();
  readonly maxRequests = (): void => this.spent.inc();

  readonly destroyed = (side: CloseSide, activeRq: boolean | undefined): void => {
    this.active--;
    this.destroy.inc();
    this.destroyBy[side].inc();
    if (!activeRq) return;
    this.destroyActive.inc();
    this.destroyActiveBy[side].inc();
  };
}
