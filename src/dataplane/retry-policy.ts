// config.route.v3.RetryPolicy compiled once: which failures of an attempt are retried, how many
// times, each try's timeout and the back-off between tries, with Envoy's meanings of retry_on.
import type { RetryPolicy } from '../gen/envoy/config/route/v3/route_components_pb.js';
import { durationMs } from '../common/duration.js';
import { ConfigError, unappliedFields } from '../envoy/config-error.js';
import { RetryPolicySchema } from '../gen/envoy/config/route/v3/route_components_pb.js';
import { scope } from '../common/log.js';
import { GRPC_RETRY_CONDITIONS, RETRY_CONDITIONS } from '../envoy/retry-conditions.js';
import { PreviousHostsPredicateSchema } from '../gen/envoy/extensions/retry/host/previous_hosts/v3/previous_hosts_pb.js';
import { PreviousPrioritiesConfigSchema } from '../gen/envoy/extensions/retry/priority/previous_priorities/v3/previous_priorities_config_pb.js';
import { typeUrlOf } from '../envoy/types.js';
import { unpackConfig } from './extensions.js';
import { compileHeaderMatcher, type HeaderGetter, type Predicate } from '../envoy/matchers.js';
import type { RequestView } from '../envoy/request.js';
import type { HeaderMap } from './http-codec.js';
import { grpcStatusOf } from './filters/upstream-outcome.js';

const log = scope('router');

/** How an attempt failed without a response (filters/upstream-outcome.ts `failureOf`). */
export type AttemptFailure = 'connect-failure' | 'refused-stream' | 'reset' | 'per-try-timeout';

export interface RetrySpec {
  readonly numRetries: number;
  /** 0 = none (the route timeout alone). */
  readonly perTryTimeoutMs: number;
  /**
   * Whether the request may be retried at all: it matches one of retriable_request_headers (read
   * once, when the router takes the request), or there are none.
   */
  admits(req: Pick<RequestView, 'header'>): boolean;
  /**
   * Whether an upstream response is retried, by its status, its headers (retriable_headers, the
   * grpc-status of a trailers-only gRPC response, x-envoy-ratelimited: an upstream Envoy's rate limit).
   */
  retriableResponse(status: number, headers: HeaderMap): boolean;
  /**
   * Whether an attempt that ended without a response is retried; `sent`: some of its request may
   * have reached the upstream (a connect failure never did).
   */
  retriableFailure(f: AttemptFailure, sent?: boolean): boolean;
  /** The wait before retry number `n` (1-based): full jitter over an exponential ceiling. */
  backOffMs(n: number): number;
  /**
   * The previous_hosts retry host predicate: how many times a retry's endpoint is picked again
   * while it is one an earlier attempt went to (host_selection_retry_max_attempts; the last pick
   * stands then); 0 without the predicate.
   */
  readonly reselectPrevious: number;
  /**
   * The previous_priorities retry priority's update_frequency: every that many attempts, the
   * priority levels tried so far leave the load of later retries; 0 without it.
   */
  readonly priorityUpdateFrequency: number;
}

const UNAPPLIED_RETRY = ['rateLimitedRetryBackOff', 'retryOptionsPredicates', 'perTryIdleTimeout'];

const DEFAULT_BASE_MS = 25;

/**
 * Compiles a RetryPolicy; unknown retry_on conditions are a ConfigError rather than ignored. Of
 * Envoy's conditions, http3-post-connect-failure concerns HTTP/3 upstreams, which this proxy never
 * uses: as in Envoy for any other protocol, it retries nothing. retriable-headers retries a
 * response that matches one of retriable_headers; without any, as the Go mesh's VirtualService
 * sends it, it matches nothing.
 */
export function compileRetryPolicy(p: RetryPolicy, field: string): RetrySpec {
  const on = new Set(p.retryOn.split(',').map((s) => s.trim()).filter(Boolean));
  for (const c of on) if (!RETRY_CONDITIONS.has(c)) throw new ConfigError(`${field}.retry_on`, `retry condition ${JSON.stringify(c)} is not supported (supported: ${[...RETRY_CONDITIONS].join(', ')})`);
  const unapplied = unappliedFields(RetryPolicySchema, p, UNAPPLIED_RETRY);
  if (unapplied.length > 0) log.warn(`${field}: accepted but not applied yet: ${unapplied.join(', ')}`);
  const previousHosts = retryHostPredicates(p, field);
  const priorityUpdateFrequency = retryPriority(p, field);
  const codes = new Set(p.retriableStatusCodes);
  const baseMs = durationMs(p.retryBackOff?.baseInterval, DEFAULT_BASE_MS);
  if (p.retryBackOff && baseMs <= 0) throw new ConfigError(`${field}.retry_back_off.base_interval`, 'must be greater than 0');
  const maxMs = durationMs(p.retryBackOff?.maxInterval, baseMs * 10);
  if (maxMs < baseMs) throw new ConfigError(`${field}.retry_back_off.max_interval`, 'must not be less than base_interval');
  const fiveXx = on.has('5xx');
  const gateway = on.has('gateway-error');
  const rateLimitedOn = on.has('envoy-ratelimited');
  const grpcStatuses = new Set([...on].flatMap((c) => (GRPC_RETRY_CONDITIONS.has(c) ? [GRPC_RETRY_CONDITIONS.get(c)!] : [])));
  const requestHeaders = headerMatchers(p.retriableRequestHeaders, `${field}.retriable_request_headers`);
  // Compiled (and so checked) whether or not retry_on asks for them, as Envoy does.
  const responseHeaders = headerMatchers(p.retriableHeaders, `${field}.retriable_headers`);
  const headersOn = on.has('retriable-headers') && responseHeaders.length > 0;
  return {
    numRetries: p.numRetries ?? 1,
    perTryTimeoutMs: durationMs(p.perTryTimeout, 0),
    admits(req) {
      if (requestHeaders.length === 0) return true;
      const get = req.header;
      return requestHeaders.some((m) => m(get));
    },
    retriableResponse(status, headers) {
      // As Envoy: a rate-limited response is retried under envoy-ratelimited, and under nothing else.
      if (headers['x-envoy-ratelimited'] !== undefined) return rateLimitedOn;
      if (fiveXx && status >= 500) return true;
      if (gateway && (status === 502 || status === 503 || status === 504)) return true;
      if (on.has('retriable-4xx') && status === 409) return true;
      if (on.has('retriable-status-codes') && codes.has(status)) return true;
      if (headersOn) {
        const get = responseHeaderGetter(status, headers);
        if (responseHeaders.some((m) => m(get))) return true;
      }
      if (grpcStatuses.size === 0) return false;
      const grpcStatus = grpcStatusOf(headers['grpc-status']);
      return grpcStatus !== undefined && grpcStatuses.has(grpcStatus);
    },
    retriableFailure(f, sent = f !== 'connect-failure') {
      // Envoy's order (wouldRetryFromReset): a connect failure under connect-failure; any failure
      // before the request went out under reset-before-request; then reset, 5xx and gateway-error
      // cover every failure (per-try timeouts included); refused-stream, a refused HTTP/2 stream.
      if (f === 'connect-failure' && on.has('connect-failure')) return true;
      if (!sent && on.has('reset-before-request')) return true;
      if (fiveXx || gateway || on.has('reset')) return true;
      return f === 'refused-stream' && on.has('refused-stream');
    },
    reselectPrevious: previousHosts ? Number(p.hostSelectionRetryMaxAttempts) : 0,
    priorityUpdateFrequency,
    backOffMs(n) {
      const ceiling = Math.min(baseMs * 2 ** (n - 1), maxMs);
      return Math.random() * ceiling;
    },
  };
}

function headerMatchers(list: RetryPolicy['retriableHeaders'], field: string): Predicate<HeaderGetter>[] {
  return list.map((h, i) => compileHeaderMatcher(h, `${field}[${i}]`));
}

/** A response's headers as a header matcher reads them: :status too, a repeated header's values joined with ','. */
function responseHeaderGetter(status: number, headers: HeaderMap): HeaderGetter {
  return (name) => {
    if (name === ':status') return String(status);
    const v = headers[name];
    return Array.isArray(v) ? v.join(',') : v;
  };
}

/**
 * Whether the policy's retry host predicates include previous_hosts (by its typed_config, as Envoy
 * finds an extension); any other predicate is logged as not applied yet.
 */
function retryHostPredicates(p: RetryPolicy, field: string): boolean {
  let previousHosts = false;
  p.retryHostPredicate.forEach((h, i) => {
    const typeUrl = h.configType.case === 'typedConfig' ? h.configType.value.typeUrl : '';
    if (typeUrl === PREVIOUS_HOSTS) previousHosts = true;
    else log.warn(`${field}.retry_host_predicate[${i}]: ${h.name || typeUrl} is accepted but not applied yet (applied: ${PREVIOUS_HOSTS})`);
  });
  return previousHosts;
}

const PREVIOUS_HOSTS = typeUrlOf(PreviousHostsPredicateSchema);
const PREVIOUS_PRIORITIES = typeUrlOf(PreviousPrioritiesConfigSchema);

/** previous_priorities' update_frequency (above 0, Envoy's proto rule), 0 without a retry priority; any other is logged as not applied. */
function retryPriority(p: RetryPolicy, field: string): number {
  const rp = p.retryPriority;
  if (!rp) return 0;
  const at = `${field}.retry_priority`;
  const any = rp.configType.case === 'typedConfig' ? rp.configType.value : undefined;
  if (any?.typeUrl !== PREVIOUS_PRIORITIES) {
    log.warn(`${at}: ${rp.name || any?.typeUrl || '(unnamed)'} is accepted but not applied yet (applied: ${PREVIOUS_PRIORITIES})`);
    return 0;
  }
  const { updateFrequency } = unpackConfig(any, PreviousPrioritiesConfigSchema, `${at}.typed_config`);
  if (!(updateFrequency > 0)) throw new ConfigError(`${at}.typed_config.update_frequency`, `must be greater than 0, got ${updateFrequency}`);
  return updateFrequency;
}

/**
 * previous_priorities before a retry: every `updateFrequency` attempts (the endpoints `tried` so
 * far), the priority levels they went to join `excluded`, which later retries' load leaves out
 * (host-sets.ts chooseHostSet); between updates the set stands, as in Envoy.
 */
export function excludeTriedPriorities(tried: readonly { readonly priority?: number }[], updateFrequency: number, excluded: Set<number>): ReadonlySet<number> {
  if (tried.length >= updateFrequency && tried.length % updateFrequency === 0) {
    for (const e of tried) if (e.priority !== undefined) excluded.add(e.priority);
  }
  return excluded;
}
