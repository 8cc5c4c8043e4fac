// Informers over the orchestrator's API, shared by the CRD config source and the service registry:
// per collection (a resource type, in one namespace or all) list, then watch from the list's
// resourceVersion with bookmarks; a 410 Gone (stale version) means relist, any other failure means
// reconnect with backoff; --resync relists every period and reconciles. Every request passes one
// client-side token bucket (--orchestratorApiQPS/--orchestratorApiBurst).

import { request as httpRequest } from 'node:http';
import { request as httpsRequest, type RequestOptions } from 'node:https';
import { KubeConfig, Watch } from '@kubernetes/client-node';
import { scope } from '../common/log.js';
import { Backoff, DEFAULT_BACKOFF, realClock, TokenBucket, type BackoffOptions, type Clock } from './pacing.js';

const log = scope('orch');

/** A resource type as the API serves it: `/api/v1/...` for the core group, `/apis/<group>/<version>/...` otherwise. */
export interface ResourceType {
  readonly kind: string;
  /** '' for the core group. */
  readonly group: string;
  readonly version: string;
  readonly plural: string;
}

export function collectionPath(type: ResourceType, namespace?: string): string {
  const base = type.group === '' ? `/api/${type.version}` : `/apis/${type.group}/${type.version}`;
  return namespace ? `${base}/namespaces/${namespace}/${type.plural}` : `${base}/${type.plural}`;
}

const REQUEST_TIMEOUT_MS = 30_000;

/** An API error: its HTTP status and the Status message the server sent. */
export class ApiError extends Error {
  constructor(
    readonly statusCode: number,
    message: string,
  ) {
    super(message);
  }
}

export function statusOf(err: unknown): number | undefined {
  const e = err as { code?: unknown; statusCode?: unknown };
  if (typeof e?.statusCode === 'number') return e.statusCode;
  return typeof e?.code === 'number' ? e.code : undefined;
}

export function messageOf(err: unknown): string {
  const message = err instanceof Error ? err.message : String(err);
  return message.split('\n')[0]!.slice(0, 300);
}

export interface ObjectMeta {
  name?: string;
  namespace?: string;
  resourceVersion?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}

export interface ListResult {
  items: unknown[];
  resourceVersion: string;
}

/** The API client: the kubeconfig's server and credentials, plain JSON requests and watches. */
export class OrchestratorClient {
  private readonly watcher: Watch;

  private constructor(private readonly config: KubeConfig) {
    this.watcher = new Watch(config);
  }

  /** From --orchconfig, or the in-cluster configuration when absent; errors name which. */
  static connect(kubeconfig: string | undefined): OrchestratorClient {
    const config = new KubeConfig();
    const origin = kubeconfig ? `--orchconfig ${kubeconfig}` : 'in-cluster configuration';
    // The orchestrator sets these in every container; without them there is no cluster to talk to.
    if (!kubeconfig && !(process.env['KUBERNETES_SERVICE_HOST'] && process.env['KUBERNETES_SERVICE_PORT'])) {
      throw new Error(`${origin}: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set (not running in a cluster); give --orchconfig, or --configDir for local files`);
    }
    try {
      if (kubeconfig) config.loadFromFile(kubeconfig);
      else config.loadFromCluster();
    } catch (err) {
      throw new Error(`${origin}: ${messageOf(err)}`);
    }
    if (!config.getCurrentCluster()) throw new Error(`${origin}: no current cluster`);
    return new OrchestratorClient(config);
  }

  /**
   * One request with a JSON body (or none); resolves to the parsed reply, rejects with ApiError on a
   * non-2xx status. Bounded by REQUEST_TIMEOUT_MS so that a stalled server cannot stall its caller.
   */
  async request(method: string, path: string, body?: unknown, contentType = 'application/json'): Promise<unknown> {
    const server = new URL(this.config.getCurrentCluster()!.server);
    const options: RequestOptions = { method, headers: { accept: 'application/json' }, timeout: REQUEST_TIMEOUT_MS };
    await this.config.applyToHTTPSOptions(options);
    const payload = body === undefined ? undefined : JSON.stringify(body);
    if (payload !== undefined) Object.assign(options.headers!, { 'content-type': contentType, 'content-length': Buffer.byteLength(payload) });
    const url = new URL(path, server);
    const send = url.protocol === 'https:' ? httpsRequest : httpRequest;
    return new Promise((resolve, reject) => {
      const req = send(url, options, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('error', reject);
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          let parsed: unknown;
          try {
            parsed = text === '' ? undefined : JSON.parse(text);
          } catch {
            parsed = undefined;
          }
          const status = res.statusCode ?? 0;
          if (status >= 200 && status < 300) resolve(parsed);
          else reject(new ApiError(status, `${method} ${path}: ${status} ${(parsed as { message?: string } | undefined)?.message ?? text.slice(0, 200)}`));
        });
      });
      req.on('timeout', () => req.destroy(new Error(`${method} ${path}: no answer within ${REQUEST_TIMEOUT_MS} ms`)));
      req.on('error', reject);
      req.end(payload);
    });
  }

  async list(path: string): Promise<ListResult> {
    const reply = (await this.request('GET', path)) as { items?: unknown[]; metadata?: { resourceVersion?: string } } | undefined;
    return { items: reply?.items ?? [], resourceVersion: reply?.metadata?.resourceVersion ?? '' };
  }

  watch(path: string, query: Record<string, string | number | boolean | undefined>, onEvent: (type: string, object: unknown) => void, onDone: (err: unknown) => void): Promise<AbortController> {
    return this.watcher.watch(path, query, onEvent, onDone);
  }
}

/** What an informer does with what it reads. */
export interface InformerHandlers {
  /** An object was added or changed (listed or watched). Returns its identity, e.g. `ns/name`. */
  apply(object: unknown): string | undefined;
  /** An object was deleted (watched). */
  remove(object: unknown): void;
  /** A list completed: objects held from this collection whose identity is not in `seen` are gone. */
  prune(seen: ReadonlySet<string>): void;
}

/** `namespace/name`, or `name` for a cluster-scoped object. */
export function objectKey(meta: { namespace?: string; name?: string } | undefined): string {
  return meta?.namespace ? `${meta.namespace}/${meta.name ?? ''}` : (meta?.name ?? '');
}

/**
 * Handlers that keep a collection's objects in `cache` by objectKey; `changed` hears of each add,
 * update (a new resourceVersion) and delete. `namespace`: the collection's, undefined for all.
 */
export function cachingHandlers(cache: Map<string, unknown>, namespace: string | undefined, changed: (event: 'add' | 'update' | 'delete') => void): InformerHandlers {
  const keyOf = (object: unknown): string => objectKey((object as { metadata?: ObjectMeta } | null)?.metadata);
  return {
    apply: (object) => {
      const key = keyOf(object);
      const before = cache.get(key) as { metadata?: ObjectMeta } | undefined;
      const version = (object as { metadata?: ObjectMeta }).metadata?.resourceVersion;
      cache.set(key, object);
      if (before?.metadata?.resourceVersion !== version || version === undefined) changed(before ? 'update' : 'add');
      return key;
    },
    remove: (object) => {
      if (cache.delete(keyOf(object))) changed('delete');
    },
    prune: (seen) => {
      for (const key of [...cache.keys()]) {
        const inScope = namespace === undefined || key.startsWith(`${namespace}/`);
        if (inScope && !seen.has(key) && cache.delete(key)) changed('delete');
      }
    },
  };
}

export interface InformerOptions {
  backoff?: BackoffOptions;
  clock?: Clock;
}

type WatchOutcome = 'ended' | 'gone';

/** One list+watch loop on one collection. */
class Informer {
  /** Where the watch resumes; '' means list first. */
  private resourceVersion = '';
  listed = false;
  /** Set by resync: the next iteration relists even though a resume point exists. */
  private relistRequested = false;
  private watchAbort: AbortController | undefined;

  constructor(
    readonly description: string,
    private readonly path: string,
    private readonly handlers: InformerHandlers,
    private readonly group: InformerGroup,
  ) {}

  async run(): Promise<void> {
    const { stop, clock } = this.group;
    const backoff = new Backoff(this.group.options.backoff ?? DEFAULT_BACKOFF);
    while (!stop.signal.aborted) {
      try {
        if (this.resourceVersion === '' || this.relistRequested) await this.relist();
        const outcome = await this.watchOnce();
        if (outcome === 'gone') {
          log.info(`${this.description}: resourceVersion ${this.resourceVersion} is gone (410), relisting`);
          this.resourceVersion = '';
        }
        backoff.reset();
      } catch (err) {
        if (stop.signal.aborted) return;
        const delay = backoff.next();
        if (statusOf(err) === 404) {
          // Not served (a CRD not installed): nothing to wait for; keep trying quietly in case it is added.
          if (!this.listed) log.warn(`${this.description}: not served by the orchestrator (404); is deploy/crds.yaml applied?`);
          this.markListed();
          log.debug(`${this.description}: still not served; retrying in ${Math.round(delay)} ms`);
        } else {
          log.warn(`${this.description}: ${messageOf(err)}; retrying in ${Math.round(delay)} ms`);
        }
        await clock.sleep(delay, stop.signal).catch(() => undefined);
      }
    }
  }

  /** Ends the watch with a relist requested, so the loop relists and reconciles. */
  resync(): void {
    this.relistRequested = true;
    this.watchAbort?.abort();
  }

  abort(): void {
    this.watchAbort?.abort();
  }

  private markListed(): void {
    if (this.listed) return;
    this.listed = true;
    this.group.checkSynced();
  }

  private async relist(): Promise<void> {
    await this.group.bucket.take(this.group.stop.signal);
    const list = await this.group.client().list(this.path);
    const seen = new Set<string>();
    for (const item of list.items) {
      const key = this.handlers.apply(item);
      if (key !== undefined) seen.add(key);
    }
    this.handlers.prune(seen);
    this.resourceVersion = list.resourceVersion;
    this.relistRequested = false;
    this.markListed();
  }

  /** Watches from the resume point until the stream ends. */
  private async watchOnce(): Promise<WatchOutcome> {
    const { stop } = this.group;
    await this.group.bucket.take(stop.signal);
    return new Promise<WatchOutcome>((resolve, reject) => {
      let gone = false;
      let finished = false;
      // A watch still connecting has no controller yet; closing must not wait for it.
      const onStop = (): void => resolve('ended');
      stop.signal.addEventListener('abort', onStop, { once: true });
      const onEvent = (type: string, object: unknown): void => {
        if (type === 'ERROR') {
          if ((object as { code?: unknown } | null)?.code === 410) gone = true;
          else log.warn(`${this.description}: watch error: ${JSON.stringify(object)}`);
          return;
        }
        if (type === 'ADDED' || type === 'MODIFIED') this.handlers.apply(object);
        else if (type === 'DELETED') this.handlers.remove(object);
        // Every event, bookmarks included, moves the resume point forward.
        const version = (object as { metadata?: ObjectMeta } | null)?.metadata?.resourceVersion;
        if (typeof version === 'string' && version !== '') this.resourceVersion = version;
      };
      const onDone = (err: unknown): void => {
        finished = true;
        this.watchAbort = undefined;
        stop.signal.removeEventListener('abort', onStop);
        if (err === null || err === undefined || stop.signal.aborted || (err as Error).name === 'AbortError') resolve(gone ? 'gone' : 'ended');
        else if (statusOf(err) === 410) resolve('gone');
        else reject(err);
      };
      const query = { resourceVersion: this.resourceVersion, allowWatchBookmarks: true };
      this.group
        .client()
        .watch(this.path, query, onEvent, onDone)
        .then((controller) => {
          if (finished) return;
          this.watchAbort = controller;
          if (stop.signal.aborted) controller.abort();
        }, reject);
    });
  }
}

export interface InformerGroupOptions extends InformerOptions {
  /** --orchestratorApiQPS; <= 0 means unlimited. */
  qps?: number;
  /** --orchestratorApiBurst. */
  burst?: number;
  /** --resync in milliseconds; 0 or absent: never. */
  resyncMs?: number;
}

/** Informers started and stopped together, sharing a client, a token bucket and a resync period. */
export class InformerGroup {
  readonly stop = new AbortController();
  readonly clock: Clock;
  readonly bucket: TokenBucket;
  private readonly informers: Informer[] = [];
  private apiClient: OrchestratorClient | undefined;
  private loops: Promise<void>[] = [];
  private resyncTimer: NodeJS.Timeout | undefined;
  private syncedResolve: (() => void) | undefined;
  private readonly syncedPromise = new Promise<void>((resolve) => (this.syncedResolve = resolve));
  synced = false;

  constructor(readonly options: InformerGroupOptions = {}) {
    this.clock = options.clock ?? realClock;
    this.bucket = new TokenBucket(options.qps ?? 0, options.burst ?? 0, this.clock);
  }

  client(): OrchestratorClient {
    if (!this.apiClient) throw new Error('informers used before start()');
    return this.apiClient;
  }

  /** Adds an informer on `path`; call before start(). */
  add(description: string, path: string, handlers: InformerHandlers): void {
    this.informers.push(new Informer(description, path, handlers, this));
  }

  /** Starts every loop; resolves once each collection has been listed once. */
  async start(client: OrchestratorClient): Promise<void> {
    this.apiClient = client;
    this.loops = this.informers.map((i) => i.run());
    if (this.options.resyncMs && this.options.resyncMs > 0) {
      this.resyncTimer = setInterval(() => this.informers.forEach((i) => i.resync()), this.options.resyncMs);
    }
    this.checkSynced();
    await this.syncedPromise;
  }

  checkSynced(): void {
    if (this.synced || !this.informers.every((i) => i.listed)) return;
    this.synced = true;
    this.syncedResolve!();
  }

  async close(): Promise<void> {
    clearInterval(this.resyncTimer);
    this.stop.abort();
    for (const i of this.informers) i.abort();
    await Promise.all(this.loops);
  }
}
