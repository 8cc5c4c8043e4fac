// One request the router forwards, as one object: its attempts, timers and releases, and the
// steps from the first attempt to the response or a local reply. The stream is also its first
// attempt (the exchange's request and events), so a request that is not retried allocates no
// closure or attempt object here; a retry's attempt is a small object of its own, so that an
// abandoned attempt's late events are still told apart from the current one's. A route with a
// stat_prefix counts what happens here in its stats (route-stats.ts), and the cluster its own
// (response-stats.ts), where Envoy's router does.
import type { OutgoingHttpHeaders } from 'node:http';
import { scope } from '../../common/log.js';
import type { LocalReply, ResponseHeaderMap } from '../../envoy/filter.js';
import type { StreamRequest } from '../../envoy/request.js';
import type { Endpoint } from '../upstream-pools.js';
import { upstreamExchange } from '../http1-exchange.js';
import { ResponseParseError } from '../http1/response-parser.js';
import {
  requestComplete,
  respondHeadersOnly,
  writeHead,
  type BodyDone,
  type BodyFraming,
  type DownstreamRequest,
  type DownstreamResponse,
  type HeaderMap,
  type UpstreamBody,
  type UpstreamEvents,
  type UpstreamExchange,
  type UpstreamHead,
  type UpstreamRequest,
} from '../http-codec.js';
import { applyMutations, HeaderRecord } from '../header-mutations.js';
import type { RetrySpec } from '../retry-policy.js';
import type { StatCounter } from '../stats.js';
import { originalSrcOf, type OriginalSource } from '../original-src.js';
import type { DownstreamAddresses } from '../tls/proxy-protocol.js';
import { failureOf, NO_HEALTHY_UPSTREAM, PROTOCOL_ERROR, resetAfterResponseStarted, transportFailureOf, UPSTREAM_TIMEOUT, upstreamReset } from './upstream-outcome.js';
import type { RouterDeps, Target } from './router.js';
import { chargeRetry, RetryState } from './retry-state.js';

const log = scope('http');

/** What a stream needs of its router's connection manager. */
export type StreamDeps = Pick<RouterDeps, 'serverName' | 'alwaysSetRequestIdInResponse' | 'sendLocal' | 'responseStarts'>;

type AttemptState = 'waiting' | 'streaming' | 'abandoned';

/** One attempt of a request: where it went, and whether its events still count. */
interface Attempt extends UpstreamEvents {
  state: AttemptState;
  readonly endpoint: Endpoint;
  upstream: UpstreamExchange | undefined;
  /** Takes the attempt off its endpoint's active count (least_request); idempotent. */
  active: (() => void) | undefined;
}

/** A retry's attempt: its events go to the stream with the attempt they belong to. */
class RetryAttempt implements Attempt {
  state: AttemptState = 'waiting';
  upstream: UpstreamExchange | undefined = undefined;
  active: (() => void) | undefined = undefined;

  constructor(
    private readonly stream: RouterStream,
    readonly endpoint: Endpoint,
  ) {}

  head(up: UpstreamHead, body: UpstreamBody): void {
    this.stream.attemptHead(this, up, body);
  }

  error(e: Error): void {
    this.stream.attemptError(this, e);
  }
}

// Timer callbacks, shared by every stream (setTimeout's extra arguments carry the stream).
function routeTimedOut(s: RouterStream): void {
  s.routeTimedOut();
}
function tryTimedOut(s: RouterStream, a: Attempt): void {
  s.tryTimedOut(a);
}

/**
 * Sends the request upstream and the response downstream. The route timeout covers every
 * attempt; a retriable failure or status (the route's retry policy) is retried on a newly picked
 * endpoint after a back-off, as long as no byte of the response has gone downstream.
 */
export class RouterStream implements Attempt, UpstreamRequest, BodyDone {
  // The first attempt's request to the upstream (a retry's copies it with its own endpoint); what
  // the target already holds is read through getters, which take no room in each stream.
  readonly source: OriginalSource | undefined;
  /** The ALPN override of the cluster's upstream protocol (`mesh.alpn`). */
  readonly alpn: readonly string[] | undefined;
  // The first attempt's own state.
  state: AttemptState = 'waiting';
  upstream: UpstreamExchange | undefined = undefined;
  active: (() => void) | undefined = undefined;
  // The request's.
  /** The body streams through unbuffered, so only a request without one can be sent again. */
  private readonly retry: RetrySpec | undefined;
  private readonly started = Date.now();
  private attempts = 0;
  private answered = false;
  /** The latest attempt's exchange. */
  private current: UpstreamExchange | undefined = undefined;
  private routeTimer: NodeJS.Timeout | undefined = undefined;
  private tryTimer: NodeJS.Timeout | undefined = undefined;
  /** Released when the request is answered or abandoned: its circuit-breaker admission. */
  private admitted: (() => void) | undefined;
  /** Likewise, made at the first retry: retry slots and the retries' active counts. */
  private releases: (() => void)[] | undefined = undefined;
  /** Made at the first retriable outcome. */
  private retryState: RetryState | undefined = undefined;

  constructor(
    private readonly deps: StreamDeps,
    private readonly req: DownstreamRequest,
    private readonly res: DownstreamResponse,
    private readonly sreq: StreamRequest,
    private readonly target: Target,
    readonly framing: BodyFraming,
    private readonly requestId: string | undefined,
    private readonly grpc: boolean,
    admitted: (() => void) | undefined,
  ) {
    this.source = originalSrcOf(req.socket);
    // Envoy's upstream protocol of the cluster: HTTP/2 when configured, else HTTP/1.1.
    this.alpn = sreq.alpnOverride?.get(target.http2 ? 'h2' : 'http/1.1');
    this.retry = framing === 'none' && target.retry?.admits(sreq) ? target.retry : undefined;
    this.admitted = admitted;
  }

  get endpoint(): Endpoint {
    return this.target.endpoint;
  }

  /** The downstream connection, named by a PROXY protocol header, as Envoy's connection manager passes it (the request's own addresses: nothing to allocate). */
  get downstream(): DownstreamAddresses {
    return this.sreq;
  }

  get method(): string {
    return this.sreq.method;
  }

  get path(): string {
    return this.target.path;
  }

  get headers(): OutgoingHttpHeaders {
    return this.target.headers;
  }

  get routeTotal(): StatCounter | undefined {
    return this.target.route.stats?.total;
  }

  start(): void {
    const timeoutMs = this.target.timeoutMs;
    if (timeoutMs > 0) this.routeTimer = setTimeout(routeTimedOut, timeoutMs, this);
    // Closed before the router answered (the client went away, or a stream timeout answered or
    // reset it): the upstream exchange is abandoned.
    this.res.on('close', () => this.closed());
    this.send(this, this);
  }

  head(up: UpstreamHead, body: UpstreamBody): void {
    this.attemptHead(this, up, body);
  }

  error(e: Error): void {
    this.attemptError(this, e);
  }

  /** The response's body all went downstream. */
  bodyDone(trailers: HeaderMap | undefined, tail?: Buffer): void {
    const res = this.res;
    if (trailers && this.sreq.streamInfo) this.sreq.streamInfo.responseTrailers = trailers;
    this.finish();
    this.completed();
    if (trailers) res.addTrailers(trailers);
    if (tail) res.end(tail);
    else res.end();
    this.resetUnsentRequest();
  }

  attemptError(a: Attempt, e: Error): void {
    // A response ended elsewhere (a stream timeout) is not the router's to answer.
    if (a.state === 'abandoned' || this.answered || this.res.writableEnded) return;
    const info = this.sreq.streamInfo;
    if (a.state === 'streaming') {
      if (info) {
        const reset = resetAfterResponseStarted(e);
        info.proxyReset(reset.flag, reset.details);
        info.upstreamTransportFailureReason = reset.transport;
      }
      this.finish();
      if (!this.res.writableEnded) this.res.destroy();
      return;
    }
    a.state = 'abandoned';
    a.active?.();
    clearTimeout(this.tryTimer);
    const cluster = this.target.cluster;
    log.debug(`upstream ${cluster.name} ${a.endpoint.host}:${a.endpoint.port} failed: ${e.message}`);
    cluster.report?.(a.endpoint, 'failure');
    if (info) info.upstreamTransportFailureReason = transportFailureOf(e);
    if (!this.retries(this.retry?.retriableFailure(failureOf(e)) ?? false)) this.reply(e instanceof ResponseParseError ? PROTOCOL_ERROR : upstreamReset(e, this.attempts > 1));
  }

  attemptHead(a: Attempt, up: UpstreamHead, body: UpstreamBody): void {
    const res = this.res;
    if (a.state === 'abandoned' || this.answered || res.writableEnded) {
      body.discard();
      return;
    }
    clearTimeout(this.tryTimer);
    const { cluster, attemptCount } = this.target;
    cluster.report?.(a.endpoint, up.status);
    if (this.retries(this.retry?.retriableResponse(up.status, up.headers) ?? false)) {
      a.state = 'abandoned';
      a.active?.();
      body.discard();
      return;
    }
    a.state = 'streaming';
    this.respondedWith(up.status);
    const out = up.headers;
    out.server = this.deps.serverName;
    out['x-envoy-upstream-service-time'] = String(Date.now() - this.started);
    if (attemptCount.response) out['x-envoy-attempt-count'] = String(this.attempts);
    if (this.requestId && this.deps.alwaysSetRequestIdInResponse) out['x-request-id'] = this.requestId;
    const headerSet = new HeaderRecord(out);
    for (const c of this.target.setCookies) headerSet.add('set-cookie', c);
    applyMutations(headerSet, this.target.responseHeaders);
    this.target.encode?.(out);
    this.sreq.streamInfo?.upstreamResponse(up.status, out, up.connection);
    this.deps.responseStarts(res);
    if (up.endStream) {
      this.finish();
      this.completed();
      respondHeadersOnly(res, up.status, out);
      this.resetUnsentRequest();
      return;
    }
    writeHead(res, up.status, out, up.message);
    body.pipeTo(res, this);
  }

  routeTimedOut(): void {
    this.current?.destroy();
    this.target.cluster.timedOut?.('route');
    this.target.route.stats?.timeout.inc();
    this.reply(UPSTREAM_TIMEOUT);
  }

  tryTimedOut(a: Attempt): void {
    if (a.state !== 'waiting') return;
    a.state = 'abandoned';
    a.active?.();
    // Read before the exchange goes: whether its request had gone out (reset-before-request).
    const sent = a.upstream?.sent ?? false;
    a.upstream?.destroy();
    const cluster = this.target.cluster;
    cluster.report?.(a.endpoint, 'failure');
    cluster.timedOut?.('perTry');
    if (!this.retries(this.retry?.retriableFailure('per-try-timeout', sent) ?? false)) this.reply(UPSTREAM_TIMEOUT);
  }

  /** After a retry's back-off: the retry goes to a newly picked endpoint. */
  retryNow(): void {
    if (this.answered) return;
    const endpoint = this.retryState!.endpoint();
    if (!endpoint) {
      this.reply(NO_HEALTHY_UPSTREAM);
      return;
    }
    const { method, path, headers, framing, source, alpn, downstream, routeTotal } = this;
    this.send(new RetryAttempt(this, endpoint), { endpoint, method, path, headers, framing, source, alpn, downstream, routeTotal });
  }

  /** One attempt: the exchange, its per-try timer, and the request body piped into it. */
  private send(a: Attempt, request: UpstreamRequest): void {
    const { cluster, attemptCount } = this.target;
    this.attempts++;
    this.sreq.streamInfo?.upstreamAttempt(cluster.name, a.endpoint, this.attempts);
    // The attempt counts as active on its endpoint (LEAST_REQUEST) until it is answered or abandoned.
    const active = cluster.begin?.(a.endpoint);
    if (active) {
      a.active = active;
      if (a !== this) this.hold(active);
    }
    if (attemptCount.request) this.headers['x-envoy-attempt-count'] = String(this.attempts);
    let upstream: UpstreamExchange;
    try {
      upstream = upstreamExchange(request, cluster, this.target.http2, a);
    } catch (e) {
      // e.g. the pooled HTTP/2 session went away between the pick and the request
      a.error(e as Error);
      this.req.resume();
      return;
    }
    a.upstream = upstream;
    this.current = upstream;
    // Every attempt, retried or not (a request with a body, one retriable_request_headers leaves out), as in Envoy.
    const perTry = this.target.retry?.perTryTimeoutMs ?? 0;
    if (perTry > 0) this.tryTimer = setTimeout(tryTimedOut, perTry, this, a);
    const body = upstream.body;
    if (!body) return;
    const req = this.req;
    req.pipe(body, { end: false });
    const info = this.sreq.streamInfo;
    // Listened to once piped, so that the listener does not start the flow itself.
    if (info) req.on('data', (chunk: Buffer) => (info.bytesReceived += chunk.length));
    req.on('end', () => upstream.finish(req.rawTrailers.length > 0 ? (req.trailers as HeaderMap) : undefined));
  }

  /**
   * Whether an attempt's outcome (`retriable` by the route's policy) is retried (retry-state.ts);
   * a retry's outcome that is not retriable counts as upstream_rq_retry_success, whatever its status.
   */
  private retries(retriable: boolean): boolean {
    const spec = this.retry;
    if (!spec || this.answered) return false;
    if (!retriable) {
      if (this.attempts > 1) chargeRetry(this.target, 'retrySuccess');
      return false;
    }
    return (this.retryState ??= new RetryState(spec, this.target, this.sreq)).retry(this.attempts, (release) => this.hold(release), () => this.retryNow());
  }

  /** The status the router answers with, on the cluster's and the route's code stats. */
  private respondedWith(status: number): void {
    this.target.cluster.responses?.response(status);
    this.target.route.stats?.response(status);
  }

  private hold(release: () => void): void {
    (this.releases ??= []).push(release);
  }

  private finish(): void {
    this.answered = true;
    const admitted = this.admitted;
    this.admitted = undefined;
    admitted?.();
    this.active?.();
    const releases = this.releases;
    this.releases = undefined;
    if (releases) for (const r of releases) r();
    clearTimeout(this.routeTimer);
    clearTimeout(this.tryTimer);
  }

  /** The response went downstream complete (upstream_rq_time). */
  private completed(): void {
    const ms = Date.now() - this.started;
    this.target.cluster.responses?.responseTime(ms);
    this.target.route.stats?.responseTime(ms);
  }

  private reply(r: LocalReply): void {
    this.finish();
    // Envoy counts the status of a local reply that stands for the upstream's response, not of
    // one that ends a response already begun.
    if (!this.res.headersSent) this.respondedWith(r.status);
    const encode = this.target.encode;
    const encoded = encode ? { ...r, headers: { ...r.headers } } : r;
    encode?.(encoded.headers as ResponseHeaderMap);
    this.deps.sendLocal(this.res, encoded, this.requestId, this.grpc);
  }

  private closed(): void {
    const abandoned = !this.answered;
    this.finish();
    if (abandoned) this.current?.destroy();
  }

  /**
   * A response complete before the request's body was all sent: Envoy resets the upstream request.
   * The streaming attempt's exchange is the latest: no attempt starts once one streams.
   */
  private resetUnsentRequest(): void {
    if (!requestComplete(this.req)) this.current?.destroy();
  }
}
