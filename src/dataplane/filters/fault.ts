// The fault HTTP filter (envoy.filters.http.fault): delays and aborts injected into a share of the
// requests its header matchers select, as Envoy does: the delay first, then the abort. The
// x-envoy-fault-* request headers count only where the config asks for header-controlled faults
// (header_delay / header_abort); Envoy enables none by default.
import { setTimeout as sleep } from 'node:timers/promises';
import { durationMs } from '../../common/duration.js';
import { scope } from '../../common/log.js';
import type { FractionalPercent } from '../../gen/envoy/type/v3/percent_pb.js';
import { HTTPFaultSchema, type HTTPFault } from '../../gen/envoy/extensions/filters/http/fault/v3/fault_pb.js';
import { ConfigError, unappliedFields } from '../../envoy/config-error.js';
import { CONTINUE, type FilterOutcome } from '../../envoy/filter.js';
import { compileHeaderMatcher, fractionOf } from '../../envoy/matchers.js';
import type { StreamRequest } from '../../envoy/request.js';
import { registerHttpFilter, registerPerRouteConfig } from './registry.js';
import { ResponseFlag } from '../../envoy/response-flags.js';

const log = scope('http');

export interface FaultStats {
  delays_injected: number;
  aborts_injected: number;
  faults_overflow: number;
}

declare module './registry.js' {
  interface HttpFilterStatsByGroup {
    fault: FaultStats;
  }
}

const DELAY_HEADER = 'x-envoy-fault-delay-request';
const DELAY_PERCENT_HEADER = 'x-envoy-fault-delay-request-percentage';
const ABORT_HEADER = 'x-envoy-fault-abort-request';
const ABORT_PERCENT_HEADER = 'x-envoy-fault-abort-request-percentage';
const DOWNSTREAM_NODE_HEADER = 'x-envoy-downstream-service-node';
const UNAPPLIED = ['responseRateLimit', 'delayPercentRuntime', 'abortPercentRuntime', 'delayDurationRuntime', 'abortHttpStatusRuntime', 'maxActiveFaultsRuntime', 'responseRateLimitPercentRuntime', 'abortGrpcStatusRuntime', 'disableDownstreamClusterStats', 'filterMetadata'];

/** Whether this request falls in the share: the configured fraction, lowered by the header's where allowed. */
function rolls(p: FractionalPercent | undefined, req: StreamRequest, percentHeader: string | undefined): boolean {
  let share = fractionOf(p);
  const h = percentHeader ? req.header(percentHeader) : undefined;
  // The header's value is a numerator over the configured denominator.
  if (h !== undefined && /^\d+$/.test(h) && p) share = Math.min(share, fractionOf({ ...p, numerator: Number(h) }));
  return Math.random() < share;
}

/** The delay of a request in ms (0 = none). */
function compileDelay(c: HTTPFault, field: string): (req: StreamRequest) => number {
  const d = c.delay;
  if (!d) return () => 0;
  const s = d.faultDelaySecifier;
  if (s.case === 'fixedDelay') {
    const ms = durationMs(s.value, 0);
    return (req) => (rolls(d.percentage, req, undefined) ? ms : 0);
  }
  if (s.case === 'headerDelay') {
    return (req) => {
      const v = req.header(DELAY_HEADER);
      if (v === undefined || !/^\d+$/.test(v)) return 0;
      return rolls(d.percentage, req, DELAY_PERCENT_HEADER) ? Number(v) : 0;
    };
  }
  throw new ConfigError(`${field}.delay`, 'fixed_delay or header_delay is required');
}

/** The abort status of a request (undefined = none). */
function compileAbort(c: HTTPFault, field: string): (req: StreamRequest) => number | undefined {
  const a = c.abort;
  if (!a) return () => undefined;
  const e = a.errorType;
  if (e.case === 'httpStatus') {
    const status = e.value;
    if (status < 200 || status >= 600) throw new ConfigError(`${field}.abort.http_status`, `${status} is not in [200, 600)`);
    return (req) => (rolls(a.percentage, req, undefined) ? status : undefined);
  }
  if (e.case === 'headerAbort') {
    return (req) => {
      const v = Number(req.header(ABORT_HEADER));
      if (!Number.isInteger(v) || v < 200 || v >= 600) return undefined;
      return rolls(a.percentage, req, ABORT_PERCENT_HEADER) ? v : undefined;
    };
  }
  throw new ConfigError(`${field}.abort`, e.case === 'grpcStatus' ? 'grpc_status aborts are not supported yet; use http_status' : 'http_status or header_abort is required');
}

/** One fault configuration: the filter's own, or a route's typed_per_filter_config that replaces it. */
interface FaultSettings {
  readonly headers: readonly ((h: StreamRequest['header']) => boolean)[];
  readonly nodes: ReadonlySet<string>;
  readonly delay: (req: StreamRequest) => number;
  readonly abort: (req: StreamRequest) => number | undefined;
  readonly maxActive: number | undefined;
}

function compileSettings(c: HTTPFault, field: string): FaultSettings {
  if (c.upstreamCluster) throw new ConfigError(`${field}.upstream_cluster`, 'faults limited to an upstream cluster are not supported');
  const unapplied = unappliedFields(HTTPFaultSchema, c, UNAPPLIED);
  if (unapplied.length > 0) log.warn(`fault config ${field}: accepted but not applied yet: ${unapplied.join(', ')}`);
  return {
    headers: c.headers.map((h, i) => compileHeaderMatcher(h, `${field}.headers[${i}]`)),
    nodes: new Set(c.downstreamNodes),
    delay: compileDelay(c, field),
    abort: compileAbort(c, field),
    maxActive: c.maxActiveFaults,
  };
}

/**
 * The fault filter: the most specific per-route config, when the route has one, replaces the
 * filter's own whole (as Envoy resolves it); the counters are the filter's either way.
 */
export function compileFault(c: HTTPFault, name: string): { decodeHeaders(req: StreamRequest, perRoute: readonly unknown[]): Promise<FilterOutcome> | FilterOutcome; stats: FaultStats } {
  const own = compileSettings(c, name);
  const stats: FaultStats = { delays_injected: 0, aborts_injected: 0, faults_overflow: 0 };
  let active = 0;
  const abortOutcome = (settings: FaultSettings, req: StreamRequest): FilterOutcome => {
    const status = settings.abort(req);
    if (status === undefined) return CONTINUE;
    stats.aborts_injected++;
    return { kind: 'reply', reply: { status, body: 'fault filter abort', headers: {}, details: 'fault_filter_abort', responseFlag: ResponseFlag.FaultInjected } };
  };
  return {
    stats,
    decodeHeaders(req, perRoute) {
      const settings = (perRoute[0] as FaultSettings | undefined) ?? own;
      for (const h of settings.headers) if (!h(req.header)) return CONTINUE;
      if (settings.nodes.size > 0 && !settings.nodes.has(req.header(DOWNSTREAM_NODE_HEADER) ?? '')) return CONTINUE;
      if (settings.maxActive !== undefined && active >= settings.maxActive) {
        stats.faults_overflow++;
        return CONTINUE;
      }
      const ms = settings.delay(req);
      if (ms <= 0) return abortOutcome(settings, req);
      stats.delays_injected++;
      req.streamInfo?.setResponseFlag(ResponseFlag.DelayInjected);
      active++;
      return sleep(ms)
        .then(() => abortOutcome(settings, req))
        .finally(() => active--);
    },
  };
}

registerHttpFilter({
  schema: HTTPFaultSchema,
  compile(config, name) {
    const compiled = compileFault(config, name);
    return { filter: { name, decodeHeaders: (r, perRoute) => compiled.decodeHeaders(r, perRoute) }, stats: { name, fault: compiled.stats } };
  },
});

registerPerRouteConfig({ schema: HTTPFaultSchema, compile: (config, field): FaultSettings => compileSettings(config, field) });
