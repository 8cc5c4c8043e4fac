// A cluster's passive protections, as Envoy applies them: circuit breakers (the default-priority
// thresholds: requests in flight, retries in flight) and outlier detection (hosts ejected after
// consecutive 5xx or gateway failures, back after base_ejection_time x the times ejected).
import type { CircuitBreakers } from '../gen/envoy/config/cluster/v3/circuit_breaker_pb.js';
import { RoutingPriority } from '../gen/envoy/config/core/v3/base_pb.js';
import type { OutlierDetection } from '../gen/envoy/config/cluster/v3/outlier_detection_pb.js';
import { durationMs } from '../common/duration.js';
import { scope } from '../common/log.js';
import type { Endpoint } from './upstream-pools.js';

const log = scope('upstream');

/** Envoy's defaults for an unset threshold. */
const DEFAULT_MAX = 1024;
const DEFAULT_MAX_RETRIES = 3;

export interface CircuitLimits {
  /** Requests in flight the cluster admits (max_requests; for HTTP/1.1 also connections + pending). */
  readonly maxRequests: number;
  readonly maxRetries: number;
  /**
   * retry_budget, which replaces max_retries: retries in flight up to `percent` of the requests in
   * flight, never fewer than `minConcurrency` (Envoy's defaults 20 % and 3).
   */
  readonly retryBudget?: { readonly percent: number; readonly minConcurrency: number };
}

/**
 * The default-priority thresholds. An HTTP/1.1 request needs a connection of its own, so it also
 * overflows once max_connections are busy and max_pending_requests wait; connections themselves are
 * not capped (the pool opens what it needs).
 */
export function compileCircuitBreakers(cb: CircuitBreakers | undefined, http1: boolean): CircuitLimits {
  const t = cb?.thresholds.find((x) => x.priority === RoutingPriority.DEFAULT);
  if (cb && cb.perHostThresholds.length > 0) log.warn('circuit_breakers.per_host_thresholds are not applied yet');
  const requests = t?.maxRequests ?? DEFAULT_MAX;
  const viaConnections = (t?.maxConnections ?? DEFAULT_MAX) + (t?.maxPendingRequests ?? DEFAULT_MAX);
  const budget = t?.retryBudget;
  return {
    maxRequests: http1 ? Math.min(requests, viaConnections) : requests,
    maxRetries: t?.maxRetries ?? DEFAULT_MAX_RETRIES,
    ...(budget ? { retryBudget: { percent: budget.budgetPercent?.value ?? DEFAULT_BUDGET_PERCENT, minConcurrency: budget.minRetryConcurrency ?? DEFAULT_MIN_RETRY_CONCURRENCY } } : {}),
  };
}

/** Envoy's retry_budget defaults. */
const DEFAULT_BUDGET_PERCENT = 20;
const DEFAULT_MIN_RETRY_CONCURRENCY = 3;

/** Requests and retries in flight against the limits; `admit` returns the release, or undefined on overflow. */
export class CircuitBreaker {
  private requests = 0;
  private retries = 0;
  constructor(public limits: CircuitLimits) {}

  admit(retry = false): (() => void) | undefined {
    if (retry ? this.retries >= this.maxRetries() : this.requests >= this.limits.maxRequests) return undefined;
    if (retry) this.retries++;
    else this.requests++;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      if (retry) this.retries--;
      else this.requests--;
    };
  }

  /** Retries allowed in flight now: max_retries, or the retry budget's share of the requests in flight. */
  private maxRetries(): number {
    const b = this.limits.retryBudget;
    return b ? Math.max(Math.floor((b.percent / 100) * this.requests), b.minConcurrency) : this.limits.maxRetries;
  }
}

interface HostState {
  consecutive5xx: number;
  consecutiveGateway: number;
  consecutiveLocalOrigin: number;
  ejections: number;
  ejectedUntil: number;
}

export interface OutlierSpec {
  readonly consecutive5xx: number;
  readonly enforce5xx: number;
  readonly consecutiveGateway: number;
  readonly enforceGateway: number;
  readonly baseEjectionMs: number;
  readonly maxEjectionMs: number;
  readonly maxEjectionPercent: number;
  /** split_external_local_origin_errors: connect failures and timeouts count on their own (consecutive_local_origin_failure), not as 5xx. */
  readonly split: boolean;
  readonly consecutiveLocalOrigin: number;
  readonly enforceLocalOrigin: number;
}

/**
 * An attempt's outcome as the outlier detector takes it: an HTTP status (the connection worked),
 * 'failure' (connect failure, reset, timeout: local origin) or 'connected' (a TCP proxy's upstream
 * connection was established, Envoy's LocalOriginConnectSuccessFinal).
 */
export type OutlierOutcome = number | 'failure' | 'connected';

export function compileOutlierDetection(o: OutlierDetection, cluster: string): OutlierSpec {
  // Envoy's success-rate and failure-percentage ejection (the Go mesh turns success rate off and never sets the others).
  const statistical = [
    (o.enforcingSuccessRate ?? 100) > 0 ? 'enforcing_success_rate' : '',
    (o.enforcingFailurePercentage ?? 0) > 0 ? 'enforcing_failure_percentage' : '',
    o.splitExternalLocalOriginErrors && (o.enforcingLocalOriginSuccessRate ?? 100) > 0 ? 'enforcing_local_origin_success_rate' : '',
    (o.enforcingFailurePercentageLocalOrigin ?? 0) > 0 ? 'enforcing_failure_percentage_local_origin' : '',
  ].filter((f) => f !== '');
  if (statistical.length > 0) log.warn(`cluster ${cluster}: outlier_detection: ${statistical.join(', ')} (success-rate and failure-percentage ejection) not applied yet; consecutive-error ejection is`);
  const baseEjectionMs = durationMs(o.baseEjectionTime, 30_000);
  return {
    consecutive5xx: o.consecutive5xx ?? 5,
    enforce5xx: o.enforcingConsecutive5xx ?? 100,
    consecutiveGateway: o.consecutiveGatewayFailure ?? 5,
    // Envoy enforces gateway-failure ejections only when asked (its default is 0 %).
    enforceGateway: o.enforcingConsecutiveGatewayFailure ?? 0,
    baseEjectionMs,
    maxEjectionMs: Math.max(baseEjectionMs, durationMs(o.maxEjectionTime, 300_000)),
    maxEjectionPercent: o.maxEjectionPercent ?? 10,
    split: o.splitExternalLocalOriginErrors,
    consecutiveLocalOrigin: o.consecutiveLocalOriginFailure ?? 5,
    enforceLocalOrigin: o.enforcingConsecutiveLocalOriginFailure ?? 100,
  };
}

const keyOf = (e: Endpoint): string => `${e.host}:${e.port}`;

/**
 * Ejects hosts on consecutive failures. A host comes back once its ejection time has passed
 * (checked when endpoints are picked, not on Envoy's interval timer).
 */
export class OutlierDetector {
  private readonly hosts = new Map<string, HostState>();
  /** Counts ejections: what was derived from the ejected set holds while it is unchanged (and no ejection has ended). */
  version = 0;
  constructor(public spec: OutlierSpec) {}

  /** When the host's current ejection ends (ms since the epoch); 0 when it never was ejected. */
  ejectedUntil(e: Endpoint): number {
    return this.hosts.get(keyOf(e))?.ejectedUntil ?? 0;
  }

  /**
   * Records an attempt's outcome; `all`: the cluster's hosts. Without the split, as Envoy maps
   * them, a local-origin failure is a 503 and a connection made a 200; with it, they count on the
   * local-origin counter alone (a response means the connection was made), responses on the others.
   */
  report(e: Endpoint, outcome: OutlierOutcome, all: readonly Endpoint[], now = Date.now()): void {
    const key = keyOf(e);
    const h = this.hosts.get(key) ?? { consecutive5xx: 0, consecutiveGateway: 0, consecutiveLocalOrigin: 0, ejections: 0, ejectedUntil: 0 };
    this.hosts.set(key, h);
    const s = this.spec;
    if (s.split && outcome === 'failure') h.consecutiveLocalOrigin++;
    else if (s.split && outcome === 'connected') h.consecutiveLocalOrigin = 0;
    else {
      const code = outcome === 'failure' ? 503 : outcome === 'connected' ? 200 : outcome;
      if (s.split) h.consecutiveLocalOrigin = 0;
      h.consecutive5xx = code >= 500 ? h.consecutive5xx + 1 : 0;
      h.consecutiveGateway = code === 502 || code === 503 || code === 504 ? h.consecutiveGateway + 1 : 0;
    }
    if (h.ejectedUntil > now) return;
    const by5xx = h.consecutive5xx >= s.consecutive5xx && Math.random() * 100 < s.enforce5xx;
    const byGateway = h.consecutiveGateway >= s.consecutiveGateway && Math.random() * 100 < s.enforceGateway;
    const byLocalOrigin = s.split && h.consecutiveLocalOrigin >= s.consecutiveLocalOrigin && Math.random() * 100 < s.enforceLocalOrigin;
    if (!by5xx && !byGateway && !byLocalOrigin) return;
    const ejected = all.filter((x) => this.ejectedUntil(x) > now).length;
    if (all.length === 0 || (ejected / all.length) * 100 >= s.maxEjectionPercent) return;
    h.ejections++;
    h.ejectedUntil = now + Math.min(s.baseEjectionMs * h.ejections, s.maxEjectionMs);
    h.consecutive5xx = 0;
    h.consecutiveGateway = 0;
    h.consecutiveLocalOrigin = 0;
    this.version++;
    const why = by5xx ? 'consecutive 5xx' : byGateway ? 'consecutive gateway failures' : 'consecutive local-origin failures';
    log.info(`outlier detection: ejecting ${key} for ${h.ejectedUntil - now}ms (${why})`);
  }
}
