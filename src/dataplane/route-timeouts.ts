// A route's timeouts beyond `timeout` and the retry policy's per_try_timeout, with Envoy's
// semantics, as pure decisions over a request's headers:
// - max_grpc_timeout / grpc_timeout_offset (the router's): a gRPC request's grpc-timeout (none:
//   infinity), less the offset while that leaves some time, capped at the maximum (0: no cap),
//   replaces the route timeout; the grpc-timeout sent upstream is then the time the router allows.
// - max_stream_duration (the connection manager's): MaxStreamDuration.max_stream_duration (else
//   the HCM's common_http_protocol_options.max_stream_duration; 0 on the route: none) bounds the
//   whole stream; with grpc_timeout_header_max set, a request's grpc-timeout (capped, 0: no cap,
//   then less grpc_timeout_header_offset) does instead. A route with MaxStreamDuration uses these
//   "new timeouts" only: its `timeout` and max_grpc_timeout are not applied by the router.
// - idle_timeout: the route's stream idle timeout, replacing the HCM's stream_idle_timeout (0: none).
import type { Duplex } from 'node:stream';
import type { Duration } from '@bufbuild/protobuf/wkt';
import type { RouteAction } from '../gen/envoy/config/route/v3/route_components_pb.js';
import { MAX_TIMER_MS, timerMs } from '../common/duration.js';
import type { DownstreamResponse } from './http-codec.js';

/** A grpc-timeout's cap (0: none) and the offset taken off it. */
export interface GrpcTimeoutPolicy {
  readonly maxMs: number;
  readonly offsetMs: number;
}

export interface RouteTimeouts {
  /** max_grpc_timeout: the router's timeout of a gRPC request comes from its grpc-timeout. */
  readonly grpc?: GrpcTimeoutPolicy;
  /** MaxStreamDuration is set: the route's stream duration replaces its router timeouts. */
  readonly stream?: StreamDuration;
  /** idle_timeout in ms (0: none). */
  readonly idleMs?: number;
  /** Whether the connection manager has anything to do per stream (MaxStreamDuration or idle_timeout set). */
  readonly perStream: boolean;
}

export interface StreamDuration {
  /** max_stream_duration; undefined: the HCM's; 0: none. */
  readonly maxMs?: number;
  /** grpc_timeout_header_max and grpc_timeout_header_offset; undefined: grpc-timeout is not read. */
  readonly grpcHeader?: GrpcTimeoutPolicy;
}

const ms = (d: Duration | undefined): number | undefined => (d ? timerMs(d, 0) : undefined);

/** The route's timeout fields; undefined when it sets none (most routes: nothing to do per request). */
export function compileRouteTimeouts(a: RouteAction): RouteTimeouts | undefined {
  const msd = a.maxStreamDuration;
  const idleMs = ms(a.idleTimeout);
  let stream: StreamDuration | undefined;
  if (msd) {
    const maxMs = ms(msd.maxStreamDuration);
    const headerMax = ms(msd.grpcTimeoutHeaderMax);
    stream = {
      ...(maxMs !== undefined ? { maxMs } : {}),
      ...(headerMax !== undefined ? { grpcHeader: { maxMs: headerMax, offsetMs: ms(msd.grpcTimeoutHeaderOffset) ?? 0 } } : {}),
    };
  }
  const maxGrpc = ms(a.maxGrpcTimeout);
  const grpc = !msd && maxGrpc !== undefined ? { maxMs: maxGrpc, offsetMs: ms(a.grpcTimeoutOffset) ?? 0 } : undefined;
  if (!stream && !grpc && idleMs === undefined) return undefined;
  return { ...(grpc ? { grpc } : {}), ...(stream ? { stream } : {}), ...(idleMs !== undefined ? { idleMs } : {}), perStream: stream !== undefined || idleMs !== undefined };
}

/** Per unit: ms per unit, or (u, n) units per ms as a negative. */
const GRPC_UNIT_MS: Readonly<Record<string, number>> = { H: 3_600_000, M: 60_000, S: 1000, m: 1, u: -1000, n: -1_000_000 };
/** gRPC's TimeoutValue: at most 8 digits. */
const MAX_GRPC_TIMEOUT_VALUE = 99_999_999;

/**
 * A grpc-timeout header in ms (a fraction of a ms rounds up, beyond node's longest timer it is cut
 * to it); undefined when absent or malformed.
 */
export function parseGrpcTimeout(v: string | undefined): number | undefined {
  if (v === undefined || !/^\d{1,8}[HMSmun]$/.test(v)) return undefined;
  const value = Number(v.slice(0, -1));
  const unit = GRPC_UNIT_MS[v[v.length - 1]!]!;
  return Math.min(unit > 0 ? value * unit : Math.ceil(value / -unit), MAX_TIMER_MS);
}

/** ms as a grpc-timeout: in ms while it fits 8 digits, else in the smallest unit it fits (hours at most). */
export function formatGrpcTimeout(timeoutMs: number): string {
  if (timeoutMs <= MAX_GRPC_TIMEOUT_VALUE) return `${timeoutMs}m`;
  let t = Math.floor(timeoutMs / 1000);
  for (const unit of ['S', 'M']) {
    if (t <= MAX_GRPC_TIMEOUT_VALUE) return `${t}${unit}`;
    t = Math.floor(t / 60);
  }
  return `${Math.min(t, MAX_GRPC_TIMEOUT_VALUE)}H`;
}

/**
 * The router's timeout of a gRPC request on a route with max_grpc_timeout (Envoy's
 * FilterUtility::finalTimeout): its grpc-timeout (none: 0, infinity), less the offset only while
 * that leaves more than 0, then capped at the maximum unless the maximum is 0.
 */
export function grpcRouterTimeoutMs(policy: GrpcTimeoutPolicy, grpcTimeout: string | undefined): number {
  let t = parseGrpcTimeout(grpcTimeout) ?? 0;
  if (policy.offsetMs < t) t -= policy.offsetMs;
  if (policy.maxMs !== 0 && (t === 0 || t > policy.maxMs)) t = policy.maxMs;
  return t;
}

/**
 * How long the connection manager lets a stream last (Envoy's refreshDurationTimeout), or
 * undefined for no limit. With grpc_timeout_header_max set and a grpc-timeout on the request: that
 * timeout, capped (0: no cap), less the offset (down to 0, which ends the stream at once).
 * Otherwise the route's max_stream_duration (0: none), else the HCM's (0: none).
 */
export function streamDurationMs(stream: StreamDuration | undefined, hcmMaxMs: number, grpcTimeout: string | undefined): number | undefined {
  const header = stream?.grpcHeader ? parseGrpcTimeout(grpcTimeout) : undefined;
  if (header === undefined) {
    const limit = stream?.maxMs ?? hcmMaxMs;
    return limit > 0 ? limit : undefined;
  }
  const { maxMs, offsetMs } = stream!.grpcHeader!;
  let t = maxMs !== 0 && header > maxMs ? maxMs : header;
  if (t !== 0 && offsetMs > 0) t = offsetMs < t ? t - offsetMs : 0;
  return t;
}

/** Arms a stream's own timers (listener/stream-timeouts.ts): a request's on its response, an upgrade's on its socket. */
export interface StreamTimerHost {
  arm(stream: DownstreamResponse | Duplex, timers: StreamTimers): void;
}

/** What a stream's route asks of the connection manager beyond its own stream timeouts. */
export interface StreamTimers {
  /** The route's idle_timeout, replacing stream_idle_timeout for this stream (0: none). */
  readonly idleMs?: number;
  /** The stream's max duration (0: it ends at once). */
  readonly durationMs?: number;
}

const NOTHING = {} as const;

/**
 * The per-stream timers a request on a route needs (none: the usual case) and, for a gRPC request
 * on a route with MaxStreamDuration, the grpc-timeout to send upstream (the stream's duration, as
 * Envoy rewrites it).
 */
export function streamTimersOf(
  t: RouteTimeouts | undefined,
  hcmMaxMs: number,
  grpcTimeout: string | undefined,
  grpc: boolean,
): { readonly timers?: StreamTimers; readonly grpcTimeout?: string } {
  if (!t?.perStream && hcmMaxMs === 0) return NOTHING;
  const durationMs = streamDurationMs(t?.stream, hcmMaxMs, grpcTimeout);
  const idleMs = t?.idleMs;
  if (durationMs === undefined && idleMs === undefined) return NOTHING;
  const timers = { ...(durationMs !== undefined ? { durationMs } : {}), ...(idleMs !== undefined ? { idleMs } : {}) };
  return t?.stream && durationMs !== undefined && grpc ? { timers, grpcTimeout: formatGrpcTimeout(durationMs) } : { timers };
}
