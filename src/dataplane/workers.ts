// --concurrency: the proxy's workers. Envoy runs worker threads over one config; Node's threads
// cannot share sockets, so mesh-proxy runs worker *processes*. The main process stays what it is
// with one worker: the xDS client, the admin API, the JWKS refresh channel, and it serves
// connections too. Each other worker is a child process (worker.ts) with its own listeners,
// clusters and routes, and the main process keeps them in step:
//   - the main process alone binds and accepts; each new connection, before a byte is read, goes
//     round robin to one of the workers (itself included), as a handle over IPC, to the listener
//     of the same address there (Node's cluster module does the same: a listening socket shared
//     by processes spreads connections very unevenly, and Node 20 has no SO_REUSEPORT);
//   - every xDS update the main process applied is sent to every worker, which compiles and
//     applies it with the same code and says so; the update is ACKed (and shown in config_dump)
//     only once every worker has, so what the proxy reports is what each connection meets; a
//     worker that fails or does not answer within APPLY_TIMEOUT_MS makes it a NACK naming it;
//   - /stats merges the workers' counters (asked for at read time), drain and shutdown reach every
//     worker, an unknown kid a worker meets is reported by the main process, log level changes
//     follow;
//   - a worker that dies is replaced, and gets the current config before any connection.
import { SecretSchema, type Secret } from '../gen/envoy/extensions/transport_sockets/tls/v3/secret_pb.js';
import { fork, type ChildProcess } from 'node:child_process';
import type { Socket } from 'node:net';
import { fileURLToPath } from 'node:url';
import { toBinary } from '@bufbuild/protobuf';
import { listScopes, scope, type Level } from '../common/log.js';
import { ClusterSchema, type Cluster } from '../gen/envoy/config/cluster/v3/cluster_pb.js';
import type { AdsUpdate } from '../envoy/ads-client.js';
import { TypeUrl } from '../envoy/types.js';
import type { StatSample } from './stats.js';
import type { LocalNode } from './telemetry/workload-metadata.js';
import type { HistogramSample } from './histograms.js';
import { proxyNodeFlags, proxyProcessEnv } from './node-flags.js';

const log = scope('main');

/** How long /stats waits for a worker's counters before it answers without them. */
const STATS_TIMEOUT_MS = 1000;
/** How long an update waits for each worker's acknowledgement before it is NACKed. */
export const APPLY_TIMEOUT_MS = 10_000;
/** Replacements of a crashing worker are spaced at least this much. */
const RESTART_DELAY_MS = 1000;
/** Types in the order a fresh worker applies them: endpoints after clusters, routes after listeners. */
const TYPE_ORDER = [TypeUrl.Cluster, TypeUrl.ClusterLoadAssignment, TypeUrl.Listener, TypeUrl.RouteConfiguration];

export interface WireResource {
  readonly name: string;
  readonly typeUrl: string;
  readonly value: Uint8Array;
}

export interface WireUpdate {
  readonly typeUrl: string;
  readonly version: string;
  readonly resources: readonly WireResource[];
}

export interface WorkerInit {
  readonly index: number;
  readonly staticClusters: readonly Uint8Array[];
  /** The bootstrap's static secrets (the dynamic ones come as updates). */
  readonly staticSecrets: readonly Uint8Array[];
  readonly drainTimeMs: number;
  readonly levels: ReadonlyArray<readonly [string, Level]>;
  /** The bootstrap node, for the telemetry filters. */
  readonly node: LocalNode;
}

/** A worker's counters, traffic gauges and histograms, as /stats asks for them. */
export interface WorkerStats {
  readonly samples: readonly StatSample[];
  readonly histograms: readonly HistogramSample[];
}

const NO_STATS: WorkerStats = { samples: [], histograms: [] };

/** Main process -> worker. A `connection` message carries the accepted socket as its handle. */
export type ToWorker =
  | { readonly t: 'init'; readonly init: WorkerInit }
  // Not `key`: Node's IPC sets message.key on a message that carries a server's socket.
  | { readonly t: 'connection'; readonly address: string }
  | { readonly t: 'update'; readonly id: number; readonly update: WireUpdate }
  | { readonly t: 'drain'; readonly inboundOnly: boolean; readonly graceful: boolean }
  | { readonly t: 'stats'; readonly id: number }
  | { readonly t: 'log'; readonly levels: ReadonlyArray<readonly [string, Level]> }
  | { readonly t: 'reopen' }
  | { readonly t: 'stop'; readonly drainTimeMs: number };

/** Worker -> main process. */
export type FromWorker =
  | ({ readonly t: 'stats'; readonly id: number } & WorkerStats)
  | { readonly t: 'unknown-kid'; readonly issuer: string; readonly kid: string }
  | { readonly t: 'applied'; readonly id: number }
  | { readonly t: 'rejected'; readonly id: number; readonly details: string };

export function toWire(u: AdsUpdate): WireUpdate {
  return { typeUrl: u.typeUrl, version: u.version, resources: [...u.resources.values()].map((r) => ({ name: r.name, typeUrl: r.any.typeUrl, value: r.any.value })) };
}

/** The worker processes for --concurrency N: none when N is 1. */
export function workerCount(concurrency: number, cores: number): number {
  return Math.max(1, concurrency === 0 ? cores : concurrency) - 1;
}

interface WorkerOptions {
  readonly count: number;
  readonly staticClusters: readonly Cluster[];
  readonly staticSecrets: readonly Secret[];
  readonly drainTimeMs: number;
  readonly node: LocalNode;
  readonly onUnknownKid: (issuer: string, kid: string) => void;
}

/** The answer a worker gives to an update: undefined when applied, else why not. */
type ApplyResult = string | undefined;

class Worker {
  readonly exited: Promise<void>;
  private readonly pending = new Map<number, (stats: WorkerStats) => void>();
  /** Updates sent and not answered yet, by id. */
  private readonly applying = new Map<number, (r: ApplyResult) => void>();
  private nextId = 0;

  constructor(
    readonly index: number,
    readonly child: ChildProcess,
    onMessage: (m: FromWorker) => void,
  ) {
    this.exited = new Promise((resolve) => child.once('exit', () => resolve()));
    // A worker that exits owes nothing: its replacement starts from the latest config.
    void this.exited.then(() => [...this.applying.values()].forEach((done) => done(undefined)));
    child.on('message', (m: FromWorker) => {
      if (m.t === 'stats') this.pending.get(m.id)?.(m);
      else if (m.t === 'applied') this.applying.get(m.id)?.(undefined);
      else if (m.t === 'rejected') {
        const done = this.applying.get(m.id);
        if (done) done(m.details);
        else log.error(`worker ${index} could not apply the config it started with: ${m.details}`);
      } else onMessage(m);
    });
    // A worker that went away mid-message: its exit handler replaces it.
    child.on('error', (e) => log.debug(`worker ${index}: ${e.message}`));
  }

  send(m: ToWorker, handle?: Socket): boolean {
    if (!this.child.connected) return false;
    this.child.send(m, handle);
    return true;
  }

  /** Sends an update; resolves when the worker applied it, with why not when it could not. */
  apply(update: WireUpdate): Promise<ApplyResult> {
    const id = this.nextId++;
    return new Promise((resolve) => {
      const timer = setTimeout(() => done(`did not apply it within ${APPLY_TIMEOUT_MS / 1000}s`), APPLY_TIMEOUT_MS);
      const done = (r: ApplyResult): void => {
        clearTimeout(timer);
        this.applying.delete(id);
        resolve(r);
      };
      this.applying.set(id, done);
      if (!this.send({ t: 'update', id, update })) done(undefined);
    });
  }

  /** Sends an update nobody waits for (a new worker's initial config). */
  load(update: WireUpdate): void {
    this.send({ t: 'update', id: this.nextId++, update });
  }

  /** The worker's stats; empty when it does not answer in time. */
  stats(): Promise<WorkerStats> {
    const id = this.nextId++;
    return new Promise((resolve) => {
      const timer = setTimeout(() => done(NO_STATS), STATS_TIMEOUT_MS);
      const done = (stats: WorkerStats): void => {
        clearTimeout(timer);
        this.pending.delete(id);
        resolve(stats);
      };
      this.pending.set(id, done);
      this.send({ t: 'stats', id });
    });
  }
}

export class WorkerPool {
  private readonly workers = new Map<number, Worker>();
  /** Round robin over this process (0) and the workers. */
  private next = 0;
  private readonly latest = new Map<string, WireUpdate>();
  private stopping = false;
  /** The workers' stats as of the last `collectStats`. */
  private collected: readonly WorkerStats[] = [];

  constructor(private readonly o: WorkerOptions) {}

  start(): void {
    for (let i = 1; i <= this.o.count; i++) this.spawn(i);
    log.info(`${this.o.count + 1} workers: this process and ${this.o.count} worker process${this.o.count === 1 ? '' : 'es'}`);
  }

  get size(): number {
    return this.workers.size;
  }

  /**
   * A new connection on the listening socket `key`, not read from: true when a worker took it,
   * false when this process serves it (its turn, or the worker's is being replaced).
   */
  readonly distribute = (key: string, socket: Socket): boolean => {
    const turn = this.next;
    this.next = (this.next + 1) % (this.o.count + 1);
    const w = this.workers.get(turn);
    return w !== undefined && w.send({ t: 'connection', address: key }, socket);
  };

  /**
   * An update the main process applied, to every worker; resolves once each applied it (a worker
   * that exits meanwhile is not waited for: its replacement gets it), rejects naming the workers
   * that failed or did not answer in time.
   */
  async replicate(u: AdsUpdate): Promise<void> {
    const wire = toWire(u);
    this.latest.set(u.typeUrl, wire);
    const workers = [...this.workers.values()];
    const results = await Promise.all(workers.map((w) => w.apply(wire)));
    const failed = results.flatMap((r, i) => (r === undefined ? [] : [`worker ${workers[i]!.index}: ${r}`]));
    if (failed.length > 0) throw new Error(failed.join('; '));
  }

  drain(inboundOnly: boolean, graceful: boolean): void {
    for (const w of this.workers.values()) w.send({ t: 'drain', inboundOnly, graceful });
  }

  logLevelsChanged(): void {
    const levels = currentLevels();
    for (const w of this.workers.values()) w.send({ t: 'log', levels });
  }

  reopenLogs(): void {
    for (const w of this.workers.values()) w.send({ t: 'reopen' });
  }

  /** Asks every worker for its counters; `samples` then returns them. */
  async collectStats(): Promise<void> {
    this.collected = await Promise.all([...this.workers.values()].map((w) => w.stats()));
  }

  samples(): readonly StatSample[] {
    return this.collected.flatMap((w) => w.samples);
  }

  histograms(): readonly HistogramSample[] {
    return this.collected.flatMap((w) => w.histograms);
  }

  /** Each worker drains its connections (at most `drainTimeMs`) and exits; resolves when all did. */
  async stop(drainTimeMs: number): Promise<void> {
    this.stopping = true;
    const workers = [...this.workers.values()];
    for (const w of workers) w.send({ t: 'stop', drainTimeMs });
    const killer = setTimeout(() => workers.forEach((w) => w.child.kill('SIGKILL')), drainTimeMs + 5000);
    await Promise.all(workers.map((w) => w.exited));
    clearTimeout(killer);
  }

  /** Ends every worker now (a second signal). */
  abort(): void {
    this.stopping = true;
    for (const w of this.workers.values()) w.child.kill('SIGKILL');
  }

  private spawn(index: number): void {
    const entry = fileURLToPath(new URL('./worker.js', import.meta.url));
    // Workers inherit stdout/stderr: their log lines are the proxy's.
    const child = fork(entry, [], { serialization: 'advanced', stdio: ['ignore', 'inherit', 'inherit', 'ipc'], execArgv: proxyNodeFlags(process.env), env: proxyProcessEnv(process.env) });
    const w = new Worker(index, child, (m) => this.onMessage(m));
    this.workers.set(index, w);
    w.send({
      t: 'init',
      init: { index, staticClusters: this.o.staticClusters.map((c) => toBinary(ClusterSchema, c)), staticSecrets: this.o.staticSecrets.map((c) => toBinary(SecretSchema, c)), drainTimeMs: this.o.drainTimeMs, levels: currentLevels(), node: this.o.node },
    });
    // The current config, in an order that applies.
    for (const type of TYPE_ORDER) {
      const u = this.latest.get(type);
      if (u) w.load(u);
    }
    child.once('exit', (code, signal) => {
      this.workers.delete(index);
      if (this.stopping) return;
      log.error(`worker ${index} exited (${signal ?? `code ${code}`}); starting another`);
      setTimeout(() => !this.stopping && this.spawn(index), RESTART_DELAY_MS).unref();
    });
  }

  private onMessage(m: FromWorker): void {
    if (m.t === 'unknown-kid') this.o.onUnknownKid(m.issuer, m.kid);
  }
}

function currentLevels(): Array<[string, Level]> {
  return listScopes().map((s) => [s.name, s.level]);
}
