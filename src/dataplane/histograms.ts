// The proxy's histograms (e.g. upstream_rq_time, milliseconds) with Envoy's default buckets, and
// how Envoy's admin shows them in `/stats` (a line of quantiles) and `?format=json` (quantiles per
// histogram); their Prometheus form, cumulative buckets, is written in stats.ts. Recording a value
// costs a scan of the bucket bounds and a few field writes; nothing is allocated.
import type { StatName } from './stats.js';

/** Envoy's default histogram bucket bounds (HistogramSettingsImpl::defaultBuckets). */
export const BUCKETS: readonly number[] = [0.5, 1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 300000, 600000, 1800000, 3600000];

/** The quantiles Envoy's admin shows, in percent (HistogramStatisticsImpl's supported quantiles). */
const PERCENTILES: readonly number[] = [0, 25, 50, 75, 90, 95, 99, 99.5, 99.9, 100];

/** A histogram's state as read: per-bucket counts (the last one above every bound), sum, count, extremes. */
export interface HistogramSample extends StatName {
  readonly buckets: readonly number[];
  readonly count: number;
  readonly sum: number;
  readonly min: number;
  readonly max: number;
}

export class StatHistogram {
  /** Values per bucket: counts[i] holds those <= BUCKETS[i] and above the bound before; the last, the rest. */
  private readonly counts = new Array<number>(BUCKETS.length + 1).fill(0);
  private count = 0;
  private sum = 0;
  private min = 0;
  private max = 0;

  constructor(readonly stat: StatName) {}

  record(value: number): void {
    let i = 0;
    while (i < BUCKETS.length && value > BUCKETS[i]!) i++;
    this.counts[i]!++;
    if (this.count === 0 || value < this.min) this.min = value;
    if (this.count === 0 || value > this.max) this.max = value;
    this.count++;
    this.sum += value;
  }

  sample(): HistogramSample {
    return { ...this.stat, buckets: [...this.counts], count: this.count, sum: this.sum, min: this.min, max: this.max };
  }
}

/** Two samples of one histogram (processes' shares) as one. */
export function mergeHistograms(a: HistogramSample, b: HistogramSample): HistogramSample {
  if (a.count === 0) return b;
  if (b.count === 0) return a;
  return { ...a, buckets: a.buckets.map((n, i) => n + (b.buckets[i] ?? 0)), count: a.count + b.count, sum: a.sum + b.sum, min: Math.min(a.min, b.min), max: Math.max(a.max, b.max) };
}

/**
 * The value below which `percent` of the values lie, interpolated linearly inside its bucket and
 * kept within the recorded extremes (so one value is every quantile), to six significant digits.
 * Envoy computes its quantiles from finer log-linear bins: the values differ a little, the buckets
 * do not.
 */
function quantile(h: HistogramSample, percent: number): number {
  return Number(estimate(h, percent).toPrecision(6));
}

function estimate(h: HistogramSample, percent: number): number {
  const rank = (percent / 100) * h.count;
  let below = 0;
  for (let i = 0; i < h.buckets.length; i++) {
    const n = h.buckets[i]!;
    if (n === 0 || below + n < rank) {
      below += n;
      continue;
    }
    const lower = Math.max(i === 0 ? 0 : BUCKETS[i - 1]!, h.min);
    const upper = Math.min(i < BUCKETS.length ? BUCKETS[i]! : h.max, h.max);
    return lower + ((upper - lower) * (rank - below)) / n;
  }
  return h.max;
}

/**
 * `/stats`'s line for a histogram, Envoy's `P<q>(<interval>,<cumulative>)` list. Envoy's interval
 * values cover the time since its last stats flush; this proxy keeps no flush interval, so they are
 * `nan` (Envoy's value for an interval without samples).
 */
export function quantileSummary(h: HistogramSample): string {
  return PERCENTILES.map((p) => `P${p}(nan,${quantile(h, p)})`).join(' ');
}

/** `?format=json`: Envoy's `histograms` entry of the `stats` list. */
export function histogramsJson(samples: readonly HistogramSample[]): { histograms: object } {
  return {
    histograms: {
      supported_quantiles: PERCENTILES,
      computed_quantiles: samples.map((h) => ({ name: h.name, values: PERCENTILES.map((p) => ({ interval: null, cumulative: quantile(h, p) })) })),
    },
  };
}
