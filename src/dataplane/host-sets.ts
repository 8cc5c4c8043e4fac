// What a cluster load balances over right now: per priority level, the hosts a request may go to
// (its healthy hosts not ejected by outlier detection, or all of its hosts while the level is in
// panic) and the share of requests each level gets (priority-load.ts). Derived from the spec and the
// ejections, and kept until either changes or an ejection ends, so a request pays for none of it.
import type { ClusterSpec, WeightedEndpoint } from './cluster-spec.js';
import { equalWeights } from './cluster-spec.js';
import type { OutlierDetector } from './cluster-health.js';
import { choosePriority, priorityLoad } from './priority-load.js';

export interface HostSet {
  readonly endpoints: readonly WeightedEndpoint[];
  /** All of `endpoints` have one weight (plain round robin). */
  readonly equalWeights: boolean;
  /** The level is in panic: `endpoints` are all of its hosts, healthy or not. */
  readonly panic: boolean;
}

export interface HostSets {
  /** One per priority level, best first. */
  readonly sets: readonly HostSet[];
  /** Percent of requests per level. */
  readonly load: readonly number[];
  /** Hosts healthy and not ejected, over all levels (membership_healthy). */
  readonly healthy: number;
}

const NONE: HostSets = { sets: [], load: [], healthy: 0 };

/** The host sets of a cluster, rebuilt when its spec or its ejections change. */
export class HostSetCache {
  private state?: { readonly spec: ClusterSpec; readonly version: number; readonly validUntil: number; readonly sets: HostSets };

  current(spec: ClusterSpec, outlier: OutlierDetector | undefined): HostSets {
    const st = this.state;
    if (st && st.spec === spec && st.version === (outlier?.version ?? 0) && (st.validUntil === Infinity || Date.now() < st.validUntil)) return st.sets;
    const now = Date.now();
    const { sets, validUntil } = build(spec, outlier, now);
    this.state = { spec, version: outlier?.version ?? 0, validUntil, sets };
    return sets;
  }
}

function build(spec: ClusterSpec, outlier: OutlierDetector | undefined, now: number): { sets: HostSets; validUntil: number } {
  if (spec.levels.length === 0) return { sets: NONE, validUntil: Infinity };
  let validUntil = Infinity;
  const healthyPerLevel = spec.levels.map((level) => {
    if (!outlier) return level.healthy;
    const kept = level.healthy.filter((e) => {
      const until = outlier.ejectedUntil(e);
      if (until <= now) return true;
      validUntil = Math.min(validUntil, until);
      return false;
    });
    return kept.length === level.healthy.length ? level.healthy : kept;
  });
  const { load, panic } = priorityLoad(
    spec.levels.map((l, i) => ({ hosts: l.hosts.length, healthy: healthyPerLevel[i]!.length })),
    spec.overprovisioningFactor,
    spec.panicThreshold,
  );
  const sets = spec.levels.map((level, i): HostSet => {
    if (panic[i]) return { endpoints: level.hosts, equalWeights: equalWeights(level.hosts), panic: true };
    const healthy = healthyPerLevel[i]!;
    return { endpoints: healthy, equalWeights: healthy === level.healthy ? level.equalWeights : equalWeights(healthy), panic: false };
  });
  return { sets: { sets, load, healthy: healthyPerLevel.reduce((a, h) => a + h.length, 0) }, validUntil };
}

/** The level a request goes to: by the load over a random roll, the only one without a roll. */
export function chooseHostSet(hs: HostSets): HostSet | undefined {
  if (hs.sets.length <= 1) return hs.sets[0];
  return hs.sets[choosePriority(hs.load, Math.floor(Math.random() * 100))];
}
