// Envoy's slow start for ROUND_ROBIN and LEAST_REQUEST clusters: an endpoint that joins the
// cluster healthy (or turns healthy while a member) is balanced to at a reduced weight for the
// slow start window, weight × max(min_weight_percent, time_factor^(1/aggression)) with
// time_factor = max(elapsed, 1 ms) / window, so its share ramps up instead of arriving whole.
// Endpoints present when the cluster starts start together, so among themselves nothing changes.
import type { Cluster, Cluster_SlowStartConfig } from '../gen/envoy/config/cluster/v3/cluster_pb.js';
import { durationMs } from '../common/duration.js';
import { scope } from '../common/log.js';
import { ConfigError } from '../envoy/config-error.js';
import type { EdsHealth, WeightedEndpoint } from './cluster-spec.js';

const log = scope('upstream');

export interface SlowStartSpec {
  readonly windowMs: number;
  readonly aggression: number;
  /** min_weight_percent as a fraction (Envoy's default 10 % = 0.1). */
  readonly minWeight: number;
}

/** The slow_start_config of the cluster's round robin or least request config; undefined when off (no window). */
export function compileSlowStart(c: Cluster, field: string): SlowStartSpec | undefined {
  const cfg = c.lbConfig.case === 'roundRobinLbConfig' || c.lbConfig.case === 'leastRequestLbConfig' ? c.lbConfig.value.slowStartConfig : undefined;
  if (!cfg) return undefined;
  return fromConfig(cfg, `${field}.${c.lbConfig.case === 'roundRobinLbConfig' ? 'round_robin_lb_config' : 'least_request_lb_config'}.slow_start_config`);
}

function fromConfig(cfg: Cluster_SlowStartConfig, field: string): SlowStartSpec | undefined {
  const windowMs = durationMs(cfg.slowStartWindow, 0);
  if (windowMs < 0) throw new ConfigError(`${field}.slow_start_window`, 'must not be negative');
  // Envoy: slow start is enabled only by a window longer than zero.
  if (windowMs === 0) return undefined;
  let aggression = cfg.aggression?.defaultValue ?? 1;
  // As Envoy: an invalid aggression is logged and 1.0 (linear) is used. There is no runtime, so a runtime_key reads the default_value.
  if (!(aggression > 0)) {
    log.warn(`${field}.aggression: ${aggression} is invalid (must be > 0.0); using 1.0`);
    aggression = 1;
  }
  const percent = cfg.minWeightPercent?.value ?? 10;
  if (!(percent >= 0 && percent <= 100)) throw new ConfigError(`${field}.min_weight_percent`, `must be between 0 and 100, got ${percent}`);
  return { windowMs, aggression, minWeight: percent / 100 };
}

const balanced = (h: EdsHealth): boolean => h === 'healthy' || h === 'unknown';
const keyOf = (e: WeightedEndpoint): string => `${e.host}:${e.port}`;

/** When each endpoint of a cluster entered slow start, across the cluster's updates. */
export class SlowStartClock {
  private since = new Map<string, number>();
  /** The last moment any endpoint is still in its window. */
  private until = 0;

  /** Records the cluster's endpoints now: new healthy ones (and ones turned healthy) start their window. */
  observe(eps: readonly WeightedEndpoint[], spec: SlowStartSpec | undefined, now: number): void {
    const next = new Map<string, number>();
    for (const e of eps) {
      if (!balanced(e.health)) continue;
      const start = this.since.get(keyOf(e)) ?? now;
      next.set(keyOf(e), start);
      if (spec) this.until = Math.max(this.until, start + spec.windowMs);
    }
    this.since = next;
  }

  /** The endpoints' slow start weights now, or undefined when none is in its window (plain weights apply). */
  weights(spec: SlowStartSpec | undefined, now: number): ((e: WeightedEndpoint) => number) | undefined {
    if (!spec || now >= this.until) return undefined;
    return (e) => {
      const start = this.since.get(keyOf(e));
      const elapsed = start === undefined ? spec.windowMs : now - start;
      if (elapsed >= spec.windowMs) return e.weight;
      const time = Math.max(elapsed, 1) / spec.windowMs;
      const factor = spec.aggression === 1 ? time : Math.pow(time, 1 / spec.aggression);
      return e.weight * Math.max(factor, spec.minWeight);
    };
  }
}
