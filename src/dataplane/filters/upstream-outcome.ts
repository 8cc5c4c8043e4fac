// What the router makes of an upstream's outcome: Envoy's local replies for the ways an upstream
// attempt fails (connect failure, protocol error, overflow, timeout, no healthy endpoint), which
// failures retry_on calls connect failures, the grpc-status gRPC retry conditions read, and the
// upstream response's headers as the router passes them on (end-to-end only, mutable for the
// route's response header mutations).
import type { IncomingMessage } from 'node:http';
import type { LocalReply } from '../../envoy/filter.js';
import { isEndToEnd } from '../http-codec.js';
import type { MutableHeaders } from '../header-mutations.js';
import type { AttemptFailure } from '../retry-policy.js';

/** Node's header object as a mutable header set (for response header mutations). */
export class ResponseHeaderSet implements MutableHeaders {
  constructor(readonly h: Record<string, string | string[]>) {}
  has(name: string): boolean {
    return this.h[name] !== undefined;
  }
  add(name: string, value: string): void {
    const cur = this.h[name];
    this.h[name] = cur === undefined ? value : [...(Array.isArray(cur) ? cur : [cur]), value];
  }
  set(name: string, value: string): void {
    this.h[name] = value;
  }
  remove(name: string): void {
    delete this.h[name];
  }
}

/** Envoy's answer when the upstream connection fails before a response. */
export const CONNECT_FAILURE: LocalReply = {
  status: 503,
  body: 'upstream connect error or disconnect/reset before headers. reset reason: connection failure',
  headers: {},
  details: 'upstream_reset_before_response_started{connection_failure}',
};

/** Envoy's answer when the upstream's response is not valid HTTP (a reset for protocol error: 502). */
export const PROTOCOL_ERROR: LocalReply = {
  status: 502,
  body: 'upstream connect error or disconnect/reset before headers. reset reason: protocol error',
  headers: {},
  details: 'upstream_reset_before_response_started{protocol_error}',
};

/** Envoy's answer when a circuit breaker overflows. */
export const OVERFLOW: LocalReply = {
  status: 503,
  body: 'upstream connect error or disconnect/reset before headers. reset reason: overflow',
  headers: { 'x-envoy-overloaded': 'true' },
  details: 'upstream_reset_before_response_started{overflow}',
};

export const UPSTREAM_TIMEOUT: LocalReply = { status: 504, body: 'upstream request timeout', headers: {}, details: 'upstream_response_timeout' };
export const NO_HEALTHY_UPSTREAM: LocalReply = { status: 503, body: 'no healthy upstream', headers: {}, details: 'no_healthy_upstream' };

const CONNECT_ERRORS = new Set(['ECONNREFUSED', 'EHOSTUNREACH', 'ENETUNREACH', 'EADDRNOTAVAIL']);

/** Whether an exchange failed to connect (retry_on connect-failure) or was reset after connecting. */
export function failureOf(e: Error): AttemptFailure {
  const code = (e as NodeJS.ErrnoException).code;
  return (code !== undefined && CONNECT_ERRORS.has(code)) || e.message.startsWith('connect timeout') ? 'connect-failure' : 'reset';
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
