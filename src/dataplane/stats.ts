// The proxy's own statistics, named as Envoy names them: a dotted name for `/stats`
// (`cluster.inbound|8080||.upstream_rq_total`) and, for `/stats/prometheus`, the name with its
// variable part extracted as a tag (`envoy_cluster_upstream_rq_total{envoy_cluster_name="..."}`).
// They are not the mesh's spec metrics (src/common/metrics.ts): those belong to the programs'
// registries; these describe one proxy's traffic and config and live as long as the process.
import { compareText } from '../common/compare.js';

export interface StatName {
  /** Envoy's dotted name, as `/stats` prints it. */
  readonly name: string;
  /** The Prometheus metric name (`envoy_...`). */
  readonly prom: string;
  readonly labels: Readonly<Record<string, string>>;
}

export interface StatSample extends StatName {
  readonly kind: 'counter' | 'gauge';
  readonly value: number;
}

/**
 * `family.<tag value>.stat` with the tag extracted for Prometheus, as Envoy's default tag
 * extractors do (e.g. family `cluster`, tag `envoy_cluster_name`). Without a tag: `family.stat`.
 */
export function statName(family: string, stat: string, tag?: { name: string; value: string }): StatName {
  const prom = `envoy_${family}_${stat}`.replace(/[^a-zA-Z0-9_:]/g, '_');
  if (!tag) return { name: `${family}.${stat}`, prom, labels: {} };
  return { name: `${family}.${tag.value}.${stat}`, prom, labels: { [tag.name]: tag.value } };
}

export class StatCounter {
  value = 0;
  constructor(readonly stat: StatName) {}
  inc(n = 1): void {
    this.value += n;
  }
}

/** Samples computed at read time (gauges of live state, counters owned by compiled filters). */
export type StatSource = () => Iterable<StatSample>;

export class StatsStore {
  private readonly counters = new Map<string, StatCounter>();
  /** Final values of counters whose owner (a replaced filter chain) is gone, kept so totals never go back. */
  private readonly retired = new Map<string, StatSample>();
  private readonly sources = new Set<StatSource>();

  /** The counter of that name (created at 0 on first use). */
  counter(stat: StatName): StatCounter {
    let c = this.counters.get(stat.name);
    if (!c) this.counters.set(stat.name, (c = new StatCounter(stat)));
    return c;
  }

  addSource(source: StatSource): void {
    this.sources.add(source);
  }

  /** Folds the counters of a retired owner into the totals. */
  retire(samples: Iterable<StatSample>): void {
    for (const s of samples) {
      if (s.kind !== 'counter') continue;
      const prev = this.retired.get(s.name);
      this.retired.set(s.name, { ...s, value: (prev?.value ?? 0) + s.value });
    }
  }

  /** Every stat, same-named samples summed, sorted by name. */
  samples(): StatSample[] {
    const out = new Map<string, StatSample>();
    const add = (s: StatSample) => {
      const prev = out.get(s.name);
      out.set(s.name, prev ? { ...prev, value: prev.value + s.value } : s);
    };
    for (const c of this.counters.values()) add({ ...c.stat, kind: 'counter', value: c.value });
    for (const s of this.retired.values()) add(s);
    for (const source of this.sources) for (const s of source()) add(s);
    // Code-unit order, as Envoy's byte-wise string order: localeCompare would load ICU's collation
    // data into every proxy whose stats are read, /stats/prometheus scrapes included (about 3 MiB of RSS).
    return [...out.values()].sort((a, b) => compareText(a.name, b.name));
  }

  /** `/stats`: `name: value` lines; `filter` is a regex on the name (Envoy's `?filter=`). */
  text(filter?: RegExp): string {
    return this.samples()
      .filter((s) => !filter || filter.test(s.name))
      .map((s) => `${s.name}: ${s.value}\n`)
      .join('');
  }

  /**
   * `/stats/prometheus`: the Prometheus text format, through prom-client, loaded on the first
   * scrape rather than in every proxy process (most are never scraped directly).
   */
  async prometheus(): Promise<string> {
    const { Counter, Gauge, Registry } = await import('prom-client');
    const registry = new Registry();
    const byProm = new Map<string, StatSample[]>();
    for (const s of this.samples()) {
      const list = byProm.get(s.prom);
      if (list) list.push(s);
      else byProm.set(s.prom, [s]);
    }
    for (const [name, list] of byProm) {
      const labelNames = [...new Set(list.flatMap((s) => Object.keys(s.labels)))].sort();
      const full = (s: StatSample) => Object.fromEntries(labelNames.map((l) => [l, s.labels[l] ?? '']));
      if (list[0]!.kind === 'counter') {
        const m = new Counter({ name, help: name, labelNames, registers: [registry] });
        for (const s of list) m.inc(full(s), s.value);
      } else {
        const m = new Gauge({ name, help: name, labelNames, registers: [registry] });
        for (const s of list) m.set(full(s), s.value);
      }
    }
    return registry.metrics();
  }
}
