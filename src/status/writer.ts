// The status writer (PILOT_ENABLE_STATUS): writes what ./content.ts decides into the `status`
// subresource of the mesh's custom resources through the orchestrator's API. One pending write per
// resource (a newer desire replaces the older one's part), at most PILOT_STATUS_MAX_WORKERS writes
// at once and never two for one resource, every request paced by one token bucket
// (PILOT_STATUS_QPS / PILOT_STATUS_BURST). A write reads the object through `/status` and updates
// `/status` with the resourceVersion it read (so RBAC needs get and update on `<plural>/status` only): a 409 Conflict (someone changed it in between) reads and tries again.
// Other resources' status (the orchestrator's Ingresses) goes the same way as a StatusTarget.
import { GROUP_OF_KIND, type ApiVersionName, type ResourceKey } from '../api/types.js';
import { pluralOf } from '../api/crds.js';
import { scope } from '../common/log.js';
import { collectionPath, messageOf, statusOf, type OrchestratorClient } from '../config/informer.js';
import { realClock, TokenBucket, type Clock } from '../config/pacing.js';
import { desiredStatus, type DesiredStatus, type Status } from './content.js';
import { keyString } from '../config/store.js';

const log = scope('status');

/** Conflicts retried per write before it is given up (a later change queues it again). */
const MAX_CONFLICT_RETRIES = 5;

export interface StatusWriterOptions {
  readonly client: Pick<OrchestratorClient, 'request'>;
  readonly qps: number;
  readonly burst: number;
  readonly workers: number;
  /**
   * Written under leader election: nothing is queued or written except while the signal given to
   * writeWhile says this replica leads. Default false: always writes.
   */
  readonly elected?: boolean;
  /** The API version of the paths; default v1. */
  readonly version?: ApiVersionName;
  readonly clock?: Clock;
}

interface StoredObject {
  metadata?: { generation?: number; resourceVersion?: string };
  status?: Status;
  [field: string]: unknown;
}

/** The status of any resource: its path, and the status wanted given the one read (undefined: nothing to write). */
export interface StatusTarget {
  /** Names the resource in logs and as the one pending write per resource. */
  readonly id: string;
  readonly path: string;
  readonly next: (current: unknown) => unknown;
}

type Pending = { readonly key: ResourceKey; desired: DesiredStatus } | { readonly target: StatusTarget };

export class StatusWriter {
  private readonly pending = new Map<string, Pending>();
  private readonly busy = new Set<string>();
  private readonly inFlight = new Set<Promise<void>>();
  private readonly bucket: TokenBucket;
  private readonly stop = new AbortController();
  /** Aborted when the leadership writes run under ends (and on close); undefined while not leading. */
  private term: AbortController | undefined;
  /** Status updates the API server accepted, for /debug and tests. */
  written = 0;

  constructor(private readonly options: StatusWriterOptions) {
    this.bucket = new TokenBucket(options.qps, options.burst, options.clock ?? realClock);
    if (!options.elected) this.term = new AbortController();
  }

  /**
   * Writes while `leading` is not aborted (this replica holds the election). When it aborts, what
   * is queued is dropped and writes in progress stop before their next request: fail safe, as
   * another replica may lead by then. Whoever calls this queues what should be written anew.
   */
  writeWhile(leading: AbortSignal): void {
    if (leading.aborted || this.stop.signal.aborted) return;
    const term = (this.term = new AbortController());
    leading.addEventListener('abort', () => {
      term.abort();
      if (this.term !== term) return;
      this.term = undefined;
      this.pending.clear();
    }, { once: true });
  }

  /** Whether writes go out now (not elected, or leading). */
  writing(): boolean {
    return this.term !== undefined && !this.stop.signal.aborted;
  }

  /** Queues a write; a part of `desired` replaces the same part of a write still pending. */
  enqueue(key: ResourceKey, desired: DesiredStatus): void {
    if (!this.writing()) return;
    const k = keyString(key);
    const queued = this.pending.get(k);
    if (queued && 'desired' in queued) queued.desired = { ...queued.desired, ...desired };
    else this.pending.set(k, { key, desired });
    this.pump();
  }

  /** Queues the write of another resource's status; it replaces one still pending for the same id. */
  enqueueTarget(target: StatusTarget): void {
    if (!this.writing()) return;
    this.pending.set(target.id, { target });
    this.pump();
  }

  /** Whether nothing is queued or being written. */
  idle(): boolean {
    return this.pending.size === 0 && this.inFlight.size === 0;
  }

  async close(): Promise<void> {
    this.stop.abort();
    this.term?.abort();
    this.pending.clear();
    await Promise.all(this.inFlight);
  }

  private pump(): void {
    for (const [k, item] of this.pending) {
      if (this.inFlight.size >= Math.max(1, this.options.workers)) return;
      if (this.busy.has(k)) continue;
      this.pending.delete(k);
      this.busy.add(k);
      const task: Promise<void> = this.write(item).finally(() => {
        this.busy.delete(k);
        this.inFlight.delete(task);
        this.pump();
      });
      this.inFlight.add(task);
    }
  }

  private path(key: ResourceKey): string {
    const type = { kind: key.kind, group: GROUP_OF_KIND[key.kind], version: this.options.version ?? 'v1', plural: pluralOf(key.kind) };
    return `${collectionPath(type, key.namespace)}/${key.name}`;
  }

  /** The status a mesh resource should have, given the object read. */
  private meshStatus(object: StoredObject, desired: DesiredStatus): Status | undefined {
    let wanted = desired;
    // The spec changed since: a newer snapshot tracks the new generation and will say so.
    if (desired.distribution && object.metadata?.generation !== desired.distribution.generation) {
      const { distribution: _stale, ...rest } = desired;
      wanted = rest;
    }
    return desiredStatus(object.status, wanted, new Date().toISOString());
  }

  private async write(item: Pending): Promise<void> {
    const term = this.term?.signal;
    if (!term) return;
    const path = 'target' in item ? item.target.path : this.path(item.key);
    const name = 'target' in item ? item.target.id : keyString(item.key);
    for (let attempt = 0; attempt <= MAX_CONFLICT_RETRIES; attempt++) {
      try {
        await this.bucket.take(term);
        if (term.aborted) return;
        const object = (await this.options.client.request('GET', `${path}/status`)) as StoredObject;
        const next = 'target' in item ? item.target.next(object.status) : this.meshStatus(object, item.desired);
        if (next === undefined) return;
        await this.bucket.take(term);
        // Leadership may have ended while reading: the PUT is not sent then.
        if (term.aborted) return;
        await this.options.client.request('PUT', `${path}/status`, { ...object, status: next });
        this.written += 1;
        log.debug(`status of ${name} written`);
        return;
      } catch (e) {
        if (term.aborted) return;
        const code = statusOf(e);
        if (code === 409) {
          log.debug(`status of ${name}: conflict, reading it again (${messageOf(e)})`);
          continue;
        }
        if (code === 404) log.debug(`status of ${name} not written: the resource is gone`);
        else log.warn(`status of ${name} not written: ${messageOf(e)}`);
        return;
      }
    }
    log.warn(`status of ${name} not written: it kept changing (${MAX_CONFLICT_RETRIES + 1} conflicts); the next change writes it`);
  }
}
