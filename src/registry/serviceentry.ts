// Services and instances declared with ServiceEntry and WorkloadEntry, computed from the config
// store. A ServiceEntry's instances are its inline `endpoints` plus the WorkloadEntries of its
// namespace whose labels match its `workloadSelector`; one Service per host it lists.
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

function instanceOf(
  service: Service,
  port: ServicePort,
  targetPort: number | undefined,
  we: WorkloadEntrySpec,
  address: string,
  clusterId: string,
): ServiceInstance {
  return {
    hostname: service.hostname,
    namespace: service.namespace,
    servicePort: port,
    address,
    // A WorkloadEntry may map the port name to the port its workload listens on.
    endpointPort: we.ports?.[port.name] ?? targetPort ?? port.port,
    labels: we.labels ?? {},
    serviceAccount: we.serviceAccount ?? '',
    locality: parseLocality(we.locality),
    weight: we.weight && we.weight > 0 ? we.weight : 1,
    network: we.network ?? '',
    clusterId,
  };
}

/** The pure conversion: ServiceEntries + WorkloadEntries -> services and instances. */
export function convertServiceEntries(
  serviceEntries: readonly ServiceEntry[],
  workloadEntries: readonly WorkloadEntry[],
  clusterId: string,
): ServiceEntryState {
  const services = new Map<string, Service>();
  const instances = new Map<string, ServiceInstance[]>();
  const duplicates: string[] = [];
  const entriesByNamespace = new Map<string, WorkloadEntry[]>();
  for (const we of workloadEntries) {
    const list = entriesByNamespace.get(we.metadata.namespace);
    if (list) list.push(we);
    else entriesByNamespace.set(we.metadata.namespace, [we]);
  }
  for (const se of serviceEntries) {
    const ns = se.metadata.namespace;
    const ports = servicePorts(se);
    const targetPorts = new Map((se.spec.ports ?? []).map((p) => [p.number, p.targetPort]));
    const resolution: Resolution = se.spec.resolution ?? 'NONE';
    const selector = se.spec.workloadSelector?.labels;
    const workloads: WorkloadEntrySpec[] = [
      ...(se.spec.endpoints ?? []),
      ...(selector ? (entriesByNamespace.get(ns) ?? []).filter((we) => labelsMatch(selector, we.spec.labels ?? {})).map((we) => we.spec) : []),
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
        sources.flatMap(({ spec, address }) => ports.map((p) => instanceOf(service, p, targetPorts.get(p.port), spec, address, clusterId))),
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

  hasSynced(): boolean {
    return this.store.hasSynced();
  }

  close(): void {
    this.unsubscribe.forEach((u) => u());
  }

  protected compute(): ServiceEntryState {
    const entries = [...this.store.list('WorkloadEntry'), ...(this.workloads?.list('WorkloadEntry') ?? [])];
    const state = convertServiceEntries(this.store.list('ServiceEntry'), entries, this.clusterId);
    gauge('pilot_duplicate_envoy_clusters').set(state.duplicates.length);
    return state;
  }
}
