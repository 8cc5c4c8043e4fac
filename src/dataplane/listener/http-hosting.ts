// The http_connection_manager network filter hosted on node's servers: a node:http server and a
// node:http2 server that never listen themselves; each connection of the chain is emitted into the
// one its codec (and, for AUTO, its first bytes) calls for. node:http2 gets a socket whose first
// bytes were already read behind a stream that replays them. The connection's idle timeout and
// request limit (common_http_protocol_options) are kept by downstream-limits.ts, the stream
// timeouts by stream-timeouts.ts.
import { createServer as createHttpServer, ServerResponse, type IncomingMessage, type Server as HttpServer } from 'node:http';
import { createServer as createHttp2Server, type Http2ServerRequest, type Http2ServerResponse, type Http2Server, type Http2Session, type ServerHttp2Session } from 'node:http2';
import type { Socket } from 'node:net';
import { Duplex } from 'node:stream';
import { scope } from '../../common/log.js';
import { HttpConnectionManagerSchema } from '../../gen/envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager_pb.js';
import type { CompiledChainMatch } from '../filter-chain-match.js';
import { buildHttpConnectionManager, type FilterStats, type HttpConnectionManagerHandler } from '../http-connection-manager.js';
import { statName, type StatCounter, type StatSample, type StatsStore } from '../stats.js';
import { Chain, type ListenerCounters } from './chain.js';
import { registerNetworkFilter } from './network-filters.js';
import { isH2cUpgrade, serveH2cAsHttp1 } from '../request-guards.js';
import { sniffH2Preface } from './sniffers.js';
import { DownstreamConnections, limitSession } from './downstream-limits.js';
import { http1ServerTimeouts, StreamTimeouts, type SessionStreams } from './stream-timeouts.js';
import { localNode } from '../telemetry/workload-metadata.js';

const log = scope('conn_handler');

export class HttpChain extends Chain {
  private readonly server: HttpServer;
  private readonly h2: Http2Server;
  /** The downstream socket of each HTTP/2 session (its own `socket` may be a wrapper). */
  private readonly h2Sockets = new WeakMap<Http2Session, Socket>();
  /** The HTTP/2 sessions, with their open streams when a stream timeout needs them. */
  private readonly h2Sessions = new Map<Http2Session, SessionStreams | undefined>();
  private readonly h1Connections: DownstreamConnections;
  private readonly timeouts: StreamTimeouts;
  /** Envoy's downstream_cx_http1_total and downstream_cx_http2_total: connections by codec. */
  private readonly cxByCodec: { readonly http1: StatCounter; readonly http2: StatCounter };

  constructor(
    name: string,
    match: CompiledChainMatch,
    private readonly handler: HttpConnectionManagerHandler,
    counters: ListenerCounters,
    stats: StatsStore,
  ) {
    super(name, match);
    const tag = { name: 'envoy_http_conn_manager_prefix', value: handler.statPrefix };
    const hcmRq = stats.counter(statName('http', 'downstream_rq_total', tag));
    this.cxByCodec = { http1: stats.counter(statName('http', 'downstream_cx_http1_total', tag)), http2: stats.counter(statName('http', 'downstream_cx_http2_total', tag)) };
    const hcmClass = [1, 2, 3, 4, 5].map((k) => stats.counter(statName('http', `downstream_rq_${k}xx`, tag)));
    const connections = (this.h1Connections = new DownstreamConnections(handler.limits));
    // One listener for every response of the chain, not a closure per request; 'finish' comes once.
    const chain = this;
    const finished = function (this: ServerResponse | Http2ServerResponse): void {
      const k = Math.floor(this.statusCode / 100);
      if (k >= 1 && k <= 5) {
        counters.rqClass[k - 1]!.inc();
        hcmClass[k - 1]!.inc();
      }
      if (this instanceof ServerResponse) connections.of(this.req.socket)?.end();
      if (chain.closingIdle) setImmediate(() => chain.server.closeIdleConnections());
    };
    const count = (res: ServerResponse | Http2ServerResponse): void => {
      counters.rq.inc();
      hcmRq.inc();
      res.on('finish', finished);
    };
    // One header more than the limit is kept, so that the connection manager sees the excess (431).
    const { maxHeaderBytes, maxHeadersCount } = handler.limits;
    this.server = createHttpServer({ maxHeaderSize: maxHeaderBytes, ...http1ServerTimeouts(handler.limits) });
    this.server.maxHeadersCount = maxHeadersCount + 1;
    // The idle timeout is the connection manager's (no `Keep-Alive` header, as from Envoy).
    this.server.keepAliveTimeout = 0;
    this.timeouts = new StreamTimeouts(handler, this.h1Connections, (stat) => stats.counter(statName('http', stat, tag)));
    this.server.on('timeout', (socket: Socket) => this.timeouts.onHttp1Idle(socket));
    this.server.on('clientError', (e: NodeJS.ErrnoException, socket: Duplex) => this.timeouts.onClientError(e, socket));
    // node:http tracks connections (closeIdleConnections, header timeouts) only once 'listening'
    // fired; this server never listens itself, its connections are handed over.
    this.server.emit('listening');
    const serve = (req: IncomingMessage, res: ServerResponse): void => {
      const conn = connections.of(req.socket);
      count(res);
      // The connection's last request (max_requests_per_connection) closes it as a drain does.
      if (conn?.begin(res) === true || this.draining) res.setHeader('connection', 'close');
      handler.handle(req, res, undefined, this.timeouts);
    };
    this.server.on('request', serve);
    this.server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => {
      this.h1Connections.release(socket);
      this.timeouts.openUpgrade(socket);
      if (isH2cUpgrade(req)) return serveH2cAsHttp1(req, socket, head, serve);
      counters.rq.inc();
      hcmRq.inc();
      handler.handleUpgrade(req, socket, head, this.timeouts);
    });
    // Pseudo-headers come on top of the header fields the limit counts.
    this.h2 = createHttp2Server({ maxHeaderListPairs: maxHeadersCount + 8, settings: { maxHeaderListSize: maxHeaderBytes } });
    this.h2.on('session', (session: ServerHttp2Session) => {
      const streams = this.timeouts.openSession(session);
      this.h2Sessions.set(session, streams);
      limitSession(session, handler.limits, streams ? (stream) => streams.closed(stream) : undefined);
      session.once('close', () => this.h2Sessions.delete(session));
    });
    this.h2.on('sessionError', (e: Error) => log.debug(`HTTP/2 session error: ${e.message}`));
    this.h2.on('request', (req: Http2ServerRequest, res: Http2ServerResponse) => {
      count(res);
      const session = req.stream.session;
      if (session) this.h2Sessions.get(session)?.begin(res);
      // HTTP/2's `connection: close`: GOAWAY, the streams already open finish.
      if (this.draining) session?.close();
      handler.handle(req, res, session ? this.h2Sockets.get(session) : undefined, this.timeouts);
    });
  }

  protected accept(socket: Socket): void {
    const codec = this.handler.codec;
    if (codec === 'auto') {
      // A connection that never says anything is closed after the connection manager's idle timeout.
      sniffH2Preface(socket, this.handler.limits.idleTimeoutMs).then(
        (h2) => (h2 === undefined ? socket.destroy() : h2 ? this.acceptH2(socket) : this.acceptH1(socket)),
        () => socket.destroy(),
      );
    } else if (codec === 'http2') this.acceptH2(socket);
    else this.acceptH1(socket);
  }

  private acceptH1(socket: Socket): void {
    this.cxByCodec.http1.inc();
    this.h1Connections.open(socket);
    this.server.emit('connection', socket);
    this.timeouts.openHttp1(socket);
    // After inspection the socket is paused with the bytes read put back: the parser reads the
    // handle directly, so the buffered bytes only reach it once the stream flows again.
    if (socket.isPaused()) socket.resume();
  }

  private acceptH2(socket: Socket): void {
    this.cxByCodec.http2.inc();
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
    for (const s of this.h2Sessions.keys()) s.close();
  }

  override dispose(): void {
    // Stops node:http's connection-checking timer; the server never listened.
    this.server.close();
  }

  override samples(): StatSample[] {
    return [...super.samples(), ...this.handler.filterStats.flatMap((f) => filterSamples(this.handler.statPrefix, f))];
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

/** Envoy's names: http.<prefix>.<group>.<stat> (http.<prefix>.jwt_authn.allowed, ...). */
function filterSamples(prefix: string, f: FilterStats): StatSample[] {
  // The one member besides `name` is the filter's stats group.
  const [kind, values] = Object.entries(f).find(([k]) => k !== 'name') as [string, Readonly<Record<string, number>>];
  return Object.entries(values).map(([stat, value]) => {
    const n = statName('http', `${kind}_${stat}`, { name: 'envoy_http_conn_manager_prefix', value: prefix });
    return { ...n, name: `http.${prefix}.${kind}.${stat}`, kind: 'counter' as const, value };
  });
}

/** A proxy without a node (a unit test's listener manager): empty labels. */
const NO_NODE = localNode('', '', {});

registerNetworkFilter({
  schema: HttpConnectionManagerSchema,
  build: (hcm, ctx) => {
    const handler = buildHttpConnectionManager(hcm, {
      clusters: ctx.deps.clusters,
      routes: ctx.deps.routes,
      ...(ctx.deps.jwt ? { jwt: ctx.deps.jwt } : {}),
      listenerPort: ctx.listenerPort,
      counter: (stat) => ctx.deps.stats.counter(statName('http', stat, { name: 'envoy_http_conn_manager_prefix', value: hcm.statPrefix })),
      stats: ctx.deps.stats,
      telemetry: { node: ctx.deps.node ?? NO_NODE, inbound: ctx.inbound, stats: ctx.deps.stats },
    });
    return new HttpChain(ctx.name, ctx.match, handler, ctx.counters, ctx.deps.stats);
  },
});
