// Subscriptions by content. A SotW request repeats its whole list of resource names every time
// (an Envoy EDS ACK names every cluster), and proxies of one namespace ask for the same lists. So
// the ADS transport keeps a request's names as their wire bytes (decodeSotwRequest), an ACK is
// recognised by comparing those bytes with the previous request's, and a changed list is interned:
// streams asking for the same names share one decoded list and one Set. Generators can then
// memoize a named type's resources per (snapshot, name set) instead of per proxy. A Delta stream's
// first request is read the same way (its resource_names_subscribe); later Delta subscriptions
// change by increments, and the set a change leaves is interned too.
import { createHash } from 'node:crypto';
import { create, fromBinary, toBinary, type MessageShape } from '@bufbuild/protobuf';
import { BinaryReader, WireType } from '@bufbuild/protobuf/wire';
import { DeltaDiscoveryRequestSchema, DiscoveryRequestSchema, type DeltaDiscoveryRequest, type DiscoveryRequest } from '../gen/envoy/service/discovery/v3/discovery_pb.js';
import { LRUCache } from 'lru-cache';

/** The field number of DiscoveryRequest.resource_names, and of DeltaDiscoveryRequest.resource_names_subscribe. */
const RESOURCE_NAMES = 3;
/** Distinct name lists kept; a stream holds its own list, so an evicted one only stops being shared. */
const SUBSCRIPTIONS_SIZE = 1024;

/**
 * The names of a request as kept by the transport: their wire bytes (`resourceNames` decodes them on
 * first read) and, once `shareNames` has run, the shared list they are equal to.
 */
export interface WireNames {
  namesBytes: Uint8Array;
  requested?: RequestedNames;
}
/** A DiscoveryRequest whose resource_names were kept as wire bytes. */
export type SotwWireRequest = DiscoveryRequest & WireNames;
/** A DeltaDiscoveryRequest whose resource_names_subscribe were kept the same way. */
export type DeltaWireRequest = DeltaDiscoveryRequest & WireNames;

/** One distinct list of requested names, shared (read-only) by every stream that asked for it. */
export interface RequestedNames {
  /** The list's resource_names entries as encoded in a DiscoveryRequest. */
  readonly bytes: Uint8Array;
  /** The names as listed. */
  readonly list: readonly string[];
  /** The names without `*`. */
  readonly named: ReadonlySet<string>;
  readonly hasWildcard: boolean;
}

/**
 * Decodes a DiscoveryRequest except its resource_names, whose entries are kept as bytes
 * (`namesBytes`) and decoded only if `resourceNames` is read. A malformed message throws as
 * fromBinary does.
 */
export function decodeSotwRequest(buf: Uint8Array): SotwWireRequest {
  return decodeKeepingNames(DiscoveryRequestSchema, 'resourceNames', buf);
}

/**
 * The same for a DeltaDiscoveryRequest and its resource_names_subscribe (field 3 too): a Delta
 * stream's first EDS request names every cluster, and the proxies of a namespace name the same ones.
 */
export function decodeDeltaRequest(buf: Uint8Array): DeltaWireRequest {
  return decodeKeepingNames(DeltaDiscoveryRequestSchema, 'resourceNamesSubscribe', buf);
}

function decodeKeepingNames<Desc extends typeof DiscoveryRequestSchema | typeof DeltaDiscoveryRequestSchema, Field extends 'resourceNames' | 'resourceNamesSubscribe'>(
  schema: Desc,
  field: Field,
  buf: Uint8Array,
): MessageShape<Desc> & WireNames {
  const reader = new BinaryReader(buf);
  const spans: Array<[number, number]> = [];
  while (reader.pos < reader.len) {
    const start = reader.pos;
    const [number, wireType] = reader.tag();
    if (number === RESOURCE_NAMES && wireType === WireType.LengthDelimited) {
      const len = reader.uint32();
      reader.pos += len;
      if (reader.pos > reader.len) throw new RangeError('premature EOF in resource names');
      const last = spans[spans.length - 1];
      if (last && last[1] === start) last[1] = reader.pos;
      else spans.push([start, reader.pos]);
    } else {
      reader.skip(wireType, number);
    }
  }
  if (spans.length === 0) return Object.assign(fromBinary(schema, buf) as MessageShape<Desc>, { namesBytes: new Uint8Array(0) });
  const namesBytes = spans.length === 1 ? buf.subarray(spans[0][0], spans[0][1]) : Buffer.concat(spans.map(([a, b]) => buf.subarray(a, b)));
  const rest: Uint8Array[] = [];
  let at = 0;
  for (const [a, b] of spans) {
    rest.push(buf.subarray(at, a));
    at = b;
  }
  rest.push(buf.subarray(at));
  const msg = Object.assign(fromBinary(schema, Buffer.concat(rest)) as MessageShape<Desc>, { namesBytes }) as MessageShape<Desc> & WireNames;
  // The names are decoded from the message's namesBytes as they are when read (not from a
  // captured view): shareNames can so swap in the shared copy and let gRPC's buffer go.
  let names: string[] | undefined;
  Object.defineProperty(msg, field, {
    enumerable: true,
    configurable: true,
    get: () => (names ??= fromBinary(DiscoveryRequestSchema, msg.namesBytes).resourceNames),
    set: (v: string[]) => {
      names = v;
    },
  });
  return msg;
}

/**
 * Settles a request's names when it arrives: the shared list equal to them (`current`, the list
 * the stream's watch holds, when the bytes are the same, as in an ACK; else the interned one), and
 * its bytes in place of the request's. The request's own bytes are a view of gRPC's whole message
 * (an EDS request or ACK is about 50 KB of names): a request waiting in its stream's queue would
 * otherwise keep that buffer alive, and at 2000 streams behind the push throttle that was 100 MB.
 */
export function shareNames(req: WireNames, current: RequestedNames | undefined): void {
  if (req.namesBytes.length === 0 || req.requested) return;
  const requested = current && sameBytes(req.namesBytes, current.bytes) ? current : internNames(req.namesBytes, () => fromBinary(DiscoveryRequestSchema, req.namesBytes).resourceNames);
  req.requested = requested;
  req.namesBytes = requested.bytes;
}

/** The resource_names entries of a list of names, as a DiscoveryRequest encodes them. */
export function encodeNames(names: readonly string[]): Uint8Array {
  return toBinary(DiscoveryRequestSchema, create(DiscoveryRequestSchema, { resourceNames: [...names] }));
}

export function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  return a === b || (a.length === b.length && Buffer.compare(a, b) === 0);
}

const interned = new LRUCache<string, RequestedNames>({ max: SUBSCRIPTIONS_SIZE });

/**
 * The shared RequestedNames of a list given by its wire bytes (`decode` gives the names when the
 * list is new). Equal bytes are equal lists: the table is looked up by a hash of the bytes and the
 * bytes compared.
 */
export function internNames(bytes: Uint8Array, decode: () => readonly string[]): RequestedNames {
  const key = createHash('sha256').update(bytes).digest('base64url');
  const hit = interned.get(key);
  if (hit && sameBytes(hit.bytes, bytes)) return hit;
  const list = decode();
  const named = new Set(list);
  const hasWildcard = named.delete('*');
  // A copy: the request's bytes are a view of gRPC's whole message buffer.
  const names: RequestedNames = { bytes: new Uint8Array(bytes), list, named, hasWildcard };
  interned.set(key, names);
  return names;
}

const internedSets = new LRUCache<string, { readonly text: string; readonly set: ReadonlySet<string> }>({ max: SUBSCRIPTIONS_SIZE });

/**
 * The shared set equal to `names`, in the same order (a Delta watch's names after a change): streams
 * that made the same subscriptions share one set. Never change the returned set in place.
 */
export function internNameSet(names: ReadonlySet<string>): ReadonlySet<string> {
  let text = '';
  for (const n of names) text += `${n}\0`;
  const key = createHash('sha256').update(text).digest('base64url');
  const hit = internedSets.get(key);
  if (hit && hit.text === text) return hit.set;
  internedSets.set(key, { text, set: names });
  return names;
}

const deltaNamed = new WeakMap<RequestedNames, ReadonlySet<string>>();

/**
 * A Delta watch's first names (a requested list without `*`), as the set shared with the watches
 * that reached the same names by increments (internNameSet), looked up once per distinct list.
 */
export function internedNamed(requested: RequestedNames): ReadonlySet<string> {
  let set = deltaNamed.get(requested);
  if (!set) deltaNamed.set(requested, (set = internNameSet(requested.named)));
  return set;
}
