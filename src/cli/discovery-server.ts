// Assembles the discovery server from its flags (the Go mesh's bootstrap): config source, service
// registries, PushContext, JWKS resolver, xDS server with the mesh's generators, debounced pushes,
// the validation webhook, and the HTTP servers (--httpAddr: /ready and the debug endpoints;
// --monitoringAddr: /metrics, /version and the same debug endpoints).
import type { Server } from 'node:http';
import { status } from '@grpc/grpc-js';
import { listSettings } from '../common/env.js';
import { scope } from '../common/log.js';
import { counter, gauge, programRegistry } from '../common/metrics.js';
import { buildInfo } from '../common/version.js';
import { FileConfigStore } from '../config/file.js';
import { OrchestratorConfigSource, type OrchestratorSourceOptions } from '../config/orchestrator.js';
import { MemoryStore } from '../config/memory.js';
import type { ConfigEvent, ConfigSource } from '../config/store.js';
import { installDiscoveryDebug } from '../debug/discovery.js';
import { closeServer, formatAddress, httpServer, listen, ListenError, Mux, sendJson, sendText } from '../debug/http.js';
import type { HttpFilter } from '../gen/envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager_pb.js';
import type { Proxy } from '../model/proxy.js';
import { PushContext } from '../model/push-context.js';
import { AggregateRegistry } from '../registry/aggregate.js';
import { AutoRegistration, AutoRegistrationError } from '../registry/autoregister.js';
import { MockRegistry } from '../registry/mock.js';
import { ServiceEntryRegistry } from '../registry/serviceentry.js';
import type { ServiceRegistry } from '../registry/types.js';
import { JwksResolver } from '../security/authn/jwks-resolver.js';
import { jwksPrefetch, unknownKidRefresh } from '../security/authn/jwks-policy.js';
import { buildWorkloadSecurity, grpcServerHttpFilters, securityHttpFilters, type WorkloadSecurity } from '../security/filters.js';
import { XdsCache } from '../xds/cache.js';
import { Debouncer } from '../xds/debounce.js';
import { XdsStreamError, type ProxyInfo, type PushRequest } from '../xds/generator.js';
import type { PathNormalization } from '../networking/common.js';
import { createMeshGenerators, MESH_XDS_TYPES, proxyOf } from '../xds/generators/index.js';
import { serveJwksService, type RefreshVerdict, type RequestRefreshRequest } from '../envoy/jwks-service.js';
import { pushFor, workloadAddresses, type PushTrigger } from '../xds/push-scope.js';
import { XdsServer } from '../xds/server.js';
import { WebhookServer } from '../webhooks/server.js';
import { installValidation } from '../webhooks/validation.js';
import { discoverySettings, type DiscoverySettings } from './discovery-settings.js';

const log = scope('default');

export interface DiscoveryOptions {
  httpAddr: string;
  monitoringAddr: string;
  grpcAddr: string;
  httpsAddr: string;
  /** --configDir: files replace the orchestrator as the config source. */
  configDir?: string;
  orchestrator: OrchestratorSourceOptions;
  registries: readonly string[];
  domain: string;
  clusterId: string;
  keepaliveIntervalMs: number;
  keepaliveTimeoutMs: number;
  maxConnectionAgeMs: number;
  tlsCertFile?: string;
  tlsKeyFile?: string;
  /** Mesh config pathNormalization of every HTTP connection manager; default BASE. */
  pathNormalization?: PathNormalization;
}

export class DiscoveryServer {
  private readonly servers: Server[] = [];
  private ready = false;
  readonly debug = new Mux();
  // The debug endpoints are reachable on the monitoring address too, like the Go mesh's, so
  // `pilot-discovery request` reaches them.
  readonly monitoring = new Mux(this.debug);
  /** Bound addresses, for logs and tests that listen on port 0. */
  readonly addresses: Record<string, string> = {};
  readonly store: ConfigSource;
  readonly registry: AggregateRegistry;
  /** The in-memory registry of `--registries Mock`, for tests to drive. */
  readonly mock: MockRegistry | undefined;
  readonly resolver: JwksResolver;
  readonly xds: XdsServer;
  /** WorkloadEntries of auto-registered proxies (the config source stays the user's, read-only). */
  readonly autoEntries = new MemoryStore();
  readonly autoRegistration: AutoRegistration;
  /** Per gRPC server proxy: the unenforceable-policy notes last logged. */
  private readonly grpcNotes = new Map<string, string>();
  private readonly debouncer: Debouncer;
  private readonly webhook: WebhookServer;
  /** The settings, read once when the server is made. */
  private readonly settings: DiscoverySettings;
  private push: PushContext;
  /** Live streams, for pushes aimed at the proxies of one workload. */
  private readonly connected = new Map<string, ProxyInfo>();
  /** Addresses of WorkloadEntries changed since the last push: their proxies' own config may change. */
  private readonly changedWorkloads = new Set<string>();

  constructor(private readonly opts: DiscoveryOptions) {
    const settings = (this.settings = discoverySettings());
    this.store = opts.configDir ? new FileConfigStore({ configDir: opts.configDir }) : new OrchestratorConfigSource({ validate: settings.crdValidation, ...opts.orchestrator });
    this.autoEntries.markSynced();
    this.autoRegistration = new AutoRegistration({ config: this.store, entries: this.autoEntries, controllerId: `pilot-discovery-${buildInfo.version}`, ...settings.autoRegistration });
    const registries: ServiceRegistry[] = [new ServiceEntryRegistry(this.store, opts.clusterId, this.autoEntries)];
    if (opts.registries.includes('Mock')) {
      this.mock = new MockRegistry(opts.clusterId);
      registries.push(this.mock);
    }
    if (opts.registries.includes('Orchestrator')) {
      log.info('the Orchestrator service registry is not implemented yet; services come from ServiceEntry and WorkloadEntry');
    }
    this.registry = new AggregateRegistry(registries, opts.clusterId);
    this.push = this.buildPush();
    this.debouncer = new Debouncer((req) => void this.pushAll(req), settings.debounce);
    this.resolver = new JwksResolver({ onChange: (uri) => this.trigger({ source: 'jwks', uri }) });
    const generators = createMeshGenerators({
      pushContext: () => this.push,
      inboundHttpFilters: (proxy, push) => this.securityFilters(proxy, push),
      serverHttpFilters: (proxy, push) => this.grpcServerFilters(proxy, push),
      inboundSniffing: settings.inboundSniffing,
      outboundSniffing: settings.outboundSniffing,
      detectionTimeout: settings.detectionTimeout,
      ...(opts.pathNormalization ? { pathNormalization: opts.pathNormalization } : {}),
      cache: new XdsCache(settings.cache),
    });
    this.xds = new XdsServer({
      generators,
      ...settings.xds,
      controlPlaneId: `pilot-discovery-${buildInfo.version}`,
      keepaliveIntervalMs: opts.keepaliveIntervalMs,
      keepaliveTimeoutMs: opts.keepaliveTimeoutMs,
      maxConnectionAgeMs: opts.maxConnectionAgeMs,
      onConnect: (info) => this.onProxyConnect(info),
      onDisconnect: (info) => {
        this.connected.delete(info.connectionId);
        this.autoRegistration.unregister(info.connectionId);
      },
    });
    serveJwksService(this.xds.grpc, (req) => this.refreshForUnknownKid(req));
    this.webhook = new WebhookServer({ httpsAddr: opts.httpsAddr, tlsCertFile: opts.tlsCertFile, tlsKeyFile: opts.tlsKeyFile, customHost: settings.webhookCustomHost });

    const metrics = programRegistry('discovery');
    this.debug
      .handle('/ready', 'readiness: 200 once config is read and every listener serves', (_req, res) => sendText(res, this.ready ? 200 : 503, this.ready ? 'ready\n' : 'not ready\n'))
      .handle('/debug', 'this list of debug endpoints', (_req, res) => sendJson(res, 200, this.debug.list()))
      .handle('/debug/env', 'settings registry: every variable with its value, default and whether it is effective', (_req, res) => sendJson(res, 200, listSettings('discovery')));
    if (settings.debugOnHttp) {
      installDiscoveryDebug(this.debug, {
        xds: this.xds,
        generators,
        pushContext: () => this.push,
        store: this.store,
        registry: this.registry,
        resolver: this.resolver,
      });
    }
    this.monitoring
      .handle('/metrics', 'Prometheus metrics of the discovery server', async (_req, res) => sendText(res, 200, await metrics.metrics(), metrics.contentType))
      .handle('/version', 'build information', (_req, res) => sendJson(res, 200, buildInfo));
  }

  /** The jwt_authn and rbac filters of a proxy's inbound HTTP chains, from the policies selecting it. */
  private securityFilters(proxy: Proxy, push: PushContext): HttpFilter[] {
    return securityHttpFilters(this.workloadSecurity(proxy, push));
  }

  /** Selection and both builders for a proxy; untranslatable values are logged (they failed closed). */
  private workloadSecurity(proxy: Proxy, push: PushContext): WorkloadSecurity {
    const sec = buildWorkloadSecurity(proxy, push.policiesFor('RequestAuthentication', proxy), push.policiesFor('AuthorizationPolicy', proxy), this.resolver.lookup, push.rootNamespace);
    for (const w of sec.warnings) log.warn(w);
    return sec;
  }

  /**
   * JwksService: a proxy (through its agent) saw a token whose kid its issuer's key set lacks; see
   * unknownKidRefresh. New keys arrive at the proxies by the resolver's onChange push.
   */
  private refreshForUnknownKid({ issuer, kid }: RequestRefreshRequest): RefreshVerdict {
    const decision = unknownKidRefresh(this.store.list('RequestAuthentication'), issuer);
    const verdict = decision.refetch ? this.resolver.refetchForUnknownKid(issuer, kid) : { started: false, reason: decision.reason };
    if (!verdict.started) log.debug(`JWKS refresh for an unknown kid not started: ${verdict.reason}`, { issuer, kid });
    return { accepted: verdict.started, reason: verdict.reason };
  }

  /**
   * Refuses a malformed node, and auto-registers the proxy's WorkloadEntry. A new entry changes
   * the proxy's own config (its inbound ports come from it), so the snapshot is rebuilt before its
   * first request is answered; the other proxies get the debounced push of the registry event.
   */
  private onProxyConnect(info: ProxyInfo): void {
    const proxy = proxyOf(info);
    let registration;
    try {
      registration = this.autoRegistration.register({ proxy, connectionId: info.connectionId, peer: info.peer });
    } catch (e) {
      if (e instanceof AutoRegistrationError) {
        log.warn(`auto-registration failed: ${e.message}`);
        throw new XdsStreamError(status.FAILED_PRECONDITION, `auto-registration failed: ${e.message}`);
      }
      throw e;
    }
    if (registration?.changed) this.rebuildPush();
    this.connected.set(info.connectionId, info);
  }

  /** Queues the push of the types whose push scope rule the trigger meets (see ../xds/push-scope.ts). */
  private trigger(t: PushTrigger): void {
    const push = pushFor(MESH_XDS_TYPES, t);
    if (push) this.debouncer.enqueue(push);
  }

  private onConfigEvent(e: ConfigEvent): void {
    for (const address of workloadAddresses(e)) this.changedWorkloads.add(address);
    this.trigger({ source: 'config', kind: (e.new ?? e.old).kind });
  }

  /** Every type, to the proxies whose IPs are those of WorkloadEntries changed since the last push. */
  private async pushChangedWorkloads(triggeredAt: number | undefined): Promise<void> {
    if (this.changedWorkloads.size === 0) return;
    const addresses = new Set(this.changedWorkloads);
    this.changedWorkloads.clear();
    const ids = new Set([...this.connected.values()].filter((info) => proxyOf(info).ipAddresses.some((ip) => addresses.has(ip))).map((info) => info.id));
    await Promise.all([...ids].map((id) => this.xds.push(id, { reason: 'workloadentry', ...(triggeredAt !== undefined ? { triggeredAt } : {}) })));
  }

  /** A new snapshot; a failed rebuild keeps the last good one. Returns whether it succeeded. */
  private rebuildPush(): boolean {
    try {
      this.push = this.buildPush();
      return true;
    } catch (e) {
      counter('pilot_xds_push_context_errors').inc();
      log.error(`push context rebuild failed, keeping the last good snapshot: ${(e as Error).message}`);
      return false;
    }
  }

  /**
   * The rbac filters of an xDS-enabled gRPC server. What gRPC cannot enforce (RequestAuthentication,
   * AUDIT) is logged once per proxy and change, not on every push.
   */
  private grpcServerFilters(proxy: Proxy, push: PushContext): HttpFilter[] {
    const sec = this.workloadSecurity(proxy, push);
    const { filters, notes } = grpcServerHttpFilters(sec);
    const summary = notes.join('\n');
    if (this.grpcNotes.get(proxy.id) !== summary) {
      this.grpcNotes.set(proxy.id, summary);
      for (const n of notes) log.warn(`proxy ${proxy.id}: ${n}`);
    }
    return filters;
  }

  private buildPush(): PushContext {
    return PushContext.build({ config: this.store, registry: this.registry, domain: this.opts.domain, clusterId: this.opts.clusterId });
  }

  /** Applies the JWKS prefetch policy (see jwksPrefetch) before a push is built. */
  private async jwksReady(): Promise<void> {
    const { inUse, fetches } = jwksPrefetch(this.store.list('RequestAuthentication'));
    this.resolver.retain(inUse);
    await Promise.all(fetches.map((f) => this.resolver.ready(f.issuer, f.jwksUri, f.timeoutMs)));
  }

  /** Rebuilds the snapshot and pushes; a failed rebuild keeps the last good snapshot. */
  private async pushAll(req: PushRequest): Promise<void> {
    await this.jwksReady();
    if (!this.rebuildPush()) return;
    await this.xds.pushAll(req);
    if (req.types !== undefined) await this.pushChangedWorkloads(req.triggeredAt);
    else this.changedWorkloads.clear();
  }

  /**
   * Binds HTTP and monitoring first (a taken port fails fast; /ready says 503 while config syncs),
   * then waits for the config source, then serves xDS: a proxy never gets a pre-sync snapshot.
   */
  async start(): Promise<void> {
    await this.bind('http', this.opts.httpAddr, this.debug);
    await this.bind('monitoring', this.opts.monitoringAddr, this.monitoring);
    await this.store.start();
    this.store.onEvent((e) => this.onConfigEvent(e));
    this.registry.onEvent((e) => this.trigger({ source: e.kind === 'endpoints' ? 'endpoints' : 'service' }));
    await this.jwksReady();
    this.push = this.buildPush();
    try {
      const port = await this.xds.listen(grpcAddress(this.opts.grpcAddr));
      this.addresses.grpc = this.opts.grpcAddr.replace(/:\d+$/, `:${port}`);
      log.info(`gRPC xDS server listening on ${this.addresses.grpc}`);
    } catch (e) {
      throw new ListenError(`failed to listen on ${this.opts.grpcAddr}: ${(e as Error).message}`);
    }
    if (installValidation(this.webhook, { enabled: this.settings.validationWebhook })) {
      await this.webhook.start();
      log.info(`validation webhook listening on ${this.opts.httpsAddr}`);
    }
    this.ready = true;
    gauge('startup_duration_seconds').set(process.uptime());
    gauge('mesh_build').set({ component: 'pilot-discovery', version: buildInfo.version }, 1);
    log.info('discovery server ready');
  }

  private async bind(name: string, addr: string, mux: Mux): Promise<void> {
    const server = httpServer(mux);
    const bound = await listen(server, addr);
    this.servers.push(server);
    this.addresses[name] = formatAddress(bound);
    log.info(`${name} server listening on ${formatAddress(bound)}`);
  }

  async stop(): Promise<void> {
    this.ready = false;
    this.debouncer.close();
    this.resolver.close();
    this.xds.close();
    this.autoRegistration.close();
    await Promise.all([...this.servers.map(closeServer), this.webhook.close(), this.store.close()]);
    this.servers.length = 0;
  }
}

/** gRPC binds `host:port`; a Go-style `:15010` means every interface. */
function grpcAddress(addr: string): string {
  return addr.startsWith(':') ? `0.0.0.0${addr}` : addr;
}
