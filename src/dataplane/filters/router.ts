// The router HTTP filter, the last of every chain: the route of a request (looked up before the
// other filters, as Envoy caches it), upgrade admission, then the route's direct response or its
// upstream, and the forwarding itself: a request's attempts are a RouterStream (router-stream.ts),
// an upgrade is spliced on 101 here.
import { request as httpRequest, type IncomingMessage, type OutgoingHttpHeaders } from 'node:http';
import type { Duplex } from 'node:stream';
import { scope } from '../../common/log.js';
import { RouterSchema } from '../../gen/envoy/extensions/filters/http/router/v3/router_pb.js';
import type { LocalReply, ResponseHeaderMap } from '../../envoy/filter.js';
import type { StreamRequest } from '../../envoy/request.js';
import { ResponseFlag } from '../../envoy/response-flags.js';
import type { ClusterManager } from '../clusters.js';
import { http2For, type Endpoint, type UpstreamCluster } from '../upstream-pools.js';
import type { Http2Pool } from '../http2-pool.js';
import { RouterStream } from './router-stream.js';
import { bodyFraming, isGrpc, rawHead, type DownstreamRequest, type DownstreamResponse, type HeaderMap } from '../http-codec.js';
import type { CompiledRoute, RouteTable } from '../route-table.js';
import { applyMutations, HeaderRecord, type HeaderMutation } from '../header-mutations.js';
import { mirror, type ShadowBody } from '../mirror.js';
import type { RetrySpec } from '../retry-policy.js';
import { formatGrpcTimeout, grpcRouterTimeoutMs } from '../route-timeouts.js';
import { registerHttpFilter } from './registry.js';
import { endToEndHeaders, NO_HEALTHY_UPSTREAM, OVERFLOW, upstreamReset } from './upstream-outcome.js';
import { cookieJar } from '../hash-cookie.js';
import { originalSrcOf } from '../original-src.js';
import type { RequestHasher } from '../load-balancers.js';

const log = scope('http');

registerHttpFilter({ schema: RouterSchema, terminal: true, compile: () => ({}) });

const NO_HASH = { hash: (): undefined => undefined, setCookies: [] } as const;

/**
 * A request's hash, computed when a consistent-hash balancer first asks (a cookie policy may then
 * generate its cookie) and kept for retries; the generated cookies go on the upstream response.
 */
function requestHash(hasher: RequestHasher, sreq: StreamRequest): { hash: () => bigint | undefined; setCookies: readonly string[] } {
  const jar = cookieJar(sreq);
  let hashed: { value: bigint | undefined } | undefined;
  return { hash: () => (hashed ??= { value: hasher(sreq, jar.add) }).value, setCookies: jar.setCookies };
}

/** Where the router sends an admitted request. */
export interface Target {
  readonly route: CompiledRoute;
  readonly cluster: UpstreamCluster;
  /** The cluster's HTTP/2 sessions this request goes over; undefined: HTTP/1.1. */
  readonly http2: Http2Pool | undefined;
  /** The response's mutations: the weighted cluster's (if any), then the route's. */
  readonly responseHeaders: readonly HeaderMutation[];
  readonly endpoint: Endpoint;
  readonly path: string;
  readonly headers: OutgoingHttpHeaders;
  readonly timeoutMs: number;
  readonly retry: RetrySpec | undefined;
  readonly attemptCount: { readonly request: boolean; readonly response: boolean };
  /** The request's hash (route hash_policy), computed once when a balancer first asks, kept for retries. */
  readonly hash: () => bigint | undefined;
  /** Set-Cookie values of generated hash cookies, for the upstream response. */
  readonly setCookies: readonly string[];
  /** The encoder sides of the HTTP filters the request passed (e.g. CORS headers), for its response. */
  readonly encode: ((headers: ResponseHeaderMap) => void) | undefined;
}

/** The request body's chunks are copied to the shadows as they are forwarded (a listener beside the upstream's pipe). */
function teeShadows(req: DownstreamRequest, shadows: ShadowBody | undefined): void {
  if (!shadows) return;
  req.on('data', (chunk: Buffer) => shadows.write(chunk));
  req.on('end', () => shadows.end(req.rawTrailers.length > 0 ? (req.trailers as HeaderMap) : undefined));
  req.once('close', () => {
    if (!req.readableEnded) shadows.abort();
  });
}

/** What the router needs of its connection manager. */
export interface RouterDeps {
  readonly clusters: ClusterManager;
  /** The current route table (RDS: undefined until it has arrived). */
  readonly routeTable: () => RouteTable | undefined;
  /** The connection manager's upgrade_configs: enabled by upgrade type. */
  readonly upgrades: ReadonlyMap<string, boolean>;
  readonly serverName: string;
  readonly alwaysSetRequestIdInResponse: boolean;
  /** A local reply; to a gRPC request it is a gRPC status. */
  sendLocal(res: DownstreamResponse, reply: LocalReply, requestId: string | undefined, grpc: boolean): void;
  /** A local reply on the raw socket of an upgrade request. */
  sendLocalRaw(socket: Duplex, reply: LocalReply, requestId?: string): void;
  /** An upstream response's head is about to go downstream (the stream may have to end with it). */
  responseStarts(res: DownstreamResponse): void;
}

/** The router of one connection manager. */
export class Router {
  private readonly clusters: ClusterManager;
  private readonly routeTable: () => RouteTable | undefined;
  private readonly upgrades: ReadonlyMap<string, boolean>;

  constructor(private readonly deps: RouterDeps) {
    this.clusters = deps.clusters;
    this.routeTable = deps.routeTable;
    this.upgrades = deps.upgrades;
  }

  route(sreq: StreamRequest): CompiledRoute | undefined {
    return this.routeTable()?.route(sreq);
  }

  /** Whether the route (else the connection manager) enables this upgrade; a 403 if not. */
  admitUpgrade(route: CompiledRoute | undefined, upgrade: string, reply: (r: LocalReply) => void): boolean {
    const perRoute = route?.action.kind === 'route' ? route.action.upgrades.get(upgrade) : undefined;
    if (!(perRoute ?? this.upgrades.get(upgrade) ?? false)) {
      reply({ status: 403, body: '', headers: {}, details: 'upgrade_failed' });
      return false;
    }
    return true;
  }

  /** Where an admitted request goes, or undefined after a local reply (no route, direct response, no upstream). */
  target(sreq: StreamRequest, route: CompiledRoute | undefined, reply: (r: LocalReply) => void): Target | undefined {
    if (!route) {
      reply({ status: 404, body: '', headers: {}, details: 'route_not_found', responseFlag: ResponseFlag.NoRouteFound });
      return undefined;
    }
    const action = route.action;
    if (action.kind === 'direct') {
      const headers: Record<string, string | string[]> = {};
      applyMutations(new HeaderRecord(headers), route.responseHeaders);
      reply({ status: action.status, body: action.body, headers, details: 'direct_response' });
      return undefined;
    }
    if (action.kind === 'redirect') {
      const headers: Record<string, string | string[]> = { location: action.redirect.location(sreq, route.matchedPrefix) };
      applyMutations(new HeaderRecord(headers), route.responseHeaders);
      reply({ status: action.redirect.status, body: '', headers, details: 'direct_response' });
      return undefined;
    }
    const choice = action.cluster(sreq);
    const cluster = this.clusters.get(choice.name);
    if (!cluster) {
      reply({ status: action.clusterNotFoundStatus, body: '', headers: {}, details: 'cluster_not_found', responseFlag: ResponseFlag.NoClusterFound });
      return undefined;
    }
    const { hash, setCookies } = action.hash ? requestHash(action.hash, sreq) : NO_HASH;
    const endpoint = cluster.pick(sreq, hash);
    if (!endpoint) {
      cluster.responses?.response(NO_HEALTHY_UPSTREAM.status);
      route.stats?.response(NO_HEALTHY_UPSTREAM.status);
      reply(NO_HEALTHY_UPSTREAM);
      return undefined;
    }
    // max_grpc_timeout: a gRPC request's own deadline is its route timeout. As Envoy's router, the
    // request is read as the filters left it, before the route's own header mutations.
    const grpcPolicy = action.timeouts?.grpc;
    const grpc = grpcPolicy !== undefined && isGrpc(sreq.headers.joined('content-type'));
    const timeoutMs = grpc ? grpcRouterTimeoutMs(grpcPolicy, sreq.headers.joined('grpc-timeout')) : action.timeoutMs;
    if (choice.requestHeaders) applyMutations(sreq.headers, choice.requestHeaders);
    applyMutations(sreq.headers, route.requestHeaders);
    const path = action.pathRewrite ? action.pathRewrite(sreq.path, route.matchedPrefix) : sreq.path;
    const headers: OutgoingHttpHeaders = sreq.headers.toRecord();
    headers.host = action.hostRewrite ?? choice.hostRewrite ?? sreq.authority;
    const perTry = action.retry?.perTryTimeoutMs ?? 0;
    const expected = perTry > 0 && (timeoutMs === 0 || perTry < timeoutMs) ? perTry : timeoutMs;
    if (expected > 0) {
      headers['x-envoy-expected-rq-timeout-ms'] = String(expected);
      // The upstream gRPC server learns the time it actually has.
      if (grpc) headers['grpc-timeout'] = formatGrpcTimeout(expected);
    }
    const responseHeaders = choice.responseHeaders ? [...choice.responseHeaders, ...route.responseHeaders] : route.responseHeaders;
    return { route, cluster, http2: http2For(cluster, sreq.downstreamH2), responseHeaders, endpoint, path, headers, timeoutMs, attemptCount: action.attemptCount, retry: action.retry, hash, setCookies, encode: undefined };
  }

  /** Sends the request upstream and the response downstream (router-stream.ts), unless the cluster's circuit breaker overflows. */
  forward(req: DownstreamRequest, res: DownstreamResponse, sreq: StreamRequest, target: Target, requestId: string | undefined, grpc: boolean): void {
    const cluster = target.cluster;
    const framing = bodyFraming(req);
    // A chunked HTTP/1.1 request stays chunked upstream, so that request trailers can follow it.
    if (!target.http2 && String(req.headers['transfer-encoding'] ?? '').toLowerCase().includes('chunked')) target.headers['transfer-encoding'] = 'chunked';
    const admitted = cluster.breaker?.admit();
    if (cluster.breaker && !admitted) {
      req.resume();
      cluster.responses?.response(OVERFLOW.status);
      target.route.stats?.response(OVERFLOW.status);
      this.deps.sendLocal(res, OVERFLOW, requestId, grpc);
      return;
    }
    const action = target.route.action;
    if (action.kind === 'route' && action.mirrors.length > 0) teeShadows(req, mirror(this.clusters, action.mirrors, sreq, target.path, target.headers, framing));
    new RouterStream(this.deps, req, res, sreq, target, framing, requestId, grpc, admitted).start();
  }

  /** Forwards an upgrade (e.g. WebSocket): on 101 the two sockets are spliced together. */
  forwardUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer, sreq: StreamRequest, target: Target, requestId: string | undefined): void {
    const sendLocalRaw = this.deps.sendLocalRaw;
    const { cluster, endpoint, path, headers } = target;
    // An upgrade is a request of its cluster's while it lasts, as in Envoy's HTTP/1.1 pool: over
    // max_requests it is 503 UO, and its admission is held until the connection closes.
    const admitted = cluster.breaker?.admit();
    if (cluster.breaker && !admitted) {
      cluster.responses?.response(OVERFLOW.status);
      sendLocalRaw(socket, OVERFLOW, requestId);
      socket.end();
      return;
    }
    if (admitted) socket.once('close', admitted);
    headers.connection = 'Upgrade';
    headers.upgrade = req.headers.upgrade;
    // An upgraded connection leaves the pool for good: its own socket, made as the cluster makes
    // them (transport socket, PROXY header, original source, connect timeout), offering the ALPN
    // override of HTTP/1.1, the protocol an upgrade speaks.
    const options = { source: originalSrcOf(req.socket), alpn: sreq.alpnOverride?.get('http/1.1'), downstream: sreq };
    const opened = cluster.tcp.connect(endpoint, options);
    const info = sreq.streamInfo;
    info?.upstreamAttempt(cluster.name, endpoint, 1);
    const upstream = httpRequest({ method: sreq.method, path, headers, createConnection: () => opened.socket });
    const kill = (): void => {
      upstream.destroy();
      socket.destroy();
    };
    socket.on('error', kill);
    // Closed before the 101 (the client went away, a stream timeout answered): the upstream request is abandoned.
    socket.once('close', kill);
    upstream.on('error', (e) => {
      log.debug(`upgrade to ${cluster.name} ${endpoint.host}:${endpoint.port} failed: ${e.message}`);
      if (socket.writable) {
        sendLocalRaw(socket, upstreamReset(e, false), requestId);
      }
    });
    upstream.on('upgrade', (up, upSocket, upHead) => {
      // The 101 goes out as received, Connection/Upgrade included.
      info?.upstreamResponse(up.statusCode ?? 101, up.headers, upSocket);
      socket.write(rawHead(up.statusCode ?? 101, up.statusMessage ?? '', up.headersDistinct as Record<string, string[]>));
      if (upHead.length > 0) socket.write(upHead);
      if (head.length > 0) upSocket.write(head);
      upSocket.on('error', kill);
      // Half-closes propagate through the pipes; once either side is fully closed, so is the other.
      upSocket.on('close', () => socket.destroy());
      socket.on('close', () => upSocket.destroy());
      upSocket.pipe(socket);
      socket.pipe(upSocket);
    });
    upstream.on('response', (up) => {
      // The upstream declined the upgrade: relay its answer and close.
      const out: OutgoingHttpHeaders = { ...endToEndHeaders(up), connection: 'close' };
      info?.upstreamResponse(up.statusCode ?? 502, out, up.socket);
      socket.write(rawHead(up.statusCode ?? 502, up.statusMessage ?? '', out));
      up.pipe(socket);
    });
    upstream.end();
  }
}
