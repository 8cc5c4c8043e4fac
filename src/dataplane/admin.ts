// The admin API (Envoy's, on the bootstrap's admin address): readiness, config_dump, stats,
// clusters, listeners, logging levels, health check fail/ok, drain and quit. Mutating endpoints
// need POST, as in Envoy.
import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { create } from '@bufbuild/protobuf';
import { anyPack, timestampFromDate, type Any } from '@bufbuild/protobuf/wkt';
import { listScopes, scope, setScopeLevel } from '../common/log.js';
import { buildInfo } from '../common/version.js';
import { httpServer, listen, Mux, sendJson, sendText } from '../debug/http.js';
import { ClustersSchema } from '../gen/envoy/admin/v3/clusters_pb.js';
import { BootstrapConfigDumpSchema, ConfigDumpSchema, SecretsConfigDumpSchema } from '../gen/envoy/admin/v3/config_dump_pb.js';
import {
  ClientResourceStatus,
  ClustersConfigDumpSchema,
  EndpointsConfigDumpSchema,
  ListenersConfigDumpSchema,
  RoutesConfigDumpSchema,
  type UpdateFailureState,
} from '../gen/envoy/admin/v3/config_dump_shared_pb.js';
import { ListenersSchema } from '../gen/envoy/admin/v3/listeners_pb.js';
import { ClusterSchema } from '../gen/envoy/config/cluster/v3/cluster_pb.js';
import { HealthStatus } from '../gen/envoy/config/core/v3/health_check_pb.js';
import { pack, toEnvoyJson, TypeUrl } from '../envoy/types.js';
import type { ProxyBootstrap } from './bootstrap.js';
import type { DynamicClusterManager } from './clusters.js';
import type { EdsHealth, WeightedEndpoint } from './cluster-spec.js';
import type { ListenerManager } from './listener-manager.js';
import { envoyLevelName, PROXY_COMPONENTS, PROXY_LEVELS } from './logging.js';
import type { StatsStore } from './stats.js';
import type { Rejection, XdsApplier } from './xds-applier.js';

const log = scope('admin');

/** What the admin API asks of the proxy it serves. */
export interface AdminTarget {
  readonly bootstrap: ProxyBootstrap;
  readonly startedAt: Date;
  /** Workers serving connections: this process and its worker processes. */
  readonly concurrency: number;
  readonly xds: XdsApplier;
  readonly clusters: DynamicClusterManager;
  readonly listeners: ListenerManager;
  readonly stats: StatsStore;
  /** LIVE, PRE_INITIALIZING or DRAINING, with the reason when not LIVE. */
  state(): { state: 'LIVE' | 'PRE_INITIALIZING' | 'DRAINING'; reason: string };
  healthCheckFailed: boolean;
  drainListeners(opts: { inboundOnly: boolean; graceful: boolean }): void;
  /** /quitquitquit: stop and exit 0. */
  quit(): void;
  /** Brings other processes' counters (the proxy's workers) into `stats` before it is read. */
  collectStats?(): Promise<void>;
  /** Log levels changed through /logging. */
  logLevelsChanged?(): void;
  /** /reopen_logs: every process's access log files are opened again. */
  reopenLogs(): void;
}

type Handler = (req: IncomingMessage, res: ServerResponse, url: URL) => void | Promise<void>;

/** Envoy's admin refuses a GET on a mutating endpoint. */
function postOnly(h: Handler): Handler {
  return (req, res, url) => {
    if (req.method !== 'POST') {
      sendText(res, 405, 'This endpoint requires POST.\n');
      return;
    }
    return h(req, res, url);
  };
}

function errorState(r: Rejection | undefined, name: string): { errorState?: UpdateFailureState; clientStatus: ClientResourceStatus } {
  const failed = r?.resources.get(name);
  if (!r || !failed) return { clientStatus: ClientResourceStatus.ACKED };
  return {
    clientStatus: ClientResourceStatus.NACKED,
    errorState: { failedConfiguration: failed, lastUpdateAttempt: timestampFromDate(r.at), details: r.details, versionInfo: r.version } as UpdateFailureState,
  };
}

function configDump(t: AdminTarget, includeEds: boolean): Any[] {
  const xds = t.xds;
  const ts = timestampFromDate;
  const bootstrap = anyPack(BootstrapConfigDumpSchema, create(BootstrapConfigDumpSchema, { bootstrap: t.bootstrap.bootstrap, lastUpdated: ts(t.startedAt) }));
  const cdsReject = xds.rejection(TypeUrl.Cluster);
  const clusters = pack(ClustersConfigDumpSchema, {
    versionInfo: xds.version(TypeUrl.Cluster),
    staticClusters: t.bootstrap.staticClusters.map((c) => ({ cluster: anyPack(ClusterSchema, c), lastUpdated: ts(t.startedAt) })),
    dynamicActiveClusters: xds.resources(TypeUrl.Cluster).map((r) => ({ versionInfo: r.version, cluster: r.any, lastUpdated: ts(r.lastUpdated), ...errorState(cdsReject, r.name) })),
  });
  const ldsReject = xds.rejection(TypeUrl.Listener);
  const accepted = xds.resources(TypeUrl.Listener);
  const active = accepted.map((r) => ({
    name: r.name,
    activeState: { versionInfo: r.version, listener: r.any, lastUpdated: ts(r.lastUpdated) },
    ...errorState(ldsReject, r.name),
  }));
  // Listeners only a rejected update had: their error, no active state.
  const rejectedOnly = [...(ldsReject?.resources.keys() ?? [])]
    .filter((n) => !accepted.some((r) => r.name === n))
    .map((name) => ({ name, ...errorState(ldsReject, name) }));
  const listeners = pack(ListenersConfigDumpSchema, { versionInfo: xds.version(TypeUrl.Listener), dynamicListeners: [...active, ...rejectedOnly] });
  const rdsReject = xds.rejection(TypeUrl.RouteConfiguration);
  const routes = pack(RoutesConfigDumpSchema, {
    dynamicRouteConfigs: xds.resources(TypeUrl.RouteConfiguration).map((r) => ({ versionInfo: r.version, routeConfig: r.any, lastUpdated: ts(r.lastUpdated), ...errorState(rdsReject, r.name) })),
  });
  const out = [bootstrap, clusters, listeners, routes, anyPack(SecretsConfigDumpSchema, xds.secrets.dump())];
  if (includeEds) {
    const edsReject = xds.rejection(TypeUrl.ClusterLoadAssignment);
    out.push(
      pack(EndpointsConfigDumpSchema, {
        dynamicEndpointConfigs: xds.resources(TypeUrl.ClusterLoadAssignment).map((r) => ({ versionInfo: r.version, endpointConfig: r.any, lastUpdated: ts(r.lastUpdated), ...errorState(edsReject, r.name) })),
      }),
    );
  }
  return out;
}

function socketAddress(host: string, port: number) {
  return { address: { case: 'socketAddress' as const, value: { address: host, portSpecifier: { case: 'portValue' as const, value: port } } } };
}

const EDS_STATUS: Readonly<Record<EdsHealth, HealthStatus>> = {
  healthy: HealthStatus.HEALTHY,
  unknown: HealthStatus.UNKNOWN,
  unhealthy: HealthStatus.UNHEALTHY,
  draining: HealthStatus.DRAINING,
  timeout: HealthStatus.TIMEOUT,
  degraded: HealthStatus.DEGRADED,
};

/** Envoy's health_flags of a host in /clusters: `healthy`, else each flag after a `/`. */
export function healthFlags(e: WeightedEndpoint, ejected: boolean): string {
  let flags = ejected ? '/failed_outlier_check' : '';
  if (e.health === 'unhealthy' || e.health === 'timeout') flags += '/failed_eds_health';
  else if (e.health === 'degraded') flags += '/degraded_eds_health';
  else if (e.health === 'draining') flags += '/eds_status_draining';
  return flags || 'healthy';
}

function clustersText(t: AdminTarget): string {
  let out = '';
  for (const c of t.clusters.info()) {
    out += `${c.name}::observability_name::${c.name}\n`;
    out += `${c.name}::added_via_api::${!c.static}\n`;
    for (const e of c.endpoints) {
      const at = `${c.name}::${e.host}:${e.port}`;
      out += `${at}::health_flags::${healthFlags(e, c.ejected(e))}\n${at}::weight::${e.weight}\n${at}::priority::${e.priority}\n`;
    }
  }
  return out;
}

function clustersJson(t: AdminTarget): unknown {
  const info = create(ClustersSchema, {
    clusterStatuses: t.clusters.info().map((c) => ({
      name: c.name,
      addedViaApi: !c.static,
      observabilityName: c.name,
      hostStatuses: c.endpoints.map((e) => ({
        address: socketAddress(e.host, e.port),
        weight: e.weight,
        priority: e.priority,
        healthStatus: { edsHealthStatus: EDS_STATUS[e.health], failedOutlierCheck: c.ejected(e) },
      })),
    })),
  });
  return toEnvoyJson(ClustersSchema, info);
}

function listenersJson(t: AdminTarget): unknown {
  const info = create(ListenersSchema, {
    listenerStatuses: t.listeners.info().map((l) => ({
      name: l.name,
      ...(l.bound ? { localAddress: socketAddress(l.bound.host, l.bound.port) } : {}),
    })),
  });
  return toEnvoyJson(ListenersSchema, info);
}

function loggingText(): string {
  const known = new Set<string>(PROXY_COMPONENTS);
  return 'active loggers:\n' + listScopes().filter((s) => known.has(s.name)).map((s) => `  ${s.name}: ${envoyLevelName(s.level)}\n`).join('');
}

/** POST /logging?level=L (every component) or ?<component>=L or ?paths=c1:L,c2:L. */
function changeLogging(url: URL): string | undefined {
  const known = new Set<string>(PROXY_COMPONENTS);
  const changes: Array<[string, string]> = [];
  for (const [k, v] of url.searchParams) {
    if (k === 'level') for (const c of known) changes.push([c, v]);
    else if (k === 'paths') for (const p of v.split(',').filter(Boolean)) changes.push(p.split(':', 2) as [string, string]);
    else changes.push([k, v]);
  }
  for (const [c, l] of changes) {
    if (!known.has(c)) return `error: unknown logger name ${JSON.stringify(c)}`;
    if (!PROXY_LEVELS[l ?? '']) return `error: unknown level ${JSON.stringify(l)}; expected one of ${Object.keys(PROXY_LEVELS).join(', ')}`;
  }
  for (const [c, l] of changes) setScopeLevel(c, PROXY_LEVELS[l]!);
  if (changes.length > 0) log.info(`log levels changed: ${changes.map(([c, l]) => `${c}:${l}`).join(',')}`);
  return undefined;
}

export function adminMux(t: AdminTarget): Mux {
  const mux = new Mux();
  mux
    .handle('/', 'this list', (_req, res) => sendText(res, 200, mux.list().map((r) => `  ${r.path}: ${r.help}\n`).join('')))
    .handle('/ready', 'LIVE (200) once the initial config is applied; 503 otherwise, while draining or health-check-failed', (_req, res) => {
      const s = t.state();
      if (s.state === 'LIVE' && !t.healthCheckFailed) sendText(res, 200, 'LIVE\n');
      else sendText(res, 503, `${s.state}${s.reason ? `: ${s.reason}` : t.healthCheckFailed ? ': health check failed (/healthcheck/fail)' : ''}\n`);
    })
    .handle('/server_info', 'state, version, uptime, node', (_req, res) =>
      sendJson(res, 200, {
        version: `${buildInfo.revision}/${buildInfo.version}/${buildInfo.status}`,
        state: t.state().state,
        hot_restart_version: 'disabled',
        uptime_current_epoch: `${Math.floor((Date.now() - t.startedAt.getTime()) / 1000)}s`,
        node: { id: t.bootstrap.node.id, cluster: t.bootstrap.node.cluster },
        command_line_options: { concurrency: t.concurrency },
      }),
    )
    .handle('/config_dump', 'the current config (Envoy admin ConfigDump); ?include_eds adds endpoints', (_req, res, url) => {
      const dump = create(ConfigDumpSchema, { configs: configDump(t, url.searchParams.has('include_eds')) });
      sendJson(res, 200, toEnvoyJson(ConfigDumpSchema, dump));
    })
    .handle('/stats', 'counters and gauges as name: value, then histograms; ?filter=<regex>, ?format=json|prometheus', async (_req, res, url) => {
      await t.collectStats?.();
      const format = url.searchParams.get('format');
      if (format === 'prometheus') {
        sendText(res, 200, await t.stats.prometheus(), 'text/plain; version=0.0.4; charset=utf-8');
        return;
      }
      let filter: RegExp | undefined;
      try {
        const f = url.searchParams.get('filter');
        filter = f ? new RegExp(f) : undefined;
      } catch (e) {
        sendText(res, 400, `invalid filter: ${(e as Error).message}\n`);
        return;
      }
      if (format === 'json') sendJson(res, 200, { stats: t.stats.json(filter) });
      else sendText(res, 200, t.stats.text(filter));
    })
    .handle('/stats/prometheus', 'stats in the Prometheus text format', async (_req, res) => {
      await t.collectStats?.();
      sendText(res, 200, await t.stats.prometheus(), 'text/plain; version=0.0.4; charset=utf-8');
    })
    .handle('/clusters', 'clusters and their endpoints; ?format=json', (_req, res, url) => {
      if (url.searchParams.get('format') === 'json') sendJson(res, 200, clustersJson(t));
      else sendText(res, 200, clustersText(t));
    })
    .handle('/listeners', 'listeners and their addresses; ?format=json', (_req, res, url) => {
      if (url.searchParams.get('format') === 'json') sendJson(res, 200, listenersJson(t));
      else sendText(res, 200, t.listeners.info().map((l) => `${l.name}::${l.bound ? `${l.bound.host}:${l.bound.port}` : l.address}\n`).join(''));
    })
    .handle('/logging', 'log levels; POST ?level=<level> or ?<component>=<level> changes them', (req, res, url) => {
      if (req.method === 'POST') {
        const err = changeLogging(url);
        if (err) {
          sendText(res, 400, `${err}\n${loggingText()}`);
          return;
        }
        t.logLevelsChanged?.();
      } else if ([...url.searchParams.keys()].length > 0) {
        sendText(res, 405, 'This endpoint requires POST to change levels.\n');
        return;
      }
      sendText(res, 200, loggingText());
    })
    .handle('/healthcheck/fail', 'POST: make /ready answer 503', postOnly((_req, res) => {
      t.healthCheckFailed = true;
      sendText(res, 200, 'OK\n');
    }))
    .handle('/healthcheck/ok', 'POST: undo /healthcheck/fail', postOnly((_req, res) => {
      t.healthCheckFailed = false;
      sendText(res, 200, 'OK\n');
    }))
    .handle('/drain_listeners', 'POST: drain listeners; ?inboundonly, ?graceful', postOnly((_req, res, url) => {
      t.drainListeners({ inboundOnly: url.searchParams.has('inboundonly'), graceful: url.searchParams.has('graceful') });
      sendText(res, 200, 'OK\n');
    }))
    .handle('/reopen_logs', 'POST: reopen access log files (after rotation)', postOnly((_req, res) => {
      t.reopenLogs();
      sendText(res, 200, 'OK\n');
    }))
    .handle('/quitquitquit', 'POST: exit cleanly', postOnly((_req, res) => {
      res.once('finish', () => t.quit());
      sendText(res, 200, 'OK\n');
    }));
  return mux;
}

/** Starts the admin server on the bootstrap's admin address; a bind failure names the address. */
export async function startAdmin(t: AdminTarget): Promise<{ server: Server; port: number }> {
  const server = httpServer(adminMux(t));
  const { host, port } = t.bootstrap.admin;
  const addr = await listen(server, host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`);
  log.info(`admin API listening on ${host}:${addr.port}`);
  return { server, port: addr.port };
}
