// Assembles the discovery server from its flags (the Go mesh's bootstrap): config source, service
// registries, PushContext, JWKS resolver, xDS server with the mesh's generators, debounced pushes,
// the validation webhook, and the HTTP servers (--httpAddr: /ready and the debug endpoints;
// --monitoringAddr: /metrics, /version and the same debug endpoints).
import { existsSync } from 'node:fs';
import type { Server } from 'node:http';
import { status, type ServerCredentials } from '@grpc/grpc-js';
import { listSettings } from '../common/env.js';
import { scope } from '../common/log.js';
import { gauge, programRegistry } from '../common/metrics.js';
import { buildInfo } from '../common/version.js';
import { FileConfigStore } from '../config/file.js';
import { OrchestratorConfigSource } from '../config/orchestrator.js';
import { MemoryStore } from '../config/memory.js';
import type { ConfigSource } from '../config/store.js';
import { installDiscoveryDebug } from '../debug/discovery.js';
import { ConfigAnalysis, installAnalysisDebug, type AnalysisSources } from '../debug/analysis.js';
import { installPprof, type Profiler } from '../debug/pprof/handlers.js';
import { closeServer, formatAddress, httpServer, listen, ListenError, Mux, sendJson, sendText } from '../debug/http.js';
import { ROOT_NAMESPACE, type Kind, type ResourceOf, type WorkloadEntry } from '../api/types.js';
import type { IngressController } from '../registry/orchestrator/ingress.js';
import { AutoRegistration, AutoRegistrationError } from '../registry/autoregister.js';
import { WorkloadHealth } from '../registry/workload-health.js';
import { healthConditionWriter, writtenCondition } from '../status/health-conditions.js';
import type { StatusWriter } from '../status/writer.js';
import { JwksResolver } from '../security/authn/jwks-resolver.js';
import type { AggregateRegistry } from '../registry/aggregate.js';
import type { MockRegistry } from '../registry/mock.js';
import type { OrchestratorRegistry } from '../registry/orchestrator/controller.js';
import { discoveryRegistries } from './discovery-registries.js';
import { ProxySecurity } from './discovery-security.js';
import { unknownKidRefresh } from '../security/authn/jwks-policy.js';
import { AuthenticationError, IdentityMismatchError } from '../security/ca/xds-auth.js';
import { callerAuthenticator, startMeshCa, xdsAuthorizer, type MeshCa } from '../security/ca/setup.js';
import { MeshFederation } from '../security/ca/federation.js';
import type { CallerAuthenticator } from '../security/ca/authenticate.js';
import type { XdsAuthorizer } from '../security/ca/xds-auth.js';
import { credentialService, type CredentialService } from '../security/credentials/setup.js';
import { PlaintextCredentials } from '../security/ca/transport.js';
import type { MeshMtlsSettings } from '../xds/generators/mtls.js';
import { XdsStreamError, type ProxyInfo } from '../xds/generator.js';
import { createMeshGenerators, ProxyModels } from '../xds/generators/index.js';
import { serveJwksService } from '../envoy/jwks-grpc.js';
import type { RefreshVerdict, RequestRefreshRequest } from '../envoy/jwks-service.js';
import { XdsServer } from '../xds/server.js';
import { WebhookServer } from '../webhooks/server.js';
import { TemplateFile } from '../webhooks/inject-template.js';
import { startWebhooks, type Webhooks } from '../webhooks/setup.js';
import { OrchestratorClient } from '../config/informer.js';
import { StatusReporting } from '../status/setup.js';
import { discoverySettings, type DiscoverySettings } from './discovery-settings.js';
import { INJECTION_TEMPLATE_FILE, type DiscoveryOptions } from './discovery-options.js';
import { DiscoveryPushes } from './discovery-pushes.js';
import { meshGeneratorOptions } from './discovery-generators.js';
import { DiscoveryElections } from './discovery-elections.js';
import { readTelemetryProviders } from '../model/telemetry-providers.js';
import type { MeshTrafficDefaults } from '../model/mesh-traffic-defaults.js';

const log = scope('default');

export type { DiscoveryOptions } from './discovery-options.js';
export { INJECTION_TEMPLATE_FILE } from './discovery-options.js';

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
  /** `--registries Orchestrator` with an orchestrator to read. */
  readonly orchestrator: OrchestratorRegistry | undefined;
  /** The orchestrator's Ingresses, translated into Gateways and VirtualServices at every push. */
  readonly ingress: IngressController | undefined;
  readonly resolver: JwksResolver;
  readonly xds: XdsServer;
  /** WorkloadEntries of auto-registered proxies (the config source stays the user's, read-only). */
  readonly autoEntries = new MemoryStore();
  readonly autoRegistration: AutoRegistration;
  /** The per-proxy security translation (discovery-security.ts). */
  private readonly security: ProxySecurity;
  private readonly pushes: DiscoveryPushes;
  /** The HTTPS server of /inject and /validate (its certificate is the webhooks' CA bundle). */
  readonly webhook: WebhookServer;
  /** The injection template file, re-read on change. */
  readonly injectionTemplate: TemplateFile;
  /** The revision tags and the webhook configurations' caBundle upkeep, with an orchestrator. */
  private webhooks: Webhooks | undefined;
  /** The settings, read once when the server is made. */
  private readonly settings: DiscoverySettings;
  private readonly profiler: Profiler | undefined;
  /** PILOT_ENABLE_ANALYSIS: the analysis of the config held, served at /debug/analyze. */
  readonly analysis: ConfigAnalysis | undefined;
  private readonly authenticator: CallerAuthenticator;
  private readonly federation: MeshFederation | undefined;
  private readonly xdsAuth: XdsAuthorizer;
  /** Mesh mTLS: trust domain and aliases, auto mTLS, inbound TLS parameters. */
  private readonly mtls: MeshMtlsSettings;
  /** The CA and the secured port's credentials, once made (start() does not wait for them). */
  ca: MeshCa | undefined;
  /** Each connected stream's proxy, its claims checked against its Pod when there is an orchestrator. */
  private readonly proxies: ProxyModels;
  /** Live streams, for pushes aimed at the proxies of one workload. */
  private readonly connected = new Map<string, ProxyInfo>();
  /** PILOT_ENABLE_STATUS with an orchestrator: distribution and analysis written to resource status. */
  readonly status: StatusReporting | undefined;
  /** With an orchestrator: user WorkloadEntries' Healthy conditions, written where their proxies report. */
  private readonly healthStatus: StatusWriter | undefined;
  /** The writers that run on the elected replica only: status and Ingress status. */
  readonly elections: DiscoveryElections;
  /** MESHD_ENABLE_SDS_SERVER: the credentialName secrets served over SDS. */
  private readonly credentials: CredentialService | undefined;
  /** Streams whose namespace the identity check verified: the only ones given Secrets. */
  private readonly verified = new WeakSet<ProxyInfo>();

  constructor(private readonly opts: DiscoveryOptions) {
    const settings = (this.settings = discoverySettings());
    const meshTraffic: MeshTrafficDefaults = opts.meshTraffic ?? {};
    const telemetryProviders = opts.telemetryProviders ?? readTelemetryProviders({});
    this.store = opts.configDir ? new FileConfigStore({ configDir: opts.configDir }) : new OrchestratorConfigSource({ validate: settings.crdValidation, revision: settings.revision, ...opts.orchestrator });
    this.autoEntries.markSynced();
    const source = this.store instanceof OrchestratorConfigSource ? this.store : undefined;
    const health = new WorkloadHealth(settings.workloadHealthChecks, source ? { persisted: writtenCondition(source) } : {});
    this.autoRegistration = new AutoRegistration({ config: this.store, entries: this.autoEntries, controllerId: `pilot-discovery-${buildInfo.version}`, health, ...settings.autoRegistration });
    const registries = discoveryRegistries({ ...opts, hasOrchestrator: this.hasOrchestrator() }, settings, this.store, this.autoEntries, health);
    this.registry = registries.registry;
    this.mock = registries.mock;
    this.orchestrator = registries.orchestrator;
    this.ingress = registries.ingress;
    this.proxies = registries.proxies;
    // The mesh config's trustDomain, as the Go mesh's discovery server takes it; TRUST_DOMAIN when it sets none.
    this.mtls = { ...settings.mtls, trustDomain: opts.meshMtls?.trustDomain ?? settings.mtls.trustDomain, autoMtls: opts.meshMtls?.autoMtls ?? true, aliases: opts.meshMtls?.trustDomainAliases ?? [] };
    this.status = this.statusReporting();
    this.healthStatus = source ? healthConditionWriter(health, source, OrchestratorClient.connect(opts.orchestrator.kubeconfig), settings.status) : undefined;
    this.elections = new DiscoveryElections({ kubeconfig: opts.orchestrator.kubeconfig, namespace: opts.namespace ?? 'mesh-system', revision: settings.revision, status: this.status, ingress: this.ingress, timings: opts.leaderElection });
    this.credentials = credentialService({
      ...settings.sdsServer,
      configDir: opts.configDir,
      orchestrator: this.hasOrchestrator() ? { kubeconfig: opts.orchestrator.kubeconfig, ...opts.orchestrator } : undefined,
    });
    this.federation = opts.bundleEndpoints?.length ? new MeshFederation(opts.bundleEndpoints, this.mtls.trustDomain) : undefined;
    this.authenticator = callerAuthenticator(this.mtls.trustDomain, this.federation?.peerTrust);
    this.xdsAuth = xdsAuthorizer(this.authenticator);
    this.resolver = new JwksResolver({ onChange: (uri) => this.pushes.trigger({ source: 'jwks', uri }) });
    this.pushes = new DiscoveryPushes({
      store: this.store,
      registry: this.registry,
      ingress: this.ingress,
      snapshot: { domain: opts.domain, clusterId: opts.clusterId, traffic: settings.traffic, credentialsServed: this.credentials !== undefined, outboundTrafficPolicy: meshTraffic.outboundTrafficPolicy ?? 'ALLOW_ANY', rootNamespace: opts.rootNamespace ?? ROOT_NAMESPACE, exportDefaults: meshTraffic.exportTo ?? {}, telemetryProviders },
      status: this.status,
      resolver: this.resolver,
      proxies: this.proxies,
      connected: this.connected,
      xds: () => this.xds,
      debounce: settings.debounce,
    });
    this.security = new ProxySecurity({ resolver: this.resolver, trustDomains: this.mtls, plugins: opts.plugins, extensionProviders: opts.extensionProviders });
    const generators = createMeshGenerators(
      meshGeneratorOptions(opts, settings, {
        pushContext: () => this.pushes.current,
        proxies: this.proxies,
        security: this.security,
        mtls: this.mtls,
        telemetryProviders,
        ...(this.credentials ? { credentials: { store: this.credentials.store, verified: (info: ProxyInfo) => this.verified.has(info) } } : {}),
      }),
    );
    this.xds = new XdsServer({
      generators,
      ...settings.xds,
      controlPlaneId: `pilot-discovery-${buildInfo.version}`,
      keepaliveIntervalMs: opts.keepaliveIntervalMs,
      keepaliveTimeoutMs: opts.keepaliveTimeoutMs,
      maxConnectionAgeMs: opts.maxConnectionAgeMs,
      onConnect: (info) => this.onProxyConnect(info),
      onHealth: (info, report) => this.autoRegistration.reportHealth(info.connectionId, report),
      ...(this.status?.deliveries ? { deliveries: this.status.deliveries } : {}),
      onDisconnect: (info) => {
        this.connected.delete(info.connectionId);
        this.status?.disconnected(info.connectionId);
        this.analysis?.onChange();
        this.autoRegistration.unregister(info.connectionId);
      },
    });
    serveJwksService(this.xds.grpc, (req) => this.refreshForUnknownKid(req));
    this.injectionTemplate = new TemplateFile(opts.injectionTemplate ?? (existsSync(INJECTION_TEMPLATE_FILE) ? INJECTION_TEMPLATE_FILE : undefined));
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
        pushContext: () => this.pushes.current,
        store: this.store,
        registry: this.registry,
        resolver: this.resolver,
        securityOptions: (push) => this.security.options(push),
        proxies: this.proxies,
        adminEndpoints: settings.adminEndpoints,
        workloadEntries: () => health.describe(this.workloadEntries()),
      });
    }
    this.profiler = opts.profile ? installPprof(this.debug) : undefined;
    this.analysis = this.settings.analysis ? new ConfigAnalysis(this.analysisSources()) : undefined;
    if (this.analysis) this.status?.follow(this.analysis);
    installAnalysisDebug(this.debug, this.analysis);
    this.monitoring
      .handle('/metrics', 'Prometheus metrics of the discovery server', async (_req, res) => sendText(res, 200, await metrics.metrics(), metrics.contentType))
      .handle('/version', 'build information', (_req, res) => sendJson(res, 200, buildInfo));
  }

  /** Status is written to the custom resources the orchestrator config source reads, so only there. */
  private statusReporting(): StatusReporting | undefined {
    const { enabled, ...settings } = this.settings.status;
    if (!enabled) return undefined;
    if (!(this.store instanceof OrchestratorConfigSource)) {
      log.info('PILOT_ENABLE_STATUS: config comes from --configDir, which has no status to write; status is not written');
      return undefined;
    }
    const source = this.store;
    return new StatusReporting({ client: OrchestratorClient.connect(this.opts.orchestrator.kubeconfig), store: source, hasMessages: (key) => source.hasValidationMessages(key) }, settings);
  }

  /** With --configDir and no --orchconfig there is no orchestrator to read or patch (the local mode). */
  private hasOrchestrator(): boolean {
    return !(this.opts.configDir && !this.opts.orchestrator.kubeconfig);
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
  private async onProxyConnect(info: ProxyInfo): Promise<void> {
    await this.authorizeProxy(info);
    const proxy = this.proxies.of(info);
    let registration;
    try {
      registration = this.autoRegistration.register({ proxy, connectionId: info.connectionId, peer: info.peer, verified: this.verified.has(info) });
    } catch (e) {
      if (e instanceof AutoRegistrationError) {
        log.warn(`auto-registration failed: ${e.message}`);
        throw new XdsStreamError(status.FAILED_PRECONDITION, `auto-registration failed: ${e.message}`);
      }
      throw e;
    }
    if (registration?.changed) this.pushes.rebuild();
    this.connected.set(info.connectionId, info);
    this.analysis?.onChange();
  }

  /** The user's WorkloadEntries and the auto-registered ones. */
  private workloadEntries(): WorkloadEntry[] {
    return [...this.store.list('WorkloadEntry'), ...this.autoEntries.list('WorkloadEntry')];
  }

  /** What the analyzers read: the config, every known workload, the connected gateways. */
  private analysisSources(): AnalysisSources {
    const proxies = () => [...this.connected.values()].map((info) => this.proxies.of(info));
    return {
      list: <K extends Kind>(kind: K) => (kind === 'WorkloadEntry' ? (this.workloadEntries() as ResourceOf<K>[]) : this.store.list(kind)),
      workloads: () => [...this.workloadEntries().map((we) => ({ namespace: we.metadata.namespace, labels: we.spec.labels ?? {} })), ...proxies()],
      gateways: () => proxies().filter((p) => p.type === 'router'),
      rootNamespace: this.opts.rootNamespace ?? ROOT_NAMESPACE,
      domain: this.opts.domain,
    };
  }

  /** XDS_AUTH and the identity check; the refusal's reason goes to the proxy and to the log. */
  private async authorizeProxy(info: ProxyInfo): Promise<void> {
    try {
      if (await this.xdsAuth.check(info, info.credentials)) this.verified.add(info);
    } catch (e) {
      const code = e instanceof AuthenticationError ? status.UNAUTHENTICATED : e instanceof IdentityMismatchError ? status.PERMISSION_DENIED : undefined;
      if (code === undefined) throw e;
      const why = `${code === status.UNAUTHENTICATED ? 'authentication failed' : 'identity check failed'}: ${(e as Error).message}`;
      log.warn(`xDS stream from ${info.peer} refused: ${why}`);
      throw new XdsStreamError(code, why);
    }
  }

  /**
   * Binds HTTP and monitoring first (a taken port fails fast; /ready says 503 while config syncs),
   * then waits for the config source, then serves xDS: a proxy never gets a pre-sync snapshot.
   */
  async start(): Promise<void> {
    const ca = this.startSecure();
    // Settled here too, so a failure before `await ca` below is not an unhandled rejection.
    ca.catch(() => undefined);
    await this.bind('http', this.opts.httpAddr, this.debug);
    await this.bind('monitoring', this.opts.monitoringAddr, this.monitoring);
    await Promise.all([this.store.start(), this.orchestrator?.start(), this.ingress?.start(), this.credentials?.start()]);
    this.ingress?.onChange(() => {
      this.pushes.trigger({ source: 'config', kind: 'Gateway' });
      this.pushes.trigger({ source: 'config', kind: 'VirtualService' });
    });
    this.credentials?.store.onChange((c) => this.pushes.trigger({ source: 'credential', ...c }));
    this.store.onEvent((e) => this.pushes.onConfigEvent(e));
    if (this.analysis) {
      this.store.onEvent(() => this.analysis?.onChange());
      this.analysis.publish();
      log.info(`config analysis on (PILOT_ENABLE_ANALYSIS): results at /debug/analyze and in the analysis log scope${this.status ? ', and in the resources\' status.validationMessages' : '; status.validationMessages is written only with PILOT_ENABLE_STATUS'}`);
    }
    this.registry.onEvent((e) => this.pushes.trigger(e.kind === 'service' ? { source: 'service' } : { source: 'endpoints', ...(e.headless ? { headless: true } : {}) }));
    this.pushes.start();
    this.elections.start();
    await this.listenGrpc('grpc', this.opts.grpcAddr, new PlaintextCredentials());
    await this.injectionTemplate.start();
    this.webhooks = await startWebhooks({
      server: this.webhook,
      httpsAddr: this.opts.httpsAddr,
      injection: {
        ...this.settings.injection,
        template: this.injectionTemplate,
        namespaceLabels: (ns) => this.orchestrator?.namespaceLabels(ns),
        clusterId: this.opts.clusterId,
        domain: this.opts.domain,
        trustDomain: this.mtls.trustDomain,
        revision: this.settings.revision,
      },
      validation: this.settings.validationWebhook,
      orchestrator: this.hasOrchestrator() ? this.opts.orchestrator : undefined,
      webhookConfigs: this.settings.webhookConfigs,
    });
    this.ready = true;
    gauge('startup_duration_seconds').set(process.uptime());
    gauge('mesh_build').set({ component: 'pilot-discovery', version: buildInfo.version }, 1);
    log.info('discovery server ready');
    await ca;
  }

  /**
   * The CA (key generation can take seconds on a loaded machine: readiness and the plaintext port
   * do not wait for it) and then the secured port. A broken plugged-in CA rejects start().
   */
  private async startSecure(): Promise<void> {
    this.ca = await startMeshCa(this.xds.grpc, this.authenticator, { namespace: this.opts.namespace ?? 'mesh-system', trustDomain: this.mtls.trustDomain, trustDomainAliases: this.mtls.aliases, federation: this.federation });
    if (!this.opts.secureGrpcAddr) return;
    if (!this.ca) log.info(`secured gRPC (${this.opts.secureGrpcAddr}) not served: there is no CA to issue its certificate`);
    else await this.listenGrpc('secureGrpc', this.opts.secureGrpcAddr, this.ca.securePort.credentials);
  }

  private async listenGrpc(name: string, addr: string, credentials: ServerCredentials): Promise<void> {
    try {
      const port = await this.xds.listen(grpcAddress(addr), credentials);
      this.addresses[name] = addr.replace(/:\d+$/, `:${port}`);
      log.info(`${name === 'grpc' ? 'gRPC xDS server' : 'secured gRPC server (xDS and CA, TLS)'} listening on ${this.addresses[name]}`);
    } catch (e) {
      throw new ListenError(`failed to listen on ${addr}: ${(e as Error).message}`);
    }
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
    this.pushes.close();
    this.resolver.close();
    this.credentials?.close();
    this.xds.close();
    this.ca?.close();
    this.federation?.close();
    this.autoRegistration.close();
    this.profiler?.close();
    this.analysis?.close();
    this.injectionTemplate.close();
    await Promise.all([...this.servers.map(closeServer), this.webhook.close(), this.webhooks?.close(), this.elections.close(), this.status?.close(), this.healthStatus?.close(), this.store.close(), this.orchestrator?.close(), this.ingress?.close()]);
    this.servers.length = 0;
  }
}

/** gRPC binds `host:port`; a Go-style `:15010` means every interface. */
function grpcAddress(addr: string): string {
  return addr.startsWith(':') ? `0.0.0.0${addr}` : addr;
}
