// The XDS cache: everything the discovery server keeps of what it generated, in one place, in tiers
// by lifetime (docs/xds-server.md, "The XDS cache"):
//
// 1. Snapshot tier (`memo`): values derived from one immutable snapshot object (a PushContext, a
//    sidecar scope), kept on that object; they go when a push replaces the snapshot.
// 2. Dependency tier (`XdsCache`, PILOT_ENABLE_XDS_CACHE, PILOT_XDS_CACHE_SIZE): built Envoy
//    messages across snapshots, keyed by the builder's kind and a fingerprint of everything it reads
//    (as the Go mesh's XdsCache keys by dependencies). An edit that changes no input of a message
//    (an AuthorizationPolicy edit changes no cluster) hands out the very same object, so nothing is
//    rebuilt, re-serialized or re-hashed, and the xDS server sees equal versions and sends nothing.
//    A changed input is a new key: entries are never stale, the old one ages out of the LRU.
// 3. Resource tier (`packOnce`, `versioned`, `encodedSotw`, `encodedDelta`): per message object
//    its packed Any, per resource its content version and its encoded entry of a response's
//    `resources`; they go with the object. Proxies handed the same message share all of them, so a
//    resource is encoded once for every proxy and response that carries it.
// 4. Response tier (`ResponseCache`): the distinct resource sets generated (one `ResourceSet`, with
//    its version, for every stream given the same resources) and encoded SotW resource lists per
//    `<type URL> <version>`, shared by every stream sent that version.
import { createHash } from 'node:crypto';
import { create, toBinary } from '@bufbuild/protobuf';
import type { Any } from '@bufbuild/protobuf/wkt';
import { DeltaDiscoveryResponseSchema, DiscoveryResponseSchema } from '../gen/envoy/service/discovery/v3/discovery_pb.js';
import { LRUCache } from 'lru-cache';
import { settingDefault } from '../common/env.js';
import { counter, gauge } from '../common/metrics.js';
import { setVersion, type VersionedResource } from './connection.js';
import type { Subscription, XdsResource } from './generator.js';

/**
 * A least-recently-used map (lru-cache) that reports its evictions: reading an entry refreshes it;
 * beyond `limit` entries the least recently used goes; a limit <= 0 is unbounded (a plain map).
 */
export class Lru<V extends NonNullable<unknown>> {
  private readonly entries: LRUCache<string, V> | Map<string, V>;
  private evictions = 0;

  constructor(limit: number) {
    this.entries =
      limit > 0
        ? new LRUCache<string, V>({
            max: limit,
            dispose: (_v, _k, reason) => {
              if (reason === 'evict') this.evictions++;
            },
          })
        : new Map();
  }

  get size(): number {
    return this.entries.size;
  }

  get(key: string): V | undefined {
    return this.entries.get(key);
  }

  /** Stores `value`; returns how many entries were evicted to stay within the limit. */
  set(key: string, value: V): number {
    const before = this.evictions;
    this.entries.set(key, value);
    return this.evictions - before;
  }

  /** The entry of `key`, made and stored on a miss. */
  remember(key: string, make: () => V): V {
    let value = this.get(key);
    if (value === undefined) this.set(key, (value = make()));
    return value;
  }

  clear(): void {
    this.entries.clear();
  }
}

// ---- 1. snapshot tier ----

interface KeyedStore<K> {
  has(key: K): boolean;
  get(key: K): unknown;
  set(key: K, value: unknown): unknown;
}

/** The value of `key` in the store of `owner` (made by `store` on first use), built on a miss. */
function remembered<K, T>(stores: WeakMap<object, KeyedStore<K>>, store: () => KeyedStore<K>, owner: object, key: K, build: () => T): T {
  let m = stores.get(owner);
  if (!m) stores.set(owner, (m = store()));
  if (m.has(key)) return m.get(key) as T;
  const v = build();
  m.set(key, v);
  return v;
}

const memos = new WeakMap<object, KeyedStore<string>>();
const newMap = (): KeyedStore<string> => new Map<string, unknown>();

/**
 * The value of `key` derived from `owner`, an immutable snapshot object: built once, gone with the
 * owner. Within one snapshot this is cheaper than fingerprinting inputs, so it sits in front of the
 * dependency tier (most of a proxy's config depends only on its sidecar scope, shared by the proxies
 * of a namespace or Sidecar, or on the whole snapshot).
 */
export function memo<T>(owner: object, key: string, build: () => T): T {
  return remembered(memos, newMap, owner, key, build);
}

const pairMemos = new WeakMap<object, KeyedStore<object>>();
const newWeakMap = (): KeyedStore<object> => new WeakMap<object, unknown>();

/**
 * The value derived from two immutable objects (a snapshot value and a shared subscription set,
 * say), built once per pair and gone with either.
 */
export function memoPair<T>(owner: object, other: object, build: () => T): T {
  return remembered(pairMemos, newWeakMap, owner, other, build);
}

// ---- 2. dependency tier ----

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

/** Built messages by dependency key, with the xds_cache_* metrics. Options left out take the spec's defaults. */
export class XdsCache {
  readonly enabled: boolean;
  readonly maxSize: number;
  private readonly stats: boolean;
  private readonly entries: Lru<{ readonly value: unknown }>;

  constructor(opts: XdsCacheOptions = {}) {
    this.enabled = opts.enabled ?? settingDefault('PILOT_ENABLE_XDS_CACHE');
    this.maxSize = opts.size ?? settingDefault('PILOT_XDS_CACHE_SIZE');
    this.stats = opts.stats ?? settingDefault('PILOT_XDS_CACHE_STATS');
    this.entries = new Lru(this.maxSize);
  }

  get size(): number {
    return this.entries.size;
  }

  /** The entry of `key`, built (and kept) on a miss. */
  getOrBuild<T>(key: string, build: () => T): T {
    if (!this.enabled) return build();
    const hit = this.entries.get(key);
    if (hit !== undefined) {
      if (this.stats) counter('xds_cache_reads').inc({ type: 'hit' });
      return hit.value as T;
    }
    if (this.stats) counter('xds_cache_reads').inc({ type: 'miss' });
    const value = build();
    const evicted = this.entries.set(key, { value });
    if (evicted > 0) counter('xds_cache_evictions').inc(evicted);
    gauge('xds_cache_size').set(this.entries.size);
    return value;
  }

  /**
   * Through the cache when it is on: `key` names the builder and lists everything `build` reads, so
   * an entry is reused exactly when its inputs are unchanged, across snapshots.
   */
  cached<T>(key: () => [kind: string, ...inputs: unknown[]], build: () => T): T {
    if (!this.enabled) return build();
    const [kind, ...inputs] = key();
    return this.getOrBuild(cacheKey(kind, ...inputs), build);
  }

  /** Drops everything (e.g. when the meaning of an input changes outside the keys). */
  clear(): void {
    if (this.entries.size > 0) counter('xds_cache_evictions').inc(this.entries.size);
    this.entries.clear();
    gauge('xds_cache_size').set(0);
  }
}

/** Through `cache`'s dependency tier when there is one (see XdsCache.cached), else built each time. */
export function cachedIn<T>(cache: XdsCache | undefined, key: () => [kind: string, ...inputs: unknown[]], build: () => T): T {
  return cache ? cache.cached(key, build) : build();
}

// ---- 3. resource tier ----

const packed = new WeakMap<object, XdsResource>();

/** The resource of a built message, packed once per message object (shared messages are serialized once). */
export function packOnce(message: object, pack: () => XdsResource): XdsResource {
  let r = packed.get(message);
  if (!r) packed.set(message, (r = pack()));
  return r;
}

const contentVersions = new WeakMap<Any, string>();

/** The content hash of a resource, its version when the generator gives none; hashed once per Any. */
export function contentVersion(resource: Any): string {
  let v = contentVersions.get(resource);
  if (v === undefined) {
    v = createHash('sha256').update(resource.typeUrl).update(resource.value).digest('base64url').slice(0, 16);
    contentVersions.set(resource, v);
  }
  return v;
}

const versionedResources = new WeakMap<XdsResource, VersionedResource>();

/** A generated resource with its version, made once per resource object. */
export function versioned(r: XdsResource): VersionedResource {
  let v = versionedResources.get(r);
  if (v === undefined) {
    v = { name: r.name, version: r.version ?? contentVersion(r.resource), resource: r.resource };
    versionedResources.set(r, v);
  }
  return v;
}

const sotwEntries = new WeakMap<Any, Uint8Array>();

/**
 * The resource as one encoded entry of a DiscoveryResponse's `resources` (a repeated field: entries
 * concatenated are the encoded list), encoded once per Any.
 */
export function encodedSotw(r: VersionedResource): Uint8Array {
  let b = sotwEntries.get(r.resource);
  if (b === undefined) {
    b = toBinary(DiscoveryResponseSchema, create(DiscoveryResponseSchema, { resources: [r.resource] }));
    sotwEntries.set(r.resource, b);
  }
  return b;
}

const deltaEntries = new WeakMap<VersionedResource, Uint8Array>();

/** The same for a DeltaDiscoveryResponse's `resources` (name, version and Any), once per resource. */
export function encodedDelta(r: VersionedResource): Uint8Array {
  let b = deltaEntries.get(r);
  if (b === undefined) {
    b = toBinary(DeltaDiscoveryResponseSchema, create(DeltaDiscoveryResponseSchema, { resources: [{ name: r.name, version: r.version, resource: r.resource }] }));
    deltaEntries.set(r, b);
  }
  return b;
}

/** Byte strings one after the other (protobuf parses concatenated encodings as one message). */
export function concatBytes(parts: readonly Uint8Array[]): Uint8Array {
  let size = 0;
  for (const p of parts) size += p.length;
  const out = new Uint8Array(size);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

// ---- 4. response tier ----

/** Encoded SotW resource lists kept. */
const RESPONSE_CACHE_SIZE = 64;
/** Distinct generated resource sets kept (proxies with equal sets share one). */
const RESOURCE_SETS_SIZE = 1024;

/** One generated set of a type's resources, shared by every stream it was generated for. */
export interface ResourceSet {
  /** setVersion of the resources, in the generator's order. */
  readonly version: string;
  /** By name, in the generator's order (the first of a name wins); read-only, shared by deliveries. */
  readonly resources: ReadonlyMap<string, VersionedResource>;
}

/**
 * Interns generated resource lists: a list of the same resource objects, in the same order, as one
 * generated before gets that one's ResourceSet, so its map and version are built once for every
 * proxy given these resources, not once per proxy (with 1000 clusters, hashing and indexing them per
 * proxy and push was most of a push's cost). Lists are told apart by the identities of their
 * resources: a hash of per-object numbers finds the candidate, an element-wise comparison confirms
 * it. Equal content in other objects makes another set with the same version.
 */
export class ResourceSets {
  private readonly ids = new WeakMap<XdsResource, number>();
  private nextId = 0;
  private readonly sets = new Lru<{ readonly list: readonly XdsResource[]; readonly set: ResourceSet }>(RESOURCE_SETS_SIZE);

  private readonly bySubscription = new WeakMap<readonly XdsResource[], { readonly wildcard: boolean; readonly names: ReadonlySet<string>; readonly set: ResourceSet }>();

  /**
   * The set of what `generated` holds of `subscription`. A generator that hands the same list to
   * every stream with the same subscription (EDS per scope and name set) gets it filtered and
   * interned once, not once per stream.
   */
  forSubscription(generated: readonly XdsResource[], subscription: Subscription): ResourceSet {
    const kept = this.bySubscription.get(generated);
    if (kept && kept.wildcard === subscription.wildcard && (kept.wildcard || kept.names === subscription.names)) return kept.set;
    const set = this.intern(subscription.wildcard ? generated : generated.filter((r) => subscription.names.has(r.name)));
    this.bySubscription.set(generated, { wildcard: subscription.wildcard, names: subscription.names, set });
    return set;
  }

  intern(list: readonly XdsResource[]): ResourceSet {
    let h1 = 0x811c9dc5;
    let h2 = 0;
    for (const r of list) {
      let id = this.ids.get(r);
      if (id === undefined) this.ids.set(r, (id = ++this.nextId));
      h1 = Math.imul(h1 ^ id, 0x01000193);
      h2 = (Math.imul(h2, 31) + id) | 0;
    }
    const key = `${list.length}:${h1}:${h2}`;
    const hit = this.sets.get(key);
    if (hit && hit.list.length === list.length && hit.list.every((r, i) => r === list[i])) return hit.set;
    const resources = new Map<string, VersionedResource>();
    for (const r of list) if (!resources.has(r.name)) resources.set(r.name, versioned(r));
    const set: ResourceSet = { version: setVersion(resources.values()), resources };
    this.sets.set(key, { list, set });
    return set;
  }
}

/** What changed from one generated set to another: resources new or in another version, names gone. */
export interface SetDiff {
  readonly updated: readonly VersionedResource[];
  readonly removed: readonly string[];
}

const diffs = new WeakMap<ResourceSet, { readonly to: ResourceSet; readonly diff: SetDiff }>();

/**
 * The diff from `from` to `to`, computed once for every stream moving between the same two sets
 * (a push moves all the streams that had one set to the same next one); the latest per `from` is kept.
 */
export function setDiff(from: ResourceSet, to: ResourceSet): SetDiff {
  const kept = diffs.get(from);
  if (kept?.to === to) return kept.diff;
  const updated: VersionedResource[] = [];
  for (const r of to.resources.values()) if (from.resources.get(r.name)?.version !== r.version) updated.push(r);
  const removed: string[] = [];
  for (const name of from.resources.keys()) if (!to.resources.has(name)) removed.push(name);
  const diff = { updated, removed };
  diffs.set(from, { to, diff });
  return diff;
}

/** What responses share across streams. */
export class ResponseCache {
  /** Encoded SotW resource lists per `<type URL> <version>` (and the acked base of a partial push). */
  readonly encoded = new Lru<Uint8Array>(RESPONSE_CACHE_SIZE);
  /**
   * The generated sets: the streams given the same resources share one read-only map in their
   * delivery records instead of one per stream (2000 proxies holding 1000 clusters and 1000
   * endpoints each would be millions of map entries).
   */
  readonly sets = new ResourceSets();
}
