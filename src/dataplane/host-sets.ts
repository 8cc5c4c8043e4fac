// What a cluster load balances over right now: per priority level, the hosts a request may go to
// (its healthy hosts not ejected by outlier detection, or all of its hosts while the level is in
// panic) and the share of requests each level gets (priority-load.ts). Derived from the spec and the
// ejections, and kept until either changes or an ejection ends, so a request pays for none of it.
import type { ClusterSpec, WeightedEndpoint } from './cluster-spec.js';
import { equalWeights } from './cluster-spec.js';
import type { OutlierDetector } from './cluster-health.js';
import { choosePriority, loadExcluding, priorityLoad, type LevelCount } from './priority-load.js';
import { RoundRobin } from './round-robin.js';

export interface HostSet {
  readonly endpoints: readonly WeightedEndpoint[];
  /** All of `endpoints` have one weight (plain round robin). */
  readonly equalWeights: boolean;
  /** The level is in panic: `endpoints` are all of its hosts, healthy or not. */
  readonly panic: boolean;
  /** With locality_weighted_lb_config (outside panic): the localities a request may go to, by effective weight, and the round robin over them. */
  readonly localities?: { readonly choices: readonly LocalityChoice[]; readonly order: RoundRobin };
}

/** One locality of a level: its effective weight (locality weight x availability) and its healthy hosts. */
export interface LocalityChoice {
  readonly weight: number;
  readonly endpoints: readonly WeightedEndpoint[];
  readonly equalWeights: boolean;
  /** Round robin over its hosts. */
  readonly order: RoundRobin;
}

export interface HostSets {
  /** One per priority level, best first. */
  readonly sets: readonly HostSet[];
  /** Percent of requests per level. */
  readonly load: readonly number[];
  /** Hosts healthy and not ejected, over all levels (membership_healthy). */
  readonly healthy: number;
  /** Per level: its priority, and what its health is computed from (a retry's load, chooseHostSet). */
  readonly priorities: readonly number[];
  readonly counts: readonly LevelCount[];
  readonly overprovisioning: number;
}

const NONE: HostSets = { sets: [], load: [], healthy: 0, priorities: [], counts: [], overprovisioning: 0 };

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
  const counts = spec.levels.map((l, i) => ({ hosts: l.hosts.length, healthy: healthyPerLevel[i]!.length }));
  const { load, panic } = priorityLoad(counts, spec.overprovisioningFactor, spec.panicThreshold);
  const sets = spec.levels.map((level, i): HostSet => {
    // In panic a level balances over all of its hosts, localities aside (as Envoy).
    if (panic[i]) return { endpoints: level.hosts, equalWeights: equalWeights(level.hosts), panic: true };
    const healthy = healthyPerLevel[i]!;
    const localities = spec.localityWeighted ? localityChoices(level.hosts, healthy, spec.overprovisioningFactor) : undefined;
    return {
      endpoints: healthy,
      equalWeights: healthy === level.healthy ? level.equalWeights : equalWeights(healthy),
      panic: false,
      ...(localities ? { localities: { choices: localities, order: new RoundRobin() } } : {}),
    };
  });
  const healthy = healthyPerLevel.reduce((a, h) => a + h.length, 0);
  return { sets: { sets, load, healthy, priorities: spec.levels.map((l) => l.priority), counts, overprovisioning: spec.overprovisioningFactor }, validUntil };
}

/**
 * Envoy's locality-weighted balancing within a level: each locality's weight (its
 * load_balancing_weight; none = 0, no traffic) times its availability, min(1, overprovisioning x
 * healthy / hosts). Undefined when no locality has any: the level's healthy hosts then serve.
 */
function localityChoices(hosts: readonly WeightedEndpoint[], healthy: readonly WeightedEndpoint[], overprovisioning: number): LocalityChoice[] | undefined {
  const groups = new Map<string, { weight: number; hosts: number; healthy: WeightedEndpoint[] }>();
  for (const h of hosts) {
    const g = groups.get(h.locality) ?? groups.set(h.locality, { weight: h.localityWeight, hosts: 0, healthy: [] }).get(h.locality)!;
    g.hosts++;
  }
  for (const h of healthy) groups.get(h.locality)!.healthy.push(h);
  const choices = [...groups.values()]
    .map((g) => ({ weight: g.weight * Math.min(1, ((overprovisioning / 100) * g.healthy.length) / g.hosts), endpoints: g.healthy, equalWeights: equalWeights(g.healthy), order: new RoundRobin() }))
    .filter((c) => c.weight > 0 && c.endpoints.length > 0);
  return choices.length > 0 ? choices : undefined;
}

/**
 * The level a request goes to: by the load over a random roll, the only one without a roll. A
 * retry under previous_priorities passes the priorities it excludes (loadExcluding).
 */
export function chooseHostSet(hs: HostSets, excludedPriorities?: ReadonlySet<number>): HostSet | undefined {
  if (hs.sets.length <= 1) return hs.sets[0];
  const excluded = excludedPriorities?.size ? new Set(hs.priorities.flatMap((p, i) => (excludedPriorities.has(p) ? [i] : []))) : undefined;
  const load = (excluded && loadExcluding(hs.counts, hs.overprovisioning, excluded)) || hs.load;
  return hs.sets[choosePriority(load, Math.floor(Math.random() * 100))];
}
