// The idle keep-alive connections of the proxy's own HTTP/1.1 client (client.ts) to one pool key:
// which connection a request takes, whether a connection is kept after its exchange (retired list,
// max_requests_per_connection, max_connection_duration, idle timeout), and the cluster's counters its connections report to.
import { DEFAULT_CONNECTION_LIMITS, durationTimer, type ConnectionLimits, type PoolCloses } from '../connection-limits.js';
import type { CloseSide, ConnectionEnds } from '../upstream-cx-stats.js';
import type { OpenedUpstream } from '../upstream-pools.js';
import { RequestGauges } from '../upstream-rq-stats.js';
import { Http1Connection } from './client.js';

/** A new connection to the endpoint, and the event that says it can carry a request. */
export type OpenConnection = () => OpenedUpstream;

/**
 * Told when the list gets its first open connection and when its last one closes: a pool keeps
 * only lists with connections, as keys per downstream connection (PROXY protocol) would pile up.
 */
export interface ListMembership {
  joined(): void;
  left(): void;
}

/** The idle keep-alive connections of one pool key (endpoint and upstream options), newest first used. */
export class ConnectionList {
  private readonly idle: Http1Connection[] = [];
  /** Every open connection, idle or busy, for destroy(). */
  private readonly open = new Set<Http1Connection>();
  private retired = false;

  constructor(
    private readonly connect: OpenConnection,
    /** The cluster's limits as they are now (an update applies to connections already open). */
    private readonly limits: () => ConnectionLimits = () => DEFAULT_CONNECTION_LIMITS,
    private readonly count?: PoolCloses & ConnectionEnds,
    /** The cluster's request gauges, which the connections keep. */
    readonly requests = new RequestGauges(),
    private readonly membership?: ListMembership,
  ) {}

  /** An idle connection, or a new one. */
  acquire(): Http1Connection {
    for (let c = this.idle.pop(); c; c = this.idle.pop()) if (c.usable) return c.take();
    const c = new Http1Connection(this.connect(), this);
    this.open.add(c);
    if (this.open.size === 1) this.membership?.joined();
    const timer = durationTimer(this.limits().maxDurationMs, () => this.outlived(c));
    if (timer) c.socket.once('close', () => clearTimeout(timer));
    return c;
  }

  /** max_connection_duration: an idle connection closes now, a busy one once its exchange ends. */
  private outlived(c: Http1Connection): void {
    this.count?.maxDuration();
    c.outlived = true;
    const i = this.idle.indexOf(c);
    if (i < 0) return;
    this.idle.splice(i, 1);
    c.close();
  }

  /**
   * A connection whose exchange ended cleanly: kept for the next request unless the list is
   * retired, the connection carried max_requests_per_connection requests or outlived
   * max_connection_duration.
   */
  release(c: Http1Connection): void {
    const { idleTimeoutMs, maxRequests } = this.limits();
    if (this.retired || c.outlived) c.close();
    else if (maxRequests > 0 && c.reuses + 1 >= maxRequests) {
      this.count?.maxRequests();
      c.close();
    } else this.idle.push(c.park(idleTimeoutMs));
  }

  /** An idle connection reached the idle timeout. */
  expired(c: Http1Connection): void {
    this.count?.idleTimeout();
    c.close();
  }

  /** The connection closed. */
  forget(c: Http1Connection): void {
    if (this.open.delete(c) && this.open.size === 0) this.membership?.left();
    const i = this.idle.indexOf(c);
    if (i >= 0) this.idle.splice(i, 1);
  }

  /** The connection's socket closed. */
  destroyed(side: CloseSide, activeRq: boolean): void {
    this.count?.destroyed(side, activeRq);
  }

  /** Idle connections close; busy ones close once their exchange ends. */
  retire(): void {
    this.retired = true;
    for (const c of this.idle.splice(0)) c.close();
  }

  /** Every connection closes, busy ones too (their exchanges fail). */
  destroy(): void {
    this.retire();
    for (const c of [...this.open]) c.socket.destroy();
  }
}
