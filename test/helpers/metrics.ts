import type { Counter, Gauge } from 'prom-client';

/** Sum of a metric's series whose labels include `labels`. */
export async function metricValue(metric: Counter<string> | Gauge<string>, labels: Record<string, string> = {}): Promise<number> {
  const { values } = await metric.get();
  return values.filter((v) => Object.entries(labels).every(([k, l]) => v.labels[k] === l)).reduce((sum, v) => sum + v.value, 0);
}
