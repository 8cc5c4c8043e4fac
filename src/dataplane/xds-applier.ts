// The proxy's side of xDS: the ADS client (src/envoy/ads-client.ts) subscribed to listeners and clusters
// (wildcard) and the routes and endpoints they name, and the application of each response.
//
// A response is applied atomically: everything it carries is compiled first (clusters, endpoints,
// listeners with their filters and bound sockets, route tables); a ConfigError (or any other
// failure) throws before anything serving changed, which the client turns into a NACK carrying the
// reason, and the proxy keeps its last good config. Success ACKs. A lost control plane changes
// nothing: the proxy keeps serving what it has while the client reconnects.
import { equals, type Message } from '@bufbuild/protobuf';
import type { Any } from '@bufbuild/protobuf/wkt';
import { scope } from '../common/log.js';
import type { Cluster } from '../gen/envoy/config/cluster/v3/cluster_pb.js';
import type { Node } from '../gen/envoy/config/core/v3/base_pb.js';
import type { ClusterLoadAssignment } from '../gen/envoy/config/endpoint/v3/endpoint_pb.js';
import type { Listener } from '../gen/envoy/config/listener/v3/listener_pb.js';
import { RouteConfigurationSchema, type RouteConfiguration } from '../gen/envoy/config/route/v3/route_pb.js';
import { AdsClient, PartiallyApplied, routeNames, type AdsResource, type AdsUpdate } from '../envoy/ads-client.js';
import { shortTypeName, TypeUrl } from '../envoy/types.js';
import type { DynamicClusterManager } from './clusters.js';
import { ConfigError, withinResource } from '../envoy/config-error.js';
import type { ListenerManager, ListenerPlan } from './listener-manager.js';
import { compileRouteConfiguration, type RouteTable } from './route-table.js';
import { statName, type StatCounter, type StatsStore } from './stats.js';
import { DEFAULT_INITIAL_FETCH_TIMEOUT_MS, routeWarmingTimeoutMs } from './initial-fetch.js';
import { SecretManager } from './tls/secrets.js';

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

/** An accepted listener set that waits for its route configurations and secrets before it serves. */
interface Warming {
  readonly plan: ListenerPlan;
  readonly listeners: readonly Listener[];
  /** Absent when an initial_fetch_timeout of what it waits for is 0: it waits without limit. */
  readonly timer?: NodeJS.Timeout;
}

/**
 * Compiles and applies whole-type updates to the cluster and listener managers and keeps the route
 * tables: the part of xDS a data plane needs, used by the ADS client below and by the proxy's
 * worker processes, which get the updates the main process accepted (workers.ts).
 *
 * Listener warming, as Envoy does it: a listener set naming a route configuration not received yet
 * is accepted (ACKed, its addresses bound) but not served until the routes arrive or the
 * initial_fetch_timeout of the HCMs' RDS config sources passes (initial-fetch.ts). Meanwhile the listeners it replaces keep serving and connections to
 * new addresses wait; no request meets a listener without its routes.
 */
export class ResourceApplier {
  private readonly routes = new Map<string, { table: RouteTable; message: RouteConfiguration }>();
  private assignments = new Map<string, ClusterLoadAssignment>();
  private warming?: Warming;
  /** The listener resources applied (what serves, or warms): a failed listener's last good one. */
  private listenerResources = new Map<string, AdsResource>();
  /** Whether a listener set was ever activated (readiness waits for the first). */
  activated = false;
  /** Route configurations whose initial fetch timed out: readiness no longer waits for them. */
  private readonly routesGivenUp = new Set<string>();

  constructor(
    private readonly clusters: DynamicClusterManager,
    private readonly listeners: ListenerManager,
    readonly secrets: SecretManager = new SecretManager(),
  ) {}

  /** What warming listeners wait for: route configurations and secrets (empty when none). */
  warmingFor(): string[] {
    return this.warming ? this.missing(this.warming) : [];
  }

  private missing(w: { plan: ListenerPlan; listeners: readonly Listener[] }): string[] {
    const secrets = this.secrets.missing([...w.plan.listeners.values()].flatMap((l) => l.secretRefs()));
    return [...this.missingRoutes(w.listeners).map((n) => `route configuration ${n}`), ...secrets.map((n) => `secret ${n}`)];
  }

  /**
   * How long warming may wait: Envoy's initial_fetch_timeout of each missing resource (the RDS
   * config source of the HCMs naming a route configuration, the SdsSecretConfig's for a secret);
   * undefined when one of them is 0 (wait without limit).
   */
  private warmingTimeoutMs(w: { plan: ListenerPlan; listeners: readonly Listener[] }): number | undefined {
    const secrets = this.secrets.missing([...w.plan.listeners.values()].flatMap((l) => l.secretRefs()));
    const forSecrets = this.secrets.remainingWaitMs(secrets);
    if (forSecrets === undefined) return undefined;
    const routes = this.missingRoutes(w.listeners);
    if (routes.length === 0) return forSecrets;
    const forRoutes = routeWarmingTimeoutMs(w.listeners, routes);
    return forRoutes === 0 ? undefined : Math.max(forRoutes, forSecrets);
  }

  /** Drops a warming listener set (shutdown). */
  close(): void {
    this.cancelWarming();
  }

  /** The route table the HTTP connection managers look up by RDS name. */
  readonly route = (name: string): RouteTable | undefined => this.routes.get(name)?.table;

  hasRoute(name: string): boolean {
    return this.routes.has(name);
  }

  /** Whether the listeners stopped waiting for this route configuration (its fetch timed out). */
  gaveUpOn(name: string): boolean {
    return this.routesGivenUp.has(name);
  }

  /**
   * Applies one type's whole set; throws (changing nothing) when any of it cannot be applied,
   * except for listeners: those that apply do, and `PartiallyApplied` names the others.
   */
  async apply(u: AdsUpdate): Promise<void> {
    const msgs = <T>() => [...u.resources.values()].map((r) => r.message as Message as T);
    switch (u.typeUrl) {
      case TypeUrl.Cluster:
        this.clusters.commit(this.clusters.prepare(msgs<Cluster>(), this.assignments));
        return;
      case TypeUrl.ClusterLoadAssignment: {
        const next = new Map([...u.resources].map(([n, r]) => [n, r.message as Message as ClusterLoadAssignment]));
        this.clusters.commit(this.clusters.prepareEndpoints(next));
        this.assignments = next;
        return;
      }
      case TypeUrl.Listener: {
        // A newer set replaces one still warming (whose new addresses it may bind again).
        this.cancelWarming();
        const plan = await this.listeners.prepare(msgs<Listener>());
        const listeners = [...plan.listeners.values()].map((l) => l.message);
        const missing = this.missing({ plan, listeners });
        if (missing.length === 0) this.activate(plan, listeners);
        else this.warm(plan, listeners, missing);
        this.listenerResources = this.appliedListeners(u, plan.failures);
        if (plan.failures.size > 0) {
          const why = [...plan.failures.values()].map((e) => e.message).join('; ');
          throw new PartiallyApplied(why, this.listenerResources, new Set(plan.failures.keys()));
        }
        return;
      }
      case TypeUrl.RouteConfiguration: {
        const next = new Map<string, { table: RouteTable; message: RouteConfiguration }>();
        for (const rc of msgs<RouteConfiguration>()) {
          const old = this.routes.get(rc.name);
          if (old && equals(RouteConfigurationSchema, old.message, rc)) {
            next.set(rc.name, old);
            continue;
          }
          try {
            next.set(rc.name, { table: compileRouteConfiguration(rc), message: rc });
          } catch (e) {
            throw withinResource(`route_configuration ${rc.name}`, e);
          }
        }
        // A name missing from the response is one no longer subscribed, not a deletion (Envoy keeps
        // RDS resources a SotW response leaves out): the tables the serving listeners name stay
        // until those listeners are replaced (a warming set subscribes to its own names only).
        const serving = routeNames(this.listeners.messages());
        for (const [n, r] of this.routes) if (!next.has(n) && serving.has(n)) next.set(n, r);
        this.routes.clear();
        for (const [n, r] of next) this.routes.set(n, r);
        for (const n of next.keys()) this.routesGivenUp.delete(n);
        this.activateWarmed();
        return;
      }
      case TypeUrl.Secret:
        this.secrets.apply(u);
        this.activateWarmed();
        return;
      default:
        throw new Error(`resource type ${u.typeUrl} is not supported by this proxy`);
    }
  }

  /** The update's listeners as applied: a failed one is its previous version, or absent. */
  private appliedListeners(u: AdsUpdate, failures: ReadonlyMap<string, Error>): Map<string, AdsResource> {
    const out = new Map<string, AdsResource>();
    for (const [name, r] of u.resources) {
      const kept = failures.has(name) ? this.listenerResources.get(name) : r;
      if (kept) out.set(name, kept);
    }
    return out;
  }

  private warm(plan: ListenerPlan, listeners: readonly Listener[], missing: readonly string[]): void {
    const waitMs = this.warmingTimeoutMs({ plan, listeners });
    log.info(`listeners warming until ${missing.join(', ')} arrives${waitMs === undefined ? ' (initial_fetch_timeout 0: without limit)' : ` (at most ${waitMs}ms)`}`);
    if (waitMs === undefined) {
      this.warming = { plan, listeners };
      return;
    }
    const timer = setTimeout(() => {
      log.warn(`${this.warmingFor().join(', ')} did not arrive within its initial_fetch_timeout (${waitMs}ms); the listeners serve without it (TLS chains without their secrets refuse connections)`);
      for (const n of this.missingRoutes(listeners)) this.routesGivenUp.add(n);
      this.activate(plan, listeners);
    }, waitMs);
    timer.unref();
    this.warming = { plan, listeners, timer };
  }

  private missingRoutes(listeners: readonly Listener[]): string[] {
    return [...routeNames(listeners)].filter((n) => !this.routes.has(n));
  }

  /** Activates the warming set once nothing it waits for is missing. */
  private activateWarmed(): void {
    const w = this.warming;
    if (w && this.missing(w).length === 0) this.activate(w.plan, w.listeners);
  }

  private activate(plan: ListenerPlan, listeners: readonly Listener[]): void {
    if (this.warming) clearTimeout(this.warming.timer);
    this.warming = undefined;
    this.listeners.commit(plan);
    this.activated = true;
    // Route tables no listener names any more are dropped (the client unsubscribes them).
    const named = routeNames(listeners);
    for (const n of [...this.routes.keys()]) if (!named.has(n)) this.routes.delete(n);
  }

  private cancelWarming(): void {
    if (!this.warming) return;
    clearTimeout(this.warming.timer);
    this.listeners.abort(this.warming.plan);
    this.warming = undefined;
  }
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
    this.applier = new ResourceApplier(o.clusters, o.listeners, o.secrets);
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
