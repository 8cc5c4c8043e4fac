// The orchestrator config source: the mesh's custom resources read from the orchestrator's API with
// @kubernetes/client-node. Per kind (and namespace when restricted) it lists, then watches from the
// list's resourceVersion with bookmarks; a 410 Gone (stale version) means relist, any other failure
// means reconnect with backoff. Every request passes a client-side token bucket.

import { CustomObjectsApi, KubeConfig, Watch } from '@kubernetes/client-node';
import { formatIssues } from '../api/errors.js';
import { pluralOf } from '../api/crds.js';
import { GROUP_OF_KIND, KINDS, ROOT_NAMESPACE, DEFAULT_NAMESPACE, formatKey, type ApiVersionName, type Kind, type ResourceKey } from '../api/types.js';
import { convertResource, validateResource } from '../api/validate.js';
import { asRecord } from '../api/values.js';
import { settingDefault } from '../common/env.js';
import { scope } from '../common/log.js';
import { counter, gauge } from '../common/metrics.js';
import { MemoryBackedStore, MemoryStore } from './memory.js';
import { Backoff, DEFAULT_BACKOFF, realClock, TokenBucket, type BackoffOptions, type Clock } from './pacing.js';
import { keyString, type ConfigEvent, type ConfigSource } from './store.js';

const log = scope('orch');

export interface OrchestratorSourceOptions {
  /** --orchconfig: a kubeconfig file; absent or empty means the in-cluster configuration. */
  kubeconfig?: string;
  /** --appNamespace (split on commas): watch only these namespaces, plus the root namespace whose policies are mesh-wide. Empty: all. */
  namespaces?: readonly string[];
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
  /** API version to list and watch; default v1 (the storage version). */
  version?: ApiVersionName;
  backoff?: BackoffOptions;
  clock?: Clock;
}

/** One list+watch stream: a kind, in one namespace or all. */
interface Target {
  kind: Kind;
  namespace: string | undefined;
  /** Where the watch resumes; '' means list first. */
  resourceVersion: string;
  listed: boolean;
  /** Set by resync: the next loop iteration relists even though a resume point exists. */
  relistRequested: boolean;
  /** Aborts the current watch (close or resync). */
  watchAbort: AbortController | undefined;
}

type WatchOutcome = 'ended' | 'gone';

function statusOf(err: unknown): number | undefined {
  const e = err as { code?: unknown; statusCode?: unknown };
  if (typeof e?.statusCode === 'number') return e.statusCode;
  return typeof e?.code === 'number' ? e.code : undefined;
}

function messageOf(err: unknown): string {
  const message = err instanceof Error ? err.message : String(err);
  return message.split('\n')[0]!.slice(0, 300);
}

interface RawObject {
  metadata?: { name?: unknown; namespace?: unknown; resourceVersion?: unknown };
}

export class OrchestratorConfigSource extends MemoryBackedStore implements ConfigSource {
  private readonly options: OrchestratorSourceOptions;
  private readonly version: ApiVersionName;
  private readonly validate: boolean;
  private readonly clock: Clock;
  private readonly bucket: TokenBucket;
  private readonly stop = new AbortController();
  private readonly targets: Target[];
  /** Keys of objects that failed conversion, per kind, for the pilot_orch_object_errors gauge. */
  private readonly failing = new Map<Kind, Set<string>>();
  private api: CustomObjectsApi | undefined;
  private watcher: Watch | undefined;
  private loops: Promise<void>[] = [];
  private resyncTimer: NodeJS.Timeout | undefined;

  constructor(options: OrchestratorSourceOptions = {}) {
    super(new MemoryStore({ versioning: 'source' }));
    this.options = options;
    this.version = options.version ?? 'v1';
    this.validate = options.validate ?? settingDefault('PILOT_ENABLE_CRD_VALIDATION');
    this.clock = options.clock ?? realClock;
    this.bucket = new TokenBucket(options.qps ?? 0, options.burst ?? 0, this.clock);
    const namespaces = options.namespaces?.filter((n) => n !== '') ?? [];
    const scopes: (string | undefined)[] = namespaces.length === 0 ? [undefined] : [...new Set([...namespaces, ROOT_NAMESPACE])];
    this.targets = (options.kinds ?? KINDS).flatMap((kind) =>
      scopes.map((namespace) => ({ kind, namespace, resourceVersion: '', listed: false, relistRequested: false, watchAbort: undefined })),
    );
  }

  /** Connects and starts every list+watch loop; resolves once each kind has been listed once. */
  async start(): Promise<void> {
    const config = new KubeConfig();
    const origin = this.options.kubeconfig ? `--orchconfig ${this.options.kubeconfig}` : 'in-cluster configuration';
    try {
      if (this.options.kubeconfig) config.loadFromFile(this.options.kubeconfig);
      else config.loadFromCluster();
    } catch (err) {
      throw new Error(`${origin}: ${messageOf(err)}`);
    }
    if (!config.getCurrentCluster()) throw new Error(`${origin}: no current cluster`);
    this.api = config.makeApiClient(CustomObjectsApi);
    this.watcher = new Watch(config);
    this.loops = this.targets.map((target) => this.run(target));
    if (this.options.resyncMs && this.options.resyncMs > 0) {
      this.resyncTimer = setInterval(() => this.resync(), this.options.resyncMs);
    }
    await this.store.synced();
  }

  async close(): Promise<void> {
    clearInterval(this.resyncTimer);
    this.stop.abort();
    for (const target of this.targets) target.watchAbort?.abort();
    await Promise.all(this.loops);
  }

  private describe(target: Target): string {
    return `${target.kind} (${GROUP_OF_KIND[target.kind]}/${this.version}${target.namespace ? `, namespace ${target.namespace}` : ''})`;
  }

  private async run(target: Target): Promise<void> {
    const backoff = new Backoff(this.options.backoff ?? DEFAULT_BACKOFF);
    while (!this.stop.signal.aborted) {
      try {
        if (target.resourceVersion === '' || target.relistRequested) await this.relist(target);
        const outcome = await this.watchOnce(target);
        if (outcome === 'gone') {
          log.info(`${this.describe(target)}: resourceVersion ${target.resourceVersion} is gone (410), relisting`);
          target.resourceVersion = '';
        }
        backoff.reset();
      } catch (err) {
        if (this.stop.signal.aborted) return;
        const delay = backoff.next();
        if (statusOf(err) === 404) {
          // The CRD is not installed: nothing to wait for; keep trying quietly in case it is added.
          if (!target.listed) log.warn(`${this.describe(target)}: not served by the orchestrator (404); is deploy/crds.yaml applied?`);
          this.markListed(target);
          log.debug(`${this.describe(target)}: still not served; retrying in ${Math.round(delay)} ms`);
        } else {
          log.warn(`${this.describe(target)}: ${messageOf(err)}; retrying in ${Math.round(delay)} ms`);
        }
        await this.clock.sleep(delay, this.stop.signal).catch(() => undefined);
      }
    }
  }

  /** Lists, applies every item and deletes what the list no longer holds. */
  private async relist(target: Target): Promise<void> {
    await this.bucket.take(this.stop.signal);
    const group = GROUP_OF_KIND[target.kind];
    const plural = pluralOf(target.kind);
    const list = (target.namespace
      ? await this.api!.listNamespacedCustomObject({ group, version: this.version, namespace: target.namespace, plural })
      : await this.api!.listClusterCustomObject({ group, version: this.version, plural })) as { items?: unknown[]; metadata?: { resourceVersion?: string } };
    const seen = new Set<string>();
    for (const item of list.items ?? []) {
      const key = this.upsert(target.kind, item);
      if (key !== undefined) seen.add(keyString(key));
    }
    for (const existing of this.store.list(target.kind, target.namespace)) {
      const key = { kind: target.kind, namespace: existing.metadata.namespace, name: existing.metadata.name };
      if (!seen.has(keyString(key))) this.remove(key);
    }
    target.resourceVersion = list.metadata?.resourceVersion ?? '';
    target.relistRequested = false;
    this.markListed(target);
  }

  private markListed(target: Target): void {
    if (target.listed) return;
    target.listed = true;
    if (this.targets.every((t) => t.listed)) this.store.markSynced();
  }

  /** Watches from the target's resourceVersion until the stream ends. */
  private async watchOnce(target: Target): Promise<WatchOutcome> {
    const base = `/apis/${GROUP_OF_KIND[target.kind]}/${this.version}`;
    const plural = pluralOf(target.kind);
    const path = target.namespace ? `${base}/namespaces/${target.namespace}/${plural}` : `${base}/${plural}`;
    await this.bucket.take(this.stop.signal);
    return new Promise<WatchOutcome>((resolve, reject) => {
      let gone = false;
      let finished = false;
      // A watch still connecting has no controller yet; closing must not wait for it.
      const onStop = (): void => resolve('ended');
      this.stop.signal.addEventListener('abort', onStop, { once: true });
      const onEvent = (type: string, object: unknown): void => {
        if (type === 'ERROR') {
          if ((object as { code?: unknown } | null)?.code === 410) gone = true;
          else log.warn(`${this.describe(target)}: watch error: ${JSON.stringify(object)}`);
          return;
        }
        if (type === 'ADDED' || type === 'MODIFIED') this.upsert(target.kind, object);
        else if (type === 'DELETED') {
          const key = this.rawKey(target.kind, object);
          if (key !== undefined) this.remove(key);
        }
        // Every event, bookmarks included, moves the resume point forward.
        const version = (object as RawObject | null)?.metadata?.resourceVersion;
        if (typeof version === 'string' && version !== '') target.resourceVersion = version;
      };
      const onDone = (err: unknown): void => {
        finished = true;
        target.watchAbort = undefined;
        this.stop.signal.removeEventListener('abort', onStop);
        if (err === null || err === undefined || this.stop.signal.aborted || (err as Error).name === 'AbortError') resolve(gone ? 'gone' : 'ended');
        else if (statusOf(err) === 410) resolve('gone');
        else reject(err);
      };
      const query = { resourceVersion: target.resourceVersion, allowWatchBookmarks: true };
      this.watcher!.watch(path, query, onEvent, onDone).then((controller) => {
        if (finished) return;
        target.watchAbort = controller;
        if (this.stop.signal.aborted) controller.abort();
      }, reject);
    });
  }

  /** Ends every watch with a relist requested, so each loop relists and reconciles. */
  private resync(): void {
    for (const target of this.targets) {
      target.relistRequested = true;
      target.watchAbort?.abort();
    }
  }

  private rawKey(kind: Kind, object: unknown): ResourceKey | undefined {
    const metadata = (object as RawObject | null)?.metadata;
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
    const withKind = fields ? { ...fields, kind } : object;
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

  private remove(key: ResourceKey): void {
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
