// PushContext: one immutable snapshot of everything the generators read (services, instances,
// policies, sidecars), with the indexes they need. A push builds a new one and every proxy's
// config is generated from the same snapshot, so proxies never see half of a change.
import type { AnyResource, IngressListener, Kind, ResourceOf, Sidecar, EgressListener, Telemetry } from '../api/types.js';
import { ROOT_NAMESPACE } from '../api/types.js';
import { gauge } from '../common/metrics.js';
import type { Proxy } from './proxy.js';
import { hostMatches, labelsMatch, selectPolicies } from './selection.js';
import { visibleTo, type Service, type ServiceInstance } from './service.js';
import { TrafficIndex, type ExportDefaults, type TrafficOptions } from './traffic.js';
import { GatewayIndex, gatewayNotices, gatewayRouteNotices } from './gateway.js';
import { destinationRuleNotices, virtualServiceNotices } from './traffic-notices.js';
import { scope } from '../common/log.js';
import { perObject } from '../common/same-inputs.js';
import { applicableTelemetries, telemetryWarnings } from './telemetry.js';
import { readTelemetryProviders, type TelemetryProviders } from './telemetry-providers.js';

const log = scope('model');

/** Notices already logged, by resource: each is logged again only when the resource's notices change. */
const loggedNotices = new Map<string, string>();

function logNotices(key: string, notices: readonly string[]): void {
  const text = notices.join('\n');
  if (loggedNotices.get(key) === text) return;
  loggedNotices.set(key, text);
  notices.forEach((n) => log.warn(n));
}

/** What the snapshot reads from the config store (a `ConfigStore` fits). */
export interface ConfigView {
  list<K extends Kind>(kind: K, namespace?: string): ResourceOf<K>[];
}

/** What it reads from the registries (a `ServiceRegistry`, usually the aggregate, fits). */
export interface ServiceSource {
  services(): readonly Service[];
  instances(service: Pick<Service, 'hostname' | 'namespace'>): readonly ServiceInstance[];
}

export interface PushContextOptions {
  readonly config: ConfigView;
  readonly registry: ServiceSource;
  /** `--domain`: the DNS suffix of in-mesh services (`<svc>.<ns>.svc.<domain>`). */
  readonly domain?: string;
  /** `--clusterID`: the cluster of this control plane. */
  readonly clusterId?: string;
  /** Namespace whose policies and Sidecar apply mesh-wide. */
  readonly rootNamespace?: string;
  /** Settings of the networking API (VirtualService delegation). */
  readonly traffic?: Omit<TrafficOptions, 'warn'>;
  /** The discovery server serves credentialName secrets over SDS (MESHD_ENABLE_SDS_SERVER). */
  readonly credentialsServed?: boolean;
  /** Mesh config outboundTrafficPolicy.mode: the mode of proxies whose Sidecar sets none; default ALLOW_ANY. */
  readonly outboundTrafficPolicy?: OutboundTrafficMode;
  /** Mesh config default*ExportTo: the visibility of services, VirtualServices and DestinationRules that set no exportTo; default all namespaces. */
  readonly exportDefaults?: ExportDefaults;
  /** Mesh config extensionProviders for the Telemetry API: what Telemetry resources may name; default the built-ins (`envoy`, `prometheus`, `stackdriver`). */
  readonly telemetryProviders?: TelemetryProviders;
}

export type PolicyKind = 'AuthorizationPolicy' | 'RequestAuthentication' | 'PeerAuthentication';
const POLICY_KINDS: readonly PolicyKind[] = ['AuthorizationPolicy', 'RequestAuthentication', 'PeerAuthentication'];

export type OutboundTrafficMode = 'ALLOW_ANY' | 'REGISTRY_ONLY';

/** What a Sidecar resource (or its absence) means for one proxy. */
export interface SidecarScope {
  /** The Sidecar resource applied, if any. */
  readonly sidecar?: Sidecar;
  /** Services the proxy can reach, one per hostname, sorted by hostname. */
  readonly services: readonly Service[];
  /** The same services by hostname. */
  readonly byHost: ReadonlyMap<string, Service>;
  readonly ingress: readonly IngressListener[];
  readonly egress: readonly EgressListener[];
  readonly outboundTrafficPolicy: OutboundTrafficMode;
}

let versionCounter = 0;

function groupBy<T, K = string>(items: readonly T[], key: (t: T) => K): Map<K, T[]> {
  const m = new Map<K, T[]>();
  for (const t of items) {
    const k = key(t);
    const list = m.get(k);
    if (list) list.push(t);
    else m.set(k, [t]);
  }
  return m;
}

/**
 * A service's instances by service port, once per instance list: registries keep the list of a
 * service whose instances did not change (registry/types.ts, keepUnchanged), so its per-port lists
 * are the same objects in the next snapshot, and what is derived from them (load assignments) is too.
 */
const instancesByPort = perObject((instances: readonly ServiceInstance[]) => groupBy(instances, (i) => i.servicePort.port));

/** `ns/host` egress entries: ns `*` any, `.` the proxy's, `~` none; host may be `*` or `*.suffix`. */
function egressAllows(hosts: readonly string[], service: Service, proxyNamespace: string): boolean {
  return hosts.some((entry) => {
    const slash = entry.indexOf('/');
    const ns = slash < 0 ? '*' : entry.slice(0, slash);
    const host = slash < 0 ? entry : entry.slice(slash + 1);
    if (ns === '~') return false;
    const nsOk = ns === '*' || (ns === '.' ? service.namespace === proxyNamespace : service.namespace === ns);
    return nsOk && hostMatches(host, service.hostname);
  });
}

export class PushContext {
  /** Unique per snapshot; used as the xDS version prefix and in debug output. */
  readonly version: string;
  readonly domain: string;
  readonly clusterId: string;
  readonly rootNamespace: string;
  /** The mesh's outboundTrafficPolicy mode, under a Sidecar's. */
  private readonly outboundMode: OutboundTrafficMode;
  /** The mesh's defaultServiceExportTo, under a service's own exportTo. */
  private readonly serviceExportTo: readonly string[] | undefined;
  /** Every service, sorted by hostname then namespace. */
  readonly services: readonly Service[];
  readonly virtualServiceCount: number;
  /** DestinationRules and VirtualServices by host (model/traffic.ts). */
  readonly traffic: TrafficIndex;
  /** Gateways and the VirtualServices bound to them (model/gateway.ts). */
  readonly gateways: GatewayIndex;
  private readonly servicesByHost: Map<string, Service[]>;
  private readonly servicesByNamespace: Map<string, Service[]>;
  private readonly instancesByService: Map<string, readonly ServiceInstance[]>;
  private readonly instancesByAddress: Map<string, ServiceInstance[]>;
  private readonly policies: Map<PolicyKind, Map<string, AnyResource[]>>;
  private readonly sidecarsByNamespace: Map<string, Sidecar[]>;
  private readonly scopeCache = new Map<string, SidecarScope>();
  private readonly telemetries: readonly Telemetry[];
  private readonly telemetryCache = new Map<string, readonly Telemetry[]>();

  private constructor(opts: PushContextOptions) {
    this.version = `${new Date().toISOString()}/${++versionCounter}`;
    this.domain = opts.domain || 'cluster.local';
    this.clusterId = opts.clusterId ?? '';
    this.rootNamespace = opts.rootNamespace ?? ROOT_NAMESPACE;
    this.outboundMode = opts.outboundTrafficPolicy ?? 'ALLOW_ANY';
    this.serviceExportTo = opts.exportDefaults?.services;
    this.services = opts.registry.services();
    this.servicesByHost = groupBy(this.services, (s) => s.hostname);
    this.servicesByNamespace = groupBy(this.services, (s) => s.namespace);
    this.instancesByService = new Map(this.services.map((s) => [`${s.namespace}/${s.hostname}`, opts.registry.instances(s)]));
    const all = [...this.instancesByService.values()].flat();
    this.instancesByAddress = groupBy(all, (i) => i.address);
    this.policies = new Map(POLICY_KINDS.map((k) => [k, groupBy(opts.config.list(k) as AnyResource[], (r) => r.metadata.namespace)]));
    this.sidecarsByNamespace = groupBy(opts.config.list('Sidecar'), (r) => r.metadata.namespace);
    this.telemetries = opts.config.list('Telemetry');
    const virtualServices = opts.config.list('VirtualService');
    this.virtualServiceCount = virtualServices.length;
    this.traffic = new TrafficIndex(opts.config.list('DestinationRule'), virtualServices, this.domain, this.rootNamespace, { ...opts.traffic, ...(opts.exportDefaults ? { exportDefaults: opts.exportDefaults } : {}), warn: (m) => logNotices(`delegation/${m}`, [m]) });
    this.gateways = new GatewayIndex(opts.config.list('Gateway'), virtualServices, this.domain, opts.exportDefaults?.virtualServices);
  }

  /** Builds a snapshot and sets the gauges that describe it. */
  static build(opts: PushContextOptions): PushContext {
    const push = new PushContext(opts);
    gauge('pilot_services').set(push.services.length);
    gauge('pilot_virt_services').set(push.virtualServiceCount);
    gauge('pilot_destrule_subsets').set(push.traffic.stats.duplicateSubsets);
    gauge('pilot_vservice_dup_domain').set(push.traffic.stats.duplicateDomains.length);
    for (const host of push.traffic.stats.duplicateDomains) logNotices(`dup-domain/${host}`, [`several VirtualServices for the mesh claim host ${host}: the first in namespace/name order applies`]);
    for (const dr of opts.config.list('DestinationRule')) logNotices(`DestinationRule/${dr.metadata.namespace}/${dr.metadata.name}`, destinationRuleNotices(dr));
    for (const vs of opts.config.list('VirtualService')) logNotices(`VirtualService/${vs.metadata.namespace}/${vs.metadata.name}`, [...virtualServiceNotices(vs), ...gatewayRouteNotices(vs)]);
    for (const gw of push.gateways.gateways) logNotices(`Gateway/${gw.metadata.namespace}/${gw.metadata.name}`, gatewayNotices(gw, opts.credentialsServed));
    const providers = opts.telemetryProviders ?? readTelemetryProviders({});
    for (const t of push.telemetries) logNotices(`Telemetry/${t.metadata.namespace}/${t.metadata.name}`, telemetryWarnings(t, providers));
    gauge('pilot_eds_no_instances').set(push.clustersWithoutInstances());
    return push;
  }

  /** EDS clusters (service ports of STATIC services) that have no endpoint. */
  clustersWithoutInstances(): number {
    let n = 0;
    for (const s of this.services) {
      if (s.resolution !== 'STATIC') continue;
      for (const p of s.ports) if (this.instances(s, p.port).length === 0) n++;
    }
    return n;
  }

  servicesInNamespace(ns: string): readonly Service[] {
    return this.servicesByNamespace.get(ns) ?? [];
  }

  /** The service of `hostname` as seen from namespace `ns`: its own namespace's first, else any visible. */
  serviceForHost(hostname: string, ns: string): Service | undefined {
    const candidates = (this.servicesByHost.get(hostname) ?? []).filter((s) => visibleTo(s, ns, this.serviceExportTo));
    return candidates.find((s) => s.namespace === ns) ?? candidates[0];
  }

  /** The service an instance belongs to (the registry's, whatever its visibility). */
  serviceOf(instance: Pick<ServiceInstance, 'hostname' | 'namespace'>): Service | undefined {
    return (this.servicesByHost.get(instance.hostname) ?? []).find((s) => s.namespace === instance.namespace);
  }

  /** Instances of a service on one service port, or on every port when `port` is absent. */
  instances(service: Pick<Service, 'hostname' | 'namespace'>, port?: number): readonly ServiceInstance[] {
    if (port === undefined) return this.instancesByService.get(`${service.namespace}/${service.hostname}`) ?? [];
    const all = this.instancesByService.get(`${service.namespace}/${service.hostname}`);
    return (all && instancesByPort(all).get(port)) ?? [];
  }

  /** The instances the proxy's own workload serves (its inbound ports), found by its IPs. */
  proxyInstances(proxy: Proxy): readonly ServiceInstance[] {
    return proxy.ipAddresses.flatMap((ip) => this.instancesByAddress.get(ip) ?? []);
  }

  /**
   * Policies of a kind that select the proxy: those of its namespace and of the root namespace
   * whose `selector.matchLabels` match its labels (no selector = every workload they cover).
   * Root-namespace ones come first.
   */
  policiesFor<K extends PolicyKind>(kind: K, proxy: Proxy): ResourceOf<K>[] {
    const byNs = this.policies.get(kind)!;
    const namespaces = proxy.namespace === this.rootNamespace ? [this.rootNamespace] : [this.rootNamespace, proxy.namespace];
    return selectPolicies(proxy, namespaces.flatMap((ns) => (byNs.get(ns) ?? []) as ResourceOf<K>[]), this.rootNamespace);
  }

  /** Every policy of a kind in one namespace (for debug output and the security builders). */
  policiesInNamespace<K extends PolicyKind>(kind: K, ns: string): ResourceOf<K>[] {
    return (this.policies.get(kind)!.get(ns) ?? []) as ResourceOf<K>[];
  }

  /**
   * The Telemetries that apply to the proxy, weakest first (model/telemetry.ts), once per
   * namespace and labels: every proxy of a Deployment shares one list.
   */
  telemetriesFor(proxy: Proxy): readonly Telemetry[] {
    if (this.telemetries.length === 0) return this.telemetries;
    const key = `${proxy.namespace}|${JSON.stringify(Object.entries(proxy.labels).sort())}`;
    let found = this.telemetryCache.get(key);
    if (!found) this.telemetryCache.set(key, (found = applicableTelemetries(this.telemetries, proxy, this.rootNamespace)));
    return found;
  }

  /**
   * The Sidecar that applies to the proxy: one of its namespace selecting it by labels, else its
   * namespace's selector-less one, else the root namespace's selector-less one. Cached per Sidecar.
   */
  sidecarScope(proxy: Proxy): SidecarScope {
    const sidecar = this.selectSidecar(proxy);
    const key = sidecar ? `${sidecar.metadata.namespace}/${sidecar.metadata.name}@${proxy.namespace}` : `@${proxy.namespace}`;
    let scope = this.scopeCache.get(key);
    if (!scope) {
      scope = this.computeScope(sidecar, proxy.namespace);
      this.scopeCache.set(key, scope);
    }
    return scope;
  }

  private selectSidecar(proxy: Proxy): Sidecar | undefined {
    const own = this.sidecarsByNamespace.get(proxy.namespace) ?? [];
    const selecting = own.find((s) => s.spec.workloadSelector?.labels && labelsMatch(s.spec.workloadSelector.labels, proxy.labels));
    if (selecting) return selecting;
    const nsWide = own.find((s) => !s.spec.workloadSelector?.labels);
    if (nsWide) return nsWide;
    return (this.sidecarsByNamespace.get(this.rootNamespace) ?? []).find((s) => !s.spec.workloadSelector?.labels);
  }

  private computeScope(sidecar: Sidecar | undefined, ns: string): SidecarScope {
    const egress = sidecar?.spec.egress ?? [];
    const egressHosts = egress.flatMap((e) => e.hosts);
    const byHost = new Map<string, Service>();
    for (const s of this.services) {
      if (!visibleTo(s, ns, this.serviceExportTo)) continue;
      if (egress.length > 0 && !egressAllows(egressHosts, s, ns)) continue;
      const prev = byHost.get(s.hostname);
      // The proxy's own namespace wins a hostname declared in several namespaces.
      if (!prev || (prev.namespace !== ns && s.namespace === ns)) byHost.set(s.hostname, s);
    }
    return {
      ...(sidecar ? { sidecar } : {}),
      services: [...byHost.values()],
      byHost,
      ingress: sidecar?.spec.ingress ?? [],
      egress,
      // The Sidecar's policy, else the mesh config's, as the Go mesh's sidecar scope; a policy
      // without a mode is the enum's zero, REGISTRY_ONLY.
      outboundTrafficPolicy: sidecar?.spec.outboundTrafficPolicy ? (sidecar.spec.outboundTrafficPolicy.mode ?? 'REGISTRY_ONLY') : this.outboundMode,
    };
  }
}
