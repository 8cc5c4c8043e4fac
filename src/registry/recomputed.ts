// A registry whose whole state is recomputed from its inputs (the ServiceEntry and Orchestrator
// registries). A recomputation reads everything, so it runs once per burst of changes: a change marks
// the state stale and schedules one recomputation in a microtask (a store commits a whole rescan or
// relist synchronously). Reads recompute first when the state is stale, so they never see an old
// state; each recomputation emits one event per changed service.
import type { Service, ServiceInstance } from '../model/service.js';
import { emitChanges, keepUnchanged, RegistryEvents, serviceKey, type RegistryEventHandler, type RegistrySnapshot, type ServiceRegistry } from './types.js';

export abstract class RecomputedRegistry<S extends RegistrySnapshot> implements ServiceRegistry {
  abstract readonly name: string;
  abstract readonly clusterId: string;
  protected state: S;
  private readonly events = new RegistryEvents();
  private stale = false;
  private scheduled = false;

  constructor(initial: S) {
    this.state = initial;
  }

  /** The state from the current inputs. */
  protected abstract compute(): S;

  abstract hasSynced(): boolean;

  services(): readonly Service[] {
    this.sync();
    return this.state.services;
  }

  instances(service: Pick<Service, 'hostname' | 'namespace'>): readonly ServiceInstance[] {
    this.sync();
    return this.state.instances.get(serviceKey(service)) ?? [];
  }

  onEvent(handler: RegistryEventHandler): () => void {
    return this.events.on(handler);
  }

  /** An input changed: recompute once the current burst of changes is over (or at the next read). */
  protected invalidate(): void {
    this.stale = true;
    if (this.scheduled) return;
    this.scheduled = true;
    queueMicrotask(() => {
      this.scheduled = false;
      this.sync();
    });
  }

  /** Recomputes now if a change is pending. */
  sync(): void {
    if (!this.stale) return;
    this.stale = false;
    this.refresh();
  }

  /** Recomputes (keeping the unchanged services' objects) and emits one event per service whose definition or instances changed. */
  protected refresh(): void {
    const before = this.state;
    this.state = keepUnchanged(before, this.compute());
    emitChanges(this.events, this.name, before, this.state, (s) => this.instancesShapeListeners(s));
  }

  /** Whether a service's outbound listeners depend on its instances (then they change with a full push). */
  protected instancesShapeListeners(_s: Service): boolean {
    return false;
  }
}
