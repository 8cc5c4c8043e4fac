// Services and instances declared with ServiceEntry and WorkloadEntry, computed from the config
// store. A ServiceEntry's instances are its inline `endpoints` plus the WorkloadEntries (and, with
// PILOT_ENABLE_SERVICEENTRY_SELECT_PODS, the Pods) of its namespace whose labels match its
// `workloadSelector`; one Service per host it lists.
import type { ServiceEntry, WorkloadEntry, WorkloadEntrySpec } from '../api/types.js';
import type { ConfigEvent, ConfigStore } from '../config/store.js';
import { gauge } from '../common/metrics.js';
import { labelsMatch } from '../model/selection.js';
import { parseLocality, portProtocol, type Resolution, type Service, type ServiceInstance, type ServicePort } from '../model/service.js';
import { compareServices, serviceKey } from './types.js';
import { RecomputedRegistry } from './recomputed.js';

export interface ServiceEntryState {
  readonly services: readonly Service[];
  /** By serviceKey. */
  readonly instances: ReadonlyMap<string, readonly ServiceInstance[]>;
  /** Hosts declared again in the same namespace by a later ServiceEntry (the first one wins). */
  readonly duplicates: readonly string[];
}

const REGISTRY_NAME = 'ServiceEntry';

function servicePorts(se: ServiceEntry): ServicePort[] {
  return (se.spec.ports ?? []).map((p) => ({ name: p.name ?? String(p.number), port: p.number, protocol: portProtocol(p) }));
}

/** A workload (WorkloadEntry, inline endpoint or Pod) selected by a service, on one of its ports. */
export function workloadInstance(
  service: Service,
  port: ServicePort,
  endpointPort: number,
  we: WorkloadEntrySpec,
  address: string,
  clusterId: string,
): ServiceInstance {
  return {
    hostname: service.hostname,
    namespace: service.namespace,
    servicePort: port,
    address,
    endpointPort,
    labels: we.labels ?? {},
    serviceAccount: we.serviceAccount ?? '',
    locality: parseLocality(we.locality),
    weight: we.weight && we.weight > 0 ? we.weight : 1,
    network: we.network ?? '',
    clusterId,
  };
}

/** A workload a ServiceEntry's workloadSelector may select besides WorkloadEntries: a Pod, say. */
export interface SelectableWorkload {
  readonly namespace: string;
  /** The workload as a WorkloadEntry would describe it (address, labels, ports by name, ...). */
  readonly spec: WorkloadEntrySpec;
}

/** Where Pods come from (the orchestrator registry), for PILOT_ENABLE_SERVICEENTRY_SELECT_PODS. */
export interface PodWorkloads {
  podWorkloads(): readonly SelectableWorkload[];
  /** Subscribes to changes of the Pods; returns the function that unsubscribes. */
  onPodsChanged(handler: () => void): () => void;
}

/**
 * The selectable workloads by namespace and by label: a selector's candidates are the workloads
 * carrying one of its labels, so selecting for every ServiceEntry costs the workloads it may match,
 * not every workload of the namespace (1000 ServiceEntries over 2000 WorkloadEntries were 200,000
 * label comparisons per recomputation).
 */
class SelectableByLabel {
  private readonly byNamespace = new Map<string, WorkloadEntrySpec[]>();
  private readonly byLabel = new Map<string, Map<string, WorkloadEntrySpec[]>>();

  constructor(workloads: readonly SelectableWorkload[]) {
    for (const w of workloads) push(this.byNamespace, w.namespace, w.spec);
  }

  /** The workloads of `namespace` the selector matches, in their order. */
  select(namespace: string, selector: Readonly<Record<string, string>>): WorkloadEntrySpec[] {
    const first = Object.entries(selector)[0];
    const candidates = first ? (this.indexOf(namespace).get(`${first[0]}=${first[1]}`) ?? []) : (this.byNamespace.get(namespace) ?? []);
    return candidates.filter((we) => labelsMatch(selector, we.labels ?? {}));
  }

  private indexOf(namespace: string): Map<string, WorkloadEntrySpec[]> {
    let index = this.byLabel.get(namespace);
    if (!index) {
      index = new Map();
      for (const we of this.byNamespace.get(namespace) ?? []) for (const [k, v] of Object.entries(we.labels ?? {})) push(index, `${k}=${v}`, we);
      this.byLabel.set(namespace, index);
    }
    return index;
  }
}

function push<K, V>(m: Map<K, V[]>, key: K, value: V): void {
  const list = m.get(key);
  if (list) list.push(value);
  else m.set(key, [value]);
}

/** The pure conversion: ServiceEntries + WorkloadEntries (+ Pods) -> services and instances. */
export function convertServiceEntries(
  serviceEntries: readonly ServiceEntry[],
  workloadEntries: readonly WorkloadEntry[],
  clusterId: string,
  pods: readonly SelectableWorkload[] = [],
): ServiceEntryState {
  const services = new Map<string, Service>();
  const instances = new Map<string, ServiceInstance[]>();
  const duplicates: string[] = [];
  const selectable = new SelectableByLabel([...workloadEntries.map((we) => ({ namespace: we.metadata.namespace, spec: we.spec })), ...pods]);
  for (const se of serviceEntries) {
    const ns = se.metadata.namespace;
    const ports = servicePorts(se);
    const targetPorts = new Map((se.spec.ports ?? []).map((p) => [p.number, p.targetPort]));
    const resolution: Resolution = se.spec.resolution ?? 'NONE';
    const selector = se.spec.workloadSelector?.labels;
    const workloads: WorkloadEntrySpec[] = [
      ...(se.spec.endpoints ?? []),
      ...(selector ? selectable.select(ns, selector) : []),
    ];
    for (const host of se.spec.hosts) {
      const service: Service = {
        hostname: host,
        namespace: ns,
        addresses: se.spec.addresses ?? [],
        ports,
        resolution,
        exportTo: se.spec.exportTo ?? [],
        external: (se.spec.location ?? 'MESH_EXTERNAL') === 'MESH_EXTERNAL',
        registry: REGISTRY_NAME,
        labels: se.metadata.labels ?? {},
        source: `ServiceEntry/${ns}/${se.metadata.name}`,
      };
      const key = serviceKey(service);
      if (services.has(key)) {
        duplicates.push(`${key} (ServiceEntry/${ns}/${se.metadata.name})`);
        continue;
      }
      services.set(key, service);
      // A DNS service without endpoints resolves its own (non-wildcard) host name.
      const dnsSelf = workloads.length === 0 && !selector && resolution.startsWith('DNS') && !host.includes('*');
      const sources = dnsSelf ? [{ spec: {} as WorkloadEntrySpec, address: host }] : workloads.filter((w) => w.address).map((w) => ({ spec: w, address: w.address! }));
      instances.set(
        key,
        // A workload may map the port name to the port it listens on.
        sources.flatMap(({ spec, address }) => ports.map((p) => workloadInstance(service, p, spec.ports?.[p.name] ?? targetPorts.get(p.port) ?? p.port, spec, address, clusterId))),
      );
    }
  }
  return { services: [...services.values()].sort(compareServices), instances, duplicates };
}

type StoreView = Pick<ConfigStore, 'list' | 'onEvent' | 'hasSynced'>;

/**
 * The registry over a config store: recomputed (see ./recomputed.ts) after ServiceEntry/WorkloadEntry
 * changes. `workloads`, when given, is a second source of WorkloadEntries (the auto-registered ones,
 * see ./autoregister.ts), read together with the config store's.
 */
export class ServiceEntryRegistry extends RecomputedRegistry<ServiceEntryState> {
  readonly name = REGISTRY_NAME;
  private readonly unsubscribe: Array<() => void>;

  private pods?: PodWorkloads;

  constructor(
    private readonly store: StoreView,
    readonly clusterId: string,
    private readonly workloads?: StoreView,
  ) {
    super({ services: [], instances: new Map(), duplicates: [] });
    this.refresh();
    const onEvent = (e: ConfigEvent): void => {
      const kind = (e.new ?? e.old).kind;
      if (kind === 'ServiceEntry' || kind === 'WorkloadEntry') this.invalidate();
    };
    this.unsubscribe = [store.onEvent(onEvent), ...(workloads ? [workloads.onEvent(onEvent)] : [])];
  }

  /** PILOT_ENABLE_SERVICEENTRY_SELECT_PODS: workloadSelectors select these Pods too. */
  selectPods(pods: PodWorkloads): void {
    this.pods = pods;
    this.unsubscribe.push(pods.onPodsChanged(() => this.invalidate()));
    this.invalidate();
  }

  hasSynced(): boolean {
    return this.store.hasSynced();
  }

  close(): void {
    this.unsubscribe.forEach((u) => u());
  }

  protected compute(): ServiceEntryState {
    const entries = [...this.store.list('WorkloadEntry'), ...(this.workloads?.list('WorkloadEntry') ?? [])];
    const state = convertServiceEntries(this.store.list('ServiceEntry'), entries, this.clusterId, this.pods?.podWorkloads() ?? []);
    gauge('pilot_duplicate_envoy_clusters').set(state.duplicates.length);
    return state;
  }
}
