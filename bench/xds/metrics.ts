// Percentiles of the discovery server's own latency histograms over one bench step, read from the
// in-process metrics registry (the same numbers /metrics shows), estimated within the histogram's
// buckets by linear interpolation as Prometheus's histogram_quantile does.
import { histogram } from '../../src/common/metrics.js';

type Buckets = Map<number, number>;

/** Cumulative counts per upper bound (`le`), summed over label sets. */
export async function snapshot(name: 'pilot_proxy_convergence_time' | 'pilot_proxy_queue_time'): Promise<Buckets> {
  const buckets: Buckets = new Map();
  for (const v of (await histogram(name).get()).values) {
    if (v.metricName !== `${name}_bucket`) continue;
    const le = v.labels.le === '+Inf' ? Infinity : Number(v.labels.le);
    buckets.set(le, (buckets.get(le) ?? 0) + v.value);
  }
  return buckets;
}

/**
 * The q-quantile (0..1), in milliseconds, of what was observed between two snapshots; Infinity when
 * it lies past the last finite bucket.
 */
export function quantileMs(before: Buckets, after: Buckets, q: number): number | undefined {
  const bounds = [...after.keys()].sort((a, b) => a - b);
  const counts = bounds.map((le) => after.get(le)! - (before.get(le) ?? 0));
  const total = counts[counts.length - 1] ?? 0;
  if (total === 0) return undefined;
  const rank = q * total;
  for (let i = 0; i < bounds.length; i++) {
    if (counts[i]! < rank) continue;
    const upper = bounds[i]!;
    const lower = i === 0 ? 0 : bounds[i - 1]!;
    if (upper === Infinity) return Infinity;
    const below = i === 0 ? 0 : counts[i - 1]!;
    const inBucket = counts[i]! - below;
    return (lower + ((upper - lower) * (rank - below)) / Math.max(inBucket, 1)) * 1000;
  }
  return undefined;
}
