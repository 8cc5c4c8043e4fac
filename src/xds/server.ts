// The ADS server: envoy.service.discovery.v3.AggregatedDiscoveryService (State of the World and
// Delta) and the Client Status Discovery Service, on @grpc/grpc-js.
//
// Each stream becomes a Connection (connection.ts) whose requests and pushes run one at a time, in
// order. Content comes from ResourceGenerators (generator.ts), one per served type URL; this file
// decides when to generate and what to send, following the xDS protocol's version/nonce rules.
import { Server, ServerCredentials, status, type ServerDuplexStream } from '@grpc/grpc-js';
import type { DeltaDiscoveryRequest, DiscoveryRequest } from '../gen/envoy/service/discovery/v3/discovery_pb.js';
import { ClientStatusDiscoveryService } from '../gen/envoy/service/status/v3/csds_pb.js';
import type { Node } from '../gen/envoy/config/core/v3/base_pb.js';
import { counter, gauge, histogram } from '../common/metrics.js';
import { scope } from '../common/log.js';
import { settingDefault } from '../common/env.js';
import { Connection, type ConnectionStatus, type ReplyKind, type Watch } from './connection.js';
import { csdsHandlers } from './csds.js';
import { recordReply, updateRejectGauge } from './replies.js';
import { XdsStreamError, type DeliveryObserver, type ProxyInfo, type PushRequest, type ResourceGenerator } from './generator.js';
import { grpcServiceDefinition } from '../envoy/grpc-service.js';
import { adsDefinition, grpcOptions, Semaphore, type AdsTransportOptions } from './ads-transport.js';
import { ResponseJoiner, responseWriter, type OutgoingResponse, type ResponseBytes } from './response-writer.js';
import { ResponseSizeGuard } from './size-guard.js';
import { ResponseSender } from './sender.js';
import { PushHold, type FlowControlOptions } from './flow-control.js';
import { HEALTH_INFO_TYPE_URL, TypeUrl, type HealthReport } from '../envoy/types.js';
import { shareNames, type DeltaWireRequest, type SotwWireRequest } from './subscriptions.js';

const log = scope('ads');

export interface XdsServerOptions extends AdsTransportOptions {
  /** The generator of each served type URL; requests for any other type end their stream. */
  readonly generators: ReadonlyMap<string, ResourceGenerator>;
  /** Called once per stream after its first request; throw XdsStreamError to refuse the proxy. */
  readonly onConnect?: (proxy: ProxyInfo) => void | Promise<void>;
  /** Called once when a stream whose onConnect succeeded ends. */
  readonly onDisconnect?: (proxy: ProxyInfo) => void;
  /** A HealthInformation request: the agent's report of its workload's health (no response). */
  readonly onHealth?: (proxy: ProxyInfo, report: HealthReport) => void;
  /** Sent as control_plane.identifier in every response. */
  readonly controlPlaneId?: string;
  /** A send not done after this many ms closes the stream (PILOT_XDS_SEND_TIMEOUT); <= 0 = never. */
  readonly sendTimeoutMs?: number;
  /** PILOT_PUSH_THROTTLE: streams generated for and written to at once. */
  readonly pushThrottle?: number;
  /** Largest response sent (size-guard.ts); default MAX_RESPONSE_BYTES. */
  readonly maxResponseBytes?: number;
  /** Told of generations, sends and ACKs (PILOT_ENABLE_CONFIG_DISTRIBUTION_TRACKING). */
  readonly deliveries?: DeliveryObserver;
  /** PILOT_ENABLE_FLOW_CONTROL / PILOT_FLOW_CONTROL_TIMEOUT (flow-control.ts). */
  readonly flowControl?: FlowControlOptions;
}

/** Make-before-break order: clusters before their endpoints, listeners before their routes. */
const PUSH_ORDER: readonly string[] = [
  TypeUrl.Cluster,
  TypeUrl.ClusterLoadAssignment,
  TypeUrl.Listener,
  TypeUrl.RouteConfiguration,
  TypeUrl.Secret,
];

function pushRank(typeUrl: string): number {
  const i = PUSH_ORDER.indexOf(typeUrl);
  return i < 0 ? PUSH_ORDER.length : i;
}

/** One live stream: its protocol state plus how to answer on it. */
interface Session {
  readonly conn: Connection;
  /** Regenerates a watch and sends what changed; `force` sends even when nothing did. */
  respond(w: Watch, force: boolean, push?: PushRequest, added?: readonly string[]): Promise<void>;
  /** Ends this stream with a status (an XdsStreamError's, else INTERNAL). */
  fail(err: unknown): void;
  /** Pushes waiting for the proxy's reply to the previous response (flow control on). */
  hold?: PushHold;
}

export class XdsServer {
  /** The gRPC server, so other services (CA, SDS) can share its ports. */
  readonly grpc: Server;
  /** Live streams by connection id, in connection order. */
  private readonly sessions = new Map<string, Session>();
  private readonly generators: ReadonlyMap<string, ResourceGenerator>;
  private readonly sendTimeoutMs: number;
  /** Responses too large for the proxies' gRPC clients: held back, reported (/debug/oversized). */
  readonly sizes: ResponseSizeGuard;
  /**
   * Bounds the streams being generated for and written to at once (PILOT_PUSH_THROTTLE), for
   * pushes and answers alike: with every write started at once, the last streams would wait
   * behind all the others' bytes and hit the send timeout, which is meant for slow proxies.
   */
  private readonly sendSlots: Semaphore;
  private readonly sender: ResponseSender;
  private readonly joiner = new ResponseJoiner();
  private connectionSeq = 0;
  private readonly flowControl: FlowControlOptions;

  constructor(private readonly options: XdsServerOptions) {
    this.generators = options.generators;
    this.sendTimeoutMs = options.sendTimeoutMs ?? settingDefault('PILOT_XDS_SEND_TIMEOUT');
    this.sizes = new ResponseSizeGuard(options.maxResponseBytes);
    this.sender = new ResponseSender({ generators: this.generators, deliveries: options.deliveries, controlPlaneId: options.controlPlaneId, sendTimeoutMs: this.sendTimeoutMs, sizes: this.sizes });
    this.sendSlots = new Semaphore(options.pushThrottle ?? settingDefault('PILOT_PUSH_THROTTLE'));
    this.flowControl = options.flowControl ?? { enabled: settingDefault('PILOT_ENABLE_FLOW_CONTROL'), timeoutMs: settingDefault('PILOT_FLOW_CONTROL_TIMEOUT') };
    this.grpc = new Server(grpcOptions(options));
    this.grpc.addService(adsDefinition(), {
      streamAggregatedResources: (call: ServerDuplexStream<SotwWireRequest, OutgoingResponse>) => this.serveSotw(call),
      deltaAggregatedResources: (call: ServerDuplexStream<DeltaWireRequest, OutgoingResponse>) => this.serveDelta(call),
    });
    this.grpc.addService(grpcServiceDefinition(ClientStatusDiscoveryService), csdsHandlers(() => this.liveConnections()));
  }

  /**
   * Binds `host:port`, or `:port` for every interface as the Go flags (--grpcAddr :15010) mean it;
   * port 0 picks one. Returns the bound port. Call once per address (plain and TLS, say).
   */
  listen(address: string, credentials: ServerCredentials = ServerCredentials.createInsecure()): Promise<number> {
    const target = address.startsWith(':') ? `0.0.0.0${address}` : address;
    return new Promise((resolve, reject) => {
      this.grpc.bindAsync(target, credentials, (err, port) => (err ? reject(new Error(`cannot listen on ${address}: ${err.message}`)) : resolve(port)));
    });
  }

  /** Ends every stream and stops serving. */
  close(): void {
    this.grpc.forceShutdown();
    for (const s of this.sessions.values()) this.dropSession(s);
  }

  /** Regenerates the changed types for every connected proxy and sends what differs. */
  pushAll(push: PushRequest): Promise<void> {
    return this.pushTo([...this.sessions.values()], push);
  }

  /** The same, for the streams of one proxy (node id). */
  push(proxyId: string, push: PushRequest): Promise<void> {
    return this.pushTo(
      [...this.sessions.values()].filter((s) => s.conn.proxy.id === proxyId),
      push,
    );
  }

  /**
   * Ends every stream of one proxy with UNAVAILABLE, so its client reconnects and resyncs
   * (/debug/force_disconnect). Returns how many streams were ended.
   */
  disconnect(proxyId: string, reason: string): number {
    const streams = [...this.sessions.values()].filter((s) => s.conn.proxy.id === proxyId);
    for (const s of streams) s.fail(new XdsStreamError(status.UNAVAILABLE, reason));
    return streams.length;
  }

  /**
   * Whether some stream has a response its proxy has not answered yet (no ACK or NACK read):
   * false once every reply to what was sent has been read and applied (bench/xds waits for it
   * between steps). Stops at the first such stream: streams are kept in connection order, which is
   * also the order pushes reach them, so a poll walks only the ones already settled.
   */
  awaitsReplies(): boolean {
    for (const s of this.sessions.values()) if (s.conn.awaitsReply()) return true;
    return false;
  }

  /** A connected proxy by node id (its latest stream, if it has several), for debug views. */
  proxyInfo(proxyId: string): ProxyInfo | undefined {
    let found: ProxyInfo | undefined;
    for (const s of this.sessions.values()) if (s.conn.proxy.id === proxyId) found = s.conn.proxy;
    return found;
  }

  /** Per-stream state for debug views (syncz, connections, adsz). */
  connections(): ConnectionStatus[] {
    return [...this.sessions.values()].map((s) => s.conn.status());
  }

  private async pushTo(sessions: readonly Session[], push: PushRequest): Promise<void> {
    const queuedAt = performance.now();
    await Promise.all(sessions.map((s) => this.pushOne(s, push, queuedAt)));
  }

  private async pushOne(s: Session, push: PushRequest, queuedAt: number): Promise<void> {
    let held = false;
    try {
      await s.conn.enqueue(() =>
        this.sendSlots.run(async () => {
          histogram('pilot_proxy_queue_time').observe((performance.now() - queuedAt) / 1000);
          const watches = [...s.conn.watches.values()]
            .filter((w) => push.types === undefined || push.types.has(w.typeUrl))
            .sort((a, b) => pushRank(a.typeUrl) - pushRank(b.typeUrl));
          for (const w of watches) {
            if (s.conn.closed) return;
            if (s.hold?.hold(w, push)) held = true;
            else await s.respond(w, false, push);
          }
        }),
      );
      if (push.triggeredAt !== undefined && !held) histogram('pilot_proxy_convergence_time').observe((Date.now() - push.triggeredAt) / 1000);
    } catch (err) {
      s.fail(err);
    }
  }

  // ---- streams ----

  /**
   * The lifecycle shared by SotW and Delta streams: the first request identifies the proxy, every
   * request is validated and handled in order, and an XdsStreamError ends only this stream.
   */
  private serve<Req extends { node?: Node; typeUrl: string; errorDetail?: { message: string } }>(
    call: ServerDuplexStream<Req, OutgoingResponse>,
    protocol: 'sotw' | 'delta',
    handle: (s: Session, req: Req) => Promise<void>,
    responder: (conn: Connection, send: (msg: ResponseBytes) => Promise<void>) => Session['respond'],
    received: (s: Session, req: Req) => void,
  ): void {
    let session: Session | undefined;
    // Set once the stream is failed: requests already in flight behind the bad one are dropped.
    let failed = false;
    const fail = (err: unknown): void => {
      if (failed || session?.conn.closed) return;
      failed = true;
      const e =
        err instanceof XdsStreamError
          ? err
          : new XdsStreamError(status.INTERNAL, `internal error: ${err instanceof Error ? err.message : String(err)}`);
      if (!(err instanceof XdsStreamError)) counter('pilot_total_xds_internal_errors').inc();
      log.warn(`closing stream${session ? ` of ${session.conn.proxy.connectionId}` : ''}: ${e.message}`);
      if (session) this.dropSession(session);
      call.emit('error', e);
    };
    const writer = responseWriter(call, this.joiner);
    const send = (msg: ResponseBytes): Promise<void> => this.sender.write(writer, msg);
    call.on('data', (req: Req) => {
      if (failed) return;
      if (!session) {
        try {
          const conn = new Connection(this.identify(req.node, call), protocol);
          session = { conn, respond: responder(conn, send), fail };
          session.hold = this.pushHold(session);
        } catch (err) {
          fail(err);
          return;
        }
        const opened = session;
        void opened.conn.enqueue(() => this.open(opened)).catch(fail);
      }
      const s = session;
      received(s, req);
      void s.conn
        .enqueue(async () => {
          if (s.conn.closed) return;
          if (req.typeUrl === HEALTH_INFO_TYPE_URL) return this.options.onHealth?.(s.conn.proxy, req.errorDetail ? { healthy: false, message: req.errorDetail.message } : { healthy: true });
          this.checkType(req.typeUrl);
          await handle(s, req);
        })
        .catch(fail);
    });
    const end = (): void => {
      if (session) this.dropSession(session);
    };
    call.on('end', () => {
      end();
      call.end();
    });
    call.on('cancelled', end);
    call.on('close', end);
    call.on('error', end);
  }

  private pushHold(s: Session): PushHold | undefined {
    if (!this.flowControl.enabled) return undefined;
    return new PushHold(s.conn.proxy.connectionId, this.flowControl.timeoutMs, (typeUrl, push) => {
      void s.conn.enqueue(() => this.sendHeld(s, typeUrl, push)).catch(s.fail);
    });
  }

  /** Sends a push flow control held, once the proxy replied or the wait ran out. */
  private async sendHeld(s: Session, typeUrl: string, push: PushRequest): Promise<void> {
    const w = s.conn.watches.get(typeUrl);
    if (!w || s.conn.closed) return;
    await this.sendSlots.run(() => s.respond(w, false, push));
    if (push.triggeredAt !== undefined) histogram('pilot_proxy_convergence_time').observe((Date.now() - push.triggeredAt) / 1000);
  }

  /** The proxy answered its last response of the type: a push held behind it goes now. */
  private async releaseHeld(s: Session, typeUrl: string, kind: ReplyKind): Promise<void> {
    const push = kind === 'stale' ? undefined : s.hold?.release(typeUrl);
    if (push) await this.sendHeld(s, typeUrl, push);
  }

  private serveSotw(call: ServerDuplexStream<SotwWireRequest, OutgoingResponse>): void {
    this.serve(
      call,
      'sotw',
      (s, req) => this.onSotwRequest(s, req),
      (conn, send) => (w, force, push) => this.sender.respondSotw(conn, send, w, force, push),
      (s, req) => shareNames(req, s.conn.watches.get(req.typeUrl)?.requested),
    );
  }

  private serveDelta(call: ServerDuplexStream<DeltaWireRequest, OutgoingResponse>): void {
    this.serve(
      call,
      'delta',
      (s, req) => this.onDeltaRequest(s, req),
      (conn, send) => (w, force, push, added) => this.sender.respondDelta(conn, send, w, force, push, added ?? []),
      // Only a type's first request names a whole list (later ones change it by increments).
      (s, req) => {
        if (!s.conn.watches.has(req.typeUrl)) shareNames(req, undefined);
      },
    );
  }

  /** The proxy a stream's first request names; throws the reason it cannot be served. */
  private identify(node: Node | undefined, call: ServerDuplexStream<unknown, unknown>): ProxyInfo {
    if (!node) throw new XdsStreamError(status.INVALID_ARGUMENT, 'the first request of a stream must carry a node');
    if (!node.id) throw new XdsStreamError(status.INVALID_ARGUMENT, 'node.id is empty: the proxy must identify itself');
    if (!node.metadata) throw new XdsStreamError(status.INVALID_ARGUMENT, `node ${node.id} has no metadata`);
    const text = (key: string): string | undefined => {
      const v = call.metadata.get(key)[0];
      return typeof v === 'string' ? v : undefined;
    };
    const credentials = { authorization: text('authorization'), peerCertificate: call.getAuthContext().sslPeerCertificate?.raw, transport: text('mesh-transport') };
    return { id: node.id, metadata: node.metadata, node, peer: call.getPeer(), credentials, connectionId: `${node.id}-${++this.connectionSeq}` };
  }

  private checkType(typeUrl: string): void {
    if (typeUrl === '') throw new XdsStreamError(status.INVALID_ARGUMENT, 'type_url is empty: ADS requests must name their type');
    if (!this.generators.has(typeUrl)) {
      throw new XdsStreamError(status.INVALID_ARGUMENT, `unknown type URL "${typeUrl}": served types are ${[...this.generators.keys()].join(', ')}`);
    }
  }

  private async open(s: Session): Promise<void> {
    await this.options.onConnect?.(s.conn.proxy);
    // The proxy may have gone while the hook ran: what the hook set up (an auto-registered
    // WorkloadEntry, say) is still undone, as onDisconnect follows every onConnect that succeeded.
    if (s.conn.closed) {
      this.options.onDisconnect?.(s.conn.proxy);
      return;
    }
    this.sessions.set(s.conn.proxy.connectionId, s);
    gauge('pilot_xds').set(this.sessions.size);
    log.info(`new ${s.conn.protocol} connection ${s.conn.proxy.connectionId} from ${s.conn.proxy.peer}`);
  }

  private dropSession(s: Session): void {
    if (s.conn.closed) return;
    s.conn.closed = true;
    s.hold?.clear();
    if (!this.sessions.delete(s.conn.proxy.connectionId)) return;
    this.sizes.forget(s.conn.proxy.connectionId);
    gauge('pilot_xds').set(this.sessions.size);
    for (const w of s.conn.watches.values()) if (w.rejecting) updateRejectGauge(w.typeUrl, this.liveConnections());
    log.info(`connection ${s.conn.proxy.connectionId} closed`);
    this.options.onDisconnect?.(s.conn.proxy);
  }

  private async onSotwRequest(s: Session, req: DiscoveryRequest): Promise<void> {
    const decision = this.trackRejecting(s.conn, req.typeUrl, () => s.conn.applySotw(req));
    switch (decision.kind) {
      case 'respond': {
        const w = s.conn.watches.get(req.typeUrl);
        if (w) await this.sendSlots.run(() => s.respond(w, true));
        return;
      }
      case 'ack':
      case 'nack':
      case 'stale':
        recordReply(s.conn, req.typeUrl, decision.kind, req.responseNonce);
        if (decision.kind === 'ack') this.options.deliveries?.acked(s.conn.proxy.connectionId, req.typeUrl, req.responseNonce);
        await this.releaseHeld(s, req.typeUrl, decision.kind);
        return;
      case 'unsubscribe':
      case 'ignore':
        return;
    }
  }

  private async onDeltaRequest(s: Session, req: DeltaDiscoveryRequest): Promise<void> {
    const decision = this.trackRejecting(s.conn, req.typeUrl, () => s.conn.applyDelta(req));
    if (decision.reply) {
      recordReply(s.conn, req.typeUrl, decision.reply, req.responseNonce);
      if (decision.reply === 'ack') this.options.deliveries?.acked(s.conn.proxy.connectionId, req.typeUrl, req.responseNonce);
      await this.releaseHeld(s, req.typeUrl, decision.reply);
    }
    const w = s.conn.watches.get(req.typeUrl);
    if (w && decision.respond) await this.sendSlots.run(() => s.respond(w, w.sent === undefined, undefined, decision.added));
  }

  /** Runs `apply`, refreshing the reject gauge when it flips the stream in or out of rejecting. */
  private trackRejecting<T>(conn: Connection, typeUrl: string, apply: () => T): T {
    const before = conn.watches.get(typeUrl)?.rejecting ?? false;
    const result = apply();
    if ((conn.watches.get(typeUrl)?.rejecting ?? false) !== before) updateRejectGauge(typeUrl, this.liveConnections());
    return result;
  }

  private liveConnections(): Connection[] {
    return [...this.sessions.values()].map((s) => s.conn);
  }
}

/** Encoded size of each resource, for the size guard. */
