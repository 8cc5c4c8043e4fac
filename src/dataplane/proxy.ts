// mesh-proxy as a whole: the bootstrap's static clusters, the admin API, the ADS client applying
// LDS/CDS/RDS/EDS to the listener and cluster managers, and shutdown (SIGTERM/SIGINT or
// /quitquitquit: stop accepting, let in-flight requests finish within the drain time, exit 0);
// tokens whose kid their issuer's key set lacks are reported over JwksService (jwks-refresh.ts);
// with --concurrency above 1, worker processes serve connections beside this one (workers.ts).
import type { Server } from 'node:http';
import { registerScopes, scope } from '../common/log.js';
import { closeServer } from '../debug/http.js';
import type { AdsUpdate } from '../envoy/ads-client.js';
import { startAdmin, type AdminTarget } from './admin.js';
import type { ProxyBootstrap } from './bootstrap.js';
import { DynamicClusterManager } from './clusters.js';
import { JwksRefresher } from './jwks-refresh.js';
import { ListenerManager } from './listener-manager.js';
import { PROXY_COMPONENTS } from './logging.js';
import { statName, StatsStore } from './stats.js';
import { localNode } from './telemetry/workload-metadata.js';
import { SdsFetcher } from './tls/sds.js';
import { SecretManager } from './tls/secrets.js';
import { WorkerPool } from './workers.js';
import { reopenAccessLogs } from './access-log/loggers.js';
import { XdsApplier } from './xds-applier.js';

const log = scope('main');

export interface ProxyOptions {
  readonly bootstrap: ProxyBootstrap;
  /** --drain-time-s, in ms: how long connections of removed listeners (and on shutdown) may take. */
  readonly drainTimeMs: number;
  /** First reconnect delay of the ADS client (tests shorten it). */
  readonly initialBackoffMs?: number;
  /** Worker processes beside this one (--concurrency minus one); 0 by default. */
  readonly workerProcesses?: number;
}

export class MeshProxy implements AdminTarget {
  readonly stats = new StatsStore();
  readonly clusters: DynamicClusterManager;
  readonly listeners: ListenerManager;
  readonly xds: XdsApplier;
  readonly startedAt = new Date();
  readonly bootstrap: ProxyBootstrap;
  readonly concurrency: number;
  private readonly jwksRefresher: JwksRefresher;
  private readonly sds: SdsFetcher;
  private readonly workers?: WorkerPool;
  healthCheckFailed = false;
  private draining = false;
  private admin?: Server;
  private stopping?: Promise<void>;
  private resolveDone!: (code: number) => void;
  /** Resolves with the exit code once the proxy has stopped (quit, or a stop() call). */
  readonly done = new Promise<number>((resolve) => (this.resolveDone = resolve));
  adminPort = 0;

  constructor(private readonly o: ProxyOptions) {
    registerScopes(PROXY_COMPONENTS);
    this.bootstrap = o.bootstrap;
    this.concurrency = (o.workerProcesses ?? 0) + 1;
    const secrets = new SecretManager();
    secrets.addStatic(o.bootstrap.staticSecrets);
    this.clusters = new DynamicClusterManager(this.stats, secrets);
    this.jwksRefresher = new JwksRefresher(o.bootstrap.xdsAddress, this.stats);
    const node = localNode(o.bootstrap.node.id, o.bootstrap.node.cluster, o.bootstrap.node.metadata ?? {});
    const workers = (o.workerProcesses ?? 0) > 0
      ? new WorkerPool({ count: o.workerProcesses!, staticClusters: o.bootstrap.staticClusters, staticSecrets: o.bootstrap.staticSecrets, drainTimeMs: o.drainTimeMs, node, onUnknownKid: this.jwksRefresher.onUnknownKid })
      : undefined;
    this.workers = workers;
    let routes: XdsApplier | undefined;
    this.listeners = new ListenerManager({
      clusters: this.clusters,
      routes: (name) => routes?.route(name),
      jwt: { onUnknownKid: this.jwksRefresher.onUnknownKid },
      stats: this.stats,
      secrets,
      drainTimeMs: o.drainTimeMs,
      node,
      ...(workers ? { distribute: workers.distribute } : {}),
    });
    this.xds = routes = new XdsApplier({
      address: o.bootstrap.xdsAddress,
      node: o.bootstrap.node,
      lds: o.bootstrap.lds,
      cds: o.bootstrap.cds,
      initialFetchTimeoutMs: o.bootstrap.initialFetchTimeoutMs,
      clusters: this.clusters,
      listeners: this.listeners,
      stats: this.stats,
      secrets,
      ...(o.initialBackoffMs !== undefined ? { initialBackoffMs: o.initialBackoffMs } : {}),
      ...(workers ? { onApplied: (u: AdsUpdate) => workers.replicate(u) } : {}),
    });
    const xds = this.xds;
    this.sds = new SdsFetcher({
      secrets,
      ads: xds.client,
      node: o.bootstrap.node,
      targets: o.bootstrap.grpcTargets,
      apply: (u) => xds.apply(u),
      ...(o.initialBackoffMs !== undefined ? { initialBackoffMs: o.initialBackoffMs } : {}),
    });
    if (workers) {
      this.stats.addSource(() => workers.samples());
      this.stats.addHistogramSource(() => workers.histograms());
    }
    this.stats.addSource(() => [{ ...statName('server', 'state'), kind: 'gauge', value: { LIVE: 0, DRAINING: 1, PRE_INITIALIZING: 2 }[this.state().state] }]);
  }

  /** Binds the admin API (a taken port is an error naming it) and starts xDS. */
  async start(): Promise<void> {
    this.clusters.addStatic(this.o.bootstrap.staticClusters);
    const admin = await startAdmin(this);
    this.admin = admin.server;
    this.adminPort = admin.port;
    this.workers?.start();
    this.xds.start();
    log.info(`mesh-proxy ${this.bootstrap.node.id} started; xDS server ${this.bootstrap.xdsAddress}`);
  }

  state(): ReturnType<AdminTarget['state']> {
    if (this.draining || this.stopping) return { state: 'DRAINING', reason: '' };
    const r = this.xds.ready();
    return r.ready ? { state: 'LIVE', reason: '' } : { state: 'PRE_INITIALIZING', reason: r.reason };
  }

  drainListeners(opts: { inboundOnly: boolean; graceful: boolean }): void {
    log.info(`draining ${opts.inboundOnly ? 'inbound ' : ''}listeners${opts.graceful ? ' gracefully' : ''}`);
    this.draining = true;
    this.listeners.drainListeners(opts);
    this.workers?.drain(opts.inboundOnly, opts.graceful);
  }

  /** The workers' counters, for /stats. */
  async collectStats(): Promise<void> {
    await this.workers?.collectStats();
  }

  logLevelsChanged(): void {
    this.workers?.logLevelsChanged();
  }

  reopenLogs(): void {
    log.info('reopening access log files');
    reopenAccessLogs();
    this.workers?.reopenLogs();
  }

  quit(): void {
    log.info('quit requested through the admin API');
    void this.stop();
  }

  /**
   * Stops accepting, waits for in-flight requests (at most the drain time), then closes
   * everything. Idempotent; resolves `done` with 0.
   */
  stop(drainTimeMs = this.o.drainTimeMs): Promise<void> {
    this.stopping ??= (async () => {
      this.xds.close();
      this.sds.close();
      this.jwksRefresher.close();
      await Promise.all([this.listeners.shutdown(drainTimeMs), this.workers?.stop(drainTimeMs)]);
      this.listeners.destroy();
      if (this.admin) {
        const admin = this.admin;
        const closed = closeServer(admin);
        admin.closeAllConnections();
        await closed;
      }
      this.clusters.close();
      log.info('mesh-proxy stopped');
      this.resolveDone(0);
    })();
    return this.stopping;
  }

  /** Closes everything at once (a second signal). */
  abort(): void {
    this.listeners.destroy();
    this.workers?.abort();
    this.admin?.closeAllConnections();
  }
}

/**
 * Runs until SIGTERM/SIGINT or /quitquitquit; the first signal drains (bounded by the drain time),
 * a second one closes connections at once. Returns the exit code.
 */
export async function runMeshProxy(o: ProxyOptions): Promise<number> {
  const proxy = new MeshProxy(o);
  await proxy.start();
  const onSignal = (signal: NodeJS.Signals) => {
    if (proxyStopping) {
      log.info(`${signal} again: closing connections now`);
      proxy.abort();
      return;
    }
    proxyStopping = true;
    log.info(`received ${signal}; draining (at most ${Math.round(o.drainTimeMs / 1000)}s)`);
    void proxy.stop();
  };
  let proxyStopping = false;
  // Envoy's SIGUSR1 (logrotate's postrotate): reopen the access logs. It replaces Node's default
  // of opening the inspector, which a production proxy should not do on a signal anyway.
  const onReopen = () => proxy.reopenLogs();
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);
  process.on('SIGUSR1', onReopen);
  try {
    return await proxy.done;
  } finally {
    process.off('SIGTERM', onSignal);
    process.off('SIGINT', onSignal);
    process.off('SIGUSR1', onReopen);
  }
}
