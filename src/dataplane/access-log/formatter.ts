// Envoy's SubstitutionFormatString compiled once into a formatter of access log lines: a text
// format is a list of literal pieces and operators; a JSON format a tree whose string leaves are
// formats. An operator alone in a JSON value keeps its type (numbers stay numbers); a value mixing
// text and operators is a string. Empty values are `-` in text and null in JSON, or nothing
// with omit_empty_values.
import type { JsonObject, JsonValue } from '@bufbuild/protobuf';
import { scope } from '../../common/log.js';
import type { SubstitutionFormatString } from '../../gen/envoy/config/core/v3/substitution_format_string_pb.js';
import { ConfigError } from '../../envoy/config-error.js';
import { readDataSource } from '../../envoy/matchers.js';
import { typeNameOf } from '../../envoy/types.js';
import { FormatError, parseFormatString } from '../../envoy/format-commands.js';
import { compileOperator, type LogValue, type Operator } from './operators.js';
import type { StreamInfo } from './record.js';

const log = scope('misc');

/** Envoy's default access log format. */
export const DEFAULT_FORMAT =
  '[%START_TIME%] "%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% %PROTOCOL%" %RESPONSE_CODE% %RESPONSE_FLAGS% %BYTES_RECEIVED% %BYTES_SENT% %DURATION% ' +
  '%RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)% "%REQ(X-FORWARDED-FOR)%" "%REQ(USER-AGENT)%" "%REQ(X-REQUEST-ID)%" "%REQ(:AUTHORITY)%" "%UPSTREAM_HOST%"\n';

/** The formatter extensions whose operators this proxy has, by their config's type name. */
const FORMATTER_EXTENSIONS: ReadonlyMap<string, string> = new Map([['envoy.extensions.formatter.req_without_query.v3.ReqWithoutQuery', 'REQ_WITHOUT_QUERY']]);

export interface Formatter {
  /** The whole line (a JSON line ends with a newline; a text line as its format says). */
  format(info: StreamInfo): string;
}

type Part = string | Operator;

/** A format string as literal pieces and operators (format-commands.ts's syntax); a bad command is a ConfigError at `field`. */
export function parseFormat(format: string, field: string, extensions: ReadonlySet<string> = new Set()): Part[] {
  let parts: ReturnType<typeof parseFormatString>;
  try {
    parts = parseFormatString(format, extensions);
  } catch (e) {
    if (e instanceof FormatError) throw new ConfigError(field, e.message);
    throw e;
  }
  return parts.map((p) => (typeof p === 'string' ? p : compileOperator(p, field)));
}

const text = (v: string | number): string => (typeof v === 'number' ? String(v) : v);

/** The parts as one string, `empty` standing for each empty value. */
function render(parts: readonly Part[], info: StreamInfo, empty: string): string {
  let out = '';
  for (const p of parts) {
    if (typeof p === 'string') out += p;
    else {
      const v = p(info);
      out += v === undefined ? empty : text(v);
    }
  }
  return out;
}

export function textFormatter(format: string, field: string, omitEmpty = false, extensions?: ReadonlySet<string>): Formatter {
  const parts = parseFormat(format, field, extensions);
  const empty = omitEmpty ? '' : '-';
  return { format: (info) => render(parts, info, empty) };
}

/** A compiled JSON value: its JSON text, or null (undefined) when empty. */
type JsonNode = (info: StreamInfo) => string | undefined;

function typed(v: LogValue): string | undefined {
  return v === undefined ? undefined : typeof v === 'number' ? String(v) : JSON.stringify(v);
}

function compileJsonValue(v: JsonValue, field: string, omitEmpty: boolean, extensions: ReadonlySet<string>): JsonNode {
  if (typeof v === 'string') {
    const parts = parseFormat(v, field, extensions);
    if (parts.every((p) => typeof p === 'string')) {
      const json = JSON.stringify(parts.join(''));
      return () => json;
    }
    const only = parts.length === 1 ? (parts[0] as Operator) : undefined;
    if (only) return (info) => typed(only(info));
    const empty = omitEmpty ? '' : '-';
    return (info) => JSON.stringify(render(parts, info, empty));
  }
  if (Array.isArray(v)) {
    const items = v.map((item, i) => compileJsonValue(item, `${field}[${i}]`, omitEmpty, extensions));
    return (info) => `[${items.map((item) => item(info) ?? (omitEmpty ? undefined : 'null')).filter((s) => s !== undefined).join(',')}]`;
  }
  if (v !== null && typeof v === 'object') return compileJsonObject(v, field, omitEmpty, extensions);
  const json = JSON.stringify(v);
  return () => json;
}

/** Keys in sorted order, as Envoy writes them (its output is deterministic). */
function compileJsonObject(o: JsonObject, field: string, omitEmpty: boolean, extensions: ReadonlySet<string>): JsonNode {
  const entries = Object.keys(o)
    .sort()
    .map((k) => [`${JSON.stringify(k)}:`, compileJsonValue(o[k]!, `${field}.${k}`, omitEmpty, extensions)] as const);
  return (info) => {
    let out = '';
    for (const [key, node] of entries) {
      const v = node(info);
      if (v === undefined && omitEmpty) continue;
      out += `${out ? ',' : ''}${key}${v ?? 'null'}`;
    }
    return `{${out}}`;
  };
}

export function jsonFormatter(o: JsonObject, field: string, omitEmpty = false, extensions: ReadonlySet<string> = new Set()): Formatter {
  const root = compileJsonObject(o, field, omitEmpty, extensions);
  return { format: (info) => `${root(info)!}\n` };
}

/** The operators the format's `formatters` add; an extension this proxy does not have is a ConfigError. */
function formatterExtensions(sfs: SubstitutionFormatString, field: string): Set<string> {
  const out = new Set<string>();
  sfs.formatters.forEach((f, i) => {
    const type = f.typedConfig ? typeNameOf(f.typedConfig.typeUrl) : '';
    const operator = FORMATTER_EXTENSIONS.get(type);
    if (!operator) throw new ConfigError(`${field}.formatters[${i}]`, `formatter extension ${f.name} (${type || 'no typed_config'}) is not supported; only envoy.formatter.req_without_query is`);
    out.add(operator);
  });
  return out;
}

/** A SubstitutionFormatString; a ConfigError at `field` for what it cannot honour. */
export function compileSubstitutionFormat(sfs: SubstitutionFormatString, field: string): Formatter {
  const extensions = formatterExtensions(sfs, field);
  // Only local replies have a content type; an access log line has none.
  if (sfs.contentType) log.warn(`${field}: accepted but not applied: content_type`);
  const f = sfs.format;
  switch (f.case) {
    case 'textFormat':
      return textFormatter(f.value, `${field}.text_format`, sfs.omitEmptyValues, extensions);
    case 'textFormatSource':
      return textFormatter(readDataSource(f.value, `${field}.text_format_source`), `${field}.text_format_source`, sfs.omitEmptyValues, extensions);
    case 'jsonFormat':
      return jsonFormatter(f.value, `${field}.json_format`, sfs.omitEmptyValues, extensions);
    default:
      throw new ConfigError(field, 'a format (text_format, text_format_source or json_format) is required');
  }
}
