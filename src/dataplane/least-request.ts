// Envoy's LEAST_REQUEST load balancer. With equal weights: "power of N choices", N random
// endpoints (choice_count, default 2) and the one with the fewest active requests wins (the first
// drawn on a tie). With unequal weights: each endpoint's weight is scaled to
// weight / (active + 1)^active_request_bias at every pick; Envoy schedules those weights with an
// EDF queue, we interleave them with smooth weighted round robin (the same shares).
import type { Cluster } from '../gen/envoy/config/cluster/v3/cluster_pb.js';
import { ConfigError } from '../envoy/config-error.js';
import { scope } from '../common/log.js';
import type { Endpoint } from './upstream-pools.js';

const log = scope('upstream');

export interface LeastRequestSpec {
  readonly choiceCount: number;
  readonly bias: number;
}

/** Envoy's defaults: two choices, a bias of 1.0. */
export const LEAST_REQUEST_DEFAULTS: LeastRequestSpec = { choiceCount: 2, bias: 1 };

/** The cluster's least_request_lb_config; choice_count below 2 is refused (Envoy's proto rule). */
export function compileLeastRequest(c: Cluster, field: string): LeastRequestSpec {
  const cfg = c.lbConfig.case === 'leastRequestLbConfig' ? c.lbConfig.value : undefined;
  if (!cfg) return LEAST_REQUEST_DEFAULTS;
  const choiceCount = cfg.choiceCount ?? LEAST_REQUEST_DEFAULTS.choiceCount;
  if (choiceCount < 2) throw new ConfigError(`${field}.least_request_lb_config.choice_count`, `must be at least 2, got ${choiceCount}`);
  let bias = cfg.activeRequestBias?.defaultValue ?? LEAST_REQUEST_DEFAULTS.bias;
  // Envoy warns and falls back to 1.0 on a negative (or NaN) bias rather than refusing the cluster.
  if (!(bias >= 0)) {
    log.warn(`${field}.least_request_lb_config.active_request_bias: ${bias} is invalid (must be >= 0.0); using 1.0`);
    bias = 1;
  }
  if (cfg.activeRequestBias?.runtimeKey) log.warn(`${field}.least_request_lb_config.active_request_bias.runtime_key: there is no runtime; using the default_value`);
  return { choiceCount, bias };
}

function keyOf(ep: Endpoint): string {
  return `${ep.host}:${ep.port}`;
}

/** Active requests (HTTP streams, TCP connections) per endpoint address of a cluster. */
export class ActiveRequests {
  private readonly counts = new Map<string, number>();

  of(ep: Endpoint): number {
    return this.counts.get(keyOf(ep)) ?? 0;
  }

  /** Counts one more on `ep`; the returned release takes it off again (once, however often called). */
  begin(ep: Endpoint): () => void {
    const key = keyOf(ep);
    this.counts.set(key, (this.counts.get(key) ?? 0) + 1);
    let done = false;
    return () => {
      if (done) return;
      done = true;
      const n = (this.counts.get(key) ?? 1) - 1;
      if (n > 0) this.counts.set(key, n);
      else this.counts.delete(key);
    };
  }
}

export interface WeightedCandidate extends Endpoint {
  readonly weight: number;
}

/**
 * Picks among `eps` (non-empty); `current` is the smooth round robin state for the weighted case.
 * `weightOf`: the endpoints' weights now when slow start changes them (then always weighted, as
 * Envoy schedules by weight while any endpoint is in slow start).
 */
export function leastRequestPick<E extends WeightedCandidate>(eps: readonly E[], spec: LeastRequestSpec, active: ActiveRequests, current: number[], random: () => number = Math.random, weightOf?: (e: E) => number): E {
  if (eps.length === 1) return eps[0]!;
  if (!weightOf && eps.every((e) => e.weight === eps[0]!.weight)) {
    let best: E | undefined;
    for (let i = 0; i < spec.choiceCount; i++) {
      const candidate = eps[Math.floor(random() * eps.length)]!;
      if (!best || active.of(candidate) < active.of(best)) best = candidate;
    }
    return best!;
  }
  if (current.length !== eps.length) current.splice(0, current.length, ...eps.map(() => 0));
  let total = 0;
  let best = 0;
  eps.forEach((e, i) => {
    const weight = weightOf ? weightOf(e) : e.weight;
    const w = spec.bias === 0 ? weight : weight / Math.pow(active.of(e) + 1, spec.bias);
    current[i]! += w;
    total += w;
    if (current[i]! > current[best]!) best = i;
  });
  current[best]! -= total;
  return eps[best]!;
}
