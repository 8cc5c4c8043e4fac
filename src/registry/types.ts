// The contract of a service registry (ServiceEntry/WorkloadEntry, Mock, later the orchestrator):
// the services it knows, their instances, and change events that trigger pushes. Registries are
// read synchronously when a PushContext is built, so each keeps its current state in memory.
import { isHeadless, type Service, type ServiceInstance } from '../model/service.js';

export interface RegistryEvent {
  /** `service`: the service itself changed (ports, addresses...): a full push.
   *  `endpoints`: only its instances changed: an EDS push is enough. */
  readonly kind: 'service' | 'endpoints';
  readonly event: 'add' | 'update' | 'delete';
  readonly hostname: string;
  readonly namespace: string;
  /** The registry that emitted it. */
  readonly registry: string;
  /** The service is headless (model/service.ts isHeadless): its instances are also in the DNS name table. */
  readonly headless?: boolean;
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

/** What a registry serves at one moment, for diffing. */
export interface RegistrySnapshot {
  readonly services: readonly Service[];
  /** By serviceKey. */
  readonly instances: ReadonlyMap<string, readonly ServiceInstance[]>;
}

/**
 * `after` with the service and instance-list objects of `before` wherever they are equal. A
 * recomputation makes every object anew; keeping the unchanged ones lets what is derived from a
 * service once per object (its dependency key, its clusters and routes) be reused by the next
 * snapshot instead of derived again for every service on every push, and lets `emitChanges` tell
 * the unchanged apart by identity.
 */
export function keepUnchanged<S extends RegistrySnapshot>(before: S, after: S): S {
  const old = new Map(before.services.map((s) => [serviceKey(s), s]));
  const services = after.services.map((s) => {
    const prev = old.get(serviceKey(s));
    return prev && JSON.stringify(prev) === JSON.stringify(s) ? prev : s;
  });
  const instances = new Map<string, readonly ServiceInstance[]>();
  for (const [key, list] of after.instances) {
    const prev = before.instances.get(key);
    instances.set(key, prev && JSON.stringify(prev) === JSON.stringify(list) ? prev : list);
  }
  return { ...after, services, instances };
}

/**
 * Emits one event per service that changed between two snapshots: `service` when its definition
 * changed, was added or deleted (a full push), `endpoints` when only its instances did (EDS) unless
 * `instancesShapeListeners` says the service's listeners follow its instances (a full push too).
 */
export function emitChanges(
  events: RegistryEvents,
  registry: string,
  before: RegistrySnapshot,
  after: RegistrySnapshot,
  instancesShapeListeners: (s: Service) => boolean = () => false,
): void {
  const old = new Map(before.services.map((s) => [serviceKey(s), s]));
  const emit = (kind: 'service' | 'endpoints', event: 'add' | 'update' | 'delete', s: Service): void =>
    events.emit({ kind, event, hostname: s.hostname, namespace: s.namespace, registry, ...(isHeadless(s) ? { headless: true } : {}) });
  for (const s of after.services) {
    const key = serviceKey(s);
    const prev = old.get(key);
    old.delete(key);
    if (!prev) emit('service', 'add', s);
    else if (prev !== s && JSON.stringify(prev) !== JSON.stringify(s)) emit('service', 'update', s);
    else if (sameInstances(before.instances.get(key), after.instances.get(key))) continue;
    else emit(instancesShapeListeners(s) ? 'service' : 'endpoints', 'update', s);
  }
  for (const s of old.values()) emit('service', 'delete', s);
}

function sameInstances(a: readonly ServiceInstance[] | undefined, b: readonly ServiceInstance[] | undefined): boolean {
  return a === b || JSON.stringify(a) === JSON.stringify(b);
}
