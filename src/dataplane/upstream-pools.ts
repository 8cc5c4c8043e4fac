// How the router reaches an upstream cluster: the cluster's endpoints and its HTTP/1.1 connection
// pools (the proxy's own client, node:http and undici; HTTP/2 sessions: http2-pool.ts), every
// connection within its connect timeout. The cluster manager (clusters.ts) builds these from CDS/EDS.
import { Agent, type ClientRequest, type ClientRequestArgs } from 'node:http';
import { createConnection, type NetConnectOpts, type Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import type { buildConnector } from 'undici';
import type { Address, RequestView } from '../envoy/request.js';
import type { Metadata } from '../gen/envoy/config/core/v3/base_pb.js';
import type { CircuitBreaker, OutlierOutcome } from './cluster-health.js';
import type { ResponseStats } from './response-stats.js';
import { bindsOriginalSrc, originalSrcSocket, type OriginalSource } from './original-src.js';
import type { UpstreamTransport } from './tls/transport-sockets.js';
import { writeProxyProtocolHeader, type DownstreamAddresses } from './tls/proxy-protocol.js';
import { ConnectionList } from './http1/connection-list.js';
import { DEFAULT_CONNECTION_LIMITS, type ConnectionLimits, type PoolCloses } from './connection-limits.js';
import type { Http2Pool } from './http2-pool.js';
import { undiciPool, type Pool } from './undici-pool.js';
import type { ConnectionEnds } from './upstream-cx-stats.js';
import { followUndici, LentConnections } from './lent-connections.js';
import { RequestGauges } from './upstream-rq-stats.js';
import type { StatCounter } from './stats.js';
import type { TcpPool } from './tcp-pool.js';
import { applyTcpKeepalive, type TcpKeepaliveSpec } from './tcp-keepalive.js';

export interface Endpoint {
  readonly host: string;
  readonly port: number;
  /** Its priority level, for an endpoint of a cluster's load assignment. */
  readonly priority?: number;
}

export interface UpstreamCluster {
  readonly name: string;
  /** The cluster's metadata (the stats filter reads its `mesh.services`). */
  readonly metadata?: Metadata | undefined;
  /**
   * The endpoint for this request (the cluster's load balancing), or undefined: no healthy upstream.
   * `hash` (the route's hash policy) is called only by a consistent-hash balancer, as Envoy's
   * balancers ask for the hash key; `excludedPriorities`: levels a retry leaves out (previous_priorities).
   */
  pick(req: RequestView, hash?: () => bigint | undefined, excludedPriorities?: ReadonlySet<number>): Endpoint | undefined;
  /** The cluster's HTTP/1.1 connections; keep-alive, so upstream connections are reused. */
  readonly http1: Http1Pool;
  /** The cluster's raw (TCP proxy) connections. */
  readonly tcp: TcpPool;
  /** Present when the cluster's protocol options ask for HTTP/2: requests go over its sessions. */
  readonly http2?: Http2Pool;
  /** use_downstream_protocol_config: only requests that came over HTTP/2 go over `http2`. */
  readonly followsDownstream?: boolean;
  /** The cluster's circuit breakers (absent: no limits). */
  readonly breaker?: CircuitBreaker;
  /** Counts an active request (HTTP attempt, TCP connection) on the endpoint until the returned release is called. */
  begin?(endpoint: Endpoint): () => void;
  /** An attempt's outcome for outlier detection: its HTTP status, 'failure' (no response) or 'connected' (a TCP proxy's connection was made). */
  report?(endpoint: Endpoint, outcome: OutlierOutcome): void;
  /** What the router charges per response and retry decision: the cluster's upstream_rq_<code>, _retry, upstream_rq_time (absent: not counted). */
  readonly responses?: ResponseStats;
  /** The route timeout or an attempt's per-try timeout expired (counted as Envoy's upstream_rq_timeout, upstream_rq_per_try_timeout). */
  timedOut?(kind: UpstreamTimeout): void;
  /** The endpoint's transport socket (TLS, PROXY protocol), from the cluster's transport_socket(_matches); undefined: plaintext. */
  transportOf?(endpoint: Endpoint): UpstreamTransport | undefined;
}

export type UpstreamTimeout = 'route' | 'perTry';

/** The HTTP/2 sessions a request goes over, or undefined: HTTP/1.1 (`downstreamH2`: the request came over HTTP/2). */
export function http2For(cluster: UpstreamCluster, downstreamH2: boolean): Http2Pool | undefined {
  return cluster.followsDownstream && !downstreamH2 ? undefined : cluster.http2;
}

/** How an endpoint's connections are made; undefined: plaintext. */
export type TransportOf = (endpoint: Endpoint) => UpstreamTransport | undefined;

/**
 * What of the downstream side a new upstream connection is made with, as Envoy's transport socket
 * options: the original source (original_src), the ALPN override of `mesh.alpn`, the downstream
 * connection's addresses (a PROXY protocol header's). Connections of other options are not shared.
 */
export interface UpstreamOptions {
  readonly source?: OriginalSource;
  readonly alpn?: readonly string[];
  readonly downstream?: DownstreamAddresses;
}

/**
 * The options as a connection to an endpoint of `transport` uses them, as Envoy's socket factories
 * hash only what they read: the ALPN override applies to mesh mTLS only (UpstreamTls.alpnFor), the
 * downstream addresses only under a PROXY protocol header.
 */
export function optionsFor(transport: UpstreamTransport | undefined, o: UpstreamOptions): UpstreamOptions {
  const alpn = transport?.tls?.alpnFor(o.alpn);
  const d = transport?.proxyProtocol ? o.downstream : undefined;
  // The common case (no original source, ALPN override or header) on every request: no object made.
  if (!o.source && !alpn && !d) return NO_OPTIONS;
  // The addresses are copied: the pool keeps its options while it has connections, not the request they came from.
  return { ...(o.source ? { source: o.source } : {}), ...(alpn ? { alpn } : {}), ...(d ? { downstream: { source: d.source, destination: d.destination } } : {}) };
}

const NO_OPTIONS: UpstreamOptions = {};

/** A cluster's settings its pools read on each use, so that an update applies to open pools. */
export interface PoolSettings {
  /** 0: none. */
  readonly connectTimeoutMs: number;
  readonly connection: ConnectionLimits;
  /** Streams an HTTP/2 session carries at once before the pool opens another (0 or unset: no limit of ours). */
  readonly maxConcurrentStreams?: number;
  /** upstream_connection_options.tcp_keepalive; unset: no keepalive of the cluster's. */
  readonly tcpKeepalive?: TcpKeepaliveSpec;
}

/** What opening a connection counts (openUpstream). */
export interface OpenCounters {
  /**
   * A new connection (upstream_cx_total; upstream_cx_active until it closes; its bytes;
   * upstream_cx_connect_fail if it closes before `ready`).
   */
  opened(socket: Socket, ready: OpenedUpstream['ready']): void;
  /** A connection that did not connect in time (upstream_cx_connect_timeout). */
  connectTimeout(): void;
}

/** The cluster's counters a pool bumps (upstream-cx-stats.ts). */
export interface PoolCounters extends PoolCloses, ConnectionEnds, OpenCounters {}

/** What a cluster gives its pools; each part has a default (no timeout, Envoy's limits, plaintext, no counters). */
export interface PoolOptions {
  readonly settings?: () => PoolSettings;
  readonly transportOf?: TransportOf;
  readonly count?: Partial<PoolCounters>;
  /** The cluster's request gauges (upstream-rq-stats.ts). */
  readonly requests?: RequestGauges;
}

const UNSET: PoolSettings = { connectTimeoutMs: 0, connection: DEFAULT_CONNECTION_LIMITS };
const NOTHING = (): void => {};

/** What every pool of a cluster keeps of its options, defaults filled in. */
export abstract class ClusterPool {
  protected readonly settings: () => PoolSettings;
  protected readonly transportOf: TransportOf;
  protected readonly count: PoolCounters;
  protected readonly requests: RequestGauges;

  constructor(o: PoolOptions = {}) {
    const c = o.count ?? {};
    this.settings = o.settings ?? (() => UNSET);
    this.transportOf = o.transportOf ?? (() => undefined);
    this.requests = o.requests ?? new RequestGauges();
    this.count = {
      opened: c.opened ?? NOTHING,
      connectTimeout: c.connectTimeout ?? NOTHING,
      idleTimeout: c.idleTimeout ?? NOTHING,
      maxRequests: c.maxRequests ?? NOTHING,
      maxDuration: c.maxDuration ?? NOTHING,
      destroyed: c.destroyed ?? NOTHING,
    };
  }
}

/** A new upstream connection and the event that says it can carry requests. */
export interface OpenedUpstream {
  readonly socket: Socket;
  readonly ready: 'connect' | 'secureConnect';
}

/**
 * A counted connection to `ep` with its transport: the TCP socket, or the TLS client over it,
 * within the cluster's connect timeout and with its TCP keepalive, a PROXY protocol header first
 * when the transport has one. `ready` is `connect`, or `secureConnect` once verified; `o` are the
 * options as optionsFor gives them (`alpn` replaces the transport's configured ALPN).
 */
export function openUpstream(
  ep: Endpoint,
  transport: UpstreamTransport | undefined,
  settings: PoolSettings,
  count: OpenCounters,
  netOptions: Partial<NetConnectOpts> = {},
  o: UpstreamOptions = {},
): OpenedUpstream {
  const tcp = connectWithin({ ...netOptions, host: ep.host, port: ep.port } as NetConnectOpts, settings.connectTimeoutMs, count.connectTimeout, o.source);
  tcp.setNoDelay(true);
  if (transport?.proxyProtocol) writeProxyProtocolHeader(tcp, transport.proxyProtocol, o.downstream);
  const keepalive = settings.tcpKeepalive;
  if (keepalive) tcp.once('connect', () => applyTcpKeepalive(tcp, keepalive));
  const tls = transport?.tls;
  const opened: OpenedUpstream = tls ? { socket: tls.wrap(tcp, o.alpn), ready: 'secureConnect' } : { socket: tcp, ready: 'connect' };
  count.opened(opened.socket, opened.ready);
  return opened;
}

/**
 * A TCP connection that fails (and calls `onTimeout`) unless it connects within `ms` (0 = no limit);
 * from `source` (original_src) when given and the proxy can bind it.
 */
export function connectWithin(options: NetConnectOpts, ms: number, onTimeout: () => void, source?: OriginalSource): Socket {
  const host = (options as { host?: string }).host ?? '';
  const bound = source && bindsOriginalSrc(source, host) ? originalSrcSocket(source, { allowHalfOpen: options.allowHalfOpen }) : undefined;
  const socket = bound ? bound.connect(options) : createConnection(options);
  if (ms > 0) {
    const timer = setTimeout(() => {
      onTimeout();
      socket.destroy(new Error(`connect timeout after ${ms}ms`));
    }, ms);
    const clear = (): void => clearTimeout(timer);
    socket.once('connect', clear);
    socket.once('close', clear);
  }
  return socket;
}

/** `host:port`, `[v6]:port` for IPv6 literals. */
export function hostPort(ep: Endpoint): string {
  return ep.host.includes(':') ? `[${ep.host}]:${ep.port}` : `${ep.host}:${ep.port}`;
}

/**
 * Connections are shared per endpoint and options (optionsFor): original source (none: the
 * proxy's own address), ALPN override (none: the transport's own) and downstream connection (a
 * PROXY protocol header's addresses, ports included), as Envoy hashes the transport socket
 * options into its pools.
 */
export function poolKey(ep: Endpoint, o: UpstreamOptions): string {
  const at = (a: Address) => hostPort({ host: a.address, port: a.port });
  const downstream = o.downstream ? ` for ${at(o.downstream.source)}>${at(o.downstream.destination)}` : '';
  return `${hostPort(ep)}${o.source ? ` from ${o.source.address}` : ''}${o.alpn ? ` alpn ${o.alpn.join(',')}` : ''}${downstream}`;
}

/** A node:http keep-alive agent sized for a proxy, whose new connections follow the pool's connect rules. */
class UpstreamAgent extends Agent {
  constructor(private readonly connectTo: (options: NetConnectOpts) => Socket) {
    super({ keepAlive: true, maxSockets: Infinity, maxFreeSockets: 256, scheduling: 'lifo' });
  }

  override createConnection(options: ClientRequestArgs): Duplex {
    return this.connectTo(options as NetConnectOpts);
  }

  /** Lets in-flight requests finish but keeps no connection. */
  retire(): void {
    this.on('free', (socket) => socket.destroy());
    for (const list of Object.values(this.freeSockets)) for (const s of list ?? []) s.destroy();
  }
}

/**
 * A cluster's HTTP/1.1 connections: the proxy's own keep-alive connections per endpoint
 * (http1/client.ts; unbounded, no timeouts of their own: the route's timeout applies) for requests
 * whose body has a known length or none, a node:http agent for chunked and `Expect` requests, and
 * an undici pool per endpoint for the ext_authz HTTP check. Every connection is counted as it opens
 * and as it ends (upstream-cx-stats.ts), and gives up after the connect timeout.
 */
export class Http1Pool extends ClusterPool {
  readonly agent: UpstreamAgent;
  /** The keep-alive agents of requests with an ALPN override, by that ALPN. */
  private readonly alpnAgents = new Map<string, UpstreamAgent>();
  private readonly pools = new Map<string, Pool>();
  private readonly lists = new Map<string, ConnectionList>();
  private retired = false;
  private readonly lent: LentConnections;

  constructor(options: PoolOptions = {}) {
    super(options);
    this.lent = new LentConnections(this.count, this.requests);
    this.agent = new UpstreamAgent((o) => this.connectLent(o).socket);
  }

  /** Counts a node:http request (on the agent, or on its own connection) in the cluster's request gauges (and `routeTotal`, its route's). */
  follow(req: ClientRequest, routeTotal?: StatCounter): void {
    this.lent.follow(req, routeTotal);
  }

  /** The undici pool of an endpoint and options (optionsFor: its connections are made with them), made on first use. */
  pool(ep: Endpoint, options: UpstreamOptions = {}): Pool {
    const o = optionsFor(this.transportOf(ep), options);
    const key = poolKey(ep, o);
    const existing = this.pools.get(key);
    if (existing) return existing;
    const UndiciPool = undiciPool();
    followUndici();
    const pool = new UndiciPool(`http://${hostPort(ep)}`, { connections: null, headersTimeout: 0, bodyTimeout: 0, connect: this.connector(ep, o) });
    // A retired pool serves the request it is asked for, then closes once that is done.
    if (this.retired) setImmediate(() => void pool.close());
    else this.pools.set(key, pool);
    return pool;
  }

  /**
   * The keep-alive connections of the proxy's own HTTP/1.1 client (http1/client.ts) to an
   * endpoint, per options as the undici pools; a list is kept while it has connections.
   */
  connections(ep: Endpoint, options: UpstreamOptions = {}): ConnectionList {
    const o = optionsFor(this.transportOf(ep), options);
    const key = poolKey(ep, o);
    const existing = this.lists.get(key);
    if (existing) return existing;
    const list: ConnectionList = new ConnectionList(() => this.connect({ host: ep.host, port: ep.port }, o), () => this.settings().connection, this.count, this.requests, {
      joined: () => {
        // A retired pool serves the request it is asked for; the connection closes once that is done.
        if (this.retired) list.retire();
        else if (!this.lists.has(key)) this.lists.set(key, list);
      },
      left: () => {
        if (this.lists.get(key) === list) this.lists.delete(key);
      },
    });
    return list;
  }

  /** In-flight requests finish; no connection is kept or opened for reuse. */
  retire(): void {
    this.retired = true;
    for (const l of this.lists.values()) l.retire();
    this.lists.clear();
    this.agent.retire();
    for (const a of this.alpnAgents.values()) a.retire();
    for (const p of this.pools.values()) void p.close();
    this.pools.clear();
  }

  destroy(): void {
    for (const l of this.lists.values()) l.destroy();
    this.lists.clear();
    this.agent.destroy();
    for (const a of this.alpnAgents.values()) a.destroy();
    this.alpnAgents.clear();
    for (const p of this.pools.values()) void p.destroy();
    this.pools.clear();
  }

  /**
   * node:http options for a request to `ep`: the keep-alive agent, or, from an original source or
   * for a downstream connection's PROXY header, a connection of the request's own (the agent's
   * pooling knows nothing of either).
   */
  requestOptions(ep: Endpoint, options: UpstreamOptions = {}): Pick<ClientRequestArgs, 'agent' | 'createConnection'> {
    const o = optionsFor(this.transportOf(ep), options);
    if (o.source || o.downstream) return { agent: false, createConnection: () => this.connectLent({ host: ep.host, port: ep.port }, o).socket };
    return { agent: o.alpn ? this.agentFor(o.alpn) : this.agent };
  }

  private agentFor(alpn: readonly string[]): UpstreamAgent {
    const key = alpn.join(',');
    let agent = this.alpnAgents.get(key);
    if (!agent) {
      agent = new UpstreamAgent((options) => this.connectLent(options, { alpn }).socket);
      if (this.retired) agent.retire();
      this.alpnAgents.set(key, agent);
    }
    return agent;
  }

  /** `o` as optionsFor gave them for the endpoint. */
  private connect(options: NetConnectOpts, o: UpstreamOptions = {}): OpenedUpstream {
    const ep = { host: (options as { host?: string }).host ?? 'localhost', port: Number((options as { port?: number | string }).port) };
    return openUpstream(ep, this.transportOf(ep), this.settings(), this.count, options, o);
  }

  /** A connection lent to node:http or undici, which keep its requests to themselves (lent-connections.ts). */
  private connectLent(options: NetConnectOpts, o: UpstreamOptions = {}): OpenedUpstream {
    const opened = this.connect(options, o);
    this.lent.lend(opened, this.settings().connection.maxDurationMs);
    return opened;
  }

  /** undici's connector: our socket (counted, connect timeout, TLS when the endpoint's transport says so), handed over once ready. */
  private connector(ep: Endpoint, o: UpstreamOptions): buildConnector.connector {
    return (_options, callback) => {
      const { socket, ready } = this.connectLent({ host: ep.host, port: ep.port }, o);
      const settle = (e?: Error): void => {
        socket.off(ready, settle);
        socket.off('error', settle);
        if (e) callback(e, null);
        else callback(null, socket);
      };
      socket.once(ready, settle);
      socket.once('error', settle);
    };
  }
}
