// The mesh config's access log fields, as the Go mesh reads them: `accessLogFile` (no file: no
// access logs), `accessLogEncoding` (TEXT or JSON), `accessLogFormat` (a text format, or for JSON a
// JSON object of fields) and `disableEnvoyListenerLog`. Read purely from the parsed document.
import type { JsonObject, JsonValue } from '@bufbuild/protobuf';
import { FormatError, parseFormatString } from '../envoy/format-commands.js';

export class AccessLogSettingsError extends Error {}

export const ACCESS_LOG_ENCODINGS = ['TEXT', 'JSON'] as const;
export type AccessLogEncoding = (typeof ACCESS_LOG_ENCODINGS)[number];

/** How every proxy's connection managers, TCP proxies and listeners log (networking/access-log.ts). */
export interface MeshAccessLog {
  /** `accessLogFile`: the path each proxy writes to (`/dev/stdout`: its standard output). */
  readonly path: string;
  readonly encoding: AccessLogEncoding;
  /** `accessLogFormat` for TEXT, newline-terminated as the Go mesh makes it; unset: the Go mesh's default format. */
  readonly text?: string;
  /** `accessLogFormat` for JSON, parsed; unset: the Go mesh's default fields. */
  readonly json?: JsonObject;
  /** Listeners log the connections no filter chain takes (flag NR) unless `disableEnvoyListenerLog`. */
  readonly listenerLog: boolean;
}

/** `defaultProviders` is read with the Telemetry API's providers (telemetry-providers.ts). */
export const ACCESS_LOG_FIELDS = ['accessLogFile', 'accessLogEncoding', 'accessLogFormat', 'disableEnvoyListenerLog', 'defaultProviders'] as const;

const isObject = (v: unknown): v is JsonObject => typeof v === 'object' && v !== null && !Array.isArray(v);

/** The access log settings of a mesh config document; undefined when `accessLogFile` is unset or empty. */
export function readAccessLog(doc: Readonly<Record<string, unknown>>): MeshAccessLog | undefined {
  const path = doc['accessLogFile'] ?? '';
  if (typeof path !== 'string') throw new AccessLogSettingsError(`accessLogFile: expected a file path such as /dev/stdout, got ${JSON.stringify(path)}`);
  const encoding = doc['accessLogEncoding'] ?? 'TEXT';
  if (typeof encoding !== 'string' || !(ACCESS_LOG_ENCODINGS as readonly string[]).includes(encoding)) {
    throw new AccessLogSettingsError(`accessLogEncoding: ${JSON.stringify(encoding)} is not one of ${ACCESS_LOG_ENCODINGS.join(', ')}`);
  }
  const format = doc['accessLogFormat'] ?? '';
  if (typeof format !== 'string') throw new AccessLogSettingsError(`accessLogFormat: expected a string (a text format, or a JSON object for JSON encoding), got ${JSON.stringify(format)}`);
  const disabled = doc['disableEnvoyListenerLog'] ?? false;
  if (typeof disabled !== 'boolean') throw new AccessLogSettingsError(`disableEnvoyListenerLog: expected true or false, got ${JSON.stringify(disabled)}`);
  if (path === '') return undefined;
  const settings = { path, encoding: encoding as AccessLogEncoding, listenerLog: !disabled };
  if (format === '') return settings;
  if (encoding === 'TEXT') {
    checkCommands(format);
    return { ...settings, text: format.endsWith('\n') ? format : `${format}\n` };
  }
  const json = jsonFormat(format);
  formatLeaves(json).forEach((f) => checkCommands(f));
  return { ...settings, json };
}

/** REQ_WITHOUT_QUERY is there whenever used: the builder names its formatter (networking/access-log.ts). */
const EXTENSIONS: ReadonlySet<string> = new Set(['REQ_WITHOUT_QUERY']);

/**
 * The format's commands as the proxies will check them: a command they would refuse refuses the
 * mesh config here, instead of every proxy rejecting every listener (the Go mesh passes it on).
 */
export function checkCommands(format: string, field = 'accessLogFormat'): void {
  try {
    parseFormatString(format, EXTENSIONS);
  } catch (e) {
    if (e instanceof FormatError) throw new AccessLogSettingsError(`${field}: ${e.message}`);
    throw e;
  }
}

/** The string values of a JSON format, nested ones included: each is a format string. */
export function formatLeaves(v: JsonValue): string[] {
  if (typeof v === 'string') return [v];
  if (Array.isArray(v)) return v.flatMap(formatLeaves);
  return v !== null && typeof v === 'object' ? Object.values(v).flatMap(formatLeaves) : [];
}

/**
 * A JSON encoding's format: a JSON object (the log line's fields). The Go mesh logs an error and
 * falls back to its default fields; we refuse it, so a typo is not a silently different log.
 */
function jsonFormat(format: string): JsonObject {
  let parsed: unknown;
  try {
    parsed = JSON.parse(format);
  } catch (e) {
    throw new AccessLogSettingsError(`accessLogFormat: not valid JSON for accessLogEncoding JSON: ${(e as Error).message}`);
  }
  if (!isObject(parsed)) throw new AccessLogSettingsError(`accessLogFormat: expected a JSON object of log fields for accessLogEncoding JSON, got ${format.trim()}`);
  return parsed;
}
