// The HTTP connection manager: an HttpConnectionManager message compiled into a request handler
// for node:http and node:http2 (compatibility API) servers that sets the x-forwarded-* /
// x-request-id headers as Envoy does, runs the configured http_filters in order (found by type URL
// in filters/registry.ts: jwt_authn -> rbac -> ...) and ends in the router (filters/router.ts),
// which forwards to the upstream picked through the injected cluster manager.
import type { IncomingMessage } from 'node:http';
import { BlockList, isIPv4, isIPv6, type Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import type { TLSSocket } from 'node:tls';
import type { StatCounter } from './stats.js';
import type { RouteStatsStore } from './route-stats.js';
import { scope } from '../common/log.js';
import type { FilterChain } from '../gen/envoy/config/listener/v3/listener_components_pb.js';
import {
  HttpConnectionManager_CodecType,
  HttpConnectionManagerSchema,
  type HttpConnectionManager,
} from '../gen/envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager_pb.js';
import type { ClusterManager } from './clusters.js';
import { unpackConfig } from './extensions.js';
import { ConfigError } from '../envoy/config-error.js';
import { unappliedHcmFields } from './hcm-unapplied.js';
import { HCM_FILTER_NAME } from '../envoy/names.js';
import { typeNameOf, typeUrlOf } from '../envoy/types.js';
import type { HttpFilter, LocalReply } from '../envoy/filter.js';
import type { JwtAuthnOptions } from '../envoy/jwt-authn.js';
import { normalizeIp } from '../envoy/matchers.js';
import { RequestHeaders, StreamRequest, type Address } from '../envoy/request.js';
import './filters/index.js';
import { compileHttpFilter, httpFilterOf, type FilterStats, type FilterTelemetry, type HttpFilterContext } from './filters/registry.js';
import type { StreamInfo } from './access-log/record.js';
import { Router, type Target } from './filters/router.js';
import { copyRequestHeaders, isGrpc, requestAuthority, requestComplete, type DownstreamRequest, type DownstreamResponse } from './http-codec.js';
import { connectionDestination } from './original-dst.js';
import { randomRequestId } from './request-id.js';
import { peerIdentityOf } from './tls/peer.js';
import { compileXfcc } from './tls/xfcc.js';
import { closeAfterReply, closeUnreadRequest, absoluteTarget, codecErrorReply, refuseHead, requestLimits, timeoutFlag, timeoutReply, type RequestLimits, type StreamTimeout } from './request-guards.js';
import { compileRouteConfiguration, stripHostPort, type CompiledRoute, type RouteTable } from './route-table.js';
import { decodeFrom, type Encoders } from './decode-filters.js';
import { streamTimersOf, type StreamTimerHost } from './route-timeouts.js';
import { compilePathNormalization } from './path-normalization.js';
import { localReplies, type LocalReplies } from './local-replies.js';
import { compileAccessLogs, withStreamHandlers, type AccessLogs } from './access-log/access-logs.js';
import { logHttpStream, logUnparsedRequest, logUpgradeStream, recordLocalReply, streamInfoOf } from './access-log/http-stream.js';

const log = scope('http');

/** Private, loopback and link-local ranges: Envoy's default notion of an internal client. */
const INTERNAL = (() => {
  const b = new BlockList();
  for (const [net, len] of [['10.0.0.0', 8], ['172.16.0.0', 12], ['192.168.0.0', 16], ['127.0.0.0', 8], ['169.254.0.0', 16]] as const) b.addSubnet(net, len, 'ipv4');
  for (const [net, len] of [['::1', 128], ['fc00::', 7], ['fe80::', 10]] as const) b.addSubnet(net, len, 'ipv6');
  return b;
})();

function isInternal(ip: string): boolean {
  return isIPv4(ip) ? INTERNAL.check(ip, 'ipv4') : isIPv6(ip) && INTERNAL.check(ip, 'ipv6');
}

export interface HcmDeps {
  readonly clusters: ClusterManager;
  /** RDS: the current route table of that name, undefined until it has arrived (requests get 404). */
  readonly routes?: (name: string) => RouteTable | undefined;
  readonly jwt?: JwtAuthnOptions;
  /** The listener's port, for strip_matching_host_port. */
  readonly listenerPort?: number;
  /** The connection manager's own counters, `http.<stat_prefix>.<stat>`. */
  readonly counter?: (stat: string) => StatCounter;
  /** Where the inline route configuration keeps the stats of routes with a stat_prefix. */
  readonly stats?: RouteStatsStore;
  /** The node, the listener's direction and the stats store, for the telemetry filters. */
  readonly telemetry?: FilterTelemetry;
}

export type { FilterStats };

/** The downstream protocols a connection manager speaks (its codec_type). */
export type Codec = 'auto' | 'http1' | 'http2';

export interface HttpConnectionManagerHandler {
  readonly statPrefix: string;
  readonly filterStats: readonly FilterStats[];
  readonly codec: Codec;
  /** Header limits and delayed close (request-guards.ts), which the hosting servers apply too. */
  readonly limits: RequestLimits;
  /**
   * Serves one request of a node:http server or a node:http2 compatibility server ('request'
   * event); `connection` is the downstream socket when `req.socket` does not stand for it.
   */
  handle(req: DownstreamRequest, res: DownstreamResponse, connection?: Socket, timers?: StreamTimerHost): void;
  /** Serves an upgrade request (the server's 'upgrade' event), e.g. WebSocket. */
  handleUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer, timers?: StreamTimerHost): void;
  /**
   * Ends a stream whose timeout expired (listener/stream-timeouts.ts), as Envoy: the timeout's
   * local reply while the response has not started (the rest of an unfinished request is not
   * read), else a reset (HTTP/1.1: the connection closes).
   */
  timeout(kind: StreamTimeout, res: DownstreamResponse): void;
  /** The same for an HTTP/1.1 request whose head has not all arrived: the local reply (408), then the connection closes. */
  timeoutHead(kind: StreamTimeout, socket: Duplex): void;
  /** An HTTP/1.1 head the parser refused (node's error `code`): Envoy's codec error reply (DPE), then the connection closes. */
  protocolError(code: string | undefined, socket: Duplex): void;
}

/** The HttpConnectionManager of a listener filter chain (the chain's last, terminal filter). */
export function httpConnectionManagerOf(chain: FilterChain): HttpConnectionManager | undefined {
  for (const [i, f] of chain.filters.entries()) {
    const c = f.configType;
    if (c.case === 'typedConfig' && c.value.typeUrl === typeUrlOf(HttpConnectionManagerSchema)) {
      return unpackConfig(c.value, HttpConnectionManagerSchema, `filters[${i}].typed_config`);
    }
  }
  return undefined;
}

/** Builds the handler for a listener filter chain; throws ConfigError if it has no HCM. */
export function buildHcmForFilterChain(chain: FilterChain, deps: HcmDeps): HttpConnectionManagerHandler {
  const hcm = httpConnectionManagerOf(chain);
  if (!hcm) throw new ConfigError('filters', `no ${HCM_FILTER_NAME} in the filter chain`);
  return buildHttpConnectionManager(hcm, deps);
}

interface CompiledChain {
  readonly filters: readonly HttpFilter[];
  readonly stats: FilterStats[];
  /** The filters told of every ended stream (the stats filter). */
  readonly streamEnded: ((info: StreamInfo) => void)[];
}

function compileHttpFilters(hcm: HttpConnectionManager, deps: HcmDeps): CompiledChain {
  const filters: HttpFilter[] = [];
  const stats: FilterStats[] = [];
  const streamEnded: ((info: StreamInfo) => void)[] = [];
  const ctx: HttpFilterContext = { clusters: deps.clusters, ...(deps.jwt ? { jwt: deps.jwt } : {}), ...(deps.telemetry ? { telemetry: deps.telemetry } : {}) };
  let sawRouter = false;
  hcm.httpFilters.forEach((f, i) => {
    const field = `http_filters[${i}]`;
    if (sawRouter) throw new ConfigError(field, `${f.name} comes after the router, which must be the last filter`);
    if (f.disabled) return;
    const c = f.configType;
    if (c.case !== 'typedConfig') throw new ConfigError(field, 'typed_config is required (config_discovery is not supported)');
    const factory = httpFilterOf(c.value.typeUrl);
    if (!factory) {
      const typeName = typeNameOf(c.value.typeUrl);
      if (f.isOptional) {
        log.warn(`${field}: skipping optional filter ${f.name} of unsupported type ${typeName}`);
        return;
      }
      throw new ConfigError(`${field}.typed_config`, `filter type ${typeName} is not supported`);
    }
    if (factory.terminal) {
      sawRouter = true;
      return;
    }
    const compiled = compileHttpFilter(factory, c.value, f.name, `${field}.typed_config`, ctx);
    if (compiled.filter) filters.push(compiled.filter);
    if (compiled.stats) stats.push(compiled.stats);
    if (compiled.streamEnded) streamEnded.push(compiled.streamEnded);
  });
  if (!sawRouter) throw new ConfigError('http_filters', 'the router (envoy.extensions.filters.http.router.v3.Router) must be the last filter');
  return { filters, stats, streamEnded };
}

function codecOf(hcm: HttpConnectionManager): Codec {
  switch (hcm.codecType) {
    case HttpConnectionManager_CodecType.AUTO:
      return 'auto';
    case HttpConnectionManager_CodecType.HTTP1:
      return 'http1';
    case HttpConnectionManager_CodecType.HTTP2:
      return 'http2';
    default:
      throw new ConfigError('codec_type', `${HttpConnectionManager_CodecType[hcm.codecType] ?? hcm.codecType} is not supported; use AUTO, HTTP1 or HTTP2`);
  }
}

/**
 * The local replies, each recorded on its stream's access log record first when the connection
 * manager logs; without access logs, the replies as they are.
 */
function recordedReplies(replies: LocalReplies, logs: AccessLogs | undefined): LocalReplies {
  if (!logs) return replies;
  const { sendLocal, sendLocalRaw } = replies;
  return {
    ...replies,
    sendLocal(res, reply, requestId, grpc) {
      recordLocalReply(res, reply);
      sendLocal(res, reply, requestId, grpc);
    },
    sendLocalRaw(socket, reply, requestId) {
      recordLocalReply(socket, reply);
      sendLocalRaw(socket, reply, requestId);
    },
  };
}

/** Compiles an HttpConnectionManager; throws ConfigError (-> NACK) on what it cannot honour. */
export function buildHttpConnectionManager(hcm: HttpConnectionManager, deps: HcmDeps): HttpConnectionManagerHandler {
  const codec = codecOf(hcm);
  const limits = requestLimits(hcm);
  const chain = compileHttpFilters(hcm, deps);
  const unapplied = unappliedHcmFields(hcm);
  const xfcc = compileXfcc(hcm);
  if (unapplied.length > 0) log.warn(`connection manager ${JSON.stringify(hcm.statPrefix)}: accepted but not applied yet: ${unapplied.join(', ')}`);
  const stripPort: 'any' | number | undefined =
    hcm.stripPortMode.case === 'stripAnyHostPort' && hcm.stripPortMode.value
      ? 'any'
      : hcm.stripMatchingHostPort && deps.listenerPort !== undefined
        ? deps.listenerPort
        : undefined;
  let routeTable: () => RouteTable | undefined;
  const rs = hcm.routeSpecifier;
  if (rs.case === 'routeConfig') {
    const table = compileRouteConfiguration(rs.value, { stats: deps.stats });
    routeTable = () => table;
  } else if (rs.case === 'rds') {
    const name = rs.value.routeConfigName;
    const lookup = deps.routes;
    if (!lookup) throw new ConfigError('rds', 'RDS is not available to this connection manager');
    routeTable = () => lookup(name);
  } else {
    throw new ConfigError('route_specifier', 'route_config or rds is required (scoped_routes is not supported)');
  }
  const normalizePath = compilePathNormalization(hcm);
  const useRemoteAddress = hcm.useRemoteAddress ?? false;
  const trustedHops = hcm.xffNumTrustedHops;
  const generateRequestId = hcm.generateRequestId ?? true;
  const serverName = hcm.serverName || 'mesh-proxy';
  const upgrades = new Map(
    hcm.upgradeConfigs.map((u, i) => {
      if (u.filters.length > 0) throw new ConfigError(`upgrade_configs[${i}].filters`, 'a separate filter chain for upgrades is not supported');
      return [u.upgradeType.toLowerCase(), u.enabled ?? true] as const;
    }),
  );

  const accessLogs = withStreamHandlers(compileAccessLogs(hcm.accessLog), chain.streamEnded);
  const { sendLocal, writeLocal, sendLocalRaw, responseStarts } = recordedReplies(
    localReplies({
      serverName,
      alwaysSetRequestIdInResponse: hcm.alwaysSetRequestIdInResponse,
      limits,
      ...(deps.counter ? { beforeRequestComplete: deps.counter('downstream_rq_response_before_rq_complete') } : {}),
    }),
    accessLogs,
  );

  const router = new Router({
    clusters: deps.clusters,
    routeTable,
    upgrades,
    serverName,
    alwaysSetRequestIdInResponse: hcm.alwaysSetRequestIdInResponse,
    sendLocal,
    sendLocalRaw,
    responseStarts,
  });

  function streamRequest(req: DownstreamRequest, connection?: Socket): StreamRequest {
    const socket = connection ?? req.socket;
    const tls = (socket as Partial<TLSSocket>).encrypted === true;
    const scheme = tls ? 'https' : 'http';
    const headers = new RequestHeaders();
    copyRequestHeaders(req, headers);
    const source: Address = { address: normalizeIp(socket.remoteAddress ?? ''), port: socket.remotePort ?? 0 };
    const destination = connectionDestination(socket);
    // The client address: the connection peer, or (not using it) the trusted entry of x-forwarded-for.
    let remote = source;
    const xff = headers.joined('x-forwarded-for');
    if (!useRemoteAddress && xff) {
      const hops = xff.split(',').map((s) => s.trim()).filter(Boolean);
      const candidate = hops[hops.length - 1 - trustedHops];
      if (candidate && (isIPv4(candidate) || isIPv6(candidate))) remote = { address: candidate, port: 0 };
    }
    if (useRemoteAddress && !hcm.skipXffAppend) headers.set('x-forwarded-for', xff ? `${xff},${source.address}` : source.address);
    if (trustedHops === 0 || !headers.has('x-forwarded-proto')) headers.set('x-forwarded-proto', scheme);
    xfcc(headers, socket);
    if (generateRequestId) {
      const external = useRemoteAddress && !isInternal(remote.address);
      if (!headers.has('x-request-id') || (external && !hcm.preserveExternalRequestId)) headers.set('x-request-id', randomRequestId());
    }
    // The absolute form (`GET http://host/path`): its host is the authority, its path the path.
    const absolute = absoluteTarget(req.url ?? '/');
    let authority = absolute?.authority ?? requestAuthority(req);
    if (stripPort !== undefined) authority = stripHostPort(authority, stripPort === 'any' ? undefined : stripPort);
    const sreq = new StreamRequest(req.method ?? 'GET', absolute?.path ?? req.url ?? '/', authority, scheme, headers, source, remote, destination, tls ? ((socket as TLSSocket).servername || '') : '', peerIdentityOf(socket));
    sreq.downstreamH2 = req.httpVersionMajor === 2;
    return sreq;
  }

  /**
   * Everything before the upstream: path normalization, route lookup (cached, as Envoy does, before the filters),
   * upgrade admission, the filters in order (decode-filters.ts), then the router's target (or its local reply).
   */
  function admit(sreq: StreamRequest, upgrade: string | undefined, reply: (r: LocalReply) => void, timers?: StreamTimerHost, stream?: DownstreamResponse | Duplex, grpc = false): Target | undefined | Promise<Target | undefined> {
    const normalized = normalizePath(sreq.path);
    if (normalized.kind === 'reject') {
      reply({ status: 400, body: '', headers: {}, details: normalized.details });
      return undefined;
    }
    if (normalized.kind === 'redirect') {
      reply({ status: 307, body: '', headers: { location: normalized.path }, details: 'path_escaped_slashes_redirect' });
      return undefined;
    }
    sreq.path = normalized.path;
    const route = router.route(sreq);
    if (sreq.streamInfo) sreq.streamInfo.routeName = route?.name;
    if (timers && stream) armStreamTimers(route, sreq, timers, stream, grpc);
    if (upgrade !== undefined && !router.admitUpgrade(route, upgrade, reply)) return undefined;
    return decodeFrom(chain.filters, 0, sreq, route, reply, undefined, toTarget);
  }

  /** The router's target of a request the filters let through, with their encoder sides. */
  function toTarget(sreq: StreamRequest, route: CompiledRoute | undefined, reply: (r: LocalReply) => void, encoders: Encoders | undefined): Target | undefined {
    const target = router.target(sreq, route, encoders ? encoders.reply : reply);
    return target && encoders ? { ...target, encode: encoders.encode } : target;
  }

  /** Once the route is known: the stream's own timers (most routes have none: nothing is done) and, for gRPC, its grpc-timeout as Envoy rewrites it. */
  function armStreamTimers(route: CompiledRoute | undefined, sreq: StreamRequest, timers: StreamTimerHost, stream: DownstreamResponse | Duplex, grpc: boolean): void {
    const timeouts = route?.action.kind === 'route' ? route.action.timeouts : undefined;
    if (!timeouts?.perStream && limits.maxStreamDurationMs === 0) return;
    const t = streamTimersOf(timeouts, limits.maxStreamDurationMs, sreq.headers.joined('grpc-timeout'), grpc);
    if (t.grpcTimeout) sreq.headers.set('grpc-timeout', t.grpcTimeout);
    if (t.timers) timers.arm(stream, t.timers);
  }

  /** Serves one request; a promise only when a filter made it wait. */
  function run(req: DownstreamRequest, res: DownstreamResponse, connection?: Socket, timers?: StreamTimerHost): Promise<void> | undefined {
    const refused = refuseHead(req, limits);
    if (refused) {
      closeUnreadRequest(req, res, limits, true);
      writeLocal(res, refused, undefined, false);
      return undefined;
    }
    const sreq = streamRequest(req, connection);
    if (accessLogs) logHttpStream(accessLogs, sreq, req, res, connection ?? req.socket);
    const requestId = sreq.headers.joined('x-request-id');
    const grpc = isGrpc(sreq.headers.joined('content-type'));
    const admitted = admit(sreq, undefined, (reply) => sendLocal(res, reply, requestId, grpc), timers, res, grpc);
    if (admitted instanceof Promise) return admitted.then((target) => target && router.forward(req, res, sreq, target, requestId, grpc));
    if (admitted) router.forward(req, res, sreq, admitted, requestId, grpc);
    return undefined;
  }

  /** A request whose handling threw: 500. */
  function failed(req: DownstreamRequest, res: DownstreamResponse, e: unknown): void {
    log.error(`request ${req.method} ${req.url} failed: ${(e as Error).message}`);
    sendLocal(res, { status: 500, body: 'internal error', headers: {}, details: 'internal_error' }, undefined, isGrpc(String(req.headers['content-type'] ?? '')));
  }

  async function runUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer, timers?: StreamTimerHost): Promise<void> {
    const sreq = streamRequest(req);
    if (accessLogs) logUpgradeStream(accessLogs, sreq, req, socket);
    const requestId = sreq.headers.joined('x-request-id');
    const upgrade = String(req.headers.upgrade ?? '').toLowerCase();
    const target = await admit(sreq, upgrade, (reply) => sendLocalRaw(socket, reply, requestId), timers, socket);
    if (target) router.forwardUpgrade(req, socket, head, sreq, target, requestId);
  }

  return {
    statPrefix: hcm.statPrefix,
    filterStats: chain.stats,
    codec,
    limits,
    handle(req, res, connection, timers) {
      try {
        // A closure only for a request that waits for a filter.
        run(req, res, connection, timers)?.catch((e: unknown) => failed(req, res, e));
      } catch (e) {
        failed(req, res, e);
      }
    },
    handleUpgrade(req, socket, head, timers) {
      runUpgrade(req, socket, head, timers).catch((e: unknown) => {
        log.error(`upgrade ${req.method} ${req.url} failed: ${(e as Error).message}`);
        socket.destroy();
      });
    },
    timeout(kind, res) {
      if (res.headersSent) {
        log.debug(`stream reset (${kind})`);
        streamInfoOf(res)?.proxyReset(timeoutFlag(kind), kind);
        res.destroy();
        return;
      }
      const req = res.req;
      sendLocal(res, timeoutReply(kind, requestComplete(req)), undefined, isGrpc(String(req.headers['content-type'] ?? '')));
    },
    timeoutHead(kind, socket) {
      answerHead(socket, timeoutReply(kind, false));
    },
    protocolError(code, socket) {
      answerHead(socket, codecErrorReply(code));
    },
  };

  /** A local reply to a request that never became a stream: logged from its connection alone. */
  function answerHead(socket: Duplex, reply: LocalReply): void {
    if (accessLogs) logUnparsedRequest(accessLogs, socket, reply);
    sendLocalRaw(socket, reply);
    closeAfterReply(socket, limits);
  }
}
