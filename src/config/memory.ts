// The in-memory config store: the state every other store feeds, and the store tests use directly.
// It owns versioning (resourceVersion, generation), in-place updates and event delivery.

import { isDeepStrictEqual } from 'node:util';
import { keyOf, type AnyResource, type Kind, type ResourceKey, type ResourceOf } from '../api/types.js';
import { scope } from '../common/log.js';
import { compareText } from '../common/compare.js';
import { keyString, type ConfigEvent, type ConfigEventHandler, type ConfigStore } from './store.js';

const log = scope('source');

export interface MemoryStoreOptions {
  /**
   * `store` (default): this store stamps resourceVersion (a store-wide counter) and generation
   * (1 on creation, +1 on each spec change). `source`: keep what the source (the orchestrator) set.
   */
  versioning?: 'store' | 'source';
}

export class MemoryStore implements ConfigStore {
  private readonly byKey = new Map<string, AnyResource>();
  private readonly handlers = new Set<ConfigEventHandler>();
  private readonly versioning: 'store' | 'source';
  private revision = 0;
  private isSynced = false;
  private readonly syncedPromise: Promise<void>;
  private resolveSynced!: () => void;

  constructor(options: MemoryStoreOptions = {}) {
    this.versioning = options.versioning ?? 'store';
    this.syncedPromise = new Promise((resolve) => (this.resolveSynced = resolve));
  }

  list<K extends Kind>(kind: K, namespace?: string): ResourceOf<K>[] {
    const out: ResourceOf<K>[] = [];
    for (const resource of this.byKey.values()) {
      if (resource.kind === kind && (namespace === undefined || resource.metadata.namespace === namespace)) {
        out.push(resource as ResourceOf<K>);
      }
    }
    return out.sort((a, b) => compareText(a.metadata.namespace, b.metadata.namespace) || compareText(a.metadata.name, b.metadata.name));
  }

  get<K extends Kind>(key: ResourceKey & { kind: K }): ResourceOf<K> | undefined {
    return this.byKey.get(keyString(key)) as ResourceOf<K> | undefined;
  }

  /** Every resource, in no particular order. */
  all(): AnyResource[] {
    return [...this.byKey.values()];
  }

  onEvent(handler: ConfigEventHandler): () => void {
    this.handlers.add(handler);
    return () => this.handlers.delete(handler);
  }

  hasSynced(): boolean {
    return this.isSynced;
  }

  synced(): Promise<void> {
    return this.syncedPromise;
  }

  markSynced(): void {
    this.isSynced = true;
    this.resolveSynced();
  }

  /**
   * Adds or updates in place by kind + namespace + name. Returns the event sent, or undefined when
   * nothing the user controls changed (so a re-read of an unchanged file is silent).
   */
  apply(resource: AnyResource): ConfigEvent | undefined {
    const key = keyString(keyOf(resource));
    const old = this.byKey.get(key);
    if (old !== undefined && sameContent(old, resource)) return undefined;
    const stored = deepFreeze(this.versioned(resource, old));
    this.byKey.set(key, stored);
    const event: ConfigEvent = old === undefined ? { type: 'add', new: stored } : { type: 'update', old, new: stored };
    this.emit(event);
    return event;
  }

  delete(key: ResourceKey): ConfigEvent | undefined {
    const k = keyString(key);
    const old = this.byKey.get(k);
    if (old === undefined) return undefined;
    this.byKey.delete(k);
    const event: ConfigEvent = { type: 'delete', old };
    this.emit(event);
    return event;
  }

  private versioned(resource: AnyResource, old: AnyResource | undefined): AnyResource {
    if (this.versioning === 'source') return structuredClone(resource);
    this.revision += 1;
    const specChanged = old === undefined || !isDeepStrictEqual(old.spec, resource.spec);
    const generation = old === undefined ? 1 : (old.metadata.generation ?? 1) + (specChanged ? 1 : 0);
    const copy = structuredClone(resource);
    copy.metadata.resourceVersion = String(this.revision);
    copy.metadata.generation = generation;
    return copy;
  }

  private emit(event: ConfigEvent): void {
    for (const handler of this.handlers) {
      try {
        handler(event);
      } catch (err) {
        // One failing subscriber must not starve the others nor break the store.
        log.error(`config event handler failed on ${event.type} of ${keyString(keyOf(event.new ?? event.old))}: ${err instanceof Error ? err.message : String(err)}`);
      }
    }
  }
}

/** Equal for consumers: same apiVersion, labels, annotations and spec; versions alone are no change. */
function sameContent(a: AnyResource, b: AnyResource): boolean {
  return (
    a.apiVersion === b.apiVersion &&
    isDeepStrictEqual(a.metadata.labels, b.metadata.labels) &&
    isDeepStrictEqual(a.metadata.annotations, b.metadata.annotations) &&
    isDeepStrictEqual(a.spec, b.spec)
  );
}

/** Stored resources are shared with every reader; freezing makes accidental mutation fail loudly. */
function deepFreeze<T>(value: T): T {
  if (typeof value === 'object' && value !== null && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const child of Object.values(value)) deepFreeze(child);
  }
  return value;
}

/** Base of the stores that read from somewhere else into a MemoryStore and serve reads from it. */
export abstract class MemoryBackedStore implements ConfigStore {
  protected constructor(protected readonly store: MemoryStore) {}

  list<K extends Kind>(kind: K, namespace?: string): ResourceOf<K>[] {
    return this.store.list(kind, namespace);
  }

  get<K extends Kind>(key: ResourceKey & { kind: K }): ResourceOf<K> | undefined {
    return this.store.get(key);
  }

  onEvent(handler: ConfigEventHandler): () => void {
    return this.store.onEvent(handler);
  }

  hasSynced(): boolean {
    return this.store.hasSynced();
  }

  synced(): Promise<void> {
    return this.store.synced();
  }
}
