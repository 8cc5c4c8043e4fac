// Per-stream xDS state and the protocol's bookkeeping rules, without I/O.
//
// A Connection is one ADS stream (SotW or Delta) of one proxy. For each type URL it has a Watch:
// what the proxy subscribed to, what was last sent (version, nonce), what the proxy last acked, and
// its last NACK. The server (server.ts) feeds requests in and sends what these methods decide.
import { createHash } from 'node:crypto';
import type { Any } from '@bufbuild/protobuf/wkt';
import type { Status } from '../gen/google/rpc/status_pb.js';
import type { ProxyInfo, Subscription } from './generator.js';
import type { ResourceSet } from './cache.js';
import { isWildcardType, shortTypeName } from '../envoy/types.js';
import { encodeNames, internedNamed, internNames, internNameSet, sameBytes, type RequestedNames } from './subscriptions.js';

export const WILDCARD = '*';

export interface VersionedResource {
  readonly name: string;
  readonly version: string;
  readonly resource: Any;
}

/** A response as the proxy would hold it once applied. */
export interface Delivery {
  /** SotW version_info, or Delta system_version_info. */
  readonly version: string;
  readonly nonce: string;
  readonly time: Date;
  /** SotW: the response's resources. Delta: every resource the proxy holds from this stream after it. */
  readonly resources: ReadonlyMap<string, VersionedResource>;
}

export interface NackRecord {
  readonly nonce: string;
  /** The version the proxy stays on (its request's version_info; Delta: the last acked one). */
  readonly keptVersion: string;
  /** The version it rejected. */
  readonly rejectedVersion: string;
  readonly time: Date;
  readonly code: number;
  readonly message: string;
}

/**
 * One version for a list of resources: equal lists get equal versions, across streams and restarts.
 * The list's order counts (sorting 1000s of names per proxy per push costs more than all the rest of
 * the version work); generators return resources in a deterministic order, and a mere reordering
 * only costs one redundant response.
 */
export function setVersion(resources: Iterable<VersionedResource>): string {
  // One update() per list: per-resource calls into the hash cost more than the hashing itself.
  let text = '';
  for (const r of resources) text += `${r.name}\0${r.version}\0`;
  return createHash('sha256').update(text).digest('base64url').slice(0, 16);
}

export type ReplyKind = 'ack' | 'nack' | 'stale';

/** JSON-ready views of the state, for the debug endpoints (syncz, connections, adsz). */
export interface DeliveryStatus {
  readonly version: string;
  readonly nonce: string;
  readonly time: string;
  readonly resourceNames: string[];
}

export interface WatchStatus {
  readonly typeUrl: string;
  /** lds, rds, cds, eds, sds, ... */
  readonly type: string;
  readonly wildcard: boolean;
  readonly names: string[];
  readonly sent?: DeliveryStatus;
  readonly acked?: DeliveryStatus;
  /** SYNCED: the last response is acked; NACKED: the proxy rejected it; STALE: no reply yet. */
  readonly state: 'SYNCED' | 'NACKED' | 'STALE' | 'NOT_SENT';
  readonly lastNack?: Omit<NackRecord, 'time'> & { readonly time: string };
}

export interface ConnectionStatus {
  readonly connectionId: string;
  readonly proxyId: string;
  readonly peer: string;
  readonly protocol: 'sotw' | 'delta';
  readonly connectedAt: string;
  readonly watches: WatchStatus[];
}

function deliveryStatus(d: Delivery | undefined): DeliveryStatus | undefined {
  return d && { version: d.version, nonce: d.nonce, time: d.time.toISOString(), resourceNames: [...d.resources.keys()] };
}

export class Watch implements Subscription {
  wildcard: boolean;
  /** Never changed in place: a SotW watch shares its set with the streams that asked for the same names. */
  names: ReadonlySet<string>;
  /** The last response sent (SotW: the only one whose nonce is current). */
  sent?: Delivery;
  acked?: Delivery;
  /** The latest NACK, kept after later ACKs for the debug view. */
  lastNack?: NackRecord;
  /** Whether the proxy's latest reply for this type was a NACK. */
  rejecting = false;
  /** SotW: the resource names of the request that set `wildcard` and `names` (shared, see subscriptions.ts). */
  requested?: RequestedNames;
  /**
   * Delta: name -> version of what the proxy holds, kept only while that is not exactly `deltaBase`
   * (initial_resource_versions, an unsubscription): a stream holding a shared set keeps no map of
   * its own (2000 streams holding 1000 clusters each would be two million entries).
   */
  private versions?: Map<string, string>;
  /**
   * Delta: whether clientVersions names resources the proxy got elsewhere (initial_resource_versions)
   * that this stream has not sent it since; until then its deliveries cannot share the generated set.
   */
  heldFromElsewhere = false;
  /**
   * Delta: the generated set clientVersions is equal to (set by each response, which makes it so),
   * so that the next response is a diff between two shared sets rather than a comparison of every
   * resource per stream; dropped when the proxy unsubscribes from something.
   */
  deltaBase?: ResourceSet;
  /** Delta: responses not yet acked or nacked, oldest first, by nonce. */
  readonly pending = new Map<string, Delivery>();

  /** Delta: name -> version of what the proxy holds (initial_resource_versions, then our sends), made from deltaBase when first asked for. */
  get clientVersions(): Map<string, string> {
    if (!this.versions) {
      this.versions = new Map();
      for (const r of this.deltaBase?.resources.values() ?? []) this.versions.set(r.name, r.version);
    }
    return this.versions;
  }

  /** Delta: the proxy unsubscribed from something: its versions are kept per stream until a response makes them a set again. */
  dropBase(): void {
    this.versions = this.clientVersions; // made from the set while it still stands for them
    this.deltaBase = undefined;
  }

  /** Delta: whether the proxy holds nothing of this type (from this stream or, as it said, elsewhere). */
  holdsNothing(): boolean {
    return this.versions ? this.versions.size === 0 : this.deltaBase === undefined;
  }

  /** Delta: whether the proxy holds `name` from this stream (or from elsewhere, as it said). */
  holds(name: string): boolean {
    return this.versions ? this.versions.has(name) : (this.deltaBase?.resources.has(name) ?? false);
  }

  /** Delta: a response made the proxy hold exactly `set`; unless it also holds resources from elsewhere, the set stands for its versions. */
  holdsExactly(set: ResourceSet): void {
    this.deltaBase = set;
    if (!this.heldFromElsewhere) this.versions = undefined;
  }

  constructor(
    readonly typeUrl: string,
    wildcard: boolean,
    names: Iterable<string>,
  ) {
    this.wildcard = wildcard;
    this.names = names instanceof Set ? names : new Set(names);
  }

  syncState(): WatchStatus['state'] {
    if (!this.sent) return 'NOT_SENT';
    if (this.lastNack?.nonce === this.sent.nonce) return 'NACKED';
    return this.acked?.nonce === this.sent.nonce ? 'SYNCED' : 'STALE';
  }

  status(): WatchStatus {
    return {
      typeUrl: this.typeUrl,
      type: shortTypeName(this.typeUrl),
      wildcard: this.wildcard,
      names: [...this.names],
      sent: deliveryStatus(this.sent),
      acked: deliveryStatus(this.acked),
      state: this.syncState(),
      lastNack: this.lastNack && { ...this.lastNack, time: this.lastNack.time.toISOString() },
    };
  }

  nack(nonce: string, keptVersion: string, rejected: Delivery | undefined, detail: Status): void {
    this.lastNack = {
      nonce,
      keptVersion,
      rejectedVersion: rejected?.version ?? '',
      time: new Date(),
      code: detail.code,
      message: detail.message,
    };
    this.rejecting = true;
  }

  ack(delivery: Delivery): void {
    this.acked = delivery;
    this.rejecting = false;
  }

  /**
   * Delta: settles the reply to `nonce`. Responses older than it were settled by earlier replies
   * (a proxy answers each response, in order), so they are dropped with it.
   */
  settleDelta(nonce: string): Delivery | undefined {
    const delivery = this.pending.get(nonce);
    if (!delivery) return undefined;
    for (const key of this.pending.keys()) {
      this.pending.delete(key);
      if (key === nonce) break;
    }
    return delivery;
  }
}

/** A SotW request's effect on a watch, as the protocol defines it. */
export type SotwDecision =
  | { kind: 'respond' } // new watch, fresh request, or changed names: answer now
  | { kind: 'ack' }
  | { kind: 'nack' }
  | { kind: 'stale' } // nonce of a superseded response: ignore
  | { kind: 'unsubscribe' } // named type with no names left
  | { kind: 'ignore' }; // nothing to do (e.g. a first request naming nothing)

export interface SotwRequest {
  readonly typeUrl: string;
  readonly versionInfo: string;
  readonly resourceNames: readonly string[];
  /** resource_names as wire bytes, when the transport kept them (decodeSotwRequest): compared without decoding. */
  readonly namesBytes?: Uint8Array;
  /** The shared list equal to namesBytes, when the transport settled it (shareNames). */
  readonly requested?: RequestedNames;
  readonly responseNonce: string;
  readonly errorDetail?: Status;
}

function sameNames(a: ReadonlySet<string>, b: ReadonlySet<string>): boolean {
  return a === b || (a.size === b.size && [...a].every((n) => b.has(n)));
}

function sotwWildcard(typeUrl: string, names: RequestedNames): boolean {
  return isWildcardType(typeUrl) && (names.list.length === 0 || names.hasWildcard);
}

export interface DeltaRequest {
  readonly typeUrl: string;
  readonly resourceNamesSubscribe: readonly string[];
  /** resource_names_subscribe as wire bytes, when the transport kept them (decodeDeltaRequest). */
  readonly namesBytes?: Uint8Array;
  /** The shared list equal to namesBytes, when the transport settled it (shareNames). */
  readonly requested?: RequestedNames;
  readonly resourceNamesUnsubscribe: readonly string[];
  readonly initialResourceVersions: Readonly<Record<string, string>>;
  readonly responseNonce: string;
  readonly errorDetail?: Status;
}

/** What a Delta request did: how its nonce was settled, and which subscriptions it added. */
export interface DeltaDecision {
  readonly reply?: ReplyKind;
  /** The watch is new or gained names/wildcard: answer now. */
  readonly respond: boolean;
  /** Names newly subscribed by this request (told "removed" if they do not exist). */
  readonly added: readonly string[];
}

export class Connection {
  readonly watches = new Map<string, Watch>();
  readonly connectedAt = new Date();
  /** Serializes request handling and pushes, so each stream sees one ordered conversation. */
  private queue: Promise<void> = Promise.resolve();
  closed = false;

  constructor(
    readonly proxy: ProxyInfo,
    readonly protocol: 'sotw' | 'delta',
  ) {}

  /** Runs `task` after everything queued before it; a failed task does not stop later ones. */
  enqueue(task: () => Promise<void>): Promise<void> {
    const run = this.queue.then(task);
    this.queue = run.catch(() => undefined);
    return run;
  }

  status(): ConnectionStatus {
    return {
      connectionId: this.proxy.connectionId,
      proxyId: this.proxy.id,
      peer: this.proxy.peer,
      protocol: this.protocol,
      connectedAt: this.connectedAt.toISOString(),
      watches: [...this.watches.values()].map((w) => w.status()),
    };
  }

  /** Whether some watch's last response has no reply (ACK or NACK) yet. */
  awaitsReply(): boolean {
    for (const w of this.watches.values()) if (w.syncState() === 'STALE') return true;
    return false;
  }

  /** Applies a SotW request to the watch of its type and says what the server must do. */
  applySotw(req: SotwRequest): SotwDecision {
    let w = this.watches.get(req.typeUrl);
    const bytes = req.namesBytes ?? encodeNames(req.resourceNames);
    if (w && w.requested !== undefined && sameBytes(bytes, w.requested.bytes) && (req.responseNonce === '' || req.responseNonce === w.sent?.nonce) && !req.errorDetail) {
      // The usual ACK: the same list as the request that set the subscription, nothing to decode or rebuild.
      if (req.responseNonce === '') return { kind: 'respond' };
      if (w.sent) w.ack(w.sent);
      return { kind: 'ack' };
    }
    const requested = req.requested ?? internNames(bytes, () => req.resourceNames);
    if (!w) {
      // First request for the type on this stream (a nonce here means a reconnect: answer anyway,
      // the proxy may hold config from another server).
      if (requested.list.length === 0 && !isWildcardType(req.typeUrl)) return { kind: 'ignore' };
      w = new Watch(req.typeUrl, sotwWildcard(req.typeUrl, requested), requested.named);
      w.requested = requested;
      this.watches.set(req.typeUrl, w);
      return { kind: 'respond' };
    }
    if (req.responseNonce !== '' && req.responseNonce !== w.sent?.nonce) return { kind: 'stale' };
    if (req.errorDetail) {
      w.nack(req.responseNonce, req.versionInfo, w.sent, req.errorDetail);
      return { kind: 'nack' };
    }
    const wildcard = sotwWildcard(req.typeUrl, requested);
    const named = requested.named;
    const changed = wildcard !== w.wildcard || !sameNames(named, w.names);
    if (requested.list.length === 0 && !isWildcardType(req.typeUrl)) {
      this.watches.delete(req.typeUrl);
      return { kind: 'unsubscribe' };
    }
    if (changed) {
      w.wildcard = wildcard;
      w.names = named;
    }
    w.requested = requested;
    if (req.responseNonce === '') return { kind: 'respond' };
    if (w.sent) w.ack(w.sent);
    return changed ? { kind: 'respond' } : { kind: 'ack' };
  }

  /** Applies a Delta request: settles its nonce, then its subscription changes (always applied). */
  applyDelta(req: DeltaRequest): DeltaDecision {
    let w = this.watches.get(req.typeUrl);
    if (!w) {
      // Shared with the streams that subscribed to the same list first (see subscriptions.ts).
      const requested = req.requested ?? internNames(req.namesBytes ?? encodeNames(req.resourceNamesSubscribe), () => req.resourceNamesSubscribe);
      const wildcard = isWildcardType(req.typeUrl) && (requested.list.length === 0 || requested.hasWildcard);
      w = new Watch(req.typeUrl, wildcard, internedNamed(requested));
      for (const [name, version] of Object.entries(req.initialResourceVersions)) w.clientVersions.set(name, version);
      w.heldFromElsewhere = w.clientVersions.size > 0;
      this.watches.set(req.typeUrl, w);
      return { respond: wildcard || w.names.size > 0, added: [...w.names] };
    }
    const reply = req.responseNonce === '' ? undefined : this.settleDelta(w, req);
    if (req.resourceNamesUnsubscribe.length === 0 && req.resourceNamesSubscribe.length === 0) return { reply, respond: false, added: [] };
    if (req.resourceNamesUnsubscribe.length > 0) w.dropBase();
    // A new set rather than a change in place (see Watch.names).
    const names = new Set(w.names);
    for (const name of req.resourceNamesUnsubscribe) {
      if (name === WILDCARD) {
        w.wildcard = false;
        for (const held of w.clientVersions.keys()) if (!names.has(held)) w.clientVersions.delete(held);
      } else {
        names.delete(name);
        w.clientVersions.delete(name);
      }
    }
    const added: string[] = [];
    let becameWildcard = false;
    for (const name of req.resourceNamesSubscribe) {
      if (name === WILDCARD) {
        becameWildcard ||= !w.wildcard;
        w.wildcard = true;
      } else if (!names.has(name)) {
        names.add(name);
        added.push(name);
      }
    }
    w.names = internNameSet(names);
    return { reply, respond: becameWildcard || added.length > 0, added };
  }

  private settleDelta(w: Watch, req: DeltaRequest): ReplyKind {
    const delivery = w.settleDelta(req.responseNonce);
    if (!delivery) return 'stale';
    if (req.errorDetail) {
      w.nack(req.responseNonce, w.acked?.version ?? '', delivery, req.errorDetail);
      return 'nack';
    }
    w.ack(delivery);
    return 'ack';
  }
}
