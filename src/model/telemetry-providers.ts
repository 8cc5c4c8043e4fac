// The mesh config's providers for the Telemetry API: `extensionProviders[]` of the logging kinds
// and `defaultProviders.accessLogging`, the kind of every provider a Telemetry's `metrics` may
// name and `defaultProviders.metrics`. As in the Go mesh's default mesh config, a provider named
// "envoy" (envoyFileAccessLog to /dev/stdout), one named "prometheus" and one named "stackdriver"
// exist unless the file defines its own of that name; an "envoy" provider without logFormat takes
// the mesh config's accessLogEncoding/accessLogFormat (the Go mesh's telemetryAccessLog), any other
// file provider without one the default text format. A document without `defaultProviders` (or
// with an empty one) records metrics with "prometheus", as the Go mesh's install writes
// `defaultProviders.metrics: [prometheus]` into the mesh config it renders when the user sets none.
// Pure: the parsed document in, settings out.
import type { JsonObject } from '@bufbuild/protobuf';
import { AccessLogSettingsError, checkCommands, formatLeaves, readAccessLog, type MeshAccessLog } from './mesh-access-log.js';

/** The file logger a provider writes; `listenerLog` does not apply (Telemetry logs connection managers and TCP proxies). */
export type FileLogSettings = Omit<MeshAccessLog, 'listenerLog'>;

export type AccessLogProvider =
  | { readonly kind: 'envoyFileAccessLog'; readonly name: string; readonly file: FileLogSettings }
  /** Remote access log services: mesh-proxy has no gRPC/OTLP logger, so these are reported, not built. */
  | { readonly kind: 'envoyHttpAls' | 'envoyTcpAls' | 'envoyOtelAls'; readonly name: string };

export type FileAccessLogProvider = Extract<AccessLogProvider, { kind: 'envoyFileAccessLog' }>;

export interface TelemetryProviders {
  /** By lower-cased name: the Go mesh looks provider names up case-insensitively. */
  readonly accessLoggers: ReadonlyMap<string, AccessLogProvider>;
  /** `defaultProviders.accessLogging`: what applies where no Telemetry names providers. */
  readonly defaultAccessLogging: readonly string[];
  /** The kind of every extension provider (built-ins included), by lower-cased name: what a Telemetry's `metrics` may name. */
  readonly providerKinds: ReadonlyMap<string, string>;
  /** `defaultProviders.metrics`: ["prometheus"] when the document has no defaultProviders. */
  readonly defaultMetrics: readonly string[];
  /** Listeners log the connections no chain takes unless `disableEnvoyListenerLog` (Telemetry loggers too). */
  readonly listenerLog: boolean;
  /** Entries without effect: `extensionProviders: <name> (<kind>)`, `defaultProviders.<field>`. */
  readonly notEffective: readonly string[];
}

export const BUILTIN_ACCESS_LOG_PROVIDER = 'envoy';
const BUILTIN_METRICS_PROVIDER = 'prometheus';
/** The only kind that records metrics here: mesh-proxy's stats filter (model/telemetry-metrics.ts). */
export const METRICS_KIND = 'prometheus';
export const LOGGING_KINDS: ReadonlySet<string> = new Set(['envoyFileAccessLog', 'envoyHttpAls', 'envoyTcpAls', 'envoyOtelAls']);
/** The kinds this module reads and reports on itself (extension-providers.ts leaves them out of its notices). */
export const TELEMETRY_KINDS: ReadonlySet<string> = new Set([...LOGGING_KINDS, METRICS_KIND]);
/** The Go mesh's default extension providers besides "envoy", by name: their kind. */
const BUILTIN_KINDS: ReadonlyArray<readonly [string, string]> = [
  [BUILTIN_METRICS_PROVIDER, METRICS_KIND],
  ['stackdriver', 'stackdriver'],
];
const FILE_FIELDS = new Set(['path', 'logFormat', 'omitEmptyValues']);

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

function fail(at: string, what: string): never {
  throw new AccessLogSettingsError(`${at}: ${what}`);
}

function fileSettings(name: string, body: unknown, at: string, doc: Readonly<Record<string, unknown>>): FileLogSettings {
  if (body === null || body === undefined) body = {};
  if (!isRecord(body)) fail(at, 'expected a mapping (path, logFormat)');
  for (const k of Object.keys(body)) if (!FILE_FIELDS.has(k)) fail(`${at}.${k}`, `unknown field (expected one of ${[...FILE_FIELDS].join(', ')})`);
  const path = body['path'] ?? '';
  if (typeof path !== 'string') fail(`${at}.path`, `expected a file path such as /dev/stdout, got ${JSON.stringify(path)}`);
  const file = path === '' ? '/dev/stdout' : path;
  const format = body['logFormat'];
  if (format === undefined || format === null) {
    if (name === BUILTIN_ACCESS_LOG_PROVIDER) {
      const { listenerLog: _unused, ...mesh } = readAccessLog({ ...doc, accessLogFile: file })!;
      return mesh;
    }
    return { path: file, encoding: 'TEXT' };
  }
  if (!isRecord(format)) fail(`${at}.logFormat`, 'expected a mapping with text or labels');
  const { text, labels } = format;
  if (text !== undefined && labels !== undefined) fail(`${at}.logFormat`, 'only one of text or labels can be set');
  if (labels !== undefined) {
    if (!isRecord(labels)) fail(`${at}.logFormat.labels`, 'expected a mapping of JSON field name to format string');
    formatLeaves(labels as JsonObject).forEach((f) => checkCommands(f, `${at}.logFormat.labels`));
    // The Go mesh falls back to its default JSON fields when labels is empty.
    return Object.keys(labels).length ? { path: file, encoding: 'JSON', json: labels as JsonObject } : { path: file, encoding: 'JSON' };
  }
  if (text === undefined || text === '') return { path: file, encoding: 'TEXT' };
  if (typeof text !== 'string') fail(`${at}.logFormat.text`, `expected a format string, got ${JSON.stringify(text)}`);
  checkCommands(text, `${at}.logFormat.text`);
  return { path: file, encoding: 'TEXT', text: text.endsWith('\n') ? text : `${text}\n` };
}

function providerNames(value: Record<string, unknown>, field: string): string[] {
  const names = value[field] ?? [];
  if (!Array.isArray(names) || !names.every((n): n is string => typeof n === 'string' && n !== '')) fail(`defaultProviders.${field}`, 'expected a list of provider names');
  return names;
}

const DEFAULT_FIELDS = new Set(['accessLogging', 'metrics']);

/** `defaultProviders`: absent or empty, metrics go to the built-in prometheus (see the header). */
function defaultProviders(value: unknown, notEffective: string[]): { accessLogging: string[]; metrics: string[] } {
  // As the install's template tests it: an empty mapping is no defaultProviders.
  if (value === undefined || value === null || (isRecord(value) && Object.keys(value).length === 0)) return { accessLogging: [], metrics: [BUILTIN_METRICS_PROVIDER] };
  if (!isRecord(value)) fail('defaultProviders', 'expected a mapping (accessLogging, metrics, tracing)');
  for (const k of Object.keys(value)) if (!DEFAULT_FIELDS.has(k)) notEffective.push(`defaultProviders.${k}`);
  return { accessLogging: providerNames(value, 'accessLogging'), metrics: providerNames(value, 'metrics') };
}

/** Default metrics providers that record nothing: said once, when the mesh config is read. */
function metricsDefaultsNotices(names: readonly string[], kinds: ReadonlyMap<string, string>): string[] {
  return names.flatMap((name) => {
    const kind = kinds.get(name.toLowerCase());
    if (kind === undefined) return [`defaultProviders.metrics: ${JSON.stringify(name)} (no extension provider has this name)`];
    return kind === METRICS_KIND ? [] : [`defaultProviders.metrics: ${JSON.stringify(name)} (${kind}: only prometheus providers record metrics)`];
  });
}

/** Go's PrometheusMetricsProvider has no fields. */
function checkPrometheus(body: unknown, at: string): void {
  if (body === undefined || body === null) return;
  if (!isRecord(body)) fail(at, 'expected an empty mapping ({})');
  const [field] = Object.keys(body);
  if (field !== undefined) fail(`${at}.${field}`, 'unknown field (a prometheus provider takes no settings)');
}

/**
 * The Telemetry providers of a mesh config document. `extensionProviders` was checked by
 * parseExtensionProviders (names, one kind each); this reads the logging and prometheus bodies.
 */
export function readTelemetryProviders(doc: Readonly<Record<string, unknown>>): TelemetryProviders {
  const accessLoggers = new Map<string, AccessLogProvider>();
  const providerKinds = new Map<string, string>(BUILTIN_KINDS);
  const notEffective: string[] = [];
  const list = Array.isArray(doc['extensionProviders']) ? (doc['extensionProviders'] as unknown[]) : [];
  list.forEach((entry, i) => {
    if (!isRecord(entry) || typeof entry['name'] !== 'string') return;
    const name = entry['name'];
    const kind = Object.keys(entry).find((k) => k !== 'name');
    if (kind === undefined) return;
    providerKinds.set(name.toLowerCase(), kind);
    const at = `extensionProviders[${i}].${kind}`;
    if (kind === METRICS_KIND) checkPrometheus(entry[kind], at);
    if (!LOGGING_KINDS.has(kind)) return;
    if (kind === 'envoyFileAccessLog') {
      const file = fileSettings(name, entry[kind], at, doc);
      if (isRecord(entry[kind]) && entry[kind]['omitEmptyValues'] === true) notEffective.push(`extensionProviders: ${name}: omitEmptyValues (empty values are logged as "-")`);
      accessLoggers.set(name.toLowerCase(), { kind, name, file });
    } else {
      accessLoggers.set(name.toLowerCase(), { kind: kind as 'envoyHttpAls' | 'envoyTcpAls' | 'envoyOtelAls', name });
      notEffective.push(`extensionProviders: ${name} (${kind})`);
    }
  });
  if (!providerKinds.has(BUILTIN_ACCESS_LOG_PROVIDER)) {
    providerKinds.set(BUILTIN_ACCESS_LOG_PROVIDER, 'envoyFileAccessLog');
    accessLoggers.set(BUILTIN_ACCESS_LOG_PROVIDER, { kind: 'envoyFileAccessLog', name: BUILTIN_ACCESS_LOG_PROVIDER, file: fileSettings(BUILTIN_ACCESS_LOG_PROVIDER, { path: '/dev/stdout' }, 'envoy', doc) });
  }
  const defaults = defaultProviders(doc['defaultProviders'], notEffective);
  notEffective.push(...metricsDefaultsNotices(defaults.metrics, providerKinds));
  return { accessLoggers, providerKinds, listenerLog: doc['disableEnvoyListenerLog'] !== true, defaultAccessLogging: defaults.accessLogging, defaultMetrics: defaults.metrics, notEffective };
}
