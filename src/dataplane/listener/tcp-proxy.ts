// The tcp_proxy network filter: each connection is spliced to an endpoint of a (weighted) cluster.
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { scope } from '../../common/log.js';
import { TcpProxySchema, type TcpProxy } from '../../gen/envoy/extensions/filters/network/tcp_proxy/v3/tcp_proxy_pb.js';
import { ConfigError, unappliedFields } from '../../envoy/config-error.js';
import { normalizeIp } from '../../envoy/matchers.js';
import { timerMs } from '../../common/duration.js';
import { requestView, type Address } from '../../envoy/request.js';
import type { ClusterManager } from '../clusters.js';
import type { CompiledChainMatch } from '../filter-chain-match.js';
import { connectionDestination } from '../original-dst.js';
import { originalSrcOf } from '../original-src.js';
import { statName, type StatCounter, type StatsStore } from '../stats.js';
import { Chain } from './chain.js';
import { registerNetworkFilter, type ConnectionWatch } from './network-filters.js';
import { compileTunnel, openTunnel, TUNNEL_READY, type TunnelSpec } from './tcp-tunnel.js';
import { ResponseFlag } from '../../envoy/response-flags.js';
import { compileAccessLogs, type AccessLogs } from '../access-log/access-logs.js';
import { connectionInfo, readConnectionBytes } from '../access-log/connection.js';
import type { StreamInfo } from '../access-log/record.js';

const log = scope('conn_handler');

const UNAPPLIED_TCP_PROXY = ['downstreamIdleTimeout', 'upstreamIdleTimeout', 'maxConnectAttempts', 'hashPolicy', 'metadataMatch', 'onDemand'];

/** The connection's access logs and when, besides its close, they are written (access_log_options, else the deprecated fields). */
interface TcpAccessLogs {
  readonly logs: AccessLogs;
  /** access_log_flush_interval: a line every so often while the connection is open (0: none). */
  readonly flushIntervalMs: number;
  /** flush_access_log_on_connected: a line once the upstream connection is up. */
  readonly onConnected: boolean;
}

function compileTcpAccessLogs(tp: TcpProxy): TcpAccessLogs | undefined {
  const logs = compileAccessLogs(tp.accessLog);
  if (!logs) return undefined;
  const o = tp.accessLogOptions;
  return { logs, flushIntervalMs: timerMs(o ? o.accessLogFlushInterval : tp.accessLogFlushInterval, 0), onConnected: o ? o.flushAccessLogOnConnected : tp.flushAccessLogOnConnected };
}

/** Writes the connection's line now. */
function logConnection(a: TcpAccessLogs, info: StreamInfo, down: Socket): void {
  readConnectionBytes(info, down);
  a.logs.log(info);
}

/** Envoy's tcp_proxy idle_timeout when none is set: one hour (0s turns it off). */
const DEFAULT_IDLE_TIMEOUT_MS = 3_600_000;

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

function addressesOf(down: Socket): { source: Address; destination: Address } {
  return { source: { address: normalizeIp(down.remoteAddress ?? ''), port: down.remotePort ?? 0 }, destination: connectionDestination(down) };
}

class TcpChain extends Chain {
  private readonly cluster: () => string;
  private readonly cx: StatCounter;
  private readonly noCluster: StatCounter;
  private readonly connectFail: StatCounter;
  private readonly idleTimeouts: StatCounter;
  private readonly durationReached: StatCounter;
  /** idle_timeout: no byte either way for this long closes both sides (0: never). */
  private readonly idleMs: number;
  /** max_downstream_connection_duration: a connection open this long is closed (0: never). */
  private readonly maxDurationMs: number;
  /** tunneling_config: the bytes go through an HTTP tunnel (tcp-tunnel.ts). */
  private readonly tunnel: TunnelSpec | undefined;
  private readonly accessLogs: TcpAccessLogs | undefined;
  /** The watches of each open connection's record. */
  private readonly watches = new WeakMap<StreamInfo, ConnectionWatch[]>();

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
    this.idleTimeouts = stats.counter(statName('tcp', 'idle_timeout', tag));
    this.durationReached = stats.counter(statName('tcp', 'max_downstream_connection_duration_reached', tag));
    this.idleMs = timerMs(tp.idleTimeout, DEFAULT_IDLE_TIMEOUT_MS);
    this.maxDurationMs = timerMs(tp.maxDownstreamConnectionDuration, 0);
    this.tunnel = tp.tunnelingConfig ? compileTunnel(tp.tunnelingConfig, `${field}.tunneling_config`) : undefined;
    this.accessLogs = compileTcpAccessLogs(tp);
  }

  /**
   * The connection's record, when the filter has access logs or a gate watches its connections
   * (the stats filter): logged at its close (and as access_log_options asks), reported to the watches.
   */
  private logged(down: Socket, addresses: { source: Address; destination: Address }): StreamInfo | undefined {
    const a = this.accessLogs;
    const watching = this.gates.filter((g) => g.watch);
    if (!a && watching.length === 0) return undefined;
    const info = connectionInfo(down, addresses.source, addresses.destination);
    const watches = watching.map((g) => g.watch!(info));
    this.watches.set(info, watches);
    const timers = [
      ...(a && a.flushIntervalMs > 0 ? [setInterval(() => logConnection(a, info, down), a.flushIntervalMs)] : []),
      ...watches.filter((w) => w.reportIntervalMs > 0).map((w) => setInterval(() => (readConnectionBytes(info, down), w.report()), w.reportIntervalMs)),
    ];
    down.once('close', () => {
      timers.forEach(clearInterval);
      info.ended();
      readConnectionBytes(info, down);
      for (const w of watches) w.closed();
      if (a) a.logs.log(info);
    });
    return info;
  }

  /** A connection network rbac refused: its line says why (%CONNECTION_TERMINATION_DETAILS%), as Envoy's tcp_proxy logs it. */
  protected override refused(down: Socket, details: string): void {
    const info = this.logged(down, addressesOf(down));
    if (info) info.connectionTerminationDetails = details;
  }

  protected accept(down: Socket): void {
    this.cx.inc();
    const name = this.cluster();
    const cluster = this.clusters.get(name);
    const addresses = addressesOf(down);
    const view = requestView(addresses);
    const endpoint = cluster?.pick(view);
    const info = this.logged(down, addresses);
    if (info) info.upstreamCluster = name;
    if (!cluster || !endpoint) {
      info?.setResponseFlag(cluster ? ResponseFlag.NoHealthyUpstream : ResponseFlag.NoClusterFound);
      this.noCluster.inc();
      log.debug(`tcp_proxy: ${cluster ? `no healthy upstream in ${name}` : `unknown cluster ${name}`}; closing the connection`);
      down.destroy();
      return;
    }
    down.pause();
    // The connection counts as an active request on its endpoint (LEAST_REQUEST) while it is open.
    const active = cluster.begin?.(endpoint);
    if (active) down.once('close', active);
    // The downstream connection's addresses are what a PROXY protocol header carries, as Envoy's tcp_proxy passes them.
    const options = { source: originalSrcOf(down), downstream: addresses };
    const { socket: up, ready }: { socket: Duplex; ready: string } = this.tunnel ? { socket: openTunnel(this.tunnel, cluster, endpoint, options), ready: TUNNEL_READY } : cluster.tcp.connect(endpoint, options);
    if (info) info.upstreamHost = `${endpoint.host}:${endpoint.port}`;
    let connected = false;
    let failed = false;
    // Before it is connected (a tunnel: established), the upstream's end is a failed connect, unless the downstream went first.
    const connectFailed = (): void => {
      if (connected || failed || down.destroyed) return;
      failed = true;
      info?.setResponseFlag(ResponseFlag.UpstreamConnectionFailure);
      this.connectFail.inc();
      cluster.report?.(endpoint, 'failure');
    };
    // idle_timeout runs from the accept on; bytes either way restart it.
    const idle = this.idleMs > 0 ? this.closeBothAfter(down, up, this.idleMs, this.idleTimeouts, info, ResponseFlag.StreamIdleTimeout) : undefined;
    const bytePassed = (): void => void idle?.refresh();
    up.once(ready, () => {
      connected = true;
      cluster.report?.(endpoint, 'connected');
      if (info) {
        info.upstreamConnection(up as Partial<Socket>);
        for (const w of this.watches.get(info) ?? []) w.connected();
        if (this.accessLogs?.onConnected) logConnection(this.accessLogs, info, down);
      }
      down.pipe(up);
      up.pipe(down);
      // Listened to only once piped: a 'data' listener of its own would start the flow before the pipe.
      if (idle) {
        down.on('data', bytePassed);
        up.on('data', bytePassed);
      }
      down.resume();
    });
    up.on('error', (e) => {
      connectFailed();
      log.debug(`tcp_proxy to ${name} ${endpoint.host}:${endpoint.port}: ${e.message}`);
      down.destroy();
    });
    down.on('error', () => up.destroy());
    // Once either side is fully closed, so is the other (half-closes pass through the pipes).
    up.on('close', () => {
      connectFailed();
      down.destroy();
    });
    down.on('close', () => up.destroy());
    if (this.maxDurationMs > 0) this.closeBothAfter(down, up, this.maxDurationMs, this.durationReached, info, ResponseFlag.DurationTimeout);
  }

  /**
   * Closes both sides after `ms`, counted in `reached` (and `flag` on the record), unless the
   * downstream closes first; the timer, which idle_timeout refreshes whenever a byte passes.
   */
  private closeBothAfter(down: Socket, up: Duplex, ms: number, reached: StatCounter, info: StreamInfo | undefined, flag: number): NodeJS.Timeout {
    const timer = setTimeout(() => {
      reached.inc();
      info?.setResponseFlag(flag);
      log.debug(`tcp_proxy: closing a connection after ${ms} ms (${reached === this.idleTimeouts ? 'idle' : 'open'} that long)`);
      down.destroy();
      up.destroy();
    }, ms);
    down.once('close', () => clearTimeout(timer));
    return timer;
  }
}

registerNetworkFilter({
  schema: TcpProxySchema,
  build: (tp, ctx) => new TcpChain(ctx.name, ctx.match, tp, ctx.field, ctx.deps.clusters, ctx.deps.stats),
});
