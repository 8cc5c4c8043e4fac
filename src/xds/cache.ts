// The XDS cache (PILOT_ENABLE_XDS_CACHE, PILOT_XDS_CACHE_SIZE): built Envoy messages kept across
// PushContexts, keyed by a fingerprint of everything their builder reads. A push builds a new
// snapshot, but most of what a snapshot yields is unchanged (an AuthorizationPolicy edit changes
// no cluster, endpoint or route): with the cache, the generators hand out the very same message
// objects as before, so nothing is rebuilt, re-serialized or re-hashed, and the xDS server sees
// equal versions and sends nothing for those types.
//
// Why fingerprints of the inputs and not "snapshot version + resource name": a key that names the
// snapshot is correct but never survives a push, which is exactly when the cache matters. A key
// that is a hash of the builder's whole input (service, port, endpoints, options, ...) is correct
// by construction: equal inputs give an equal message, whatever changed elsewhere, and any change
// of an input gives another key (the stale entry ages out of the LRU).
import { createHash } from 'node:crypto';
import { LRUCache } from 'lru-cache';
import { setting } from '../common/env.js';
import { counter, gauge } from '../common/metrics.js';

export interface XdsCacheOptions {
  /** PILOT_ENABLE_XDS_CACHE; off, every lookup builds. */
  readonly enabled?: boolean;
  /** PILOT_XDS_CACHE_SIZE: most entries kept; <= 0 = unbounded. */
  readonly size?: number;
  /** PILOT_XDS_CACHE_STATS: count hits and misses in xds_cache_reads (off by default, as it costs per read). */
  readonly stats?: boolean;
}

/** JSON of the inputs; bigints as strings and bytes (packed configs) as base64, which is far cheaper than JSON's index-by-index. */
function replacer(_key: string, v: unknown): unknown {
  if (typeof v === 'bigint') return v.toString();
  if (v instanceof Uint8Array) return Buffer.from(v.buffer, v.byteOffset, v.byteLength).toString('base64');
  return v;
}

/** A key from the builder's kind and its inputs (JSON-serializable values, bigints, bytes). */
export function cacheKey(kind: string, ...inputs: readonly unknown[]): string {
  const text = JSON.stringify(inputs, replacer);
  return `${kind}:${createHash('sha256').update(text).digest('base64url')}`;
}

interface Built {
  readonly value: unknown;
}

/** A least-recently-used map of built messages, with the xds_cache_* metrics. */
export class XdsCache {
  readonly enabled: boolean;
  readonly maxSize: number;
  private readonly stats: boolean;
  /** Bounded by maxSize, a plain map when unbounded (maxSize <= 0); boxed, as a built value may be anything. */
  private readonly entries: LRUCache<string, Built> | Map<string, Built>;

  constructor(opts: XdsCacheOptions = {}) {
    this.enabled = opts.enabled ?? setting('PILOT_ENABLE_XDS_CACHE');
    this.maxSize = opts.size ?? setting('PILOT_XDS_CACHE_SIZE');
    this.stats = opts.stats ?? setting('PILOT_XDS_CACHE_STATS');
    this.entries =
      this.maxSize > 0
        ? new LRUCache<string, Built>({
            max: this.maxSize,
            dispose: (_v, _k, reason) => {
              if (reason === 'evict') counter('xds_cache_evictions').inc();
            },
          })
        : new Map();
  }

  get size(): number {
    return this.entries.size;
  }

  /** The entry of `key`, built (and kept) on a miss. */
  getOrBuild<T>(key: string, build: () => T): T {
    if (!this.enabled) return build();
    // get() marks it most recently used.
    const hit = this.entries.get(key);
    if (hit !== undefined) {
      if (this.stats) counter('xds_cache_reads').inc({ type: 'hit' });
      return hit.value as T;
    }
    if (this.stats) counter('xds_cache_reads').inc({ type: 'miss' });
    const value = build();
    this.entries.set(key, { value });
    gauge('xds_cache_size').set(this.entries.size);
    return value;
  }

  /** Drops everything (e.g. when the meaning of an input changes outside the keys). */
  clear(): void {
    if (this.entries.size > 0) counter('xds_cache_evictions').inc(this.entries.size);
    // clear() of an LRUCache disposes with reason 'delete', which is not counted twice.
    this.entries.clear();
    gauge('xds_cache_size').set(0);
  }
}
