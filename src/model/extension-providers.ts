// Mesh config `extensionProviders`: the external authorizers a CUSTOM AuthorizationPolicy names
// (`provider.name`). Read purely from the parsed YAML; every error names the provider's index, the
// field and what is expected, so a bad mesh config stops the program instead of half-applying.
// Provider kinds other than the two ext_authz ones, the access loggers and prometheus are accepted and reported as not effective.
import { StatusCode } from '../gen/envoy/type/v3/http_status_pb.js';
import { DurationError, parseDuration, toMillis } from '../common/duration.js';
import { TELEMETRY_KINDS } from './telemetry-providers.js';

/** includeRequestBodyInCheck: Envoy's ext_authz BufferSettings. */
export interface RequestBodyInCheck {
  readonly maxRequestBytes: number;
  readonly allowPartialMessage: boolean;
  readonly packAsBytes: boolean;
}

interface ExtAuthzCommon {
  readonly name: string;
  /** `[<namespace>/]<hostname>` of the authorizer's service. */
  readonly service: string;
  readonly port: number;
  /** Milliseconds; absent: the production mesh's default (600 s). */
  readonly timeoutMs?: number;
  readonly failOpen: boolean;
  /** HTTP status sent when the authorizer cannot be asked; absent: Envoy's default 403. */
  readonly statusOnError?: number;
  readonly includeRequestBodyInCheck?: RequestBodyInCheck;
}

export interface ExtAuthzHttpProvider extends ExtAuthzCommon {
  readonly kind: 'envoyExtAuthzHttp';
  readonly pathPrefix?: string;
  readonly includeRequestHeadersInCheck: readonly string[];
  readonly includeAdditionalHeadersInCheck: Readonly<Record<string, string>>;
  readonly headersToUpstreamOnAllow: readonly string[];
  readonly headersToDownstreamOnDeny: readonly string[];
  readonly headersToDownstreamOnAllow: readonly string[];
}

export interface ExtAuthzGrpcProvider extends ExtAuthzCommon {
  readonly kind: 'envoyExtAuthzGrpc';
}

export type ExtAuthzProvider = ExtAuthzHttpProvider | ExtAuthzGrpcProvider;

export interface ExtensionProviders {
  /** The ext_authz providers by name. */
  readonly authorizers: ReadonlyMap<string, ExtAuthzProvider>;
  /** Providers of other kinds (tracing, logging, ...) `<name> (<kind>)`, and ext_authz fields without effect yet. */
  readonly notEffective: readonly string[];
}

export class ExtensionProviderError extends Error {}

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

const HTTP_FIELDS = new Set([
  'service', 'port', 'timeout', 'pathPrefix', 'failOpen', 'statusOnError', 'includeRequestHeadersInCheck', 'includeAdditionalHeadersInCheck',
  'headersToUpstreamOnAllow', 'headersToDownstreamOnDeny', 'headersToDownstreamOnAllow', 'includeRequestBodyInCheck',
]);
const GRPC_FIELDS = new Set(['service', 'port', 'timeout', 'failOpen', 'statusOnError', 'includeRequestBodyInCheck']);
const OTHER_KINDS = ['zipkin', 'lightstep', 'datadog', 'stackdriver', 'opencensus', 'skywalking', 'opentelemetry', 'prometheus', 'envoyFileAccessLog', 'envoyHttpAls', 'envoyTcpAls', 'envoyOtelAls', 'sds'];

/** Reads one provider's fields; `at` is the field path used in every message. */
class Fields {
  constructor(
    private readonly obj: Record<string, unknown>,
    readonly at: string,
  ) {}

  fail(field: string, what: string): never {
    throw new ExtensionProviderError(`${this.at}.${field}: ${what}`);
  }

  string(field: string, required = false): string | undefined {
    const v = this.obj[field];
    if (v === undefined || v === null) {
      if (required) this.fail(field, 'required');
      return undefined;
    }
    if (typeof v !== 'string') this.fail(field, `expected a string, got ${JSON.stringify(v)}`);
    return v;
  }

  bool(field: string): boolean {
    const v = this.obj[field];
    if (v === undefined || v === null) return false;
    if (typeof v !== 'boolean') this.fail(field, `expected true or false, got ${JSON.stringify(v)}`);
    return v;
  }

  port(): number {
    const v = this.obj['port'];
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 1 || v > 65535) this.fail('port', `must be in the range [1, 65535], got ${JSON.stringify(v ?? null)}`);
    return v;
  }

  timeoutMs(): number | undefined {
    const v = this.string('timeout');
    if (v === undefined) return undefined;
    let ns: bigint;
    try {
      ns = parseDuration(v);
    } catch (e) {
      if (e instanceof DurationError) this.fail('timeout', `${JSON.stringify(v)} is not a duration (e.g. "2s", "500ms")`);
      throw e;
    }
    if (ns <= 0n) this.fail('timeout', `must be positive, got ${JSON.stringify(v)}`);
    return toMillis(ns);
  }

  statusOnError(): number | undefined {
    const v = this.string('statusOnError');
    if (v === undefined || v === '') return undefined;
    const code = /^\d+$/.test(v) ? Number(v) : NaN;
    // Envoy's HttpStatus takes only the codes of its StatusCode enum.
    if (!Number.isInteger(code) || code === 0 || StatusCode[code] === undefined) this.fail('statusOnError', `${JSON.stringify(v)} is not an HTTP status code Envoy supports (e.g. "403", "503")`);
    return code;
  }

  /** A list of header names; a lone "*" is refused as in the production mesh (use a prefix or suffix). */
  headers(field: string): string[] {
    const v = this.obj[field];
    if (v === undefined || v === null) return [];
    if (!Array.isArray(v) || !v.every((h): h is string => typeof h === 'string' && h !== '')) this.fail(field, 'expected a list of header names');
    const star = v.findIndex((h) => h === '*');
    if (star >= 0) this.fail(`${field}[${star}]`, 'a single wildcard "*" is not supported; use a prefix ("x-*") or a suffix ("*-id")');
    return v;
  }

  headerValues(field: string): Record<string, string> {
    const v = this.obj[field];
    if (v === undefined || v === null) return {};
    if (!isRecord(v)) this.fail(field, 'expected a mapping of header name to value');
    const out: Record<string, string> = {};
    for (const [k, val] of Object.entries(v)) {
      if (typeof val !== 'string') this.fail(`${field}.${k}`, `expected a string value, got ${JSON.stringify(val)}`);
      Object.defineProperty(out, k, { value: val, enumerable: true });
    }
    return out;
  }

  body(): RequestBodyInCheck | undefined {
    const v = this.obj['includeRequestBodyInCheck'];
    if (v === undefined || v === null) return undefined;
    if (!isRecord(v)) this.fail('includeRequestBodyInCheck', 'expected a mapping (maxRequestBytes, allowPartialMessage, packAsBytes)');
    const sub = new Fields(v, `${this.at}.includeRequestBodyInCheck`);
    const max: unknown = v['maxRequestBytes'] ?? 0;
    if (typeof max !== 'number' || !Number.isInteger(max) || max < 0 || max > 0xffffffff) return sub.fail('maxRequestBytes', `expected a non-negative integer, got ${JSON.stringify(max)}`);
    return { maxRequestBytes: max, allowPartialMessage: sub.bool('allowPartialMessage'), packAsBytes: sub.bool('packAsBytes') };
  }

  onlyKnown(known: ReadonlySet<string>): void {
    for (const k of Object.keys(this.obj)) if (!known.has(k)) this.fail(k, `unknown field (expected one of ${[...known].join(', ')})`);
  }
}

function common(f: Fields, name: string): ExtAuthzCommon {
  const timeoutMs = f.timeoutMs();
  const statusOnError = f.statusOnError();
  const body = f.body();
  return {
    name,
    service: f.string('service', true)!,
    port: f.port(),
    failOpen: f.bool('failOpen'),
    ...(timeoutMs !== undefined ? { timeoutMs } : {}),
    ...(statusOnError !== undefined ? { statusOnError } : {}),
    ...(body ? { includeRequestBodyInCheck: body } : {}),
  };
}

function httpProvider(f: Fields, name: string): ExtAuthzHttpProvider {
  f.onlyKnown(HTTP_FIELDS);
  const pathPrefix = f.string('pathPrefix');
  if (pathPrefix !== undefined && pathPrefix !== '' && !pathPrefix.startsWith('/')) f.fail('pathPrefix', `must begin with "/", got ${JSON.stringify(pathPrefix)}`);
  return {
    kind: 'envoyExtAuthzHttp',
    ...common(f, name),
    ...(pathPrefix ? { pathPrefix } : {}),
    includeRequestHeadersInCheck: f.headers('includeRequestHeadersInCheck'),
    includeAdditionalHeadersInCheck: f.headerValues('includeAdditionalHeadersInCheck'),
    headersToUpstreamOnAllow: f.headers('headersToUpstreamOnAllow'),
    headersToDownstreamOnDeny: f.headers('headersToDownstreamOnDeny'),
    headersToDownstreamOnAllow: f.headers('headersToDownstreamOnAllow'),
  };
}

function grpcProvider(f: Fields, name: string): ExtAuthzGrpcProvider {
  f.onlyKnown(GRPC_FIELDS);
  return { kind: 'envoyExtAuthzGrpc', ...common(f, name) };
}

/** The production mesh's rule for provider names: they end up in RBAC policy names and metadata keys. */
function checkName(name: unknown, at: string): string {
  if (typeof name !== 'string' || name === '') throw new ExtensionProviderError(`${at}.name: required`);
  if (name.length > 63 || !/^[a-z0-9]([a-z0-9-]*[a-z0-9])?$/.test(name)) {
    throw new ExtensionProviderError(`${at}.name: ${JSON.stringify(name)} must be at most 63 lowercase letters, digits and "-", starting and ending with a letter or digit`);
  }
  return name;
}

/** Parses mesh config `extensionProviders` (`field` names it in messages). */
export function parseExtensionProviders(value: unknown, field = 'extensionProviders'): ExtensionProviders {
  const authorizers = new Map<string, ExtAuthzProvider>();
  const notEffective: string[] = [];
  if (value === undefined || value === null) return { authorizers, notEffective };
  if (!Array.isArray(value)) throw new ExtensionProviderError(`${field}: expected a list of providers`);
  const seen = new Set<string>();
  value.forEach((entry, i) => {
    const at = `${field}[${i}]`;
    if (!isRecord(entry)) throw new ExtensionProviderError(`${at}: expected a mapping with "name" and one provider kind`);
    const name = checkName(entry['name'], at);
    if (seen.has(name)) throw new ExtensionProviderError(`${at}.name: ${JSON.stringify(name)} is already the name of another provider`);
    seen.add(name);
    const kinds = Object.keys(entry).filter((k) => k !== 'name');
    if (kinds.length !== 1) throw new ExtensionProviderError(`${at}: expected exactly one provider kind (envoyExtAuthzHttp, envoyExtAuthzGrpc, ...), got ${kinds.length ? kinds.join(', ') : 'none'}`);
    const kind = kinds[0]!;
    const body = entry[kind];
    if (kind === 'envoyExtAuthzHttp' || kind === 'envoyExtAuthzGrpc') {
      if (!isRecord(body)) throw new ExtensionProviderError(`${at}.${kind}: expected a mapping with service and port`);
      const f = new Fields(body, `${at}.${kind}`);
      const p = kind === 'envoyExtAuthzHttp' ? httpProvider(f, name) : grpcProvider(f, name);
      authorizers.set(name, p);
      // mesh-proxy neither buffers the body for the authorizer nor adds headers to a successful response yet.
      if (p.includeRequestBodyInCheck) notEffective.push(`${name}: includeRequestBodyInCheck (the authorizer gets no body)`);
    } else if (OTHER_KINDS.includes(kind)) {
      // The logging kinds and prometheus are the Telemetry API's (telemetry-providers.ts), which reports its own.
      if (!TELEMETRY_KINDS.has(kind)) notEffective.push(`${name} (${kind})`);
    } else {
      throw new ExtensionProviderError(`${at}: unknown provider kind ${JSON.stringify(kind)} (expected envoyExtAuthzHttp, envoyExtAuthzGrpc, ${OTHER_KINDS.join(', ')})`);
    }
  });
  return { authorizers, notEffective };
}
