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
  return { maxRequests: http1 ? Math.min(requests, viaConnections) : requests, maxRetries: t?.maxRetries ?? DEFAULT_MAX_RETRIES };
}

/** Requests and retries in flight against the limits; `admit` returns the release, or undefined on overflow. */
export class CircuitBreaker {
  private requests = 0;
  private retries = 0;
  constructor(public limits: CircuitLimits) {}

  admit(retry = false): (() => void) | undefined {
    if (retry ? this.retries >= this.limits.maxRetries : this.requests >= this.limits.maxRequests) return undefined;
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
}

interface HostState {
  consecutive5xx: number;
  consecutiveGateway: number;
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
}

export function compileOutlierDetection(o: OutlierDetection): OutlierSpec {
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

  /** Records an attempt's outcome: an HTTP status, or 'failure' (connect failure, reset, timeout); `all`: the cluster's hosts. */
  report(e: Endpoint, outcome: number | 'failure', all: readonly Endpoint[], now = Date.now()): void {
    const key = keyOf(e);
    const h = this.hosts.get(key) ?? { consecutive5xx: 0, consecutiveGateway: 0, ejections: 0, ejectedUntil: 0 };
    this.hosts.set(key, h);
    const gateway = outcome === 'failure' || outcome === 502 || outcome === 503 || outcome === 504;
    const fiveXx = outcome === 'failure' || outcome >= 500;
    h.consecutive5xx = fiveXx ? h.consecutive5xx + 1 : 0;
    h.consecutiveGateway = gateway ? h.consecutiveGateway + 1 : 0;
    if (h.ejectedUntil > now) return;
    const s = this.spec;
    const by5xx = h.consecutive5xx >= s.consecutive5xx && Math.random() * 100 < s.enforce5xx;
    const byGateway = h.consecutiveGateway >= s.consecutiveGateway && Math.random() * 100 < s.enforceGateway;
    if (!by5xx && !byGateway) return;
    const ejected = all.filter((x) => this.ejectedUntil(x) > now).length;
    if (all.length === 0 || (ejected / all.length) * 100 >= s.maxEjectionPercent) return;
    h.ejections++;
    h.ejectedUntil = now + Math.min(s.baseEjectionMs * h.ejections, s.maxEjectionMs);
    h.consecutive5xx = 0;
    h.consecutiveGateway = 0;
    this.version++;
    log.info(`outlier detection: ejecting ${key} for ${h.ejectedUntil - now}ms (${by5xx ? 'consecutive 5xx' : 'consecutive gateway failures'})`);
  }
}
