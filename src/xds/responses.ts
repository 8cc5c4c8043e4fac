// What a stream is sent, as bytes: SotW and Delta responses put together from the resources' own
// encoded entries (encoded once per resource for every proxy, see cache.ts), and the bookkeeping
// rules deciding which resources a response carries. No I/O; server.ts sends what these return.
import { create, toBinary, type MessageInitShape } from '@bufbuild/protobuf';
import { DeltaDiscoveryResponseSchema, DiscoveryResponseSchema } from '../gen/envoy/service/discovery/v3/discovery_pb.js';
import { isWildcardType } from '../envoy/types.js';
import { concatBytes, encodedDelta, encodedSotw, setDiff, type ResourceSet, type ResponseCache, type SetDiff } from './cache.js';
import type { Delivery, VersionedResource, Watch } from './connection.js';
import type { ResponseBytes } from './response-writer.js';

type ControlPlane = { identifier: string } | undefined;

/**
 * For a push of a type subscribed by name (EDS, RDS), the delivery the proxy holds, when the
 * response may carry only what changed since: these types are not state-of-the-world for removal
 * (Envoy, gRPC and our proxy keep the named resources a response leaves out), so a proxy that
 * acked the last response holds the rest. With 1000 clusters, one endpoint change is then one
 * assignment per proxy instead of 1000. Requests, wildcard types and a proxy that rejected or has
 * not answered the last response get everything.
 */
export function incrementalBase(w: Watch): Delivery | undefined {
  if (isWildcardType(w.typeUrl) || w.wildcard || w.rejecting) return undefined;
  return w.acked && w.acked.nonce === w.sent?.nonce ? w.acked : undefined;
}

/**
 * A SotW DiscoveryResponse's bytes; with `since`, only the resources that differ from that acked
 * delivery. Its resources are most of them and are the same for every proxy given the same
 * version, so the list is put together once per type and version (kept in `cache`) from the
 * resources' encoded entries; the per-stream fields (nonce, ...) are encoded alone and put in
 * front (written without joining them: see ResponseJoiner).
 */
export function encodeSotw(cache: ResponseCache, typeUrl: string, d: Delivery, since: Delivery | undefined, controlPlane: ControlPlane): ResponseBytes {
  const key = since ? `${typeUrl} ${d.version} since ${since.version}` : `${typeUrl} ${d.version}`;
  const body = cache.encoded.remember(key, () => {
    const entries: Uint8Array[] = [];
    for (const r of d.resources.values()) if (since?.resources.get(r.name)?.version !== r.version) entries.push(encodedSotw(r));
    return concatBytes(entries);
  });
  const head = toBinary(DiscoveryResponseSchema, create(DiscoveryResponseSchema, { versionInfo: d.version, typeUrl, nonce: d.nonce, controlPlane }));
  return [head, body];
}

/** Joined entries per list of updates; a push hands every stream moving between the same two sets one list (setDiff). */
const updateBodies = new WeakMap<readonly VersionedResource[], Uint8Array>();

/** The entries of `updated` as one body: a single entry as it is, a list shared by streams joined once. */
function updateBody(updated: readonly VersionedResource[]): Uint8Array {
  if (updated.length === 1) return encodedDelta(updated[0]!);
  let body = updateBodies.get(updated);
  if (body === undefined) updateBodies.set(updated, (body = concatBytes(updated.map(encodedDelta))));
  return body;
}

/**
 * A DeltaDiscoveryResponse's bytes: its own fields, then the entries of the resources it updates,
 * each encoded once. A response carrying the whole set (a stream's first) shares its list of
 * entries with the streams given the same set; a partial one with the streams sent the same updates.
 */
export function encodeDelta(cache: ResponseCache, init: MessageInitShape<typeof DeltaDiscoveryResponseSchema>, set: ResourceSet, updated: readonly VersionedResource[]): ResponseBytes {
  const body = updated.length === set.resources.size ? cache.encoded.remember(`delta ${init.typeUrl} ${set.version}`, () => updateBody(updated)) : updateBody(updated);
  return [toBinary(DeltaDiscoveryResponseSchema, create(DeltaDiscoveryResponseSchema, init)), body];
}

/** What a Delta response carries: resources the proxy lacks or holds in another version, names gone. */
export interface DeltaDiff extends SetDiff {
  /** Newly subscribed names that do not exist (answered as removed, so the proxy stops waiting). */
  readonly missing: readonly string[];
}

const wholeSets = new WeakMap<ResourceSet, SetDiff>();

/** A stream's first response to `set`, when the proxy holds nothing: the same list for every stream given the set. */
function everything(set: ResourceSet): SetDiff {
  let diff = wholeSets.get(set);
  if (!diff) wholeSets.set(set, (diff = { updated: [...set.resources.values()], removed: [] }));
  return diff;
}

/** What the proxy lacks of `set` given the versions it holds, by comparing every resource. */
function diffFromVersions(held: ReadonlyMap<string, string>, set: ResourceSet): SetDiff {
  const updated: VersionedResource[] = [];
  for (const r of set.resources.values()) if (held.get(r.name) !== r.version) updated.push(r);
  const removed: string[] = [];
  for (const name of held.keys()) if (!set.resources.has(name)) removed.push(name);
  return { updated, removed };
}

/**
 * The Delta response to `set` for the watch (`added`: names subscribed by the request being
 * answered), or undefined when there is nothing to send and `force` is off. Changes nothing: the
 * response is recorded by applyDelta once it is to be sent.
 */
export function deltaDiff(w: Watch, set: ResourceSet, added: readonly string[], force: boolean): DeltaDiff | undefined {
  const { updated, removed } = w.deltaBase ? setDiff(w.deltaBase, set) : w.holdsNothing() ? everything(set) : diffFromVersions(w.clientVersions, set);
  const missing = added.filter((name) => !set.resources.has(name) && !w.holds(name));
  if (!force && updated.length === 0 && removed.length === 0 && missing.length === 0) return undefined;
  return { updated, removed, missing };
}

/**
 * Records a Delta response in the watch's clientVersions and returns what the proxy holds from
 * this stream once it applies it.
 */
export function applyDelta(w: Watch, set: ResourceSet, diff: SetDiff): ReadonlyMap<string, VersionedResource> {
  // Unless the proxy said at the start that it held resources we have not sent since, it now holds
  // the set itself: the shared map, not a copy per stream, and the next response can be a diff
  // between shared sets.
  if (!w.heldFromElsewhere) {
    w.holdsExactly(set);
    return set.resources;
  }
  for (const r of diff.updated) w.clientVersions.set(r.name, r.version);
  for (const name of diff.removed) w.clientVersions.delete(name);
  w.holdsExactly(set);
  // What the proxy holds from us: the last state, less what it unsubscribed from since.
  const held = new Map([...(w.sent?.resources ?? [])].filter(([name]) => w.clientVersions.has(name)));
  for (const r of diff.updated) held.set(r.name, r);
  for (const name of diff.removed) held.delete(name);
  if (held.size === w.clientVersions.size) w.heldFromElsewhere = false;
  return held;
}
