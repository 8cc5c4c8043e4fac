// The pure conversion of the orchestrator's objects into the service model: a Service becomes a
// mesh service (ports and protocols as the Go mesh reads them), its EndpointSlices (or Endpoints)
// with the Pods and Nodes behind them become instances. No I/O: the controller feeds it its caches.
import type { V1Endpoints, V1EndpointSlice, V1Node, V1Pod, V1Service, V1ServicePort } from '@kubernetes/client-node';
import type { WorkloadEntry } from '../../api/types.js';
import { labelsMatch } from '../../model/selection.js';
import { EMPTY_LOCALITY, localityString, ORCHESTRATOR_REGISTRY, portProtocol, type Locality, type Protocol, type Resolution, type Service, type ServiceInstance, type ServicePort } from '../../model/service.js';
import { workloadInstance, type SelectableWorkload } from '../serviceentry.js';
import { compareServices, serviceKey } from '../types.js';

export const REGISTRY_NAME = ORCHESTRATOR_REGISTRY;
/** The EndpointSlice label naming its Service. */
export const SERVICE_NAME_LABEL = 'kubernetes.io/service-name';
/** Node topology labels (the orchestrator's well-known ones) and the mesh's sub-zone label. */
export const REGION_LABEL = 'topology.kubernetes.io/region';
export const ZONE_LABEL = 'topology.kubernetes.io/zone';
export const SUBZONE_LABEL = 'topology.mesh.io/subzone';
/** A Pod's network (multi-network meshes). */
export const NETWORK_LABEL = 'topology.mesh.io/network';
/** Service annotation: the namespaces the service is visible to, comma-separated. */
export const EXPORT_TO_ANNOTATION = 'networking.mesh.io/exportTo';

export interface ConvertOptions {
  /** --domain: `<name>.<namespace>.svc.<domain>`. */
  readonly domain: string;
  readonly clusterId: string;
  /** PILOT_ENABLE_EDS_FOR_HEADLESS_SERVICES: headless services get EDS clusters instead of ORIGINAL_DST. */
  readonly edsForHeadless: boolean;
}

/** What the controller's informers hold, by `namespace/name` (nodes by name). */
export interface ClusterObjects {
  readonly services: ReadonlyMap<string, V1Service>;
  /** EndpointSlices when PILOT_USE_ENDPOINT_SLICE, else empty. */
  readonly slices: ReadonlyMap<string, V1EndpointSlice>;
  /** Endpoints when EndpointSlices are not used, else empty. */
  readonly endpoints: ReadonlyMap<string, V1Endpoints>;
  readonly pods: ReadonlyMap<string, V1Pod>;
  readonly nodes: ReadonlyMap<string, V1Node>;
  /** PILOT_ENABLE_ORCH_SELECT_WORKLOAD_ENTRIES: WorkloadEntries Services select by labels; else empty. */
  readonly workloadEntries?: readonly WorkloadEntry[];
}

export interface EndpointStats {
  /** Endpoints the orchestrator reports not ready (left out). */
  notReady: number;
  /** Endpoints with no Pod at all (no targetRef, no Pod at the address): kept, without labels. */
  noPod: number;
  /** Endpoints naming a Pod not read yet (`namespace/pod`): left out until it arrives. */
  pendingPods: string[];
}

export interface RegistryState {
  readonly services: readonly Service[];
  /** By serviceKey. */
  readonly instances: ReadonlyMap<string, readonly ServiceInstance[]>;
  readonly stats: EndpointStats;
}

export function serviceHostname(name: string, namespace: string, domain: string): string {
  return `${name}.${namespace}.svc.${domain}`;
}

/** UDP is UDP; otherwise `appProtocol`, then the port name's prefix, as the Go mesh reads them. */
export function servicePortProtocol(port: Pick<V1ServicePort, 'name' | 'protocol' | 'appProtocol'>): Protocol {
  if (port.protocol === 'UDP') return 'UDP';
  return portProtocol({ ...(port.name ? { name: port.name } : {}), ...(port.appProtocol ? { appProtocol: port.appProtocol } : {}) });
}

function isHeadless(svc: V1Service): boolean {
  return svc.spec?.clusterIP === 'None';
}

function resolutionOf(svc: V1Service, opts: ConvertOptions): Resolution {
  if (svc.spec?.type === 'ExternalName') return 'DNS';
  if (isHeadless(svc)) return opts.edsForHeadless ? 'STATIC' : 'NONE';
  return 'STATIC';
}

/** The mesh service of an orchestrator Service. */
export function convertService(svc: V1Service, opts: ConvertOptions): Service {
  const name = svc.metadata?.name ?? '';
  const namespace = svc.metadata?.namespace ?? '';
  const ips = svc.spec?.clusterIPs?.length ? svc.spec.clusterIPs : svc.spec?.clusterIP ? [svc.spec.clusterIP] : [];
  const exportTo = svc.metadata?.annotations?.[EXPORT_TO_ANNOTATION];
  return {
    hostname: serviceHostname(name, namespace, opts.domain),
    namespace,
    addresses: svc.spec?.type === 'ExternalName' ? [] : ips.filter((ip) => ip !== 'None' && ip !== ''),
    ports: (svc.spec?.ports ?? []).map((p): ServicePort => ({ name: p.name || String(p.port), port: p.port, protocol: servicePortProtocol(p) })),
    resolution: resolutionOf(svc, opts),
    exportTo: exportTo ? exportTo.split(',').map((e) => e.trim()).filter(Boolean) : [],
    external: svc.spec?.type === 'ExternalName',
    registry: REGISTRY_NAME,
    labels: svc.metadata?.labels ?? {},
    source: `Service/${namespace}/${name}`,
  };
}

export function nodeLocality(node: V1Node | undefined): Locality {
  const labels = node?.metadata?.labels;
  if (!labels) return EMPTY_LOCALITY;
  return { region: labels[REGION_LABEL] ?? '', zone: labels[ZONE_LABEL] ?? '', subZone: labels[SUBZONE_LABEL] ?? '' };
}

/** Pods by IP (status.podIPs, else status.podIP); the first Pod read wins an IP (host-network Pods share the node's). */
export function podsByIp(pods: Iterable<V1Pod>): Map<string, V1Pod> {
  const byIp = new Map<string, V1Pod>();
  for (const pod of pods) {
    const ips = pod.status?.podIPs?.map((p) => p.ip) ?? (pod.status?.podIP ? [pod.status.podIP] : []);
    for (const ip of ips) if (ip && !byIp.has(ip)) byIp.set(ip, pod);
  }
  return byIp;
}

/** One address of an endpoint, in the shape both Endpoints and EndpointSlices reduce to. */
interface EndpointAddress {
  readonly ip: string;
  readonly ready: boolean;
  /** `namespace/name` when the endpoint names a Pod. */
  readonly podRef?: string;
  readonly nodeName?: string;
  /** Endpoint port by port name ('' for an unnamed port). */
  readonly ports: ReadonlyMap<string, number>;
}

function slicesAddresses(slices: Iterable<V1EndpointSlice>): EndpointAddress[] {
  const out: EndpointAddress[] = [];
  for (const slice of slices) {
    if (slice.addressType === 'FQDN') continue;
    const ports = new Map((slice.ports ?? []).filter((p) => p.port !== undefined).map((p) => [p.name ?? '', p.port!]));
    for (const ep of slice.endpoints ?? []) {
      const ref = ep.targetRef?.kind === 'Pod' ? `${ep.targetRef.namespace ?? slice.metadata?.namespace ?? ''}/${ep.targetRef.name ?? ''}` : undefined;
      // An unset `ready` condition means ready (the API's documented default).
      const ready = ep.conditions?.ready !== false;
      for (const ip of ep.addresses) out.push({ ip, ready, ports, ...(ref ? { podRef: ref } : {}), ...(ep.nodeName ? { nodeName: ep.nodeName } : {}) });
    }
  }
  return out;
}

function endpointsAddresses(endpoints: V1Endpoints | undefined): EndpointAddress[] {
  const out: EndpointAddress[] = [];
  for (const subset of endpoints?.subsets ?? []) {
    const ports = new Map((subset.ports ?? []).map((p) => [p.name ?? '', p.port]));
    const add = (ready: boolean) => (a: { ip: string; nodeName?: string; targetRef?: { kind?: string; name?: string; namespace?: string } }): void => {
      const ref = a.targetRef?.kind === 'Pod' ? `${a.targetRef.namespace ?? endpoints?.metadata?.namespace ?? ''}/${a.targetRef.name ?? ''}` : undefined;
      out.push({ ip: a.ip, ready, ports, ...(ref ? { podRef: ref } : {}), ...(a.nodeName ? { nodeName: a.nodeName } : {}) });
    };
    (subset.addresses ?? []).forEach(add(true));
    (subset.notReadyAddresses ?? []).forEach(add(false));
  }
  return out;
}

/** Slices of each service, by `namespace/serviceName`. */
function slicesByService(slices: ReadonlyMap<string, V1EndpointSlice>): Map<string, V1EndpointSlice[]> {
  const by = new Map<string, V1EndpointSlice[]>();
  for (const slice of slices.values()) {
    const service = slice.metadata?.labels?.[SERVICE_NAME_LABEL];
    if (!service) continue;
    const key = `${slice.metadata?.namespace ?? ''}/${service}`;
    const list = by.get(key);
    if (list) list.push(slice);
    else by.set(key, [slice]);
  }
  return by;
}

/** A Pod's DNS name parts, as the orchestrator names Pods with `spec.subdomain` (hostname defaults to the Pod's name). */
function podDnsOf(pod: V1Pod | undefined): Pick<ServiceInstance, 'podDns'> {
  const subdomain = pod?.spec?.subdomain;
  if (!subdomain) return {};
  return { podDns: { hostname: pod.spec?.hostname || pod.metadata?.name || '', subdomain } };
}

/** Everything the registry serves, from the informers' caches. */
export function convertCluster(objects: ClusterObjects, opts: ConvertOptions): RegistryState {
  const stats: EndpointStats = { notReady: 0, noPod: 0, pendingPods: [] };
  const byIp = podsByIp(objects.pods.values());
  const sliceIndex = slicesByService(objects.slices);
  const services: Service[] = [];
  const instances = new Map<string, ServiceInstance[]>();
  for (const [key, svc] of objects.services) {
    const service = convertService(svc, opts);
    services.push(service);
    if (svc.spec?.type === 'ExternalName') {
      const target = svc.spec.externalName ?? '';
      instances.set(serviceKey(service), target ? service.ports.map((p) => externalInstance(service, p, target, opts.clusterId)) : []);
      continue;
    }
    // Only one of the two is read (PILOT_USE_ENDPOINT_SLICE), so the other contributes nothing.
    const addresses = [...slicesAddresses(sliceIndex.get(key) ?? []), ...endpointsAddresses(objects.endpoints.get(key))];
    const list: ServiceInstance[] = [];
    for (const address of addresses) {
      if (!address.ready) {
        stats.notReady++;
        continue;
      }
      const pod = address.podRef !== undefined ? objects.pods.get(address.podRef) : byIp.get(address.ip);
      if (address.podRef !== undefined && !pod) {
        stats.pendingPods.push(address.podRef);
        continue;
      }
      if (!pod) stats.noPod++;
      const node = objects.nodes.get(pod?.spec?.nodeName ?? address.nodeName ?? '');
      (svc.spec?.ports ?? []).forEach((sp, i) => {
        const endpointPort = address.ports.get(sp.name ?? '');
        if (endpointPort === undefined) return;
        list.push({
          hostname: service.hostname,
          namespace: service.namespace,
          servicePort: service.ports[i]!,
          address: address.ip,
          endpointPort,
          labels: pod?.metadata?.labels ?? {},
          serviceAccount: pod?.spec?.serviceAccountName ?? '',
          locality: nodeLocality(node),
          weight: 1,
          network: pod?.metadata?.labels?.[NETWORK_LABEL] ?? '',
          clusterId: opts.clusterId,
          ...podDnsOf(pod),
        });
      });
    }
    list.push(...selectedWorkloadEntries(svc, service, objects.workloadEntries ?? [], opts.clusterId));
    instances.set(serviceKey(service), list);
  }
  return { services: services.sort(compareServices), instances, stats };
}

/**
 * The WorkloadEntries of the Service's namespace its selector matches, as instances (the Go mesh's
 * Services selecting VMs): on each port, a named targetPort is looked up in the entry's `ports`
 * (a port it does not name is left out), a numeric one (or none: the port) is used as is.
 */
function selectedWorkloadEntries(svc: V1Service, service: Service, entries: readonly WorkloadEntry[], clusterId: string): ServiceInstance[] {
  const selector = svc.spec?.selector;
  if (!selector || Object.keys(selector).length === 0) return [];
  const out: ServiceInstance[] = [];
  for (const we of entries) {
    if (we.metadata.namespace !== service.namespace || !we.spec.address || !labelsMatch(selector, we.spec.labels ?? {})) continue;
    (svc.spec?.ports ?? []).forEach((sp, i) => {
      const target = sp.targetPort;
      const endpointPort = typeof target === 'string' && !/^\d+$/.test(target) ? we.spec.ports?.[target] : target === undefined ? sp.port : Number(target);
      if (endpointPort !== undefined) out.push(workloadInstance(service, service.ports[i]!, endpointPort, we.spec, we.spec.address!, clusterId));
    });
  }
  return out;
}

function podReady(pod: V1Pod): boolean {
  return pod.status?.phase === 'Running' && !pod.metadata?.deletionTimestamp && pod.status.conditions?.find((c) => c.type === 'Ready')?.status !== 'False';
}

/**
 * Running, ready Pods with an address, as ServiceEntry workloadSelectors select them
 * (PILOT_ENABLE_SERVICEENTRY_SELECT_PODS): labels, service account, the Node's locality, the network
 * label, and the containers' named ports (so an entry's port name maps to the container's port).
 */
export function podWorkloads(pods: Iterable<V1Pod>, nodes: ReadonlyMap<string, V1Node>): SelectableWorkload[] {
  const out: SelectableWorkload[] = [];
  for (const pod of pods) {
    const address = pod.status?.podIP;
    if (!address || !podReady(pod)) continue;
    const labels = pod.metadata?.labels ?? {};
    const ports = Object.fromEntries((pod.spec?.containers ?? []).flatMap((c) => c.ports ?? []).filter((p) => p.name).map((p) => [p.name!, p.containerPort]));
    const locality = nodeLocality(nodes.get(pod.spec?.nodeName ?? ''));
    out.push({
      namespace: pod.metadata?.namespace ?? '',
      spec: {
        address,
        labels,
        ports,
        serviceAccount: pod.spec?.serviceAccountName ?? 'default',
        ...(locality === EMPTY_LOCALITY ? {} : { locality: localityString(locality) }),
        ...(labels[NETWORK_LABEL] ? { network: labels[NETWORK_LABEL] } : {}),
      },
    });
  }
  return out;
}

function externalInstance(service: Service, port: ServicePort, address: string, clusterId: string): ServiceInstance {
  return {
    hostname: service.hostname,
    namespace: service.namespace,
    servicePort: port,
    address,
    endpointPort: port.port,
    labels: {},
    serviceAccount: '',
    locality: EMPTY_LOCALITY,
    weight: 1,
    network: '',
    clusterId,
  };
}
