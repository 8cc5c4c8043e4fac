// The registries combined: what the PushContext reads. A service declared by several registries
// (the same hostname and namespace) is taken from the first registry in the list, and its instances
// are the union of every registry's, as a multi-cluster mesh expects.
import type { Service, ServiceInstance } from '../model/service.js';
import { compareServices, RegistryEvents, serviceKey, type RegistryEventHandler, type ServiceRegistry } from './types.js';

export class AggregateRegistry implements ServiceRegistry {
  readonly name = 'Aggregate';
  private readonly registries: ServiceRegistry[] = [];
  private readonly events = new RegistryEvents();

  constructor(
    registries: readonly ServiceRegistry[] = [],
    readonly clusterId = '',
  ) {
    for (const r of registries) this.add(r);
  }

  add(registry: ServiceRegistry): void {
    this.registries.push(registry);
    registry.onEvent((e) => this.events.emit(e));
  }

  list(): readonly ServiceRegistry[] {
    return this.registries;
  }

  services(): readonly Service[] {
    const seen = new Map<string, Service>();
    for (const r of this.registries) {
      for (const s of r.services()) {
        const key = serviceKey(s);
        if (!seen.has(key)) seen.set(key, s);
      }
    }
    return [...seen.values()].sort(compareServices);
  }

  /** The registries' lists joined; the one registry's own list when only one has instances (it stays the same object while unchanged). */
  instances(service: Pick<Service, 'hostname' | 'namespace'>): readonly ServiceInstance[] {
    const lists = this.registries.map((r) => r.instances(service)).filter((l) => l.length > 0);
    return lists.length === 1 ? lists[0]! : lists.flat();
  }

  onEvent(handler: RegistryEventHandler): () => void {
    return this.events.on(handler);
  }

  hasSynced(): boolean {
    return this.registries.every((r) => r.hasSynced());
  }
}
