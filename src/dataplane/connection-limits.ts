// How long a connection (upstream or downstream) may stay idle, how many requests it may carry and
// how long it may live (common_http_protocol_options' idle_timeout, max_requests_per_connection and
// max_connection_duration), with Envoy's defaults, which fields of those options are not applied, and the timer that closes a connection
// once it has been idle that long.
import { HttpProtocolOptionsSchema, type HttpProtocolOptions } from '../gen/envoy/config/core/v3/protocol_pb.js';
import { timerMs } from '../common/duration.js';
import { unappliedFields } from '../envoy/config-error.js';

/** Envoy's idle_timeout of an HTTP connection when none is set: one hour. */
export const DEFAULT_IDLE_TIMEOUT_MS = 3_600_000;

export interface ConnectionLimits {
  /** Closed after this long without a request in progress (0: never). */
  readonly idleTimeoutMs: number;
  /** Closed after carrying this many requests (0: no limit; 1: no keep-alive). */
  readonly maxRequests: number;
  /** Takes no new request this long after it opened, and closes once idle (0: no limit). */
  readonly maxDurationMs: number;
}

export const DEFAULT_CONNECTION_LIMITS: ConnectionLimits = { idleTimeoutMs: DEFAULT_IDLE_TIMEOUT_MS, maxRequests: 0, maxDurationMs: 0 };

/** The limits of common_http_protocol_options (Envoy's defaults for what is unset); the idle timeout at most node's longest timer. */
export function connectionLimitsOf(common: HttpProtocolOptions | undefined): ConnectionLimits {
  return {
    idleTimeoutMs: timerMs(common?.idleTimeout, DEFAULT_IDLE_TIMEOUT_MS),
    maxRequests: common?.maxRequestsPerConnection ?? 0,
    maxDurationMs: timerMs(common?.maxConnectionDuration, 0),
  };
}

/** The set fields of common_http_protocol_options other than `applied`, by their proto names. */
export function unappliedCommonFields(common: HttpProtocolOptions, applied: readonly string[]): string[] {
  const names = HttpProtocolOptionsSchema.fields.map((f) => f.localName).filter((n) => !applied.includes(n));
  return unappliedFields(HttpProtocolOptionsSchema, common, names);
}

/** Why a pool closed a connection of its own accord, for the cluster's counters. */
export interface PoolCloses {
  /** Idle for the cluster's idle_timeout (upstream_cx_idle_timeout). */
  idleTimeout(): void;
  /** It carried max_requests_per_connection requests (upstream_cx_max_requests). */
  maxRequests(): void;
  /** It reached max_connection_duration (upstream_cx_max_duration_reached). */
  maxDuration(): void;
}

/**
 * Calls `reached` once, `ms` after now (0: never), without keeping the process alive: a
 * connection's max_connection_duration, armed as it opens.
 */
export function durationTimer(ms: number, reached: () => void): NodeJS.Timeout | undefined {
  return ms > 0 ? setTimeout(reached, ms).unref() : undefined;
}

/**
 * Calls `expire` once its owner has been idle for the limit. One timer per connection, re-armed
 * (not re-created) each time the connection goes idle, so a request costs no timer of its own; a
 * timer that fires while the connection is busy again does nothing.
 */
export class IdleTimer {
  private timer: NodeJS.Timeout | undefined;
  private ms = 0;
  private idle = false;

  constructor(private readonly expire: () => void) {}

  /** Idle from now: expires after `ms` (0: never; connectionLimitsOf caps it) unless busy() first. */
  start(ms: number): void {
    this.idle = true;
    if (ms <= 0) return this.stop();
    if (this.timer && this.ms === ms) {
      this.timer.refresh();
      return;
    }
    clearTimeout(this.timer);
    this.ms = ms;
    // An idle connection must not keep the process alive.
    this.timer = setTimeout(() => {
      if (this.idle) this.expire();
    }, ms).unref();
  }

  busy(): void {
    this.idle = false;
  }

  stop(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
  }
}
