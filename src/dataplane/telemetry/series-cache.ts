// The metric series of the streams a stats filter has seen, by what their labels are computed
// from: a stream like one before it (same peer, route, cluster, principals, code, flags) reuses
// that one's counters and histograms rather than computing 25 labels and four stat names again.
// Bounded: past the limit it starts over (the stats themselves stay in the store).
import type { StatCounter } from '../stats.js';
import type { StatHistogram } from '../histograms.js';
import type { StreamFacts } from './standard-labels.js';
import type { WorkloadMetadata } from './workload-metadata.js';

/** The stats one HTTP series records into; a metric an override drops has none. */
export interface HttpSeries {
  readonly requests: StatCounter | undefined;
  readonly duration: StatHistogram | undefined;
  readonly requestBytes: StatHistogram | undefined;
  readonly responseBytes: StatHistogram | undefined;
}

const MAX_SERIES = 10_000;

/** Peers are decoded once per distinct header (peer-metadata.ts): the same object stands for the same peer. */
const peerIds = new WeakMap<WorkloadMetadata, number>();
let nextPeerId = 1;
function peerId(peer: WorkloadMetadata | undefined): number {
  if (!peer) return 0;
  let id = peerIds.get(peer);
  if (id === undefined) peerIds.set(peer, (id = nextPeerId++));
  return id;
}

function keyOf(f: StreamFacts): string {
  return `${peerId(f.peer)}|${f.authority ?? ''}|${f.routeName ?? ''}|${f.clusterName ?? ''}|${f.peerSan}|${f.localSan}|${f.protocol}|${f.responseCode ?? ''}|${f.grpcStatus ?? ''}|${f.responseFlags}`;
}

export class SeriesCache {
  private readonly byKey = new Map<string, HttpSeries>();

  constructor(private readonly make: (f: StreamFacts) => HttpSeries) {}

  of(f: StreamFacts): HttpSeries {
    const key = keyOf(f);
    let s = this.byKey.get(key);
    if (!s) {
      if (this.byKey.size >= MAX_SERIES) this.byKey.clear();
      this.byKey.set(key, (s = this.make(f)));
    }
    return s;
  }
}
