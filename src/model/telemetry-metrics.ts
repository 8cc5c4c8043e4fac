// The Telemetry API's metrics for one proxy, as the Go mesh's mergeMetrics
// (pilot/pkg/model/telemetry.go): the `metrics` entries of the Telemetries that apply to the proxy
// (weakest first, model/telemetry.ts) merged into, per provider and per side, whether metrics are
// off and the overrides of each metric. Pure: entries in, normalized settings out.
import type { MetricsOverride, StandardMetric, Telemetry, TelemetryMetrics, WorkloadMode } from '../api/types.js';
import { STANDARD_METRICS } from '../api/types.js';
import { joinPath } from '../api/errors.js';
import { AttributeExpressionError, parseAttributeExpression } from '../envoy/attribute-expression.js';
import type { LogSide } from './telemetry.js';
import { METRICS_KIND, type TelemetryProviders } from './telemetry-providers.js';

/** A tag of a metric: set to an attribute expression, or removed. */
export type MetricTag = { readonly name: string; readonly remove: true } | { readonly name: string; readonly remove: false; readonly value: string };

/** What one metric of one side gets: `name` is the standard metric's enum name or a custom metric's. */
export interface MetricOverride {
  readonly name: string;
  readonly disabled: boolean;
  /** Sorted by name. */
  readonly tags: readonly MetricTag[];
}

export interface SideMetrics {
  /** Every metric is off: the side gets no stats filter. */
  readonly disabled: boolean;
  /** Sorted by name. */
  readonly overrides: readonly MetricOverride[];
}

export interface ProviderMetrics {
  readonly provider: string;
  readonly client: SideMetrics;
  readonly server: SideMetrics;
  /** The strongest entry's reportingInterval (a duration text) for this provider, if any set one. */
  readonly reportingInterval?: string;
}

/** The standard metrics ALL_METRICS stands for, sorted by enum name as the Go mesh lists them. */
const ALL_METRICS: readonly StandardMetric[] = STANDARD_METRICS.filter((m) => m !== 'ALL_METRICS').sort();

const SIDES: readonly LogSide[] = ['CLIENT', 'SERVER'];

function sidesOf(mode: WorkloadMode | undefined): readonly LogSide[] {
  return mode === 'CLIENT' || mode === 'SERVER' ? [mode] : SIDES;
}

/** No match, or ALL_METRICS: the override is about every metric (a custom metric never is). */
function matchesAll(o: MetricsOverride): boolean {
  return o.match?.customMetric === undefined && (o.match?.metric === undefined || o.match.metric === 'ALL_METRICS');
}

function metricsOf(o: MetricsOverride): readonly string[] {
  if (o.match?.customMetric !== undefined) return [o.match.customMetric];
  return matchesAll(o) ? ALL_METRICS : [o.match!.metric!];
}

const namesOf = (m: TelemetryMetrics): string[] => (m.providers ?? []).map((p) => p.name);

/** One metric's merged state: `disabled` unset until an override sets it; tags by name, last wins. */
interface Pending {
  disabled?: boolean;
  readonly tags: Map<string, MetricTag>;
}

function tagOf(name: string, t: NonNullable<MetricsOverride['tagOverrides']>[string]): MetricTag {
  return t.operation === 'REMOVE' ? { name, remove: true } : { name, remove: false, value: t.value ?? '' };
}

/** Code unit order, as Go sorts strings. */
const compare = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0);
const byName = <T extends { readonly name: string }>(a: T, b: T): number => compare(a.name, b.name);

type Sides = Record<LogSide, Map<string, Pending>>;
const noOverrides = (): Sides => ({ CLIENT: new Map(), SERVER: new Map() });

/**
 * Go's mergeMetrics. The last entry naming providers sets which are in scope (default:
 * defaultProviders.metrics); every entry applies to its providers (none named: the previous
 * entry's, at first the defaults) that are in scope. An override disabling every metric turns the
 * side off; any later override of that side turns it back on (a root namespace disables all, a
 * namespace enables some). Other overrides merge per metric, later ones winning field by field.
 * Without any entry the default providers record everything, unchanged.
 */
export function mergeMetrics(metrics: readonly TelemetryMetrics[], defaults: readonly string[]): ProviderMetrics[] {
  const providers = new Map<string, Sides>();
  if (metrics.length === 0) for (const name of defaults) providers.set(name, noOverrides());
  let inScopeNames: readonly string[] = defaults;
  for (const m of metrics) if (namesOf(m).length > 0) inScopeNames = namesOf(m);
  const inScope = new Set(inScopeNames);
  const allOff = new Set<string>();
  const intervals = new Map<string, string>();
  let parent: readonly string[] = defaults;
  for (const m of metrics) {
    const names = namesOf(m).length > 0 ? namesOf(m) : parent;
    parent = names;
    for (const provider of names) {
      if (!inScope.has(provider)) continue;
      if (m.reportingInterval !== undefined) intervals.set(provider, m.reportingInterval);
      let sides = providers.get(provider);
      if (!sides) providers.set(provider, (sides = noOverrides()));
      for (const o of m.overrides ?? []) {
        if (matchesAll(o) && o.disabled === true) {
          for (const side of sidesOf(o.match?.mode)) allOff.add(`${provider}/${side}`);
          continue;
        }
        for (const side of sidesOf(o.match?.mode)) {
          allOff.delete(`${provider}/${side}`);
          for (const metric of metricsOf(o)) {
            let p = sides[side].get(metric);
            if (!p) sides[side].set(metric, (p = { tags: new Map() }));
            if (o.disabled !== undefined) p.disabled = o.disabled;
            for (const [tag, t] of Object.entries(o.tagOverrides ?? {})) p.tags.set(tag, tagOf(tag, t));
          }
        }
      }
    }
  }
  return [...providers].map(([provider, sides]): ProviderMetrics => {
    const side = (s: LogSide): SideMetrics => {
      if (allOff.has(`${provider}/${s}`)) return { disabled: true, overrides: [] };
      const overrides = [...sides[s]].map(([name, p]) => ({ name, disabled: p.disabled === true, tags: [...p.tags.values()].sort(byName) }));
      return { disabled: false, overrides: overrides.sort(byName) };
    };
    const interval = intervals.get(provider);
    return { provider, client: side('CLIENT'), server: side('SERVER'), ...(interval !== undefined ? { reportingInterval: interval } : {}) };
  });
}

/**
 * The metrics a proxy records, per provider that records (a prometheus one: others build nothing,
 * telemetryWarnings says so), sorted by provider name as the Go mesh builds its filters. Provider
 * names are looked up case-insensitively, as the Go mesh's fetchProvider does.
 */
export function recordedMetrics(telemetries: readonly Telemetry[], providers: Pick<TelemetryProviders, 'providerKinds' | 'defaultMetrics'>): ProviderMetrics[] {
  const merged = mergeMetrics(telemetries.flatMap((t) => t.spec.metrics ?? []), providers.defaultMetrics);
  return merged.filter((m) => providers.providerKinds.get(m.provider.toLowerCase()) === METRICS_KIND).sort((a, b) => compare(a.provider, b.provider));
}

/** Standard metrics mesh-proxy does not record: it has no grpc_stats filter to count messages. */
const UNRECORDED: ReadonlySet<string> = new Set(['GRPC_REQUEST_MESSAGES', 'GRPC_RESPONSE_MESSAGES']);

/** The problem mesh-proxy has evaluating a tag value, or undefined when it can. */
function unevaluable(value: string): string | undefined {
  try {
    parseAttributeExpression(value);
    return undefined;
  } catch (e) {
    if (e instanceof AttributeExpressionError) return e.message;
    throw e;
  }
}

/**
 * What of a Telemetry's `metrics` has no effect, one sentence each naming the field (`at` names
 * the resource): providers no extension provider has or that do not record, entries that name no
 * provider where there is no default, tag values mesh-proxy cannot evaluate (they stay in the
 * filter config, where the stats filter records `unknown` for them, as Envoy does when a CEL
 * expression fails).
 */
export function metricsWarnings(at: string, metrics: readonly TelemetryMetrics[], providers: Pick<TelemetryProviders, 'providerKinds' | 'defaultMetrics'>): string[] {
  const out: string[] = [];
  metrics.forEach((entry, i) => {
    const field = `spec.metrics[${i}]`;
    if (!entry.providers?.length && providers.defaultMetrics.length === 0) out.push(`${at}: ${field} names no provider and the mesh config's defaultProviders.metrics names none: it has no effect`);
    (entry.providers ?? []).forEach((ref, j) => {
      const kind = providers.providerKinds.get(ref.name.toLowerCase());
      if (kind === undefined) out.push(`${at}: ${field}.providers[${j}]: no extension provider named ${JSON.stringify(ref.name)} in the mesh config (no metrics are recorded for it)`);
      else if (kind !== METRICS_KIND) out.push(`${at}: ${field}.providers[${j}]: provider ${JSON.stringify(ref.name)} (${kind}) is not effective: only prometheus providers record metrics`);
    });
    (entry.overrides ?? []).forEach((o, j) => {
      const match = `${field}.overrides[${j}].match`;
      if (o.match?.customMetric !== undefined) out.push(`${at}: ${match}.customMetric ${JSON.stringify(o.match.customMetric)} is not effective: mesh-proxy records the standard metrics only`);
      if (o.match?.metric !== undefined && UNRECORDED.has(o.match.metric)) out.push(`${at}: ${match}.metric ${o.match.metric} is not effective: mesh-proxy does not count gRPC messages (istio_request_messages_total, istio_response_messages_total)`);
      for (const [tag, t] of Object.entries(o.tagOverrides ?? {})) {
        const problem = t.operation === 'REMOVE' || t.value === undefined ? undefined : unevaluable(t.value);
        if (problem) out.push(`${at}: ${joinPath(`${field}.overrides[${j}].tagOverrides`, tag)}.value: mesh-proxy cannot evaluate ${JSON.stringify(t.value)} (${problem}): the tag is recorded as "unknown"`);
      }
    });
  });
  return out;
}
