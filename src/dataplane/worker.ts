// A worker process of mesh-proxy (see workers.ts): listeners, clusters and routes like the main
// process's, on the sockets the main process binds, applying the updates it accepted. It has no
// xDS client and no admin API, and it stops when the main process tells it to or goes away.
import { SecretSchema } from '../gen/envoy/extensions/transport_sockets/tls/v3/secret_pb.js';
import { SecretManager } from './tls/secrets.js';
import { createServer, type Server, type Socket } from 'node:net';
import { create, fromBinary } from '@bufbuild/protobuf';
import { AnySchema } from '@bufbuild/protobuf/wkt';
import { registerScopes, scope, setScopeLevel, type Level } from '../common/log.js';
import { ClusterSchema } from '../gen/envoy/config/cluster/v3/cluster_pb.js';
import type { AdsResource, AdsUpdate } from '../envoy/ads-client.js';
import { unpackAny } from '../envoy/types.js';
import { DynamicClusterManager } from './clusters.js';
import { ListenerManager } from './listener-manager.js';
import { PROXY_COMPONENTS } from './logging.js';
import { StatsStore } from './stats.js';
import type { FromWorker, ToWorker, WireUpdate, WorkerInit, WorkerStats } from './workers.js';
import { ResourceApplier } from './resource-applier.js';
import { reopenAccessLogs } from './access-log/loggers.js';

const log = scope('main');

/** How long a handed connection waits for this worker's listener of its address. */
const UNCLAIMED_TIMEOUT_MS = 15_000;
/** Gauges that count this process's traffic (summed across workers); config gauges are the main process's. */
const TRAFFIC_GAUGES = new Set(['envoy_listener_downstream_cx_active', 'envoy_cluster_upstream_cx_active', 'envoy_cluster_upstream_rq_active', 'envoy_cluster_upstream_rq_pending_active']);

/**
 * The listening side of a worker: per address, a server that never listens, on which the
 * connections the main process hands over are emitted. A connection can arrive before this
 * worker's listener of that address exists (the update that adds it is still being applied):
 * it waits until the listener claims the server.
 */
class HandedConnections {
  private readonly servers = new Map<string, { server: Server; waiting?: Socket[] }>();

  /**
   * A fresh server for `key`, for the listener manager (its handler is attached right after this
   * returns); a server claimed before belongs to a listener that is gone.
   */
  readonly claim = (key: string): Server => {
    // Emptied in place: their unclaimed timers see them as claimed.
    const waiting = this.servers.get(key)?.waiting?.splice(0) ?? [];
    const server = createServer();
    this.servers.set(key, { server });
    if (waiting.length > 0) setImmediate(() => waiting.forEach((s) => server.emit('connection', s)));
    return server;
  };

  connection(key: string, socket: Socket): void {
    // As the main process's listening sockets: the TCP proxy forwards half-closes, no Nagle.
    socket.allowHalfOpen = true;
    socket.setNoDelay(true);
    let e = this.servers.get(key);
    if (!e) this.servers.set(key, (e = { server: createServer(), waiting: [] }));
    const waiting = e.waiting;
    if (!waiting) {
      e.server.emit('connection', socket);
      return;
    }
    waiting.push(socket);
    // A listener that never comes (this worker could not apply the update) leaves no client hanging.
    setTimeout(() => waiting.includes(socket) && socket.destroy(), UNCLAIMED_TIMEOUT_MS).unref();
  }
}

function fromWire(w: WireUpdate): AdsUpdate {
  const resources = new Map<string, AdsResource>();
  for (const r of w.resources) {
    const any = create(AnySchema, { typeUrl: r.typeUrl, value: r.value });
    resources.set(r.name, { name: r.name, any, message: unpackAny(any) });
  }
  return { typeUrl: w.typeUrl, version: w.version, resources };
}

function send(m: FromWorker): void {
  if (process.connected) process.send!(m);
}

function applyLevels(levels: ReadonlyArray<readonly [string, Level]>): void {
  for (const [name, level] of levels) setScopeLevel(name, level);
}

class DataplaneWorker {
  private readonly stats = new StatsStore();
  private readonly secrets = new SecretManager();
  private readonly clusters = new DynamicClusterManager(this.stats, this.secrets);
  private readonly listeners: ListenerManager;
  private readonly applier: ResourceApplier;
  /** Updates apply one at a time, in the order they came. */
  private queue: Promise<void> = Promise.resolve();

  constructor(
    private readonly init: WorkerInit,
    connections: HandedConnections,
  ) {
    this.secrets.addStatic(init.staticSecrets.map((b) => fromBinary(SecretSchema, b)));
    this.clusters.addStatic(init.staticClusters.map((b) => fromBinary(ClusterSchema, b)));
    let applier: ResourceApplier | undefined;
    this.listeners = new ListenerManager({
      clusters: this.clusters,
      routes: (name) => applier?.route(name),
      jwt: { onUnknownKid: (issuer, kid) => send({ t: 'unknown-kid', issuer, kid }) },
      stats: this.stats,
      secrets: this.secrets,
      drainTimeMs: init.drainTimeMs,
      handedSocket: connections.claim,
      node: init.node,
      workerIndex: init.index,
    });
    this.applier = applier = new ResourceApplier(this.clusters, this.listeners, this.secrets, this.stats);
  }

  /** Applies an update and tells the main process, which ACKs it only once every worker did. */
  apply(id: number, w: WireUpdate): void {
    this.queue = this.queue.then(async () => {
      try {
        await this.applier.apply(fromWire(w));
        send({ t: 'applied', id });
      } catch (e) {
        send({ t: 'rejected', id, details: (e as Error).message });
      }
    });
  }

  /** What the main process sums with its own: counters, the traffic gauges and histograms. */
  collect(): WorkerStats {
    return { samples: this.stats.samples().filter((s) => s.kind === 'counter' || TRAFFIC_GAUGES.has(s.prom)), histograms: this.stats.histograms() };
  }

  drain(inboundOnly: boolean, graceful: boolean): void {
    this.listeners.drainListeners({ inboundOnly, graceful });
  }

  async stop(drainTimeMs: number): Promise<void> {
    await this.queue;
    this.applier.close();
    await this.listeners.shutdown(drainTimeMs);
    this.listeners.destroy();
    this.clusters.close();
    log.debug(`worker ${this.init.index} stopped`);
  }
}

function runWorker(): void {
  registerScopes(PROXY_COMPONENTS);
  const connections = new HandedConnections();
  let worker: DataplaneWorker | undefined;
  process.on('message', (m: ToWorker, handle?: Socket) => {
    switch (m.t) {
      case 'init':
        applyLevels(m.init.levels);
        worker = new DataplaneWorker(m.init, connections);
        return;
      case 'connection':
        if (handle) connections.connection(m.address, handle);
        return;
      case 'update':
        worker?.apply(m.id, m.update);
        return;
      case 'drain':
        worker?.drain(m.inboundOnly, m.graceful);
        return;
      case 'stats':
        send({ t: 'stats', id: m.id, ...(worker?.collect() ?? { samples: [], histograms: [] }) });
        return;
      case 'log':
        applyLevels(m.levels);
        return;
      case 'reopen':
        reopenAccessLogs();
        return;
      case 'stop':
        void (worker?.stop(m.drainTimeMs) ?? Promise.resolve()).finally(() => process.exit(0));
        return;
    }
  });
  // The main process decides when to drain and stop (a terminal's Ctrl-C reaches every process).
  process.on('SIGINT', () => {});
  process.on('SIGTERM', () => {});
  // The main process is gone: nothing would ever stop this one.
  process.on('disconnect', () => process.exit(0));
}

if (process.send) runWorker();
