// AccessLogFilter compiled into a predicate of the ended stream's record, with Envoy's semantics.
// Runtime keys are not looked up (this proxy has no runtime): their default values apply. A
// filter this proxy cannot evaluate (CEL extensions, metadata, log types) is a ConfigError, never
// a filter that silently passes everything.
import type { AccessLogFilter, ComparisonFilter, RuntimeFilter } from '../../gen/envoy/config/accesslog/v3/accesslog_pb.js';
import { ComparisonFilter_Op } from '../../gen/envoy/config/accesslog/v3/accesslog_pb.js';
import { FractionalPercent_DenominatorType } from '../../gen/envoy/type/v3/percent_pb.js';
import { ConfigError } from '../../envoy/config-error.js';
import { compileHeaderMatcher } from '../../envoy/matchers.js';
import { responseFlagOf } from '../../envoy/response-flags.js';
import { grpcStatusOfHttp } from '../../envoy/grpc-status.js';
import type { StreamInfo } from './record.js';

export type LogFilter = (info: StreamInfo) => boolean;

const DENOMINATORS: Readonly<Record<number, number>> = {
  [FractionalPercent_DenominatorType.HUNDRED]: 100,
  [FractionalPercent_DenominatorType.TEN_THOUSAND]: 10_000,
  [FractionalPercent_DenominatorType.MILLION]: 1_000_000,
};

function comparison(c: ComparisonFilter | undefined, field: string, read: (info: StreamInfo) => number): LogFilter {
  if (!c) throw new ConfigError(`${field}.comparison`, 'a comparison is required');
  // The runtime key is not looked up: the default value is the value.
  const value = c.value?.defaultValue ?? 0;
  switch (c.op) {
    case ComparisonFilter_Op.EQ:
      return (info) => read(info) === value;
    case ComparisonFilter_Op.GE:
      return (info) => read(info) >= value;
    case ComparisonFilter_Op.LE:
      return (info) => read(info) <= value;
    default:
      throw new ConfigError(`${field}.comparison.op`, `unknown op ${String(c.op)}`);
  }
}

/**
 * The random value a runtime filter samples by: the x-request-id's (so that every log of a
 * request decides alike, as Envoy's UUID request ids do) unless independent randomness is asked
 * for or the stream has no request id.
 */
function sampleValue(info: StreamInfo, independent: boolean): number {
  const id = independent ? undefined : info.request?.headers.joined('x-request-id');
  const n = id ? Number.parseInt(id.slice(0, 8), 16) : Number.NaN;
  return Number.isNaN(n) ? Math.floor(Math.random() * 0x1_0000_0000) : n;
}

function runtimeFilter(r: RuntimeFilter): LogFilter {
  const p = r.percentSampled;
  const numerator = p?.numerator ?? 0;
  const denominator = DENOMINATORS[p?.denominator ?? FractionalPercent_DenominatorType.HUNDRED] ?? 100;
  return (info) => sampleValue(info, r.useIndependentRandomness) % denominator < numerator;
}

/** The gRPC status Envoy's grpc_status_filter reads: grpc-status of trailers, then headers, else the HTTP status's. */
function grpcStatus(info: StreamInfo): number {
  const read = (h: typeof info.responseHeaders): number | undefined => {
    const v = h?.['grpc-status'];
    return v === undefined ? undefined : Number(Array.isArray(v) ? v[0] : v);
  };
  return read(info.responseTrailers) ?? read(info.responseHeaders) ?? info.grpcLocalStatus ?? (info.responseCode === 0 ? 2 : grpcStatusOfHttp(info.responseCode));
}

export function compileLogFilter(f: AccessLogFilter, field: string): LogFilter {
  const s = f.filterSpecifier;
  switch (s.case) {
    case 'statusCodeFilter':
      return comparison(s.value.comparison, `${field}.status_code_filter`, (info) => info.responseCode);
    case 'durationFilter':
      return comparison(s.value.comparison, `${field}.duration_filter`, (info) => info.durationMs);
    case 'notHealthCheckFilter':
      // No health check filter runs here: no stream is a health check.
      return () => true;
    case 'traceableFilter':
      // No tracing runs here: no stream is traceable.
      return () => false;
    case 'runtimeFilter':
      return runtimeFilter(s.value);
    case 'andFilter': {
      const all = s.value.filters.map((x, i) => compileLogFilter(x, `${field}.and_filter.filters[${i}]`));
      return (info) => all.every((x) => x(info));
    }
    case 'orFilter': {
      const any = s.value.filters.map((x, i) => compileLogFilter(x, `${field}.or_filter.filters[${i}]`));
      return (info) => any.some((x) => x(info));
    }
    case 'headerFilter': {
      if (!s.value.header) throw new ConfigError(`${field}.header_filter.header`, 'a header matcher is required');
      const match = compileHeaderMatcher(s.value.header, `${field}.header_filter.header`);
      return (info) => info.request !== undefined && match(info.request.header);
    }
    case 'responseFlagFilter': {
      let mask = 0;
      s.value.flags.forEach((name, i) => {
        const flag = responseFlagOf(name);
        if (flag === undefined) throw new ConfigError(`${field}.response_flag_filter.flags[${i}]`, `unknown response flag ${JSON.stringify(name)}`);
        mask |= flag;
      });
      // No flags listed: any flag.
      return mask === 0 ? (info) => info.responseFlags !== 0 : (info) => (info.responseFlags & mask) !== 0;
    }
    case 'grpcStatusFilter': {
      const statuses = new Set<number>(s.value.statuses);
      const exclude = s.value.exclude;
      // As Envoy's, any stream: one without grpc-status maps from its HTTP status.
      return (info) => statuses.has(grpcStatus(info)) !== exclude;
    }
    case 'extensionFilter':
      throw new ConfigError(`${field}.extension_filter`, `access log filter extension ${s.value.name} is not supported`);
    case 'metadataFilter':
      throw new ConfigError(`${field}.metadata_filter`, 'the metadata filter is not supported');
    case 'logTypeFilter':
      throw new ConfigError(`${field}.log_type_filter`, 'the log type filter is not supported');
    default:
      throw new ConfigError(field, 'a filter is required');
  }
}
