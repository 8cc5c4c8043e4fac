// The discovery server's pushes: turns config, registry and key-set changes into debounced pushes,
// rebuilds the snapshot (PushContext) for each, and sends it to the connected proxies, holding
// back the proxies that wait for a new issuer's first key set and adding every type for the
// proxies of changed WorkloadEntries.
import type { ConfigEvent, ConfigSource } from '../config/store.js';
import { counter } from '../common/metrics.js';
import { scope } from '../common/log.js';
import { PushContext, type PushContextOptions } from '../model/push-context.js';
import { withIngressConfig, type IngressController } from '../registry/orchestrator/ingress.js';
import type { AggregateRegistry } from '../registry/aggregate.js';
import { jwksPrefetch } from '../security/authn/jwks-policy.js';
import type { JwksResolver } from '../security/authn/jwks-resolver.js';
import type { StatusReporting } from '../status/setup.js';
import { Debouncer, type DebounceOptions } from '../xds/debounce.js';
import type { ProxyInfo, PushRequest } from '../xds/generator.js';
import { MESH_XDS_TYPES, type ProxyModels } from '../xds/generators/index.js';
import { pushFor, workloadAddresses, type PushTrigger } from '../xds/push-scope.js';
import type { XdsServer } from '../xds/server.js';

const log = scope('default');

export interface DiscoveryPushSources {
  readonly store: ConfigSource;
  readonly registry: AggregateRegistry;
  /** The orchestrator's Ingresses, translated into Gateways and VirtualServices at every push. */
  readonly ingress: IngressController | undefined;
  /** What the snapshot is built with besides the config and the registry. */
  readonly snapshot: Omit<PushContextOptions, 'config' | 'registry'>;
  readonly status: StatusReporting | undefined;
  readonly resolver: JwksResolver;
  readonly proxies: ProxyModels;
  /** The connected streams, by connection id. */
  readonly connected: ReadonlyMap<string, ProxyInfo>;
  /** The xDS server, made after the generators that read `current`. */
  readonly xds: () => XdsServer;
  readonly debounce: DebounceOptions;
}

export class DiscoveryPushes {
  /** The snapshot the generators read. */
  current: PushContext;
  private readonly debouncer: Debouncer;
  /** Addresses of WorkloadEntries changed since the last push: their proxies' own config may change. */
  private readonly changedWorkloads = new Set<string>();

  constructor(private readonly src: DiscoveryPushSources) {
    this.current = this.build();
    this.debouncer = new Debouncer((req) => void this.pushAll(req), src.debounce);
  }

  /** Queues the push of the types whose push scope rule the trigger meets (see ../xds/push-scope.ts). */
  trigger(t: PushTrigger): void {
    const push = pushFor(MESH_XDS_TYPES, t);
    if (push) this.debouncer.enqueue(push);
  }

  onConfigEvent(e: ConfigEvent): void {
    for (const address of workloadAddresses(e)) this.changedWorkloads.add(address);
    this.trigger({ source: 'config', kind: (e.new ?? e.old).kind });
  }

  /** The snapshot once the config sources have synced; a failure here fails the start. */
  start(): void {
    // Readiness never waits on an issuer: the first fetches start now, and proxies connecting
    // before they end get the fail-closed key set, then the keys by the push that follows.
    this.src.resolver.track(jwksPrefetch(this.src.store.list('RequestAuthentication')).fetches);
    this.current = this.build();
    this.src.status?.snapshot();
  }

  /** A new snapshot for a push of `types` (undefined: all); a failed rebuild keeps the last good one. Returns whether it succeeded. */
  rebuild(types?: ReadonlySet<string>): boolean {
    try {
      this.current = this.build();
      this.src.status?.snapshot(types);
      return true;
    } catch (e) {
      counter('pilot_xds_push_context_errors').inc();
      log.error(`push context rebuild failed, keeping the last good snapshot: ${(e as Error).message}`);
      return false;
    }
  }

  close(): void {
    this.debouncer.close();
  }

  private build(): PushContext {
    const { store, ingress, registry } = this.src;
    const config = ingress ? withIngressConfig(store, ingress.translate(registry.services())) : store;
    return PushContext.build({ config, registry, ...this.src.snapshot });
  }

  /**
   * Rebuilds the snapshot and pushes; a failed rebuild keeps the last good snapshot. A proxy that a
   * RequestAuthentication with a new jwksUri selects is pushed once that first fetch has ended or
   * its bound passed (jwks-resolver.ts), so it gets the keys rather than the fail-closed set;
   * every other proxy is pushed at once: one slow issuer never delays the rest of the mesh.
   */
  private async pushAll(req: PushRequest): Promise<void> {
    const { resolver, store, connected, proxies } = this.src;
    const xds = this.src.xds();
    resolver.track(jwksPrefetch(store.list('RequestAuthentication')).fetches);
    if (!this.rebuild(req.types)) return;
    const awaited = resolver.awaited();
    const held = new Set<string>();
    for (const info of awaited.size > 0 ? connected.values() : []) {
      const { fetches } = jwksPrefetch(this.current.policiesFor('RequestAuthentication', proxies.of(info)));
      if (fetches.some((f) => awaited.has(f.jwksUri))) held.add(info.id);
    }
    if (held.size === 0) await xds.pushAll(req);
    else {
      const others = new Set([...connected.values()].map((info) => info.id).filter((id) => !held.has(id)));
      const later = resolver.firstFetches(awaited).then(() => Promise.all([...held].map((id) => xds.push(id, req))));
      await Promise.all([...[...others].map((id) => xds.push(id, req)), later]);
    }
    if (req.types !== undefined) await this.pushChangedWorkloads(req.triggeredAt);
    else this.changedWorkloads.clear();
  }

  /** Every type, to the proxies whose IPs are those of WorkloadEntries changed since the last push. */
  private async pushChangedWorkloads(triggeredAt: number | undefined): Promise<void> {
    if (this.changedWorkloads.size === 0) return;
    const addresses = new Set(this.changedWorkloads);
    this.changedWorkloads.clear();
    const { connected, proxies } = this.src;
    const xds = this.src.xds();
    const ids = new Set([...connected.values()].filter((info) => proxies.of(info).ipAddresses.some((ip) => addresses.has(ip))).map((info) => info.id));
    await Promise.all([...ids].map((id) => xds.push(id, { reason: 'workloadentry', ...(triggeredAt !== undefined ? { triggeredAt } : {}) })));
  }
}
