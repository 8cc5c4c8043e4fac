// The contract every config store fulfils (memory, file, orchestrator): typed reads by kind and key,
// typed change events for pushes, and a signal once the first full read is done.

import type { AnyResource, Kind, ResourceKey, ResourceOf } from '../api/types.js';

export type ConfigEvent =
  | { type: 'add'; old?: undefined; new: AnyResource }
  | { type: 'update'; old: AnyResource; new: AnyResource }
  | { type: 'delete'; old: AnyResource; new?: undefined };

export type ConfigEventHandler = (event: ConfigEvent) => void;

export interface ConfigStore {
  /** Resources of a kind, optionally of one namespace, sorted by namespace then name. */
  list<K extends Kind>(kind: K, namespace?: string): ResourceOf<K>[];
  get<K extends Kind>(key: ResourceKey & { kind: K }): ResourceOf<K> | undefined;
  /** Subscribes to changes; returns the function that unsubscribes. */
  onEvent(handler: ConfigEventHandler): () => void;
  /** True once the first full read is done; events before that are the initial load. */
  hasSynced(): boolean;
  /** Resolves once `hasSynced()` is true. */
  synced(): Promise<void>;
}

/** A store that reads from somewhere (files, the orchestrator) and must be started and stopped. */
export interface ConfigSource extends ConfigStore {
  /** Starts reading; resolves after the first full read. */
  start(): Promise<void>;
  close(): Promise<void>;
}

/** The map key of a resource key. */
export function keyString(key: ResourceKey): string {
  return `${key.kind}/${key.namespace}/${key.name}`;
}
