// Listeners from LDS: bound TCP sockets whose connections are handed to a filter chain chosen per
// connection (filter-chain-match.ts), either an HTTP connection manager (a node:http server and a
// node:http2 server that never listen themselves; a connection is emitted into the one its codec
// and first bytes call for) or a TCP proxy to a cluster.
//
// An update is two-phase like the other xDS types: `prepare` compiles every listener and binds the
// addresses that are new (a bind failure closes what it bound and is a ConfigError naming the
// address, so the update is NACKed and nothing changed); `commit` swaps the compiled listeners in.
// A listener whose message is unchanged keeps its compiled chains and connections. A changed one
// keeps its socket when the address is the same: new connections get the new chains, connections
// of the old chains drain (responses say `connection: close`, idle ones close, the rest are closed
// after the drain time). A removed listener stops accepting at once and its connections drain.
//
// A `use_original_dst` listener (virtualOutbound, virtualInbound under iptables capture) reads each
// connection's original destination (original-dst.ts) and hands the connection to the listener of
// that address: the one bound on exactly that IP and port, else a wildcard one on that port,
// usually a `bind_to_port: false` listener that exists only to be handed connections. With no
// such listener the connection stays, matched on its original destination. Listeners with
// `bind_to_port: false` are never bound.
import { createServer as createHttpServer, type IncomingMessage, type Server as HttpServer, type ServerResponse } from 'node:http';
import { createServer as createHttp2Server, type Http2ServerRequest, type Http2ServerResponse, type Http2Server, type Http2Session, type ServerHttp2Session } from 'node:http2';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { Duplex } from 'node:stream';
import { equals } from '@bufbuild/protobuf';
import { anyUnpack, type Any } from '@bufbuild/protobuf/wkt';
import { scope } from '../common/log.js';
import { TrafficDirection } from '../gen/envoy/config/core/v3/base_pb.js';
import { ListenerSchema, type Listener } from '../gen/envoy/config/listener/v3/listener_pb.js';
import type { FilterChain } from '../gen/envoy/config/listener/v3/listener_components_pb.js';
import { TcpProxySchema, type TcpProxy } from '../gen/envoy/extensions/filters/network/tcp_proxy/v3/tcp_proxy_pb.js';
import { HttpConnectionManagerSchema } from '../gen/envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager_pb.js';
import type { ClusterManager } from './cluster-manager.js';
import { socketAddressOf } from './clusters.js';
import { ConfigError, unappliedFields } from './config-error.js';
import { compileChainMatch, selectChain, type CompiledChainMatch, type ConnectionFacts } from './filter-chain-match.js';
import type { JwtAuthnOptions } from './filters/jwt-authn.js';
import { buildHcmForFilterChain, type FilterStats } from './http-connection-manager.js';
import { normalizeIp } from './matchers.js';
import { requestView } from './request.js';
import { connectionDestination, originalDstUnavailable, restoreOriginalDst, setTransparent } from './original-dst.js';
import type { Address } from './request.js';
import { durationMs, type RouteTable } from './router.js';
import { statName, type StatCounter, type StatName, type StatSample, type StatsStore } from './stats.js';

const log = scope('conn_handler');

const HTTP_INSPECTOR = 'envoy.extensions.filters.listener.http_inspector.v3.HttpInspector';
const TLS_INSPECTOR = 'envoy.extensions.filters.listener.tls_inspector.v3.TlsInspector';
const ORIGINAL_DST = 'envoy.extensions.filters.listener.original_dst.v3.OriginalDst';
/** Envoy's default listener_filters_timeout. */
const DEFAULT_INSPECT_TIMEOUT_MS = 15_000;
/** http_inspector gives up on a request line longer than this. */
const MAX_INSPECT_BYTES = 8192;
const H2_PREFACE = 'PRI * HTTP/2.0\r\n';
/** The whole HTTP/2 client connection preface (RFC 9113 3.4). */
const H2_CLIENT_PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');

const UNAPPLIED_LISTENER = [
  'additionalAddresses', 'perConnectionBufferLimitBytes', 'socketOptions', 'tcpBacklogSize', 'connectionBalanceConfig',
  'enableReusePort', 'accessLog', 'udpListenerConfig', 'apiListener', 'freebind', 'tcpFastOpenQueueLength',
  'maxConnectionsToAcceptPerSocketEvent', 'drainType',
];
const UNAPPLIED_TCP_PROXY = ['idleTimeout', 'downstreamIdleTimeout', 'upstreamIdleTimeout', 'accessLog', 'maxConnectAttempts', 'hashPolicy', 'tunnelingConfig', 'metadataMatch', 'onDemand', 'maxDownstreamConnectionDuration'];

export interface ListenerDeps {
  readonly clusters: ClusterManager;
  /** RDS: the current route table of that name. */
  readonly routes: (name: string) => RouteTable | undefined;
  readonly jwt?: JwtAuthnOptions;
  readonly stats: StatsStore;
  /** How long the connections of a removed or changed listener may take to finish (--drain-time-s). */
  readonly drainTimeMs: number;
  /**
   * A worker process binds nothing: the server of an address is one its connections are emitted
   * on, as the main process hands them over (workers.ts).
   */
  readonly handedSocket?: (key: string) => Server;
  /**
   * The main process with workers: offers each new connection (not read from yet) to a worker;
   * true when a worker took it.
   */
  readonly distribute?: (key: string, socket: Socket) => boolean;
  /** This process's worker index, for the per-worker listener stats (0: the main process). */
  readonly workerIndex?: number;
}

/** Re-prefixes a ConfigError's field with the listener it belongs to. */
function within(prefix: string, e: unknown): unknown {
  if (!(e instanceof ConfigError)) return e;
  return new ConfigError(`${prefix}.${e.field}`, e.message.slice(e.field.length + 2));
}

interface ListenerCounters {
  readonly cx: StatCounter;
  /** Envoy's `listener.<address>.worker_<N>.downstream_cx_total`: the connections this process took. */
  readonly workerCx: StatCounter;
  readonly noChain: StatCounter;
  readonly rq: StatCounter;
  readonly rqClass: readonly StatCounter[];
}

/** One compiled filter chain with the connections it serves. */
abstract class Chain {
  readonly connections = new Set<Socket>();
  draining = false;
  protected closingIdle = false;
  private closeTimer?: NodeJS.Timeout;

  constructor(
    readonly name: string,
    readonly match: CompiledChainMatch,
  ) {}

  serve(socket: Socket): void {
    if (socket.destroyed) return;
    this.connections.add(socket);
    socket.once('close', () => this.connections.delete(socket));
    this.accept(socket);
  }

  protected abstract accept(socket: Socket): void;

  /** Counters owned by the compiled chain (filter stats), for /stats. */
  samples(): StatSample[] {
    return [];
  }

  /**
   * Asks connections to finish; after `drainTimeMs` the rest are closed. Resolves when all are
   * gone. `closeIdle` (shutdown) also closes idle connections at once; otherwise (listener update
   * or removal, drain_listeners) they get `connection: close` on their next response or close
   * after the keep-alive timeout, as closing a connection a client may be reusing right now would
   * fail its request.
   */
  drain(drainTimeMs: number, closeIdle = false): Promise<void> {
    this.draining = true;
    if (closeIdle) this.closingIdle = true;
    this.onDrain();
    if (!this.closeTimer) {
      this.closeTimer = setTimeout(() => this.destroyAll(), drainTimeMs);
      this.closeTimer.unref();
    }
    return this.whenEmpty();
  }

  protected onDrain(): void {}

  /** Releases what the chain holds once it serves nothing any more. */
  dispose(): void {}

  destroyAll(): void {
    clearTimeout(this.closeTimer);
    for (const s of this.connections) s.destroy();
  }

  async whenEmpty(): Promise<void> {
    while (this.connections.size > 0) {
      await new Promise<void>((resolve) => [...this.connections][0]!.once('close', () => resolve()));
    }
    clearTimeout(this.closeTimer);
  }
}

class HttpChain extends Chain {
  private readonly server: HttpServer;
  private readonly h2: Http2Server;
  /** The downstream socket of each HTTP/2 session (its own `socket` may be a wrapper). */
  private readonly h2Sockets = new WeakMap<Http2Session, Socket>();
  private readonly h2Sessions = new Set<ServerHttp2Session>();

  constructor(
    name: string,
    match: CompiledChainMatch,
    private readonly handler: ReturnType<typeof buildHcmForFilterChain>,
    counters: ListenerCounters,
    stats: StatsStore,
  ) {
    super(name, match);
    const tag = { name: 'envoy_http_conn_manager_prefix', value: handler.statPrefix };
    const hcmRq = stats.counter(statName('http', 'downstream_rq_total', tag));
    const hcmClass = [1, 2, 3, 4, 5].map((k) => stats.counter(statName('http', `downstream_rq_${k}xx`, tag)));
    const count = (res: ServerResponse | Http2ServerResponse): void => {
      counters.rq.inc();
      hcmRq.inc();
      res.once('finish', () => {
        const k = Math.floor(res.statusCode / 100);
        if (k >= 1 && k <= 5) {
          counters.rqClass[k - 1]!.inc();
          hcmClass[k - 1]!.inc();
        }
        if (this.closingIdle) setImmediate(() => this.server.closeIdleConnections());
      });
    };
    this.server = createHttpServer();
    // node:http tracks connections (closeIdleConnections, header timeouts) only once 'listening'
    // fired; this server never listens itself, its connections are handed over.
    this.server.emit('listening');
    this.server.on('request', (req: IncomingMessage, res: ServerResponse) => {
      count(res);
      if (this.draining) res.setHeader('connection', 'close');
      handler.handle(req, res);
    });
    this.server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
      counters.rq.inc();
      hcmRq.inc();
      handler.handleUpgrade(req, socket, head);
    });
    this.h2 = createHttp2Server();
    this.h2.on('session', (session: ServerHttp2Session) => {
      this.h2Sessions.add(session);
      session.once('close', () => this.h2Sessions.delete(session));
    });
    this.h2.on('sessionError', (e: Error) => log.debug(`HTTP/2 session error: ${e.message}`));
    this.h2.on('request', (req: Http2ServerRequest, res: Http2ServerResponse) => {
      count(res);
      const session = req.stream.session;
      // HTTP/2's `connection: close`: GOAWAY, the streams already open finish.
      if (this.draining) session?.close();
      handler.handle(req, res, session ? this.h2Sockets.get(session) : undefined);
    });
  }

  protected accept(socket: Socket): void {
    const codec = this.handler.codec;
    if (codec === 'auto') {
      // A connection that never says anything is closed after the HTTP/1.1 server's header timeout.
      sniffH2Preface(socket, this.server.headersTimeout).then(
        (h2) => (h2 === undefined ? socket.destroy() : h2 ? this.acceptH2(socket) : this.acceptH1(socket)),
        () => socket.destroy(),
      );
    } else if (codec === 'http2') this.acceptH2(socket);
    else this.acceptH1(socket);
  }

  private acceptH1(socket: Socket): void {
    this.server.emit('connection', socket);
    // After inspection the socket is paused with the bytes read put back: the parser reads the
    // handle directly, so the buffered bytes only reach it once the stream flows again.
    if (socket.isPaused()) socket.resume();
  }

  private acceptH2(socket: Socket): void {
    // node:http2 reads the socket's handle directly and would never see bytes already read (by
    // inspection or sniffing): such a socket is handed over behind a stream that replays them.
    const conn = socket.readableLength > 0 ? new ReplayingSocket(socket) : socket;
    let session: ServerHttp2Session | undefined;
    const onSession = (s: ServerHttp2Session): void => {
      session = s;
    };
    // The server makes the session synchronously inside its 'connection' listener.
    this.h2.once('session', onSession);
    this.h2.emit('connection', conn);
    this.h2.off('session', onSession);
    if (session) this.h2Sockets.set(session, socket);
  }

  protected override onDrain(): void {
    if (this.closingIdle) this.server.closeIdleConnections();
    // GOAWAY at once: open streams finish, the client takes new ones elsewhere (Envoy's drain).
    for (const s of this.h2Sessions) s.close();
  }

  override dispose(): void {
    // Stops node:http's connection-checking timer; the server never listened.
    this.server.close();
  }

  override samples(): StatSample[] {
    return this.handler.filterStats.flatMap((f) => filterSamples(this.handler.statPrefix, f));
  }
}

/**
 * A socket whose first bytes were already read, for node:http2: the bytes come back through the
 * stream interface. The addresses are the socket's.
 */
class ReplayingSocket extends Duplex {
  constructor(private readonly socket: Socket) {
    super({ allowHalfOpen: true });
    socket.on('data', (d: Buffer) => {
      if (!this.push(d)) socket.pause();
    });
    socket.on('end', () => this.push(null));
    socket.on('close', () => this.destroy());
    socket.on('error', (e) => this.destroy(e));
  }

  override _read(): void {
    this.socket.resume();
  }

  override _write(chunk: Buffer, encoding: BufferEncoding, cb: (e?: Error | null) => void): void {
    this.socket.write(chunk, encoding, cb);
  }

  override _final(cb: (e?: Error | null) => void): void {
    this.socket.end(cb);
  }

  override _destroy(e: Error | null, cb: (e?: Error | null) => void): void {
    this.socket.destroy();
    cb(e);
  }

  get remoteAddress(): string | undefined {
    return this.socket.remoteAddress;
  }

  get remotePort(): number | undefined {
    return this.socket.remotePort;
  }

  get localAddress(): string | undefined {
    return this.socket.localAddress;
  }

  get localPort(): number | undefined {
    return this.socket.localPort;
  }

  setNoDelay(noDelay?: boolean): this {
    this.socket.setNoDelay(noDelay);
    return this;
  }

  setTimeout(ms: number, cb?: () => void): this {
    this.socket.setTimeout(ms, cb);
    return this;
  }
}

/**
 * Codec AUTO on plaintext: whether the connection starts with the HTTP/2 client preface (h2c with
 * prior knowledge). Reads just enough bytes to tell, puts them back and leaves the socket paused.
 * Undefined when the connection went away or stayed silent for `timeoutMs`.
 */
function sniffH2Preface(socket: Socket, timeoutMs: number): Promise<boolean | undefined> {
  return new Promise((resolve) => {
    let buf = Buffer.alloc(0);
    const finish = (verdict: boolean | undefined): void => {
      socket.setTimeout(0);
      socket.off('timeout', onTimeout);
      socket.off('data', onData);
      socket.off('end', onEnd);
      socket.off('close', onClose);
      socket.pause();
      if (buf.length > 0 && !socket.readableEnded) socket.unshift(buf);
      resolve(verdict);
    };
    const onData = (d: Buffer): void => {
      buf = Buffer.concat([buf, d]);
      const n = Math.min(buf.length, H2_CLIENT_PREFACE.length);
      if (!buf.subarray(0, n).equals(H2_CLIENT_PREFACE.subarray(0, n))) finish(false);
      else if (n === H2_CLIENT_PREFACE.length) finish(true);
    };
    // A half-close before the preface completed: HTTP/1.1 (its parser answers what it got).
    const onEnd = (): void => finish(buf.length > 0 ? false : undefined);
    const onClose = (): void => finish(undefined);
    const onTimeout = (): void => finish(undefined);
    socket.setTimeout(timeoutMs);
    socket.once('timeout', onTimeout);
    socket.on('data', onData);
    socket.once('end', onEnd);
    socket.once('close', onClose);
    // Bytes put back by listener inspection are already buffered: this reads them first.
    socket.resume();
  });
}

/** Envoy's names: http.<prefix>.jwt_authn.<stat>, http.<prefix>.rbac.<stat>. */
function filterSamples(prefix: string, f: FilterStats): StatSample[] {
  const [kind, values] = 'jwt_authn' in f ? (['jwt_authn', f.jwt_authn] as const) : (['rbac', f.rbac] as const);
  return Object.entries(values).map(([stat, value]) => {
    const n = statName('http', `${kind}_${stat}`, { name: 'envoy_http_conn_manager_prefix', value: prefix });
    return { ...n, name: `http.${prefix}.${kind}.${stat}`, kind: 'counter' as const, value: value as number };
  });
}

/** A weighted choice among the TCP proxy's clusters. */
function clusterChooser(tp: TcpProxy, field: string): () => string {
  const cs = tp.clusterSpecifier;
  if (cs.case === 'cluster') {
    const name = cs.value;
    return () => name;
  }
  if (cs.case !== 'weightedClusters') throw new ConfigError(`${field}.cluster_specifier`, 'cluster or weighted_clusters is required');
  const clusters = cs.value.clusters;
  const total = clusters.reduce((n, c) => n + c.weight, 0);
  if (clusters.length === 0 || total === 0) throw new ConfigError(`${field}.weighted_clusters`, 'needs at least one cluster with a weight above 0');
  return () => {
    let r = Math.random() * total;
    for (const c of clusters) {
      r -= c.weight;
      if (r < 0) return c.name;
    }
    return clusters[clusters.length - 1]!.name;
  };
}

class TcpChain extends Chain {
  private readonly cluster: () => string;
  private readonly cx: StatCounter;
  private readonly noCluster: StatCounter;
  private readonly connectFail: StatCounter;

  constructor(
    name: string,
    match: CompiledChainMatch,
    tp: TcpProxy,
    field: string,
    private readonly clusters: ClusterManager,
    stats: StatsStore,
  ) {
    super(name, match);
    this.cluster = clusterChooser(tp, field);
    const unapplied = unappliedFields(TcpProxySchema, tp, UNAPPLIED_TCP_PROXY);
    if (unapplied.length > 0) log.warn(`tcp_proxy ${JSON.stringify(tp.statPrefix)}: accepted but not applied yet: ${unapplied.join(', ')}`);
    const tag = { name: 'envoy_tcp_prefix', value: tp.statPrefix };
    this.cx = stats.counter(statName('tcp', 'downstream_cx_total', tag));
    this.noCluster = stats.counter(statName('tcp', 'downstream_cx_no_route', tag));
    this.connectFail = stats.counter(statName('tcp', 'upstream_connect_fail', tag));
  }

  protected accept(down: Socket): void {
    this.cx.inc();
    const name = this.cluster();
    const cluster = this.clusters.get(name);
    const view = requestView({
      source: { address: normalizeIp(down.remoteAddress ?? ''), port: down.remotePort ?? 0 },
      destination: connectionDestination(down),
    });
    const endpoint = cluster?.pick(view);
    if (!cluster || !endpoint) {
      this.noCluster.inc();
      log.debug(`tcp_proxy: ${cluster ? `no healthy upstream in ${name}` : `unknown cluster ${name}`}; closing the connection`);
      down.destroy();
      return;
    }
    down.pause();
    const up = connect({ host: endpoint.host, port: endpoint.port, allowHalfOpen: true });
    const timeoutMs = cluster.connectTimeoutMs ?? 0;
    const timer = timeoutMs > 0 ? setTimeout(() => up.destroy(new Error(`connect timeout after ${timeoutMs}ms`)), timeoutMs) : undefined;
    up.once('connect', () => {
      clearTimeout(timer);
      down.pipe(up);
      up.pipe(down);
      down.resume();
    });
    up.on('error', (e) => {
      clearTimeout(timer);
      if (up.connecting || !up.remoteAddress) this.connectFail.inc();
      log.debug(`tcp_proxy to ${name} ${endpoint.host}:${endpoint.port}: ${e.message}`);
      down.destroy();
    });
    down.on('error', () => up.destroy());
    // Once either side is fully closed, so is the other (half-closes pass through the pipes).
    up.on('close', () => down.destroy());
    down.on('close', () => up.destroy());
  }
}

/** A chain whose transport socket (TLS) this proxy cannot terminate: matched, then closed. */
class RefusingChain extends Chain {
  protected accept(socket: Socket): void {
    log.debug(`filter chain ${this.name} needs a transport socket this proxy does not support; closing the connection`);
    socket.destroy();
  }
}

interface Inspection {
  readonly http: boolean;
  readonly tls: boolean;
  readonly timeoutMs: number;
  readonly continueOnTimeout: boolean;
}

/** A compiled listener: its chains, counters and the socket it is served on. */
class ActiveListener {
  constructor(
    readonly name: string,
    readonly message: Listener,
    readonly address: { host: string; port: number },
    readonly bind: boolean,
    readonly chains: readonly Chain[],
    readonly defaultChain: Chain | undefined,
    readonly inspection: Inspection,
    readonly counters: ListenerCounters,
  ) {}

  get inbound(): boolean {
    return this.message.trafficDirection === TrafficDirection.INBOUND;
  }

  allChains(): Chain[] {
    return [...this.chains, ...(this.defaultChain ? [this.defaultChain] : [])];
  }

  select(f: ConnectionFacts): Chain | undefined {
    return selectChain(this.chains, f) ?? this.defaultChain;
  }
}

function listenerFilterTypes(l: Listener): Set<string> {
  const out = new Set<string>();
  l.listenerFilters.forEach((f, i) => {
    const c = f.configType;
    if (c.case !== 'typedConfig') throw new ConfigError(`listener_filters[${i}]`, 'typed_config is required');
    const type = c.value.typeUrl.slice(c.value.typeUrl.lastIndexOf('/') + 1);
    if (type !== HTTP_INSPECTOR && type !== TLS_INSPECTOR && type !== ORIGINAL_DST) {
      throw new ConfigError(`listener_filters[${i}].typed_config`, `listener filter type ${type} is not supported`);
    }
    out.add(type);
  });
  return out;
}

/** A bound address and the listener it currently serves. */
interface BoundSocket {
  readonly key: string;
  readonly server: Server;
  listener: ActiveListener;
  /**
   * Connections that came before the plan binding this socket was committed (it may wait for
   * its routes: warming); undefined once committed.
   */
  held?: Socket[];
}

export interface ListenerPlan {
  readonly listeners: ReadonlyMap<string, ActiveListener>;
  readonly sockets: ReadonlyMap<string, BoundSocket>;
  /** Sockets bound by `prepare` (closed again by `abort`). */
  readonly fresh: readonly BoundSocket[];
}

export interface ListenerInfo {
  readonly name: string;
  /** The configured address. */
  readonly address: string;
  /** The bound address (the real port when 0 was configured); undefined when not bound. */
  readonly bound?: { host: string; port: number };
  readonly message: Listener;
  readonly draining: boolean;
}

export class ListenerManager {
  private listeners = new Map<string, ActiveListener>();
  /** The listeners by port, for handing over redirected connections (original-dst.ts). */
  private byPort = new Map<number, ActiveListener[]>();
  private sockets = new Map<string, BoundSocket>();
  /** Chains replaced or removed whose connections are still finishing. */
  private readonly retiring = new Set<Chain>();
  /** Sockets of a graceful drain: still accepting until the drain time ends (or shutdown). */
  private readonly gracefulSockets = new Set<Server>();
  /** Set by /drain_listeners: listeners in that scope are not bound again. */
  private stopped: 'none' | 'inbound' | 'all' = 'none';

  constructor(private readonly deps: ListenerDeps) {
    deps.stats.addSource(() => this.samples());
  }

  /** Compiles the next listener set and binds new addresses; throws ConfigError (nothing changed). */
  async prepare(msgs: readonly Listener[]): Promise<ListenerPlan> {
    const listeners = new Map<string, ActiveListener>();
    for (const msg of msgs) {
      const old = this.listeners.get(msg.name);
      if (old && equals(ListenerSchema, old.message, msg)) listeners.set(msg.name, old);
      else {
        try {
          listeners.set(msg.name, this.compile(msg));
        } catch (e) {
          throw within(`listener ${msg.name}`, e);
        }
      }
    }
    const sockets = new Map<string, BoundSocket>();
    const fresh: BoundSocket[] = [];
    try {
      for (const l of listeners.values()) {
        if (!l.bind || this.isStopped(l)) continue;
        const key = addressKey(l);
        const taken = sockets.get(key);
        if (taken) throw new ConfigError(`listener ${l.name}.address`, `${key} is also the address of listener ${taken.listener.name}`);
        const existing = this.sockets.get(key);
        if (existing) {
          sockets.set(key, existing);
          continue;
        }
        const bs = await this.bindSocket(key, l);
        fresh.push(bs);
        sockets.set(key, bs);
      }
    } catch (e) {
      this.abort({ listeners, sockets, fresh });
      throw e;
    }
    return { listeners, sockets, fresh };
  }

  /** Undoes a prepared plan that will not be committed. */
  abort(plan: ListenerPlan): void {
    for (const bs of plan.fresh) {
      bs.server.close();
      for (const s of bs.held ?? []) s.destroy();
    }
  }

  commit(plan: ListenerPlan): void {
    for (const bs of plan.fresh) {
      const held = bs.held ?? [];
      delete bs.held;
      // After the swap below, so that they meet the committed listener.
      if (held.length > 0) setImmediate(() => held.forEach((s) => this.acceptNew(bs, s)));
    }
    const before = this.listeners;
    const oldSockets = this.sockets;
    // The bound sockets hand new connections to their new listeners.
    for (const [key, bs] of plan.sockets) {
      // bs may be an old socket (reused), whose listener becomes the new one of that address.
      const next = [...plan.listeners.values()].find((l) => l.bind && addressKey(l) === key);
      if (next) bs.listener = next;
    }
    for (const [key, bs] of oldSockets) {
      if (plan.sockets.get(key) === bs) continue;
      bs.server.close();
      log.info(`listener ${bs.listener.name} stopped accepting on ${key}`);
    }
    this.listeners = new Map(plan.listeners);
    this.byPort = new Map();
    for (const l of this.listeners.values()) {
      const same = this.byPort.get(l.address.port);
      if (same) same.push(l);
      else this.byPort.set(l.address.port, [l]);
    }
    this.sockets = new Map(plan.sockets);
    for (const [name, old] of before) {
      if (this.listeners.get(name) === old) continue;
      for (const chain of old.allChains()) this.retire(chain);
    }
  }

  /** /drain_listeners: stop accepting (now, or after the drain time when graceful) and drain. */
  drainListeners(opts: { inboundOnly: boolean; graceful: boolean }): void {
    this.stopped = opts.inboundOnly ? (this.stopped === 'all' ? 'all' : 'inbound') : 'all';
    for (const [key, bs] of this.sockets) {
      if (!this.isStopped(bs.listener)) continue;
      for (const chain of bs.listener.allChains()) void chain.drain(this.deps.drainTimeMs);
      if (opts.graceful) {
        this.gracefulSockets.add(bs.server);
        setTimeout(() => this.closeGraceful(bs.server), this.deps.drainTimeMs).unref();
      } else bs.server.close();
      this.sockets.delete(key);
    }
  }

  /** Stops accepting everywhere and waits (at most the drain time) for connections to finish. */
  async shutdown(drainTimeMs = this.deps.drainTimeMs): Promise<void> {
    for (const bs of this.sockets.values()) bs.server.close();
    this.sockets.clear();
    for (const server of this.gracefulSockets) this.closeGraceful(server);
    const chains = [...this.listeners.values()].flatMap((l) => l.allChains()).concat([...this.retiring]);
    this.stopped = 'all';
    await Promise.all(chains.map((c) => c.drain(drainTimeMs, true)));
    for (const c of chains) c.dispose();
  }

  /** Closes every connection now. */
  destroy(): void {
    for (const bs of this.sockets.values()) bs.server.close();
    for (const server of this.gracefulSockets) this.closeGraceful(server);
    for (const l of this.listeners.values()) for (const c of l.allChains()) c.destroyAll();
    for (const c of this.retiring) c.destroyAll();
  }

  info(): ListenerInfo[] {
    const bound = new Map([...this.sockets.values()].map((bs) => [bs.listener, bs.server.address()] as const));
    return [...this.listeners.values()].map((l) => {
      const a = bound.get(l);
      return {
        name: l.name,
        address: `${l.address.host}:${l.address.port}`,
        ...(a && typeof a === 'object' ? { bound: { host: a.address, port: a.port } } : {}),
        message: l.message,
        draining: l.allChains().some((c) => c.draining),
      };
    });
  }

  messages(): Listener[] {
    return [...this.listeners.values()].map((l) => l.message);
  }

  private closeGraceful(server: Server): void {
    if (this.gracefulSockets.delete(server)) server.close();
  }

  private isStopped(l: ActiveListener): boolean {
    return this.stopped === 'all' || (this.stopped === 'inbound' && l.inbound);
  }

  private retire(chain: Chain): void {
    if (this.retiring.has(chain)) return;
    this.retiring.add(chain);
    void chain.drain(this.deps.drainTimeMs).then(() => {
      chain.dispose();
      this.retiring.delete(chain);
      this.deps.stats.retire(chain.samples());
    });
  }

  private *samples(): Iterable<StatSample> {
    for (const l of this.listeners.values()) {
      const tag = { name: 'envoy_listener_address', value: listenerStatName(l.address) };
      yield { ...statName('listener', 'downstream_cx_active', tag), kind: 'gauge', value: l.allChains().reduce((n, c) => n + c.connections.size, 0) };
      for (const c of l.allChains()) yield* c.samples();
    }
    for (const c of this.retiring) yield* c.samples();
    yield { ...statName('listener_manager', 'total_listeners_active'), kind: 'gauge', value: this.listeners.size };
  }

  private compile(l: Listener): ActiveListener {
    if (!l.name) throw new ConfigError('name', 'a listener name is required');
    if (l.filterChainMatcher) throw new ConfigError('filter_chain_matcher', 'the matcher API is not supported; use filter_chain_match');
    const address = socketAddressOf(l.address, 'address');
    const unapplied = unappliedFields(ListenerSchema, l, UNAPPLIED_LISTENER);
    if (unapplied.length > 0) log.warn(`listener ${l.name}: accepted but not applied yet: ${unapplied.join(', ')}`);
    const types = listenerFilterTypes(l);
    const noOriginalDst = l.useOriginalDst ? originalDstUnavailable() : undefined;
    if (noOriginalDst) log.warn(`listener ${l.name}: use_original_dst without SO_ORIGINAL_DST (${noOriginalDst}); its connections are not handed to other listeners`);
    const inspection: Inspection = {
      http: types.has(HTTP_INSPECTOR),
      tls: types.has(TLS_INSPECTOR),
      timeoutMs: durationMs(l.listenerFiltersTimeout, DEFAULT_INSPECT_TIMEOUT_MS),
      continueOnTimeout: l.continueOnListenerFiltersTimeout,
    };
    const tag = { name: 'envoy_listener_address', value: listenerStatName(address) };
    const c = (stat: string) => this.deps.stats.counter(statName('listener', stat, tag));
    const counters: ListenerCounters = {
      cx: c('downstream_cx_total'),
      workerCx: this.deps.stats.counter(workerStatName(tag.value, this.deps.workerIndex ?? 0, 'downstream_cx_total')),
      noChain: c('no_filter_chain_match'),
      rq: c('downstream_rq_total'),
      rqClass: [1, 2, 3, 4, 5].map((k) => c(`downstream_rq_${k}xx`)),
    };
    const seen = new Map<string, string>();
    const chains = l.filterChains.map((fc, i) => {
      const field = `filter_chains[${i}]`;
      const chain = this.compileChain(fc, field, address.port, counters);
      const other = seen.get(chain.match.key);
      if (other !== undefined) throw new ConfigError(`${field}.filter_chain_match`, `matches the same connections as ${other}`);
      seen.set(chain.match.key, field);
      return chain;
    });
    const defaultChain = l.defaultFilterChain ? this.compileChain(l.defaultFilterChain, 'default_filter_chain', address.port, counters) : undefined;
    if (chains.length === 0 && !defaultChain) throw new ConfigError('filter_chains', 'at least one filter chain (or a default filter chain) is required');
    return new ActiveListener(l.name, l, address, l.bindToPort ?? true, chains, defaultChain, inspection, counters);
  }

  private compileChain(fc: FilterChain, field: string, port: number, counters: ListenerCounters): Chain {
    const match = compileChainMatch(fc.filterChainMatch, `${field}.filter_chain_match`);
    const name = fc.name || field;
    if (fc.transportSocket) {
      log.warn(`${field} (${name}): transport socket ${fc.transportSocket.name} is not supported yet; connections matching this chain are closed`);
      return new RefusingChain(name, match);
    }
    if (fc.filters.length === 0) throw new ConfigError(`${field}.filters`, 'at least one network filter is required');
    const last = fc.filters.length - 1;
    fc.filters.forEach((f, i) => {
      const c = f.configType;
      if (c.case !== 'typedConfig') throw new ConfigError(`${field}.filters[${i}]`, 'typed_config is required');
      const type = c.value.typeUrl.slice(c.value.typeUrl.lastIndexOf('/') + 1);
      const terminal = type === HttpConnectionManagerSchema.typeName || type === TcpProxySchema.typeName;
      if (!terminal) throw new ConfigError(`${field}.filters[${i}].typed_config`, `network filter type ${type} is not supported`);
      if (i !== last) throw new ConfigError(`${field}.filters[${i}]`, `${f.name} is a terminal filter and must be the last one`);
    });
    const terminal = fc.filters[last]!;
    const any = terminal.configType.value as Any;
    try {
      if (any.typeUrl.endsWith(`/${TcpProxySchema.typeName}`)) {
        const tp = anyUnpack(any, TcpProxySchema);
        if (!tp) throw new ConfigError(`filters[${last}].typed_config`, `cannot decode ${any.typeUrl}`);
        return new TcpChain(name, match, tp, `filters[${last}].typed_config`, this.deps.clusters, this.deps.stats);
      }
      const handler = buildHcmForFilterChain(fc, {
        clusters: this.deps.clusters,
        routes: this.deps.routes,
        ...(this.deps.jwt ? { jwt: this.deps.jwt } : {}),
        listenerPort: port,
      });
      return new HttpChain(name, match, handler, counters, this.deps.stats);
    } catch (e) {
      throw within(`${field}.filters[${last}].typed_config`, e);
    }
  }

  private async bindSocket(key: string, l: ActiveListener): Promise<BoundSocket> {
    const distribute = this.deps.distribute;
    const server = this.deps.handedSocket ? this.deps.handedSocket(key) : await listenOn(l, distribute !== undefined);
    const bs: BoundSocket = { key, server, listener: l, held: [] };
    server.on('connection', (socket: Socket) => {
      if (distribute?.(key, socket)) return;
      if (bs.held) bs.held.push(socket);
      else this.acceptNew(bs, socket);
    });
    server.on('error', (e) => log.error(`listener ${l.name}: ${e.message}`));
    if (!this.deps.handedSocket) log.info(`listener ${l.name} listening on ${l.address.host}:${(server.address() as { port: number }).port}`);
    return bs;
  }

  /** A connection this process serves, on the listener its socket serves now. */
  private acceptNew(bs: BoundSocket, socket: Socket): void {
    // Paused on connect so that a worker would have got every byte: this process reads it.
    if (this.deps.distribute) socket.resume();
    this.accept(bs.listener, socket);
  }

  private accept(first: ActiveListener, socket: Socket): void {
    const l = first.message.useOriginalDst ? this.originalListener(first, socket) : first;
    l.counters.cx.inc();
    l.counters.workerCx.inc();
    socket.on('error', (e) => log.debug(`listener ${l.name}: downstream connection error: ${e.message}`));
    if (!l.inspection.http && !l.inspection.tls) {
      this.dispatch(l, socket, 'raw_buffer', []);
      return;
    }
    inspect(socket, l.inspection).then(
      (found) => {
        if (found) this.dispatch(l, socket, found.transport, found.protocols);
        else socket.destroy();
      },
      () => socket.destroy(),
    );
  }

  /** The listener of the connection's original destination, or `l` itself. */
  private originalListener(l: ActiveListener, socket: Socket): ActiveListener {
    const dst = restoreOriginalDst(socket);
    const target = dst && this.listenerAt(dst);
    if (!target || target === l) return l;
    log.debug(`listener ${l.name}: connection to ${dst.address}:${dst.port} handed to listener ${target.name}`);
    return target;
  }

  /** The listener on exactly this address, else one on a wildcard address with its port. */
  private listenerAt(dst: Address): ActiveListener | undefined {
    let wildcard: ActiveListener | undefined;
    for (const l of this.byPort.get(dst.port) ?? []) {
      const host = normalizeIp(l.address.host);
      if (host === dst.address) return l;
      if (!wildcard && (host === '0.0.0.0' || host === '::')) wildcard = l;
    }
    return wildcard;
  }

  private dispatch(l: ActiveListener, socket: Socket, transportProtocol: string, applicationProtocols: string[]): void {
    const destination = connectionDestination(socket);
    const chain = l.select({
      destinationIp: destination.address,
      destinationPort: destination.port,
      sourceIp: normalizeIp(socket.remoteAddress ?? ''),
      sourcePort: socket.remotePort ?? 0,
      serverName: '',
      transportProtocol,
      applicationProtocols,
    });
    if (!chain) {
      l.counters.noChain.inc();
      log.debug(`listener ${l.name}: no filter chain matches a connection from ${socket.remoteAddress}:${socket.remotePort}`);
      socket.destroy();
      return;
    }
    chain.serve(socket);
  }
}

/** A bound server for the listener's address; a bind failure is a ConfigError naming it. */
async function listenOn(l: ActiveListener, pauseOnConnect: boolean): Promise<Server> {
  // TCP_NODELAY as Envoy sets it: a response head and body written apart must not wait on Nagle
  // (and the client's delayed ACK). node:http would set it on connections it accepted itself.
  const server = createServer({ allowHalfOpen: true, pauseOnConnect, noDelay: true });
  await new Promise<void>((resolve, reject) => {
    server.once('error', (e: NodeJS.ErrnoException) => reject(new ConfigError(`listener ${l.name}.address`, `cannot bind ${l.address.host}:${l.address.port}: ${e.code ?? e.message}`)));
    server.listen(l.address.port, l.address.host, () => resolve());
  });
  const notTransparent = l.message.transparent ? setTransparent(server) : undefined;
  if (notTransparent) {
    server.close();
    throw new ConfigError(`listener ${l.name}.transparent`, `cannot set IP_TRANSPARENT on ${l.address.host}:${l.address.port}: ${notTransparent}`);
  }
  return server;
}

/** The identity of a bound address; every port-0 listener gets a port of its own. */
function addressKey(l: ActiveListener): string {
  const at = `${l.address.host}:${l.address.port}`;
  return l.address.port === 0 ? `${at}/${l.name}` : at;
}

/** A per-worker listener stat, tagged with the listener address and the worker id as Envoy does. */
function workerStatName(address: string, worker: number, stat: string): StatName {
  return {
    name: `listener.${address}.worker_${worker}.${stat}`,
    prom: `envoy_listener_worker_${stat}`,
    labels: { envoy_listener_address: address, envoy_worker_id: String(worker) },
  };
}

/** Envoy's listener stat name: the address with `_` before the port. */
function listenerStatName(a: { host: string; port: number }): string {
  return `${a.host}_${a.port}`;
}

/**
 * The listener filters this proxy runs: tls_inspector (a ClientHello starts with 0x16, giving
 * transport `tls`) and http_inspector (an HTTP/1.x request line or the HTTP/2 preface, giving
 * `http/1.0`, `http/1.1` or `h2c`). The bytes read are put back for the chain. Resolves undefined
 * when the connection should be closed (timeout without continue_on_listener_filters_timeout).
 */
function inspect(socket: Socket, how: Inspection): Promise<{ transport: string; protocols: string[] } | undefined> {
  return new Promise((resolve) => {
    let buf = Buffer.alloc(0);
    const finish = (result: { transport: string; protocols: string[] } | undefined) => {
      clearTimeout(timer);
      socket.off('data', onData);
      socket.off('end', onEnd);
      socket.off('close', onClose);
      socket.pause();
      if (buf.length > 0) {
        // Bytes read cannot be put back once the stream ended (a client that half-closed mid-line).
        if (socket.readableEnded) {
          resolve(undefined);
          return;
        }
        socket.unshift(buf);
      }
      resolve(result);
    };
    const timer = setTimeout(() => finish(how.continueOnTimeout ? { transport: 'raw_buffer', protocols: [] } : undefined), how.timeoutMs);
    const onEnd = () => finish({ transport: 'raw_buffer', protocols: [] });
    const onClose = () => finish(undefined);
    const onData = (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      const verdict = classify(buf, how);
      if (verdict) finish(verdict);
    };
    socket.on('data', onData);
    socket.once('end', onEnd);
    socket.once('close', onClose);
  });
}

function classify(buf: Buffer, how: Inspection): { transport: string; protocols: string[] } | undefined {
  if (how.tls && buf[0] === 0x16) return { transport: 'tls', protocols: [] };
  if (!how.http) return { transport: 'raw_buffer', protocols: [] };
  const text = buf.subarray(0, MAX_INSPECT_BYTES).toString('latin1');
  if (H2_PREFACE.startsWith(text)) return undefined; // could still be the preface
  if (text.startsWith(H2_PREFACE)) return { transport: 'raw_buffer', protocols: ['h2c'] };
  if (!/^[A-Z]/.test(text)) return { transport: 'raw_buffer', protocols: [] };
  const eol = text.indexOf('\r\n');
  if (eol < 0) return buf.length >= MAX_INSPECT_BYTES || !/^[A-Z]+( |$)/.test(text) ? { transport: 'raw_buffer', protocols: [] } : undefined;
  const m = /^[A-Z]+ \S+ HTTP\/1\.([01])$/.exec(text.slice(0, eol));
  return { transport: 'raw_buffer', protocols: m ? [`http/1.${m[1]}`] : [] };
}
