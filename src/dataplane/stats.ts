// The proxy's own statistics, named as Envoy names them: a dotted name for `/stats`
// (`cluster.inbound|8080||.upstream_rq_total`) and, for `/stats/prometheus`, the name with its
// variable part extracted as a tag (`envoy_cluster_upstream_rq_total{envoy_cluster_name="..."}`).
// Counters and gauges, and histograms (histograms.ts). They are not the mesh's spec metrics
// (src/common/metrics.ts): those belong to the programs' registries; these describe one proxy's
// traffic and config and live as long as the process.
import { compareText } from '../common/compare.js';
import { BUCKETS, histogramsJson, mergeHistograms, quantileSummary, StatHistogram, type HistogramSample } from './histograms.js';

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

/** The Prometheus name of a tag-extracted stat name, as Envoy's: `envoy_`, every other character than [a-zA-Z0-9_] an underscore. */
export const promName = (extracted: string): string => `envoy_${extracted.replace(/[^a-zA-Z0-9_]/g, '_')}`;

/**
 * `family.<tag value>.stat` with the tag extracted for Prometheus, as Envoy's default tag
 * extractors do (e.g. family `cluster`, tag `envoy_cluster_name`). Without a tag: `family.stat`.
 */
export function statName(family: string, stat: string, tag?: { name: string; value: string }): StatName {
  const prom = promName(`${family}.${stat}`);
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

/** Samples of one Prometheus family (same `prom`) in order, with the union of their label names. */
function families<S extends StatName>(samples: Iterable<S>): Map<string, { labelNames: string[]; list: S[] }> {
  const out = new Map<string, { labelNames: string[]; list: S[] }>();
  for (const s of samples) {
    const f = out.get(s.prom);
    if (f) f.list.push(s);
    else out.set(s.prom, { labelNames: [], list: [s] });
  }
  for (const f of out.values()) f.labelNames = [...new Set(f.list.flatMap((s) => Object.keys(s.labels)))].sort();
  return out;
}

/** `?filter=`: a regex on the name. */
const shownBy = (filter: RegExp | undefined) => (s: StatName) => !filter || filter.test(s.name);

/** Samples of several owners, same-named ones merged, sorted by name. */
function mergedByName<S extends StatName>(owners: Iterable<Iterable<S>>, merge: (a: S, b: S) => S): S[] {
  const out = new Map<string, S>();
  for (const owner of owners) {
    for (const s of owner) {
      const prev = out.get(s.name);
      out.set(s.name, prev ? merge(prev, s) : s);
    }
  }
  // Code-unit order, as Envoy's byte-wise string order: localeCompare would load ICU's collation
  // data into every proxy whose stats are read, /stats/prometheus scrapes included (about 3 MiB of RSS).
  return [...out.values()].sort((a, b) => compareText(a.name, b.name));
}

const escapeLabel = (v: string): string => v.replace(/\\/g, '\\\\').replace(/\n/g, '\\n').replace(/"/g, '\\"');

/** Histogram families in the Prometheus text format, as Envoy writes them: `_bucket{...,le}` (cumulative), `_sum`, `_count`. */
function prometheusHistograms(samples: readonly HistogramSample[]): string {
  let out = '';
  for (const [name, { labelNames, list }] of families(samples)) {
    out += `# HELP ${name} ${name}\n# TYPE ${name} histogram\n`;
    for (const s of list) {
      const labels = labelNames.map((l) => `${l}="${escapeLabel(s.labels[l] ?? '')}"`);
      const braces = (...extra: string[]) => (labels.length + extra.length > 0 ? `{${[...labels, ...extra].join(',')}}` : '');
      let cumulative = 0;
      BUCKETS.forEach((bound, i) => {
        cumulative += s.buckets[i]!;
        out += `${name}_bucket${braces(`le="${bound}"`)} ${cumulative}\n`;
      });
      out += `${name}_bucket${braces('le="+Inf"')} ${s.count}\n${name}_sum${braces()} ${s.sum}\n${name}_count${braces()} ${s.count}\n`;
    }
  }
  return out;
}

export class StatsStore {
  private readonly counters = new Map<string, StatCounter>();
  /** Final values of counters whose owner (a replaced filter chain) is gone, kept so totals never go back. */
  private readonly retired = new Map<string, StatSample>();
  private readonly sources = new Set<StatSource>();
  private readonly histogramsByName = new Map<string, StatHistogram>();
  private readonly histogramSources = new Set<() => Iterable<HistogramSample>>();

  /** The counter of that name (created at 0 on first use). */
  counter(stat: StatName): StatCounter {
    let c = this.counters.get(stat.name);
    if (!c) this.counters.set(stat.name, (c = new StatCounter(stat)));
    return c;
  }

  /** The histogram of that name (created empty on first use). */
  histogram(stat: StatName): StatHistogram {
    let h = this.histogramsByName.get(stat.name);
    if (!h) this.histogramsByName.set(stat.name, (h = new StatHistogram(stat)));
    return h;
  }

  addSource(source: StatSource): void {
    this.sources.add(source);
  }

  /** Histograms kept elsewhere (the workers'), merged with these at read time. */
  addHistogramSource(source: () => Iterable<HistogramSample>): void {
    this.histogramSources.add(source);
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
    const own = [...this.counters.values()].map((c): StatSample => ({ ...c.stat, kind: 'counter', value: c.value }));
    return mergedByName([own, this.retired.values(), ...[...this.sources].map((s) => s())], (a, b) => ({ ...a, value: a.value + b.value }));
  }

  /** Every histogram, same-named samples merged, sorted by name. */
  histograms(): HistogramSample[] {
    const own = [...this.histogramsByName.values()].map((h) => h.sample());
    return mergedByName([own, ...[...this.histogramSources].map((s) => s())], mergeHistograms);
  }

  /** `/stats`: `name: value` lines, then the histograms' quantiles (as Envoy); `filter` is a regex on the name (Envoy's `?filter=`). */
  text(filter?: RegExp): string {
    const scalars = this.samples().filter(shownBy(filter)).map((s) => `${s.name}: ${s.value}\n`);
    const histograms = this.histograms().filter(shownBy(filter)).map((h) => `${h.name}: ${quantileSummary(h)}\n`);
    return [...scalars, ...histograms].join('');
  }

  /** `/stats?format=json`: Envoy's `stats` list, `{name, value}` then a `histograms` entry when there are any. */
  json(filter?: RegExp): object[] {
    const scalars = this.samples().filter(shownBy(filter)).map((s) => ({ name: s.name, value: s.value }));
    const histograms = this.histograms().filter(shownBy(filter));
    return histograms.length > 0 ? [...scalars, histogramsJson(histograms)] : scalars;
  }

  /**
   * `/stats/prometheus`: the Prometheus text format, through prom-client, loaded on the first
   * scrape rather than in every proxy process (most are never scraped directly).
   */
  async prometheus(): Promise<string> {
    const { Counter, Gauge, Registry } = await import('prom-client');
    const registry = new Registry();
    for (const [name, { labelNames, list }] of families(this.samples())) {
      const full = (s: StatSample) => Object.fromEntries(labelNames.map((l) => [l, s.labels[l] ?? '']));
      if (list[0]!.kind === 'counter') {
        const m = new Counter({ name, help: name, labelNames, registers: [registry] });
        for (const s of list) m.inc(full(s), s.value);
      } else {
        const m = new Gauge({ name, help: name, labelNames, registers: [registry] });
        for (const s of list) m.set(full(s), s.value);
      }
    }
    // prom-client's histograms take observations, not the buckets of merged samples: written here.
    return (await registry.metrics()) + prometheusHistograms(this.histograms());
  }
}
