// The orchestrator config source: the mesh's custom resources read from the orchestrator's API
// through the shared informers (./informer.ts): per kind (and namespace when restricted) list, then
// watch with bookmarks, relist on 410, reconnect with backoff, paced by the client-side token bucket.

import { formatIssues } from '../api/errors.js';
import { pluralOf } from '../api/crds.js';
import { GROUP_OF_KIND, KINDS, ROOT_NAMESPACE, DEFAULT_NAMESPACE, formatKey, type ApiVersionName, type Kind, type ResourceKey } from '../api/types.js';
import { convertResource, validateResource } from '../api/validate.js';
import { asRecord } from '../api/values.js';
import { settingDefault } from '../common/env.js';
import { scope } from '../common/log.js';
import { counter, gauge } from '../common/metrics.js';
import { collectionPath, InformerGroup, OrchestratorClient, type ObjectMeta } from './informer.js';
import { MemoryBackedStore, MemoryStore } from './memory.js';
import type { BackoffOptions, Clock } from './pacing.js';
import { inRevision } from './revision.js';
import { keyString, type ConfigEvent, type ConfigSource } from './store.js';

const log = scope('orch');

export interface OrchestratorSourceOptions {
  /** --orchconfig: a kubeconfig file; absent or empty means the in-cluster configuration. */
  kubeconfig?: string;
  /** --appNamespace (split on commas): watch only these namespaces, plus the root namespace whose policies are mesh-wide. Empty: all. */
  namespaces?: readonly string[];
  /** Mesh config rootNamespace; default mesh-system. */
  rootNamespace?: string;
  /** --resync in milliseconds: every period each kind is relisted and reconciled. 0 or absent: never. */
  resyncMs?: number;
  /** --orchestratorApiQPS; <= 0 means unlimited. */
  qps?: number;
  /** --orchestratorApiBurst. */
  burst?: number;
  /** PILOT_ENABLE_CRD_VALIDATION (the program passes the setting); defaults to the spec's default. */
  validate?: boolean;
  /** Kinds to read; default all. */
  kinds?: readonly Kind[];
  /** REVISION: objects labelled for another revision (mesh.io/rev) are left out; see ./revision.ts. */
  revision?: string;
  /** API version to list and watch; default v1 (the storage version). */
  version?: ApiVersionName;
  backoff?: BackoffOptions;
  clock?: Clock;
}

export class OrchestratorConfigSource extends MemoryBackedStore implements ConfigSource {
  private readonly options: OrchestratorSourceOptions;
  private readonly version: ApiVersionName;
  private readonly validate: boolean;
  private readonly informers: InformerGroup;
  /** Keys of objects that failed conversion, per kind, for the pilot_orch_object_errors gauge. */
  private readonly failing = new Map<Kind, Set<string>>();
  /** Keys (`Kind/namespace/name`) of objects whose status holds validationMessages (../status reads it to clear stale ones). */
  private readonly messaged = new Set<string>();
  /** WorkloadEntries' `status.conditions` as last read: a Healthy condition a discovery server wrote outlives it. */
  private readonly entryConditions = new Map<string, readonly unknown[]>();

  constructor(options: OrchestratorSourceOptions = {}) {
    super(new MemoryStore({ versioning: 'source' }));
    this.options = options;
    this.version = options.version ?? 'v1';
    this.validate = options.validate ?? settingDefault('PILOT_ENABLE_CRD_VALIDATION');
    this.informers = new InformerGroup(options);
    const namespaces = options.namespaces?.filter((n) => n !== '') ?? [];
    const scopes: (string | undefined)[] = namespaces.length === 0 ? [undefined] : [...new Set([...namespaces, options.rootNamespace ?? ROOT_NAMESPACE])];
    for (const kind of options.kinds ?? KINDS) {
      const type = { kind, group: GROUP_OF_KIND[kind], version: this.version, plural: pluralOf(kind) };
      for (const namespace of scopes) {
        const description = `${kind} (${type.group}/${this.version}${namespace ? `, namespace ${namespace}` : ''})`;
        this.informers.add(description, collectionPath(type, namespace), {
          apply: (object) => {
            const key = this.upsert(kind, object);
            return key && keyString(key);
          },
          remove: (object) => {
            const key = this.rawKey(kind, object);
            if (key !== undefined) this.remove(key);
          },
          prune: (seen) => {
            for (const existing of this.store.list(kind, namespace)) {
              const key = { kind, namespace: existing.metadata.namespace, name: existing.metadata.name };
              if (!seen.has(keyString(key))) this.remove(key);
            }
          },
        });
      }
    }
  }

  /** Connects and starts every list+watch loop; resolves once each kind has been listed once. */
  async start(): Promise<void> {
    await this.informers.start(OrchestratorClient.connect(this.options.kubeconfig));
    this.store.markSynced();
  }

  async close(): Promise<void> {
    await this.informers.close();
  }

  private rawKey(kind: Kind, object: unknown): ResourceKey | undefined {
    const metadata = (object as { metadata?: ObjectMeta } | null)?.metadata;
    if (typeof metadata?.name !== 'string') return undefined;
    const namespace = typeof metadata.namespace === 'string' && metadata.namespace !== '' ? metadata.namespace : DEFAULT_NAMESPACE;
    return { kind, namespace, name: metadata.name };
  }

  /**
   * Converts (and with PILOT_ENABLE_CRD_VALIDATION validates) an object and applies it. A bad
   * object is counted and logged, and its last good version stays. Returns its key when known.
   */
  private upsert(kind: Kind, object: unknown): ResourceKey | undefined {
    const key = this.rawKey(kind, object);
    const fields = asRecord(object);
    if (key !== undefined) {
      const messages = asRecord(fields?.['status'])?.['validationMessages'];
      if (Array.isArray(messages) && messages.length > 0) this.messaged.add(keyString(key));
      else this.messaged.delete(keyString(key));
      const conditions = asRecord(fields?.['status'])?.['conditions'];
      if (kind === 'WorkloadEntry' && Array.isArray(conditions)) this.entryConditions.set(keyString(key), conditions);
      else this.entryConditions.delete(keyString(key));
    }
    const withKind = fields ? { ...fields, kind } : object;
    if (!inRevision(asRecord(fields?.['metadata'])?.['labels'] as Record<string, string> | undefined, this.options.revision)) {
      // Another revision's: as if absent (a label change moving it away removes it here).
      if (key !== undefined && this.store.get(key) !== undefined) this.remove(key);
      return undefined;
    }
    const result = this.validate ? validateResource(withKind) : convertResource(kind, withKind);
    const failing = this.failing.get(kind) ?? new Set<string>();
    this.failing.set(kind, failing);
    if (!result.ok) {
      counter('pilot_total_orch_object_errors').inc({ kind });
      if (key !== undefined) failing.add(keyString(key));
      gauge('pilot_orch_object_errors').set({ kind }, failing.size);
      const origin = { source: 'orchestrator', ...(key !== undefined ? { resource: formatKey(key) } : {}) };
      for (const line of formatIssues(origin, result.issues)) log.warn(line);
      return key;
    }
    if (key !== undefined && failing.delete(keyString(key))) gauge('pilot_orch_object_errors').set({ kind }, failing.size);
    this.count(this.store.apply(result.resource));
    return key;
  }

  /** Whether the object's status, as last read, holds validationMessages. */
  hasValidationMessages(key: string): boolean {
    return this.messaged.has(key);
  }

  /** A WorkloadEntry's status condition of `type`, as last read; undefined when it has none. */
  entryCondition(key: ResourceKey, type: string): Readonly<Record<string, unknown>> | undefined {
    const found = this.entryConditions.get(keyString(key))?.find((c) => asRecord(c)?.['type'] === type);
    return asRecord(found);
  }

  private remove(key: ResourceKey): void {
    this.messaged.delete(keyString(key));
    this.entryConditions.delete(keyString(key));
    const failing = this.failing.get(key.kind);
    if (failing?.delete(keyString(key))) gauge('pilot_orch_object_errors').set({ kind: key.kind }, failing.size);
    this.count(this.store.delete(key));
  }

  private count(event: ConfigEvent | undefined): void {
    if (event === undefined) return;
    const kind = (event.new ?? event.old).kind;
    counter('pilot_orch_cfg_events').inc({ type: kind, event: event.type });
  }
}

