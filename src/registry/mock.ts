// The `Mock` registry (`--registries Mock`): in memory, driven by tests and benchmarks. Every change
// emits the event a real registry would, so pushes can be exercised without an orchestrator.
import { EMPTY_LOCALITY, isHeadless, type Service, type ServiceInstance, type ServicePort } from '../model/service.js';
import { compareServices, RegistryEvents, serviceKey, type RegistryEventHandler, type ServiceRegistry } from './types.js';

/** An endpoint as a test writes it; the service's hostname/namespace and defaults are filled in. */
export interface MockEndpoint {
  address: string;
  /** Service port name or number this endpoint serves; absent = every port. */
  servicePort?: string | number;
  /** Defaults to the service port number. */
  endpointPort?: number;
  labels?: Record<string, string>;
  serviceAccount?: string;
  locality?: ServiceInstance['locality'];
  weight?: number;
  network?: string;
}

export class MockRegistry implements ServiceRegistry {
  readonly name = 'Mock';
  private readonly byKey = new Map<string, { service: Service; instances: ServiceInstance[] }>();
  private readonly events = new RegistryEvents();

  constructor(readonly clusterId = 'Mock') {}

  services(): readonly Service[] {
    return [...this.byKey.values()].map((e) => e.service).sort(compareServices);
  }

  instances(service: Pick<Service, 'hostname' | 'namespace'>): readonly ServiceInstance[] {
    return this.byKey.get(serviceKey(service))?.instances ?? [];
  }

  onEvent(handler: RegistryEventHandler): () => void {
    return this.events.on(handler);
  }

  hasSynced(): boolean {
    return true;
  }

  /** Adds or replaces a service (its instances are kept). */
  addService(init: Partial<Service> & Pick<Service, 'hostname' | 'ports'>): Service {
    const service: Service = {
      namespace: 'default',
      addresses: [],
      resolution: 'STATIC',
      exportTo: [],
      external: false,
      labels: {},
      ...init,
      registry: this.name,
    };
    const key = serviceKey(service);
    const existing = this.byKey.get(key);
    this.byKey.set(key, { service, instances: existing?.instances ?? [] });
    this.emit('service', existing ? 'update' : 'add', service);
    return service;
  }

  removeService(hostname: string, namespace = 'default'): void {
    if (this.byKey.delete(serviceKey({ hostname, namespace }))) this.emit('service', 'delete', { hostname, namespace });
  }

  /** Replaces every endpoint of the service. Throws if the service is unknown (a test bug). */
  setEndpoints(hostname: string, namespace: string, endpoints: readonly MockEndpoint[]): void {
    const entry = this.entry(hostname, namespace);
    entry.instances = endpoints.flatMap((e) => this.toInstances(entry.service, e));
    this.emitEndpoints(entry.service);
  }

  addEndpoint(hostname: string, namespace: string, endpoint: MockEndpoint): void {
    const entry = this.entry(hostname, namespace);
    entry.instances = [...entry.instances, ...this.toInstances(entry.service, endpoint)];
    this.emitEndpoints(entry.service);
  }

  /** Removes every instance at `address`. */
  removeEndpoint(hostname: string, namespace: string, address: string): void {
    const entry = this.entry(hostname, namespace);
    entry.instances = entry.instances.filter((i) => i.address !== address);
    this.emitEndpoints(entry.service);
  }

  private entry(hostname: string, namespace: string): { service: Service; instances: ServiceInstance[] } {
    const entry = this.byKey.get(serviceKey({ hostname, namespace }));
    if (!entry) throw new Error(`Mock registry: no service ${namespace}/${hostname}`);
    return entry;
  }

  private toInstances(service: Service, e: MockEndpoint): ServiceInstance[] {
    const ports = service.ports.filter((p) => e.servicePort === undefined || p.name === e.servicePort || p.port === e.servicePort);
    if (ports.length === 0) throw new Error(`Mock registry: ${service.hostname} has no port ${String(e.servicePort)}`);
    return ports.map((p: ServicePort) => ({
      hostname: service.hostname,
      namespace: service.namespace,
      servicePort: p,
      address: e.address,
      endpointPort: e.endpointPort ?? p.port,
      labels: e.labels ?? {},
      serviceAccount: e.serviceAccount ?? '',
      locality: e.locality ?? EMPTY_LOCALITY,
      weight: e.weight ?? 1,
      network: e.network ?? '',
      clusterId: this.clusterId,
    }));
  }

  private emit(kind: 'service', event: 'add' | 'update' | 'delete', s: Pick<Service, 'hostname' | 'namespace'>): void {
    this.events.emit({ kind, event, hostname: s.hostname, namespace: s.namespace, registry: this.name });
  }

  private emitEndpoints(s: Service): void {
    this.events.emit({ kind: 'endpoints', event: 'update', hostname: s.hostname, namespace: s.namespace, registry: this.name, ...(isHeadless(s) ? { headless: true } : {}) });
  }
}
