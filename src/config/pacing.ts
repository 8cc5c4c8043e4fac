// Pacing of requests to the orchestrator's API: a client-side token bucket (--orchestratorApiQPS,
// --orchestratorApiBurst) and exponential backoff with jitter for reconnects.

import { setTimeout as sleep } from 'node:timers/promises';

export interface Clock {
  now(): number;
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
}

export const realClock: Clock = {
  now: () => performance.now(),
  sleep: (ms, signal) => sleep(ms, undefined, signal ? { signal } : undefined),
};

/** Allows `burst` requests at once and `qps` per second on average; qps <= 0 means unlimited. */
export class TokenBucket {
  private tokens: number;
  private last: number;

  constructor(
    private readonly qps: number,
    private readonly burst: number,
    private readonly clock: Clock = realClock,
  ) {
    this.tokens = Math.max(1, burst);
    this.last = clock.now();
  }

  /** Waits until a request may be sent. Callers are served in the order they call. */
  async take(signal?: AbortSignal): Promise<void> {
    if (this.qps <= 0) return;
    const now = this.clock.now();
    this.tokens = Math.min(Math.max(1, this.burst), this.tokens + ((now - this.last) / 1000) * this.qps);
    this.last = now;
    // Reserve the token now (possibly going negative) so concurrent callers queue up fairly.
    this.tokens -= 1;
    if (this.tokens >= 0) return;
    await this.clock.sleep((-this.tokens / this.qps) * 1000, signal);
  }
}

export interface BackoffOptions {
  initialMs: number;
  maxMs: number;
}

export const DEFAULT_BACKOFF: BackoffOptions = { initialMs: 500, maxMs: 30_000 };

/** Exponential backoff: initial, doubling to max, each delay jittered into [50 %, 100 %]. */
export class Backoff {
  private attempt = 0;

  constructor(
    private readonly options: BackoffOptions = DEFAULT_BACKOFF,
    private readonly random: () => number = Math.random,
  ) {}

  next(): number {
    const base = Math.min(this.options.maxMs, this.options.initialMs * 2 ** this.attempt);
    this.attempt += 1;
    return base * (0.5 + this.random() / 2);
  }

  reset(): void {
    this.attempt = 0;
  }
}
