// The agent's local xDS proxy (PROXY_XDS_VIA_AGENT): the data-plane proxy's ADS stream ends here,
// on 127.0.0.1:<xdsProxyPort>, and is relayed over ONE upstream stream to the discovery server.
//
// Requests and responses pass through unchanged, so the xDS protocol (versions, nonces, ACK/NACK)
// stays between the proxy and the discovery server. What the relay adds:
// - when the upstream stream breaks, the proxy's stream stays open (the proxy keeps serving its
//   config) and the relay reconnects with exponential backoff; the new stream is primed with the
//   proxy's latest request of each type (its versions and names, without the old stream's nonces),
//   so the proxy needs no restart and the server can skip unchanged content;
// - failures are counted: `meshd_connection_failures` for an upstream stream that ended before
//   any response (could not connect), `meshd_connection_terminations` for one that had worked;
// - the proxy's ACKs are observed, which tells readiness when listeners and clusters are applied;
// - JwksService (proto/mesh/v1/jwks.proto) is served on the same address and relayed upstream, at
//   most one request per issuer per `jwksRefreshCooldownMs`: the proxy reports tokens whose kid its
//   issuer's key set lacks, and the discovery server decides whether to refetch;
// - the workload's health (reportHealth, from workload-health.ts) goes upstream as a
//   HealthInformation request, after the stream's LDS request as in the Go mesh, and again on
//   every new upstream stream; it is the agent's own, so it never reaches the proxy.
import { EventEmitter } from 'node:events';
import { clone, create } from '@bufbuild/protobuf';
import {
  credentials as grpcCredentials,
  Server,
  ServerCredentials,
  status,
  type ChannelCredentials,
  type Client,
  type ClientDuplexStream,
  type ServerDuplexStream,
  type ServiceError,
} from '@grpc/grpc-js';
import { AggregatedDiscoveryService } from '../gen/envoy/service/discovery/v3/ads_pb.js';
import { DiscoveryRequestSchema, type DiscoveryRequest, type DiscoveryResponse } from '../gen/envoy/service/discovery/v3/discovery_pb.js';
import type { Node } from '../gen/envoy/config/core/v3/base_pb.js';
import { counter } from '../common/metrics.js';
import { scope } from '../common/log.js';
import { Backoff, requestRank } from '../envoy/ads-client.js';
import { grpcClient, grpcServiceDefinition } from '../envoy/grpc-service.js';
import { grpcRefreshTransport, serveJwksService } from '../envoy/jwks-grpc.js';
import { IssuerCooldown, JwksRefreshClient, type RefreshVerdict, type RequestRefreshRequest } from '../envoy/jwks-service.js';
import { HEALTH_INFO_TYPE_URL, shortTypeName, TypeUrl, type HealthReport } from '../envoy/types.js';

const log = scope('xdsproxy');

/** The grpc-js client of the ADS service, typed for the SotW method. */
interface AdsGrpcClient extends Client {
  streamAggregatedResources(): ClientDuplexStream<DiscoveryRequest, DiscoveryResponse>;
}

export interface XdsProxyOptions {
  /** host:port of the discovery server. */
  upstreamAddress: string;
  /** Where the proxy connects, e.g. `127.0.0.1:15011` (port 0 = any free port). */
  listenAddress: string;
  credentials?: ChannelCredentials;
  initialBackoffMs?: number;
  maxBackoffMs?: number;
  /** JwksService relay: at most one request per issuer within this window. Default 5 s. */
  jwksRefreshCooldownMs?: number;
  /**
   * Types the agent itself subscribes to on the upstream stream (wildcard) and consumes, never
   * relayed to the proxy: the DNS name table. The handler's return ACKs, its throw NACKs.
   */
  agentTypes?: ReadonlyMap<string, (res: DiscoveryResponse) => void>;
}

/** The agent's own bound on unknown-kid reports, below the discovery server's per-issuer cooldown. */
const DEFAULT_JWKS_REFRESH_COOLDOWN_MS = 5_000;

export interface XdsProxyEvents {
  /** The proxy ACKed a response of this type. */
  acked: [typeUrl: string, version: string];
  /** The proxy NACKed one. */
  nacked: [typeUrl: string, version: string, message: string];
  upstreamConnected: [];
  upstreamDisconnected: [reason: string];
}

type Downstream = ServerDuplexStream<DiscoveryRequest, DiscoveryResponse>;

/** One proxy stream and the upstream stream it is relayed over. */
class Relay {
  private node?: Node;
  /** The proxy's latest request per type: what a new upstream stream is primed with. */
  private readonly latest = new Map<string, DiscoveryRequest>();
  /** Responses relayed on the current upstream stream, by nonce: to recognise the proxy's ACKs. */
  private readonly sent = new Map<string, { typeUrl: string; version: string }>();
  private upstream?: ClientDuplexStream<DiscoveryRequest, DiscoveryResponse>;
  private retryTimer?: NodeJS.Timeout;
  private done = false;
  private readonly backoff: Backoff;
  /** Last version of each agent type the agent accepted: where a new upstream stream resumes. */
  private readonly agentVersions = new Map<string, string>();
  /** The current upstream stream has carried the proxy's LDS request: health may follow it. */
  private listenersRequested = false;

  constructor(
    private readonly owner: XdsProxy,
    private readonly grpc: AdsGrpcClient,
    private readonly downstream: Downstream,
    private readonly opts: XdsProxyOptions,
  ) {
    this.backoff = new Backoff(opts.initialBackoffMs, opts.maxBackoffMs);
    downstream.on('data', (req: DiscoveryRequest) => this.fromProxy(req));
    const gone = () => this.close('the proxy closed its stream');
    downstream.on('end', gone);
    downstream.on('cancelled', gone);
    downstream.on('error', gone);
  }

  /** Ends both streams; the proxy's with OK, or with UNAVAILABLE when the agent is going away. */
  close(why: string, unavailable = false): void {
    if (this.done) return;
    this.done = true;
    log.info(`proxy stream ended: ${why}`);
    clearTimeout(this.retryTimer);
    const up = this.upstream;
    this.upstream = undefined;
    up?.cancel();
    if (unavailable) this.downstream.emit('error', { code: status.UNAVAILABLE, details: why });
    else if (!this.downstream.writableEnded) this.downstream.end();
    this.owner.forget(this);
  }

  private fromProxy(req: DiscoveryRequest): void {
    if (req.node) this.node = req.node;
    const sent = req.responseNonce ? this.sent.get(req.responseNonce) : undefined;
    if (sent && sent.typeUrl === req.typeUrl) {
      this.sent.delete(req.responseNonce);
      if (req.errorDetail) this.owner.emit('nacked', req.typeUrl, sent.version, req.errorDetail.message);
      else this.owner.noteAck(req.typeUrl, sent.version);
    }
    this.latest.set(req.typeUrl, req);
    if (this.upstream) {
      this.upstream.write(req);
      if (req.typeUrl === TypeUrl.Listener && !this.listenersRequested) {
        this.listenersRequested = true;
        this.sendHealth();
      }
    } else if (!this.retryTimer) this.connect();
  }

  /** The agent's latest health report, on the current upstream stream once it has carried LDS. */
  sendHealth(): void {
    const health = this.owner.health;
    if (health && this.upstream && this.listenersRequested) this.upstream.write(health);
  }

  private connect(): void {
    this.retryTimer = undefined;
    if (this.done) return;
    const up = this.grpc.streamAggregatedResources();
    this.upstream = up;
    this.sent.clear();
    let established = false;
    let ended = false;
    const end = (why: string) => {
      if (ended) return;
      ended = true;
      if (this.upstream !== up) return;
      this.upstream = undefined;
      if (this.done) return;
      if (established) counter('meshd_connection_terminations').inc();
      else counter('meshd_connection_failures').inc();
      this.owner.emit('upstreamDisconnected', why);
      const delay = this.backoff.next();
      log.warn(`upstream xDS stream to ${this.owner.upstreamAddress} ${established ? 'terminated' : 'failed'} (${why}); the proxy keeps its config; reconnecting in ${delay}ms`);
      this.retryTimer = setTimeout(() => this.connect(), delay);
    };
    up.on('data', (res: DiscoveryResponse) => {
      if (this.upstream !== up) return;
      if (!established) {
        established = true;
        this.backoff.reset();
        log.info(`upstream xDS stream to ${this.owner.upstreamAddress} established`);
        this.owner.emit('upstreamConnected');
      }
      const own = this.opts.agentTypes?.get(res.typeUrl);
      if (own) return this.consume(up, res, own);
      this.sent.set(res.nonce, { typeUrl: res.typeUrl, version: res.versionInfo });
      this.downstream.write(res);
    });
    up.on('status', (s) => end(`${s.code} ${s.details}`));
    up.on('error', (e: ServiceError) => end(`${e.code} ${e.details}`));
    up.on('end', () => end('closed by the server'));
    this.prime(up);
    for (const typeUrl of this.opts.agentTypes?.keys() ?? []) {
      up.write(create(DiscoveryRequestSchema, { typeUrl, versionInfo: this.agentVersions.get(typeUrl) ?? '' }));
    }
    this.listenersRequested = this.latest.has(TypeUrl.Listener);
    this.sendHealth();
  }

  /** An agent type's response: applied here and ACKed (or NACKed) upstream by the agent itself. */
  private consume(up: ClientDuplexStream<DiscoveryRequest, DiscoveryResponse>, res: DiscoveryResponse, handle: (res: DiscoveryResponse) => void): void {
    let rejection: string | undefined;
    try {
      handle(res);
      this.agentVersions.set(res.typeUrl, res.versionInfo);
    } catch (e) {
      rejection = (e as Error).message;
      log.warn(`rejected ${shortTypeName(res.typeUrl)} version ${res.versionInfo}: ${rejection}`);
    }
    const ack = create(DiscoveryRequestSchema, {
      typeUrl: res.typeUrl,
      responseNonce: res.nonce,
      // A NACK names the last version accepted, and why this one is not.
      versionInfo: this.agentVersions.get(res.typeUrl) ?? '',
      ...(rejection !== undefined ? { errorDetail: { code: status.INVALID_ARGUMENT, message: rejection } } : {}),
    });
    up.write(ack);
  }

  /** Replays the proxy's latest request of each type on a new upstream stream. */
  private prime(up: ClientDuplexStream<DiscoveryRequest, DiscoveryResponse>): void {
    const types = [...this.latest.keys()].sort((a, b) => requestRank(a) - requestRank(b));
    types.forEach((t, i) => {
      const req = clone(DiscoveryRequestSchema, this.latest.get(t)!);
      // Nonces and error details belong to the old stream.
      req.responseNonce = '';
      req.errorDetail = undefined;
      req.node = i === 0 ? this.node : undefined;
      up.write(req);
    });
  }
}

export class XdsProxy extends EventEmitter<XdsProxyEvents> {
  private readonly server = new Server();
  private readonly grpc: AdsGrpcClient;
  private readonly relays = new Set<Relay>();
  private readonly ackedTypes = new Map<string, string>();
  private readonly jwks: JwksRefreshClient;
  private readonly jwksCooldown: IssuerCooldown;
  /** The latest health report as its request; re-sent on every new upstream stream. */
  private latestHealth?: DiscoveryRequest;

  constructor(private readonly opts: XdsProxyOptions) {
    super();
    const creds = opts.credentials ?? grpcCredentials.createInsecure();
    this.grpc = grpcClient(AggregatedDiscoveryService, opts.upstreamAddress, creds) as AdsGrpcClient;
    this.jwks = new JwksRefreshClient(opts.upstreamAddress, grpcRefreshTransport(opts.upstreamAddress, creds));
    this.jwksCooldown = new IssuerCooldown(opts.jwksRefreshCooldownMs ?? DEFAULT_JWKS_REFRESH_COOLDOWN_MS);
    serveJwksService(this.server, (req) => this.relayJwksRefresh(req));
    this.server.addService(grpcServiceDefinition(AggregatedDiscoveryService), {
      streamAggregatedResources: (call: Downstream) => this.accept(call),
      deltaAggregatedResources: (call: ServerDuplexStream<unknown, unknown>) =>
        call.emit('error', { code: status.UNIMPLEMENTED, details: 'the agent relays State-of-the-World ADS only' }),
    });
  }

  get upstreamAddress(): string {
    return this.opts.upstreamAddress;
  }

  /** Binds the local server; resolves to its port. */
  async start(): Promise<number> {
    return new Promise((resolve, reject) =>
      this.server.bindAsync(this.opts.listenAddress, ServerCredentials.createInsecure(), (e, port) =>
        e ? reject(new Error(`xDS proxy: failed to listen on ${this.opts.listenAddress}: ${e.message}`)) : resolve(port),
      ),
    );
  }

  /** Types the proxy has ACKed at least once, with the last version it ACKed. */
  acked(): ReadonlyMap<string, string> {
    return this.ackedTypes;
  }

  /** The proxy has applied listeners and clusters. */
  hasListenersAndClusters(): boolean {
    return this.ackedTypes.has(TypeUrl.Listener) && this.ackedTypes.has(TypeUrl.Cluster);
  }

  noteAck(typeUrl: string, version: string): void {
    if (!this.ackedTypes.has(typeUrl)) log.info(`proxy applied its first ${shortTypeName(typeUrl)} (version ${version})`);
    this.ackedTypes.set(typeUrl, version);
    this.emit('acked', typeUrl, version);
  }

  /**
   * The workload's health (a transition, from the checker): kept, and sent upstream as a
   * HealthInformation request: no error_detail = healthy, error_detail INTERNAL = unhealthy.
   */
  reportHealth(report: HealthReport): void {
    this.latestHealth = create(DiscoveryRequestSchema, {
      typeUrl: HEALTH_INFO_TYPE_URL,
      ...(report.healthy ? {} : { errorDetail: { code: status.INTERNAL, message: report.message ?? 'unhealthy' } }),
    });
    for (const r of this.relays) r.sendHealth();
  }

  get health(): DiscoveryRequest | undefined {
    return this.latestHealth;
  }

  forget(r: Relay): void {
    this.relays.delete(r);
  }

  close(): void {
    for (const r of [...this.relays]) r.close('the agent is shutting down', true);
    this.server.forceShutdown();
    this.grpc.close();
    this.jwks.close();
  }

  /**
   * Relays a JwksService request upstream unless this issuer was relayed within the cooldown. An
   * unreachable discovery server is an error for the proxy (it only logs it); the request is not
   * queued: the next unknown kid, or the periodic refresh, asks again.
   */
  private async relayJwksRefresh({ issuer, kid }: RequestRefreshRequest): Promise<RefreshVerdict> {
    if (!this.jwksCooldown.take(issuer)) {
      return { accepted: false, reason: `the agent relayed a request for this issuer less than ${this.jwksCooldown.windowMs}ms ago` };
    }
    const verdict = await this.jwks.requestRefresh(issuer, kid);
    log.debug(`JWKS refresh for an unknown kid relayed: ${verdict.accepted ? 'accepted' : 'refused'} (${verdict.reason})`, { issuer, kid });
    return verdict;
  }

  private accept(call: Downstream): void {
    // The proxy holds one ADS stream; a new one (it reconnected) replaces the old relay.
    for (const r of [...this.relays]) r.close('the proxy opened a new stream');
    this.relays.add(new Relay(this, this.grpc, call, this.opts));
  }
}
