// The Orchestrator service registry (`--registries Orchestrator`): Services, EndpointSlices (with
// PILOT_USE_ENDPOINT_SLICE, else Endpoints), Pods, Nodes and Namespaces read through the shared
// informers (../../config/informer.ts), converted by ./convert.ts, recomputed once per burst of
// changes (../recomputed.ts).
import type { V1Endpoints, V1EndpointSlice, V1Namespace, V1Node, V1Pod, V1Service } from '@kubernetes/client-node';
import { settingDefault } from '../../common/env.js';
import { scope } from '../../common/log.js';
import { counter, gauge } from '../../common/metrics.js';
import { cachingHandlers, collectionPath, InformerGroup, OrchestratorClient, type InformerGroupOptions, type ResourceType } from '../../config/informer.js';
import type { WorkloadEntry } from '../../api/types.js';
import { isHeadless, type Service } from '../../model/service.js';
import type { ConfigStore } from '../../config/store.js';
import { RecomputedRegistry } from '../recomputed.js';
import type { PodWorkloads, SelectableWorkload } from '../serviceentry.js';
import { convertCluster, podsByIp, podWorkloads, REGISTRY_NAME, type ConvertOptions, type RegistryState } from './convert.js';

const log = scope('orch');

export interface OrchestratorRegistryOptions extends InformerGroupOptions {
  /** --orchconfig; absent means the in-cluster configuration. */
  kubeconfig?: string;
  /** --appNamespace: only these namespaces' Services, endpoints and Pods; empty: all. */
  namespaces?: readonly string[];
  /** --domain. */
  domain: string;
  /** --clusterID. */
  clusterId: string;
  /** PILOT_USE_ENDPOINT_SLICE; defaults to the setting. */
  useEndpointSlices?: boolean;
  /** PILOT_ENABLE_EDS_FOR_HEADLESS_SERVICES; defaults to the setting. */
  edsForHeadless?: boolean;
  /**
   * PILOT_ENABLE_ORCH_SELECT_WORKLOAD_ENTRIES (defaults to the setting): Services with a selector
   * select the WorkloadEntries of these sources (the config store, auto-registration).
   */
  selectWorkloadEntries?: boolean;
  /** PILOT_ENABLE_HEADLESS_SERVICE_POD_LISTENERS (defaults to the setting): see instancesShapeListeners. */
  headlessPodListeners?: boolean;
  workloadEntrySources?: readonly Pick<ConfigStore, 'list' | 'onEvent'>[];
}

/** The resource types the registry reads (deploy/ grants exactly these). */
export const TYPES = {
  Service: { kind: 'Service', group: '', version: 'v1', plural: 'services' },
  Endpoints: { kind: 'Endpoints', group: '', version: 'v1', plural: 'endpoints' },
  EndpointSlice: { kind: 'EndpointSlice', group: 'discovery.k8s.io', version: 'v1', plural: 'endpointslices' },
  Pod: { kind: 'Pod', group: '', version: 'v1', plural: 'pods' },
  Node: { kind: 'Node', group: '', version: 'v1', plural: 'nodes' },
  Namespace: { kind: 'Namespace', group: '', version: 'v1', plural: 'namespaces' },
} as const satisfies Record<string, ResourceType>;

type CachedKind = keyof typeof TYPES;

/** The workload behind a proxy, as its Pod says. */
export interface PodIdentity {
  readonly pod: V1Pod;
  readonly labels: Readonly<Record<string, string>>;
  readonly serviceAccount: string;
}

export class OrchestratorRegistry extends RecomputedRegistry<RegistryState> implements PodWorkloads {
  readonly name = REGISTRY_NAME;
  readonly clusterId: string;
  private readonly serviceObjects = new Map<string, V1Service>();
  private readonly endpoints = new Map<string, V1Endpoints>();
  private readonly slices = new Map<string, V1EndpointSlice>();
  private readonly pods = new Map<string, V1Pod>();
  private readonly nodes = new Map<string, V1Node>();
  private readonly namespaceObjects = new Map<string, V1Namespace>();
  private readonly informers: InformerGroup;
  private readonly convert: ConvertOptions;
  private podIps = new Map<string, V1Pod>();
  /** Pods endpoints were waiting for at the last recomputation, for pilot_orch_endpoints_with_no_pods. */
  private countedPending = new Set<string>();
  /** Proxies whose Pod was not found, for pilot_no_ip. */
  private readonly proxiesWithoutPod = new Set<string>();
  private readonly podHandlers = new Set<() => void>();
  private readonly entrySources: readonly Pick<ConfigStore, 'list' | 'onEvent'>[];

  constructor(private readonly options: OrchestratorRegistryOptions) {
    super({ services: [], instances: new Map(), stats: { notReady: 0, noPod: 0, pendingPods: [] } });
    this.clusterId = options.clusterId;
    this.convert = {
      domain: options.domain,
      clusterId: options.clusterId,
      edsForHeadless: options.edsForHeadless ?? settingDefault('PILOT_ENABLE_EDS_FOR_HEADLESS_SERVICES'),
    };
    this.informers = new InformerGroup(options);
    const namespaces = options.namespaces?.filter((n) => n !== '') ?? [];
    const scopes: (string | undefined)[] = namespaces.length === 0 ? [undefined] : [...new Set(namespaces)];
    const useSlices = options.useEndpointSlices ?? settingDefault('PILOT_USE_ENDPOINT_SLICE');
    const namespaced: [CachedKind, Map<string, unknown>][] = [
      ['Service', this.serviceObjects],
      useSlices ? ['EndpointSlice', this.slices] : ['Endpoints', this.endpoints],
      ['Pod', this.pods],
    ];
    for (const [kind, cache] of namespaced) for (const ns of scopes) this.watch(kind, cache, ns);
    this.watch('Node', this.nodes, undefined);
    this.watch('Namespace', this.namespaceObjects, undefined);
    const selectEntries = options.selectWorkloadEntries ?? settingDefault('PILOT_ENABLE_ORCH_SELECT_WORKLOAD_ENTRIES');
    this.entrySources = selectEntries ? (options.workloadEntrySources ?? []) : [];
    for (const source of this.entrySources) source.onEvent((e) => ((e.new ?? e.old).kind === 'WorkloadEntry' ? this.invalidate() : undefined));
  }

  /** Headless services have a listener per Pod (PILOT_ENABLE_HEADLESS_SERVICE_POD_LISTENERS): a Pod change is a full push. */
  protected override instancesShapeListeners(s: Service): boolean {
    return (this.options.headlessPodListeners ?? settingDefault('PILOT_ENABLE_HEADLESS_SERVICE_POD_LISTENERS')) && isHeadless(s);
  }

  /** Ready Pods as workloads a ServiceEntry's workloadSelector may select. */
  podWorkloads(): readonly SelectableWorkload[] {
    return podWorkloads(this.pods.values(), this.nodes);
  }

  onPodsChanged(handler: () => void): () => void {
    this.podHandlers.add(handler);
    return () => this.podHandlers.delete(handler);
  }

  private watch(kind: CachedKind, cache: Map<string, unknown>, namespace: string | undefined): void {
    const type = TYPES[kind];
    const changed = (event: string): void => {
      counter('pilot_orch_reg_events').inc({ type: kind, event });
      if (kind === 'Pod') this.podIps = podsByIp(this.pods.values());
      if (kind === 'Pod' || kind === 'Node') for (const h of [...this.podHandlers]) h();
      this.invalidate();
    };
    this.informers.add(`${kind} (${type.group || 'core'}/${type.version}${namespace ? `, namespace ${namespace}` : ''})`, collectionPath(type, namespace), cachingHandlers(cache, namespace, changed));
  }

  /** Connects and starts the informers; resolves once every collection has been listed. */
  async start(): Promise<void> {
    await this.informers.start(OrchestratorClient.connect(this.options.kubeconfig));
    // Recomputed once more now that everything is read: what is still missing is really missing.
    this.refresh();
    log.info(`Orchestrator registry synced: ${this.state.services.length} services, ${this.pods.size} pods, ${this.nodes.size} nodes`);
  }

  async close(): Promise<void> {
    await this.informers.close();
  }

  hasSynced(): boolean {
    return this.informers.synced;
  }

  /** A Service as last read (its status too), undefined when it is not known. */
  serviceObject(namespace: string, name: string): V1Service | undefined {
    return this.serviceObjects.get(`${namespace}/${name}`);
  }

  /** A namespace's labels, undefined when it is not known (not read yet, or deleted). */
  namespaceLabels(name: string): Readonly<Record<string, string>> | undefined {
    const ns = this.namespaceObjects.get(name);
    return ns ? (ns.metadata?.labels ?? {}) : undefined;
  }

  /**
   * The Pod behind a proxy: by the pod name and namespace of its node id, else by its IP. A proxy
   * whose Pod is not found is counted in pilot_no_ip and keeps what it claims.
   */
  podFor(proxyId: string, podName: string, namespace: string, ips: readonly string[]): PodIdentity | undefined {
    const pod = this.pods.get(`${namespace}/${podName}`) ?? ips.map((ip) => this.podIps.get(ip)).find((p) => p?.metadata?.namespace === namespace);
    if (pod) this.proxiesWithoutPod.delete(proxyId);
    else this.proxiesWithoutPod.add(proxyId);
    gauge('pilot_no_ip').set(this.proxiesWithoutPod.size);
    if (!pod) return undefined;
    return { pod, labels: pod.metadata?.labels ?? {}, serviceAccount: pod.spec?.serviceAccountName ?? 'default' };
  }

  protected compute(): RegistryState {
    const workloadEntries: WorkloadEntry[] = this.entrySources.flatMap((s) => s.list('WorkloadEntry'));
    const state = convertCluster({ services: this.serviceObjects, slices: this.slices, endpoints: this.endpoints, pods: this.pods, nodes: this.nodes, workloadEntries }, this.convert);
    const { stats } = state;
    gauge('pilot_endpoint_not_ready').set(stats.notReady);
    gauge('endpoint_no_pod').set(stats.noPod);
    gauge('pilot_orch_endpoints_pending_pod').set(stats.pendingPods.length);
    // Each endpoint found waiting for its Pod counts once; before every collection is listed, Pods may merely not be read yet.
    if (this.informers.synced) {
      const fresh = stats.pendingPods.filter((ref) => !this.countedPending.has(ref));
      if (fresh.length > 0) counter('pilot_orch_endpoints_with_no_pods').inc(fresh.length);
      this.countedPending = new Set(stats.pendingPods);
    }
    return state;
  }
}
