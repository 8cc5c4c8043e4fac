// How long an upstream connection may stay idle and how many requests it may carry
// (common_http_protocol_options' idle_timeout and max_requests_per_connection), with Envoy's
// defaults, and the timer that closes a connection once it has been idle that long.
import { MAX_TIMER_MS } from '../common/duration.js';

/** Envoy's idle_timeout of an HTTP connection when none is set: one hour. */
export const DEFAULT_IDLE_TIMEOUT_MS = 3_600_000;

export interface ConnectionLimits {
  /** Closed after this long without a request in progress (0: never). */
  readonly idleTimeoutMs: number;
  /** Closed after carrying this many requests (0: no limit; 1: no keep-alive). */
  readonly maxRequests: number;
}

export const DEFAULT_CONNECTION_LIMITS: ConnectionLimits = { idleTimeoutMs: DEFAULT_IDLE_TIMEOUT_MS, maxRequests: 0 };

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

  /** Idle from now: expires after `ms` (0: never; at most node's longest timer) unless busy() first. */
  start(ms: number): void {
    this.idle = true;
    if (ms <= 0) return this.stop();
    ms = Math.min(ms, MAX_TIMER_MS);
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
