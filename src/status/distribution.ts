// Config distribution tracking (PILOT_ENABLE_CONFIG_DISTRIBUTION_TRACKING): for each config
// resource's generation, how many connected proxies hold config that includes it.
//
// Every PushContext the discovery server builds gets a stamp (1, 2, ...). A resource's generation
// is "in" every snapshot from the stamp where it first appeared. A stream's type is at stamp S when
// the proxy has ACKed what a generation at S produced, or when a generation at S produced exactly
// what it had ACKed (nothing needed sending). A push names the types a change may affect; a type
// no push has touched since a stream reached it is still current. A proxy is up to date with a
// resource when every type it subscribes to is at or past the resource's stamp. No I/O here.
import type { Kind } from '../api/types.js';
import { keyString } from '../config/store.js';
import type { DeliveryObserver } from '../xds/generator.js';

export interface TrackedResource {
  readonly kind: Kind;
  readonly namespace: string;
  readonly name: string;
  readonly generation: number;
}

export interface Progress {
  readonly resource: TrackedResource;
  /** Connected proxies whose config includes this generation. */
  readonly acked: number;
  /** Connected proxies that receive config. */
  readonly total: number;
}

interface Sent {
  readonly stamp: number;
  readonly version: string;
}

/** One stream's state for one type. */
interface TypeState {
  /** The newest stamp whose content for this type the proxy has ACKed (0: none yet). */
  synced: number;
  ackedVersion: string | undefined;
  /** The newest stamp that generated each version not yet ACKed. */
  generated: Map<string, number>;
  /** Responses in flight, by nonce. */
  inFlight: Map<string, Sent>;
}

interface Entry {
  readonly resource: TrackedResource;
  /** The first stamp whose snapshot held this generation. */
  readonly since: number;
  /** When every proxy first held it (ms), for the retention. */
  reconciledAt: number | undefined;
}

/** Generations remembered per stream and type while not ACKed: older ones are superseded anyway. */
const MAX_GENERATED = 16;

export class DistributionTracker implements DeliveryObserver {
  private current = 0;
  /** The last stamp at which a push could change each type; types never named: ALL_TYPES. */
  private readonly changedAt = new Map<string, number>();
  private allChangedAt = 0;
  private readonly entries = new Map<string, Entry>();
  private readonly streams = new Map<string, Map<string, TypeState>>();

  /**
   * @param retentionMs PILOT_DISTRIBUTION_HISTORY_RETENTION: a generation every proxy has held for
   *   this long is no longer tracked (its status stays as last written).
   * @param now the clock, in ms.
   */
  constructor(
    private readonly retentionMs: number,
    private readonly now: () => number = Date.now,
  ) {}

  stamp(): number {
    return this.current;
  }

  /**
   * A new snapshot holding `resources`, pushed for `types` (undefined: every type). Returns its stamp.
   * Resources gone from the config stop being tracked.
   */
  snapshot(resources: Iterable<TrackedResource>, types?: ReadonlySet<string>): number {
    const stamp = ++this.current;
    if (types === undefined) this.allChangedAt = stamp;
    else for (const t of types) this.changedAt.set(t, stamp);
    const seen = new Set<string>();
    for (const r of resources) {
      const key = keyString(r);
      seen.add(key);
      if (this.entries.get(key)?.resource.generation !== r.generation) this.entries.set(key, { resource: r, since: stamp, reconciledAt: undefined });
    }
    for (const key of this.entries.keys()) if (!seen.has(key)) this.entries.delete(key);
    return stamp;
  }

  generated(connectionId: string, typeUrl: string, stamp: number, version: string): void {
    const state = this.state(connectionId, typeUrl);
    if (version === state.ackedVersion) {
      state.synced = Math.max(state.synced, stamp);
      return;
    }
    state.generated.set(version, Math.max(stamp, state.generated.get(version) ?? 0));
    if (state.generated.size > MAX_GENERATED) state.generated.delete(state.generated.keys().next().value!);
  }

  sent(connectionId: string, typeUrl: string, nonce: string, version: string): void {
    const state = this.state(connectionId, typeUrl);
    const stamp = state.generated.get(version);
    // A send whose generation was not observed claims nothing.
    if (stamp !== undefined) state.inFlight.set(nonce, { stamp, version });
  }

  acked(connectionId: string, typeUrl: string, nonce: string): void {
    const state = this.streams.get(connectionId)?.get(typeUrl);
    const sent = state?.inFlight.get(nonce);
    if (!state || !sent) return;
    state.synced = Math.max(state.synced, sent.stamp);
    state.ackedVersion = sent.version;
    state.generated.clear();
    // Responses sent before this one are superseded by it.
    for (const n of state.inFlight.keys()) {
      state.inFlight.delete(n);
      if (n === nonce) break;
    }
  }

  /** A stream ended: its proxy no longer counts. */
  disconnected(connectionId: string): void {
    this.streams.delete(connectionId);
  }

  /** The tracked generations with how many proxies hold them; fully held ones drop out after the retention. */
  progress(): Progress[] {
    const positions = [...this.streams.values()].filter((types) => types.size > 0).map((types) => this.position(types));
    const now = this.now();
    const out: Progress[] = [];
    for (const [key, entry] of this.entries) {
      const acked = positions.filter((p) => p >= entry.since).length;
      if (acked < positions.length) entry.reconciledAt = undefined;
      else entry.reconciledAt ??= now;
      if (entry.reconciledAt !== undefined && now - entry.reconciledAt > this.retentionMs) {
        this.entries.delete(key);
        continue;
      }
      out.push({ resource: entry.resource, acked, total: positions.length });
    }
    return out;
  }

  /** The newest stamp a proxy's config is known to include: the least of its types'. */
  private position(types: Map<string, TypeState>): number {
    let least = Infinity;
    for (const [typeUrl, state] of types) {
      const changed = Math.max(this.allChangedAt, this.changedAt.get(typeUrl) ?? 0);
      least = Math.min(least, state.synced > 0 && state.synced >= changed ? this.current : state.synced);
    }
    return least;
  }

  private state(connectionId: string, typeUrl: string): TypeState {
    let types = this.streams.get(connectionId);
    if (!types) this.streams.set(connectionId, (types = new Map()));
    let state = types.get(typeUrl);
    if (!state) types.set(typeUrl, (state = { synced: 0, ackedVersion: undefined, generated: new Map(), inFlight: new Map() }));
    return state;
  }
}
