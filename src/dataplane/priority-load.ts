// How a cluster's load is spread over its priority levels, as Envoy's load balancer does it
// (arch_overview "Priority levels" and "Panic threshold"): each level's health is its share of
// healthy hosts times the overprovisioning factor, capped at 100 %; the load goes to the best
// levels first as far as their health carries it, and is scaled up when all levels together are
// below 100 %. A level whose share of healthy hosts is under the panic threshold while the whole
// cluster is short of 100 % is in panic: its requests go to all of its hosts, healthy or not. When
// every level is, the load follows the levels' host counts. Pure; degraded hosts count as unhealthy.

/** One priority level: how many hosts it has, and how many of them are healthy now. */
export interface LevelCount {
  readonly hosts: number;
  readonly healthy: number;
}

export interface PriorityLoad {
  /** Percent of requests per level, summing to 100 (all on the first level when no host is healthy and panic is off). */
  readonly load: readonly number[];
  /** Per level: in panic (load balanced over all of its hosts). */
  readonly panic: readonly boolean[];
}

/**
 * The load per level; `overprovisioning` is ClusterLoadAssignment.policy.overprovisioning_factor
 * (140 = 1.4), `panicThreshold` common_lb_config.healthy_panic_threshold in percent (0 = never).
 */
export function priorityLoad(levels: readonly LevelCount[], overprovisioning: number, panicThreshold: number): PriorityLoad {
  const health = levelHealth(levels, overprovisioning);
  const total = Math.min(100, health.reduce((a, b) => a + b, 0));
  const load = levels.map(() => 0);
  const panic = levels.map(() => false);
  if (levels.length === 0) return { load, panic };
  if (total === 0 && panicThreshold === 0) {
    // Nothing healthy and panic off: no host is picked, wherever the load goes.
    load[0] = 100;
    return { load, panic };
  }
  if (total > 0) distribute(health, total, load);
  if (total < 100) levels.forEach((l, i) => (panic[i] = (l.hosts === 0 ? 0 : (100 * l.healthy) / l.hosts) < panicThreshold));
  if (panic.every(Boolean)) return { load: loadInTotalPanic(levels), panic };
  return { load, panic };
}

/** Each level's health: its share of healthy hosts times the overprovisioning factor, capped at 100. */
function levelHealth(levels: readonly LevelCount[], overprovisioning: number): number[] {
  return levels.map((l) => (l.hosts === 0 ? 0 : Math.min(100, Math.floor((overprovisioning * l.healthy) / l.hosts))));
}

/** Fills `load` from the levels' health (total > 0): the best levels first as far as their health carries. */
function distribute(health: readonly number[], total: number, load: number[]): void {
  let remaining = 100;
  let first = -1;
  health.forEach((h, i) => {
    load[i] = Math.min(remaining, Math.floor((h * 100) / total));
    remaining -= load[i]!;
    if (load[i]! > 0 && first < 0) first = i;
  });
  // What rounding left over goes to the best level that has any.
  load[first]! += remaining;
}

/**
 * The load a retry gets under the previous_priorities retry priority: the levels in `excluded`
 * (indexes) count as having no health, the others share the load as above. Undefined when that
 * leaves no health (every healthy level excluded): the retry takes the original load, as Envoy.
 */
export function loadExcluding(levels: readonly LevelCount[], overprovisioning: number, excluded: ReadonlySet<number>): number[] | undefined {
  const health = levelHealth(levels, overprovisioning).map((h, i) => (excluded.has(i) ? 0 : h));
  const total = Math.min(100, health.reduce((a, b) => a + b, 0));
  if (total === 0) return undefined;
  const load = levels.map(() => 0);
  distribute(health, total, load);
  return load;
}

/** Every level in panic: the load by the levels' shares of all hosts, the rounding to the first non-empty one. */
function loadInTotalPanic(levels: readonly LevelCount[]): number[] {
  const hosts = levels.reduce((a, l) => a + l.hosts, 0);
  const load = levels.map(() => 0);
  if (hosts === 0) {
    load[0] = 100;
    return load;
  }
  let remaining = 100;
  levels.forEach((l, i) => {
    load[i] = Math.floor((100 * l.hosts) / hosts);
    remaining -= load[i]!;
  });
  load[levels.findIndex((l) => l.hosts > 0)]! += remaining;
  return load;
}

/** The level a request goes to, for a roll in [0, 100). */
export function choosePriority(load: readonly number[], roll: number): number {
  let upTo = 0;
  for (let i = 0; i < load.length; i++) {
    upTo += load[i]!;
    if (roll < upTo) return i;
  }
  return 0;
}
