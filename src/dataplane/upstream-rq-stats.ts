// A cluster's request gauges, with the meanings of Envoy's connection pools: a request (an HTTP
// stream, a TCP proxy connection) is pending (upstream_rq_pending_active, counted once in
// upstream_rq_pending_total) while it waits for its connection to be ready (connected, TLS
// verified), then active (upstream_rq_active) until its exchange ends. One request is in one of the
// two or in neither. upstream_rq_total counts a request as it becomes active (Envoy's
// attachStreamToClient), so one that never reached a connection (refused, timed out connecting)
// is not in it; a request's route with a stat_prefix counts it there too (its own upstream_rq_total,
// route-stats.ts), as Envoy's router does once the pool is ready. On the HTTP/1.1 hot path a request
// costs two field writes at its start and one at its end.
import type { StatCounter } from './stats.js';

export class RequestGauges {
  /** upstream_rq_active */
  active = 0;
  /** upstream_rq_pending_active */
  pending = 0;

  /** upstream_rq_pending_total and upstream_rq_total (none: counted nowhere, a pool without a cluster). */
  constructor(
    private readonly waited?: StatCounter,
    private readonly total?: StatCounter,
  ) {}

  /** A request is sent on a ready connection; `route`: its route's upstream_rq_total. */
  start(route?: StatCounter): void {
    this.total?.inc();
    route?.inc();
    this.active++;
  }

  /** A request waits for a connection still connecting. */
  wait(): void {
    this.waited?.inc();
    this.pending++;
  }

  /** The connection a pending request waited for is ready: it is sent. */
  attach(route?: StatCounter): void {
    this.pending--;
    this.start(route);
  }
}
