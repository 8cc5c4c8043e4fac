// The contract of a service registry (ServiceEntry/WorkloadEntry, Mock, later the orchestrator):
// the services it knows, their instances, and change events that trigger pushes. Registries are
// read synchronously when a PushContext is built, so each keeps its current state in memory.
import type { Service, ServiceInstance } from '../model/service.js';

export interface RegistryEvent {
  /** `service`: the service itself changed (ports, addresses...): a full push.
   *  `endpoints`: only its instances changed: an EDS push is enough. */
  readonly kind: 'service' | 'endpoints';
  readonly event: 'add' | 'update' | 'delete';
  readonly hostname: string;
  readonly namespace: string;
  /** The registry that emitted it. */
  readonly registry: string;
}

export type RegistryEventHandler = (event: RegistryEvent) => void;

export interface ServiceRegistry {
  /** `ServiceEntry`, `Mock`, `Orchestrator`: used in debug output and events. */
  readonly name: string;
  /** The cluster the registry's workloads run in. */
  readonly clusterId: string;
  /** Every service, sorted by hostname then namespace. */
  services(): readonly Service[];
  /** The instances of one service (every port). */
  instances(service: Pick<Service, 'hostname' | 'namespace'>): readonly ServiceInstance[];
  /** Subscribes to changes; returns the function that unsubscribes. */
  onEvent(handler: RegistryEventHandler): () => void;
  /** True once the registry has read its initial state. */
  hasSynced(): boolean;
}

/** `namespace/hostname`: the identity of a service across registries. */
export function serviceKey(s: Pick<Service, 'hostname' | 'namespace'>): string {
  return `${s.namespace}/${s.hostname}`;
}

export function compareServices(a: Service, b: Service): number {
  return a.hostname < b.hostname ? -1 : a.hostname > b.hostname ? 1 : a.namespace < b.namespace ? -1 : a.namespace > b.namespace ? 1 : 0;
}

/** Handler bookkeeping shared by the registries. */
export class RegistryEvents {
  private readonly handlers = new Set<RegistryEventHandler>();

  on(handler: RegistryEventHandler): () => void {
    this.handlers.add(handler);
    return () => this.handlers.delete(handler);
  }

  emit(event: RegistryEvent): void {
    for (const h of [...this.handlers]) h(event);
  }
}
