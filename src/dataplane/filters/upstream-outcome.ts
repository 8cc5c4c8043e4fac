// What the router makes of an upstream's outcome: Envoy's local replies for the ways an upstream
// attempt fails (its reset reason, protocol error, overflow, timeout, no healthy endpoint), which
// failures retry_on calls connect failures, the grpc-status gRPC retry conditions read, and the
// upstream response's headers as the router passes them on (end-to-end only; header-mutations.ts
// HeaderRecord makes them mutable for the route's response header mutations).
import type { IncomingMessage } from 'node:http';
import type { LocalReply } from '../../envoy/filter.js';
import { ResponseFlag } from '../../envoy/response-flags.js';
import { isEndToEnd } from '../http-codec.js';
import type { AttemptFailure } from '../retry-policy.js';
import { failedHandshake } from '../tls/upstream.js';

/**
 * A stream reset as Envoy's router names it: Http::Utility::resetReasonToString, the connection's
 * transport failure reason, and the response flag the reset sets.
 */
interface ResetReason {
  readonly reason: string;
  readonly transport?: string;
  readonly flag: number;
}

/** The reset reason in response code details: `{reason}` or `{reason|transport}`, spaces as underscores. */
function detailOf({ reason, transport }: ResetReason): string {
  return `{${(transport ? `${reason}|${transport}` : reason).replace(/ /g, '_')}}`;
}

/**
 * Envoy's local reply to a stream reset before the response started, in its router's words;
 * `retried`: an earlier attempt failed too.
 */
function resetReply(status: number, r: ResetReason, retried = false, headers: Record<string, string> = {}): LocalReply {
  const detail = r.transport ? `${r.reason}, transport failure reason: ${r.transport}` : r.reason;
  return {
    status,
    body: `upstream connect error or disconnect/reset before headers. ${retried ? 'retried and the latest ' : ''}reset reason: ${detail}`,
    headers,
    details: `upstream_reset_before_response_started${detailOf(r)}`,
    responseFlag: r.flag,
  };
}

/** Envoy's answer when an attempt failed before the response started. */
export function upstreamReset(e: Error, retried: boolean): LocalReply {
  return resetReply(503, resetReasonOf(e), retried);
}

/** Envoy's answer when the upstream's response is not valid HTTP (a reset for protocol error: 502). */
export const PROTOCOL_ERROR: LocalReply = resetReply(502, { reason: 'protocol error', flag: ResponseFlag.UpstreamProtocolError });

/** Envoy's answer when a circuit breaker overflows. */
export const OVERFLOW: LocalReply = resetReply(503, { reason: 'overflow', flag: ResponseFlag.UpstreamOverflow }, false, { 'x-envoy-overloaded': 'true' });

export const UPSTREAM_TIMEOUT: LocalReply = { status: 504, body: 'upstream request timeout', headers: {}, details: 'upstream_response_timeout', responseFlag: ResponseFlag.UpstreamRequestTimeout };
export const NO_HEALTHY_UPSTREAM: LocalReply = { status: 503, body: 'no healthy upstream', headers: {}, details: 'no_healthy_upstream', responseFlag: ResponseFlag.NoHealthyUpstream };

/** What the access log records of a reset after the response began: its flag, details and transport failure reason. */
export function resetAfterResponseStarted(e: Error): { readonly flag: number; readonly details: string; readonly transport: string | undefined } {
  const r = resetReasonOf(e);
  return { flag: r.flag, details: `upstream_reset_after_response_started${detailOf(r)}`, transport: r.transport };
}

/** %UPSTREAM_TRANSPORT_FAILURE_REASON% of a failed attempt, if its connection had one. */
export function transportFailureOf(e: Error): string | undefined {
  return resetReasonOf(e).transport;
}

/** strerror's text of the errors a connect reports later (Envoy's "delayed connect error"). */
const CONNECT_ERRORS: ReadonlyMap<string, string> = new Map([
  ['ECONNREFUSED', 'Connection refused'],
  ['EHOSTUNREACH', 'No route to host'],
  ['ENETUNREACH', 'Network is unreachable'],
  ['EADDRNOTAVAIL', 'Cannot assign requested address'],
]);

/** The reset reason of a TCP connect that failed (remote connection failure) or timed out (connect_timeout), if `e` is one. */
function connectFailureOf(e: Error): ResetReason | undefined {
  const refused = CONNECT_ERRORS.get((e as NodeJS.ErrnoException).code ?? '');
  if (refused) return { reason: 'remote connection failure', transport: `delayed connect error: ${refused}`, flag: ResponseFlag.UpstreamConnectionFailure };
  return e.message.startsWith('connect timeout') ? { reason: 'connection timeout', flag: ResponseFlag.UpstreamConnectionFailure } : undefined;
}

/**
 * Envoy's reset reason of a failed attempt: a connection that never came up is a remote connection
 * failure (the connect's error, or a TLS handshake that failed) or a connection timeout
 * (connect_timeout); one that closed under the request, a connection termination; an HTTP/2 stream
 * the upstream reset, a remote reset.
 */
function resetReasonOf(e: Error): ResetReason {
  const connect = connectFailureOf(e);
  if (connect) return connect;
  const stream = streamResetOf(e);
  if (stream) return { reason: stream === 'refused' ? 'remote refused stream reset' : 'remote reset', flag: ResponseFlag.UpstreamRemoteReset };
  // Envoy's transport failure reason is BoringSSL's error list; node's code or message stands in for it.
  if (failedHandshake(e)) return { reason: 'remote connection failure', transport: `TLS error: ${(e as NodeJS.ErrnoException).code ?? e.message}`, flag: ResponseFlag.UpstreamConnectionFailure };
  return { reason: 'connection termination', flag: ResponseFlag.UpstreamConnectionTermination };
}

/** Whether the upstream reset an HTTP/2 stream (REFUSED_STREAM apart), if `e` is such a reset. */
function streamResetOf(e: Error): 'refused' | 'other' | undefined {
  if ((e as NodeJS.ErrnoException).code !== 'ERR_HTTP2_STREAM_ERROR' && !e.message.startsWith('stream closed before a response')) return undefined;
  return e.message.includes('REFUSED_STREAM') ? 'refused' : 'other';
}

/**
 * What retry_on sees of a failed exchange, as Envoy's retry state reads the reset reason: a
 * connection that never came up (its connect failed or timed out, or its TLS handshake failed) is
 * a connect failure; an HTTP/2 stream the upstream refused (REFUSED_STREAM), a refused stream;
 * anything else, a reset.
 */
export function failureOf(e: Error): AttemptFailure {
  if (connectFailureOf(e) || failedHandshake(e)) return 'connect-failure';
  return streamResetOf(e) === 'refused' ? 'refused-stream' : 'reset';
}

/** The grpc-status of a trailers-only gRPC response head, if it carries one. */
export function grpcStatusOf(v: string | string[] | number | undefined): number | undefined {
  const n = Number(Array.isArray(v) ? v[0] : v);
  return v === undefined || !Number.isInteger(n) ? undefined : n;
}

/** A response's headers without the hop-by-hop ones. */
export function endToEndHeaders(msg: IncomingMessage): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const [k, v] of Object.entries(msg.headersDistinct)) {
    if (v && isEndToEnd(k, v[0])) out[k] = v.length === 1 ? (v[0] as string) : v;
  }
  return out;
}
