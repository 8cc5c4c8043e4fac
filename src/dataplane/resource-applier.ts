// Applies whole-type xDS updates to what the proxy serves: clusters and endpoints to the cluster
// manager, listeners to the listener manager (warming them until their route configurations and
// secrets arrive), route configurations compiled into the route tables the HTTP connection managers
// look up, secrets to the secret manager. Used by the ADS side (./xds-applier.ts) and by the
// proxy's worker processes (./worker.ts).
import { equals, type Message } from '@bufbuild/protobuf';
import { scope } from '../common/log.js';
import type { Cluster } from '../gen/envoy/config/cluster/v3/cluster_pb.js';
import type { ClusterLoadAssignment } from '../gen/envoy/config/endpoint/v3/endpoint_pb.js';
import type { Listener } from '../gen/envoy/config/listener/v3/listener_pb.js';
import { RouteConfigurationSchema, type RouteConfiguration } from '../gen/envoy/config/route/v3/route_pb.js';
import { PartiallyApplied, routeNames, type AdsResource, type AdsUpdate } from '../envoy/ads-client.js';
import { TypeUrl } from '../envoy/types.js';
import { withinResource } from '../envoy/config-error.js';
import type { DynamicClusterManager } from './clusters.js';
import type { ListenerManager, ListenerPlan } from './listener-manager.js';
import { compileRouteConfiguration, type RouteTable } from './route-table.js';
import type { RouteStatsStore } from './route-stats.js';
import { routeWarmingTimeoutMs } from './initial-fetch.js';
import { SecretManager } from './tls/secrets.js';

const log = scope('config');

/** An accepted listener set that waits for its route configurations and secrets before it serves. */
interface Warming {
  readonly plan: ListenerPlan;
  readonly listeners: readonly Listener[];
  /** Absent when an initial_fetch_timeout of what it waits for is 0: it waits without limit. */
  readonly timer?: NodeJS.Timeout;
}

/**
 * Compiles and applies whole-type updates to the cluster and listener managers and keeps the route
 * tables: the part of xDS a data plane needs, used by the ADS side (./xds-applier.ts) and by the proxy's
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
    /** Where the routes' stats are kept (routes with a stat_prefix). */
    private readonly stats?: RouteStatsStore,
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
            next.set(rc.name, { table: compileRouteConfiguration(rc, { stats: this.stats }), message: rc });
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
