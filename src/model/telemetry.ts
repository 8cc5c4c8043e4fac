// The Telemetry API's access logging for one proxy, as the Go mesh's Telemetries.AccessLogging
// (pilot/pkg/model/telemetry.go): the root namespace's selector-less Telemetry, then the proxy
// namespace's selector-less one, then every Telemetry of the proxy's namespace whose selector
// matches it, later ones overriding earlier ones provider by provider. Pure: resources in, the
// providers to log to per side out.
import type { Telemetry, TelemetryAccessLogging, WorkloadMode } from '../api/types.js';
import { formatKey, keyOf } from '../api/types.js';
import { labelsMatch } from './selection.js';
import { metricsWarnings } from './telemetry-metrics.js';
import type { AccessLogProvider, FileAccessLogProvider, TelemetryProviders } from './telemetry-providers.js';

/** CLIENT: outbound listeners and gateways (the Go mesh's workloadMode); SERVER: inbound listeners. */
export type LogSide = 'CLIENT' | 'SERVER';

export interface TelemetryTarget {
  readonly namespace: string;
  readonly labels: Readonly<Record<string, string>>;
}

const hasSelector = (t: Telemetry): boolean => Object.keys(t.spec.selector?.matchLabels ?? {}).length > 0;
const hasTargetRefs = (t: Telemetry): boolean => (t.spec.targetRefs?.length ?? 0) > 0;
const namespaceWide = (t: Telemetry): boolean => !hasSelector(t) && !hasTargetRefs(t);

/** Oldest first, then by name, as the Go mesh orders config of one kind. */
function byAge(a: Telemetry, b: Telemetry): number {
  const ta = a.metadata.creationTimestamp ?? '';
  const tb = b.metadata.creationTimestamp ?? '';
  return ta === tb ? a.metadata.name.localeCompare(b.metadata.name) : ta.localeCompare(tb);
}

/**
 * The Telemetries that apply to a proxy, weakest first. targetRefs attach a Telemetry to a
 * Kubernetes Gateway or waypoint in the Go mesh, never to a sidecar: such a resource applies to
 * no proxy here (telemetryWarnings says so).
 */
export function applicableTelemetries(all: readonly Telemetry[], target: TelemetryTarget, rootNamespace: string): Telemetry[] {
  const sorted = [...all].sort(byAge);
  const out: Telemetry[] = [];
  const root = sorted.find((t) => t.metadata.namespace === rootNamespace && namespaceWide(t));
  if (root) out.push(root);
  const own = sorted.filter((t) => t.metadata.namespace === target.namespace);
  if (target.namespace !== rootNamespace) {
    const ns = own.find(namespaceWide);
    if (ns) out.push(ns);
  }
  out.push(...own.filter((t) => hasSelector(t) && !hasTargetRefs(t) && labelsMatch(t.spec.selector?.matchLabels, target.labels)));
  return out;
}

function appliesTo(entry: TelemetryAccessLogging, side: LogSide): boolean {
  const mode: WorkloadMode = entry.match?.mode ?? 'CLIENT_AND_SERVER';
  return mode === 'CLIENT_AND_SERVER' || mode === side;
}

const namesOf = (entry: TelemetryAccessLogging): string[] => (entry.providers ?? []).map((p) => p.name);

/**
 * The providers one side logs to, by name (the Go mesh's mergeLogs): the last entry naming
 * providers for this side sets which are in scope (default: defaultProviders.accessLogging); then
 * every entry for this side, in order, turns its providers (an empty list: the previous entry's,
 * at first the defaults) on or, with `disabled`, off. Undefined: no Telemetry configures logging.
 */
export function loggingProviders(telemetries: readonly Telemetry[], defaults: readonly string[], side: LogSide): Map<string, boolean> | undefined {
  const entries = telemetries.flatMap((t) => t.spec.accessLogging ?? []);
  if (entries.length === 0 && defaults.length === 0) return undefined;
  const enabled = new Map<string, boolean>();
  let inScope = new Set(defaults);
  for (const t of telemetries) {
    const names = (t.spec.accessLogging ?? []).filter((e) => appliesTo(e, side)).flatMap(namesOf);
    if (names.length) inScope = new Set(names);
  }
  if (entries.length === 0) {
    for (const name of defaults) enabled.set(name, true);
    return enabled;
  }
  let parent: readonly string[] = defaults;
  for (const entry of entries) {
    const names = namesOf(entry).length ? namesOf(entry) : parent;
    parent = names;
    if (!appliesTo(entry, side)) continue;
    for (const name of names) if (inScope.has(name)) enabled.set(name, entry.disabled !== true);
  }
  return enabled;
}

/**
 * The file providers a side writes to, sorted by name as the Go mesh sorts them; undefined when
 * the Telemetry API says nothing for it (nothing configured, or no provider that can log): the
 * mesh config's accessLogFile applies then, as in the Go mesh. An empty list: explicitly disabled.
 */
export function telemetryFileLoggers(telemetries: readonly Telemetry[], providers: TelemetryProviders, side: LogSide): FileAccessLogProvider[] | undefined {
  const merged = loggingProviders(telemetries, providers.defaultAccessLogging, side);
  if (!merged) return undefined;
  // A known provider of another kind counts as configured (the Go mesh would log there instead of
  // the mesh config's file) but writes nothing here; telemetryWarnings reports it.
  const known = [...merged].flatMap(([name, on]): { p: AccessLogProvider; on: boolean }[] => {
    const p = providers.accessLoggers.get(name.toLowerCase());
    return p ? [{ p, on }] : [];
  });
  if (known.length === 0) return undefined;
  return known.flatMap((k) => (k.on && k.p.kind === 'envoyFileAccessLog' ? [k.p] : [])).sort((a, b) => a.name.localeCompare(b.name));
}

/**
 * What a user must hear about a Telemetry when it is read: fields and providers without effect,
 * names no provider has (for metrics, metricsWarnings). Filters are dropped, not the logger: an unfiltered log is noisy but
 * loses nothing, where dropping the logger would hide the very requests the filter was for.
 */
export function telemetryWarnings(t: Telemetry, providers: TelemetryProviders): string[] {
  const at = formatKey(keyOf(t));
  const out: string[] = [];
  if (hasTargetRefs(t)) out.push(`${at}: spec.targetRefs is not effective (it attaches to Kubernetes Gateways and waypoints, which this mesh has not); the resource applies to no proxy`);
  if (t.spec.tracing?.length) out.push(`${at}: spec.tracing is not effective yet`);
  (t.spec.accessLogging ?? []).forEach((entry, i) => {
    const field = `spec.accessLogging[${i}]`;
    // The Go mesh's InvalidTelemetryProvider: such an entry turns on nothing.
    if (!entry.providers?.length && !entry.disabled && providers.defaultAccessLogging.length === 0) out.push(`${at}: ${field} names no provider and the mesh config has no defaultProviders.accessLogging: it has no effect`);
    if (entry.filter?.expression) out.push(`${at}: ${field}.filter.expression is not effective (mesh-proxy has no CEL filters): the logger logs every request`);
    (entry.providers ?? []).forEach((ref, j) => {
      const p = providers.accessLoggers.get(ref.name.toLowerCase());
      if (!p) out.push(`${at}: ${field}.providers[${j}]: no access log provider named ${JSON.stringify(ref.name)} in the mesh config's extensionProviders (nothing is logged for it)`);
      else if (p.kind !== 'envoyFileAccessLog') out.push(`${at}: ${field}.providers[${j}]: provider ${JSON.stringify(ref.name)} (${p.kind}) is not effective: only envoyFileAccessLog providers log`);
    });
  });
  out.push(...metricsWarnings(at, t.spec.metrics ?? [], providers));
  return out;
}
