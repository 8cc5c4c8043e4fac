// The proxy's side of xDS: the ADS client (src/envoy/ads-client.ts) subscribed to listeners and clusters
// (wildcard) and the routes and endpoints they name, and the application of each response (through
// ./resource-applier.ts), recorded for config_dump, counted in the update stats, and for readiness.
//
// A response is applied atomically: everything it carries is compiled first (clusters, endpoints,
// listeners with their filters and bound sockets, route tables); a ConfigError (or any other
// failure) throws before anything serving changed, which the client turns into a NACK carrying the
// reason, and the proxy keeps its last good config. Success ACKs. A lost control plane changes
// nothing: the proxy keeps serving what it has while the client reconnects.
import type { Any } from '@bufbuild/protobuf/wkt';
import { scope } from '../common/log.js';
import type { Node } from '../gen/envoy/config/core/v3/base_pb.js';
import { AdsClient, PartiallyApplied, routeNames, type AdsUpdate } from '../envoy/ads-client.js';
import { shortTypeName, TypeUrl } from '../envoy/types.js';
import type { DynamicClusterManager } from './clusters.js';
import { ConfigError } from '../envoy/config-error.js';
import type { ListenerManager } from './listener-manager.js';
import type { RouteTable } from './route-table.js';
import { statName, type StatCounter, type StatsStore } from './stats.js';
import { DEFAULT_INITIAL_FETCH_TIMEOUT_MS } from './initial-fetch.js';
import type { SecretManager } from './tls/secrets.js';
import { ResourceApplier } from './resource-applier.js';

const log = scope('config');

/** One accepted resource, with the version and time of the update that last changed it. */
export interface ResourceRecord {
  readonly name: string;
  readonly any: Any;
  readonly version: string;
  readonly lastUpdated: Date;
}

/** The last rejected update of a type, for config_dump's error_state. */
export interface Rejection {
  readonly version: string;
  readonly details: string;
  readonly at: Date;
  readonly resources: ReadonlyMap<string, Any>;
}

interface TypeStats {
  readonly attempt: StatCounter;
  readonly success: StatCounter;
  readonly rejected: StatCounter;
}

/** Envoy's families for the update counters of each type. */
const STAT_FAMILY: Record<string, string> = {
  [TypeUrl.Listener]: 'listener_manager.lds',
  [TypeUrl.Cluster]: 'cluster_manager.cds',
  [TypeUrl.RouteConfiguration]: 'http.rds',
  [TypeUrl.ClusterLoadAssignment]: 'cluster_manager.eds',
  [TypeUrl.Secret]: 'sds',
};

function sameAny(a: Any, b: Any): boolean {
  if (a.typeUrl !== b.typeUrl || a.value.length !== b.value.length) return false;
  for (let i = 0; i < a.value.length; i++) if (a.value[i] !== b.value[i]) return false;
  return true;
}

export interface XdsOptions {
  readonly address: string;
  readonly node: Node;
  readonly lds: boolean;
  readonly cds: boolean;
  readonly clusters: DynamicClusterManager;
  readonly listeners: ListenerManager;
  readonly stats: StatsStore;
  /** The secrets listeners and clusters share; SDS updates (ADS or an SDS server) apply to it. */
  readonly secrets?: SecretManager;
  readonly initialBackoffMs?: number;
  /** The bootstrap's initial_fetch_timeout for LDS and CDS, ms; 0 = wait without limit; default 15 s. */
  readonly initialFetchTimeoutMs?: { readonly lds: number; readonly cds: number };
  /**
   * Called with each update once this process applied it: the proxy's workers apply it too. The
   * update is ACKed, recorded for config_dump and counted for readiness only once this resolves;
   * a rejection NACKs it with its message.
   */
  readonly onApplied?: (u: AdsUpdate) => Promise<void>;
}

export class XdsApplier {
  readonly client: AdsClient;
  private readonly applier: ResourceApplier;
  private readonly records = new Map<string, Map<string, ResourceRecord>>();
  private readonly versions = new Map<string, string>();
  private readonly rejections = new Map<string, Rejection>();
  private readonly applied = new Set<string>();
  private readonly typeStats = new Map<string, TypeStats>();
  private connected = false;
  /** An update applied here that the workers are still applying (readiness waits for it). */
  private replicating?: string;
  private wasReady = false;
  /** LDS / CDS whose initial fetch timed out before a response (readiness stops waiting for them). */
  private readonly fetchTimedOut = new Set<string>();
  private readonly fetchTimers: NodeJS.Timeout[] = [];

  constructor(private readonly o: XdsOptions) {
    this.applier = new ResourceApplier(o.clusters, o.listeners, o.secrets, o.stats);
    const wildcard = [...(o.cds ? [TypeUrl.Cluster] : []), ...(o.lds ? [TypeUrl.Listener] : [])];
    this.client = new AdsClient({
      address: o.address,
      node: o.node,
      wildcardTypes: wildcard,
      onUpdate: (u) => this.apply(u),
      ...(o.initialBackoffMs !== undefined ? { initialBackoffMs: o.initialBackoffMs } : {}),
    });
    this.client.on('connected', () => {
      this.connected = true;
      log.info(`connected to the xDS server at ${o.address}`);
    });
    // The client logs the disconnect and its retry; the proxy keeps serving its last good config.
    this.client.on('disconnected', () => (this.connected = false));
    o.stats.addSource(() => [{ ...statName('control_plane', 'connected_state'), kind: 'gauge', value: this.connected ? 1 : 0 }]);
  }

  start(): void {
    this.client.start();
    const limits = this.o.initialFetchTimeoutMs ?? { lds: DEFAULT_INITIAL_FETCH_TIMEOUT_MS, cds: DEFAULT_INITIAL_FETCH_TIMEOUT_MS };
    if (this.o.cds) this.limitInitialFetch(TypeUrl.Cluster, limits.cds);
    if (this.o.lds) this.limitInitialFetch(TypeUrl.Listener, limits.lds);
  }

  /** Envoy's initial_fetch_timeout of a bootstrap subscription: after it, the proxy proceeds without. */
  private limitInitialFetch(typeUrl: string, ms: number): void {
    if (ms === 0) return;
    const timer = setTimeout(() => {
      if (this.applied.has(typeUrl)) return;
      this.fetchTimedOut.add(typeUrl);
      log.warn(`initial ${shortTypeName(typeUrl).toUpperCase()} fetch did not complete within its initial_fetch_timeout (${ms}ms); proceeding without it`);
    }, ms);
    timer.unref();
    this.fetchTimers.push(timer);
  }

  close(): void {
    for (const t of this.fetchTimers) clearTimeout(t);
    this.client.close();
    this.applier.close();
  }

  /** The route table the HTTP connection managers look up by RDS name. */
  readonly route = (name: string): RouteTable | undefined => this.applier.route(name);

  /** The proxy's secrets (config_dump). */
  get secrets(): SecretManager {
    return this.applier.secrets;
  }

  /**
   * Ready once the initial listeners and clusters are applied and every route configuration the
   * listeners name has arrived (Envoy's listener warming, seen from outside).
   */
  ready(): { ready: boolean; reason: string } {
    const r = this.readiness();
    this.wasReady ||= r.ready;
    return r;
  }

  private readiness(): { ready: boolean; reason: string } {
    // Before the first LIVE only: later updates keep the proxy LIVE, as warming does.
    if (!this.wasReady && this.replicating) return { ready: false, reason: `workers applying ${this.replicating}` };
    const waiting = (typeUrl: string) => !this.applied.has(typeUrl) && !this.fetchTimedOut.has(typeUrl);
    if (this.o.cds && waiting(TypeUrl.Cluster)) return { ready: false, reason: 'initial CDS not applied yet' };
    if (this.o.lds && waiting(TypeUrl.Listener)) return { ready: false, reason: 'initial LDS not applied yet' };
    if (this.o.lds && this.applied.has(TypeUrl.Listener) && !this.applier.activated) return { ready: false, reason: `listeners warming: waiting for ${this.applier.warmingFor().join(', ')}` };
    const secrets = this.applier.secrets.pending();
    if (secrets.length > 0) return { ready: false, reason: `waiting for secret ${secrets.join(', ')}` };
    const missing = [...routeNames(this.o.listeners.messages())].filter((n) => !this.applier.hasRoute(n) && !this.applier.gaveUpOn(n));
    if (missing.length > 0) return { ready: false, reason: `waiting for route configuration ${missing.join(', ')}` };
    return { ready: true, reason: '' };
  }

  /** The accepted resources of a type (those the client still holds: unsubscribed names drop out). */
  resources(typeUrl: string): ResourceRecord[] {
    const held = this.client.resources(typeUrl);
    return [...(this.records.get(typeUrl)?.values() ?? [])].filter((r) => held.has(r.name));
  }

  version(typeUrl: string): string {
    return this.versions.get(typeUrl) ?? '';
  }

  rejection(typeUrl: string): Rejection | undefined {
    return this.rejections.get(typeUrl);
  }

  private statsOf(typeUrl: string): TypeStats {
    let s = this.typeStats.get(typeUrl);
    if (!s) {
      const family = STAT_FAMILY[typeUrl] ?? `xds.${shortTypeName(typeUrl)}`;
      const c = (stat: string) => this.o.stats.counter(statName(family, stat));
      this.typeStats.set(typeUrl, (s = { attempt: c('update_attempt'), success: c('update_success'), rejected: c('update_rejected') }));
    }
    return s;
  }

  /**
   * Applies one update; throws (-> NACK) leaving everything as it was, or, for listeners that
   * applied in part, having applied (here and on the workers) and recorded the part that did.
   */
  async apply(update: AdsUpdate): Promise<void> {
    // Secrets from every SDS stream are one set by name: an update adds to what is held.
    const u = update.typeUrl === TypeUrl.Secret ? this.applier.secrets.merged(update) : update;
    const stats = this.statsOf(u.typeUrl);
    stats.attempt.inc();
    const type = shortTypeName(u.typeUrl);
    let applied = u;
    let partial: PartiallyApplied | undefined;
    try {
      try {
        await this.applier.apply(u);
      } catch (e) {
        if (!(e instanceof PartiallyApplied)) throw e;
        partial = e;
        applied = { ...u, resources: e.applied };
      }
      if (this.o.onApplied) {
        this.replicating = `${type} version ${u.version}`;
        await this.o.onApplied(applied).finally(() => (this.replicating = undefined));
      }
    } catch (e) {
      this.reject(u, e, u.resources.keys());
      throw e;
    }
    this.record(applied, partial === undefined);
    this.applied.add(u.typeUrl);
    if (partial) {
      this.reject(u, partial, partial.failed);
      throw partial;
    }
    stats.success.inc();
    this.rejections.delete(u.typeUrl);
    log.info(`applied ${type} version ${u.version}: ${u.resources.size} resources`);
  }

  /** Counts and keeps (for config_dump's error_state) a rejection of the resources `failed`. */
  private reject(u: AdsUpdate, e: unknown, failed: Iterable<string>): void {
    this.statsOf(u.typeUrl).rejected.inc();
    const details = e instanceof Error ? e.message : String(e);
    if (!(e instanceof ConfigError) && !(e instanceof PartiallyApplied)) log.error(`applying ${shortTypeName(u.typeUrl)} version ${u.version} failed: ${details}`);
    const resources = new Map<string, Any>();
    for (const n of failed) {
      const r = u.resources.get(n);
      if (r) resources.set(n, r.any);
    }
    this.rejections.set(u.typeUrl, { version: u.version, details, at: new Date(), resources });
  }

  /**
   * Per resource: the version and time of the update that last changed it; the type's version
   * only when the update applied whole.
   */
  private record(u: AdsUpdate, whole: boolean): void {
    const prev = this.records.get(u.typeUrl) ?? new Map<string, ResourceRecord>();
    const next = new Map<string, ResourceRecord>();
    const now = new Date();
    for (const [name, r] of u.resources) {
      const old = prev.get(name);
      next.set(name, old && sameAny(old.any, r.any) ? old : { name, any: r.any, version: u.version, lastUpdated: now });
    }
    this.records.set(u.typeUrl, next);
    if (whole) this.versions.set(u.typeUrl, u.version);
  }
}
