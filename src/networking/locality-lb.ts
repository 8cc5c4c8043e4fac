// Locality failover, as the Go mesh's localityLbSetting: a client's endpoints get EDS priorities by
// how near they are to it (same region, zone and subzone first, then same zone, same region, other
// regions), or by which of the failoverPriority labels they share with it, and the proxy's load
// balancer moves requests down those levels as the nearer ones become unhealthy. Pure: endpoints
// and the client in, each endpoint's priority out.
import type { Locality } from '../model/service.js';

/** A region the clients of `from` fail over to before any other. */
export interface LocalityFailover {
  readonly from: string;
  readonly to: string;
}

/** Clients in `from` send each matching locality of `to` its share (percent) of their requests. */
export interface LocalityDistribute {
  readonly from: string;
  readonly to: Readonly<Record<string, number>>;
}

/** DestinationRule `trafficPolicy.loadBalancer.localityLbSetting`, and the mesh config's. */
export interface LocalityLbSetting {
  readonly enabled?: boolean;
  readonly failover?: readonly LocalityFailover[];
  readonly failoverPriority?: readonly string[];
  readonly distribute?: readonly LocalityDistribute[];
}

/** The mesh's default: enabled, failover by locality. */
export const DEFAULT_LOCALITY_LB: LocalityLbSetting = { enabled: true };

/** The setting in effect: the rule's unless it turns locality balancing off; else the mesh's, unless off. */
export function effectiveLocalityLb(mesh: LocalityLbSetting | undefined, rule: LocalityLbSetting | undefined): LocalityLbSetting | undefined {
  if (rule) return rule.enabled === false ? undefined : rule;
  return mesh?.enabled === false ? undefined : mesh;
}

/**
 * Whether failover applies to a cluster: a setting in effect without `distribute` (weights, not
 * priorities), and outlier detection on the cluster, without which a proxy never finds the nearer
 * endpoints unhealthy and never moves down (as the Go mesh).
 */
export function failoverApplies(setting: LocalityLbSetting | undefined, outlierDetection: unknown): setting is LocalityLbSetting {
  return setting !== undefined && (setting.distribute?.length ?? 0) === 0 && outlierDetection !== undefined;
}

/** 0: same region, zone and subzone; 1: same zone; 2: same region; 3: another region. */
export function localityPriority(client: Locality, endpoint: Locality): number {
  if (client.region !== endpoint.region) return 3;
  if (client.zone !== endpoint.zone) return 2;
  return client.subZone === endpoint.subZone ? 0 : 1;
}

/** What failover reads of the client and of each endpoint. */
export interface FailoverParty {
  readonly locality: Locality;
  readonly labels: Readonly<Record<string, string>>;
}

/**
 * Each endpoint's priority, 0 (nearest) to N without gaps. With failoverPriority, by the first of
 * its labels (`label` or `label=value`, the value then standing for the client's) an endpoint does
 * not share with the client: sharing all is 0, differing at the first of n labels is n; `failover`
 * then orders within those. Without it, by locality, and a region named as `to` for the client's
 * region comes before the other regions.
 */
export function failoverPriorities(client: FailoverParty, endpoints: readonly FailoverParty[], setting: LocalityLbSetting): number[] {
  // A client without labels gets no label priorities (as the Go mesh), and then none by locality either unless failover is given.
  const labelled = (setting.failoverPriority?.length ?? 0) > 0;
  const byLabels = labelled && Object.keys(client.labels).length > 0 ? labelPriorities(client, endpoints, setting.failoverPriority!) : undefined;
  const byLocality = !labelled || (setting.failover?.length ?? 0) > 0 ? endpoints.map((e) => regionFailover(client.locality, e.locality, setting.failover ?? [])) : undefined;
  // Labels first, locality within (at most 5 locality levels, 0-4).
  const raw = endpoints.map((_, i) => (byLabels?.[i] ?? 0) * 5 + (byLocality?.[i] ?? 0));
  const levels = [...new Set(raw)].sort((a, b) => a - b);
  return raw.map((p) => levels.indexOf(p));
}

function regionFailover(client: Locality, endpoint: Locality, failover: readonly LocalityFailover[]): number {
  const p = localityPriority(client, endpoint);
  if (p !== 3) return p;
  const rule = failover.find((f) => f.from === client.region);
  return rule && endpoint.region !== rule.to ? 4 : 3;
}

function labelPriorities(client: FailoverParty, endpoints: readonly FailoverParty[], labels: readonly string[]): number[] {
  const wanted = labels.map((l) => {
    const eq = l.indexOf('=');
    return eq < 0 ? { label: l, value: client.labels[l] } : { label: l.slice(0, eq), value: l.slice(eq + 1) };
  });
  return endpoints.map((e) => {
    const j = wanted.findIndex((w) => w.value !== e.labels[w.label]);
    return j < 0 ? 0 : wanted.length - j;
  });
}

/**
 * Whether a cluster balances by locality weight (CDS common_lb_config.locality_weighted_lb_config),
 * as the Go mesh sets it: for `distribute`, or for failover given as a list (regions or labels).
 */
export function localityWeighted(setting: LocalityLbSetting | undefined, outlierDetection: unknown): boolean {
  if (!setting) return false;
  if ((setting.distribute?.length ?? 0) > 0) return true;
  return outlierDetection !== undefined && ((setting.failover?.length ?? 0) > 0 || (setting.failoverPriority?.length ?? 0) > 0);
}

/** `region/zone/subzone` of a rule against a locality: `*` or a missing part matches anything (the region must be given). */
export function localityMatches(locality: Locality, rule: string): boolean {
  const [region = '', zone = '', subZone = ''] = rule.split('/');
  const part = (want: string, have: string, optional: boolean) => want === '*' || (optional && want === '') || want === have;
  return part(region, locality.region, false) && part(zone, locality.zone, true) && part(subZone, locality.subZone, true);
}

/** A locality group of a load assignment as `distribute` reads it. */
export interface WeightedLocality {
  readonly locality: Locality;
  /** Its load_balancing_weight (the sum of its endpoints' weights). */
  readonly weight: number;
}

/**
 * The new weight of each locality group under `distribute` (the first entry whose `from` matches the
 * client), 0 for a group that no `to` names (its endpoints are left out); undefined when no entry is
 * for this client. A `to` matching several groups shares its percent by their weights, rounded up;
 * a share of 0 keeps the group's own weight (as the Go mesh).
 */
export function distributedWeights(client: Locality, groups: readonly WeightedLocality[], distribute: readonly LocalityDistribute[]): number[] | undefined {
  const rule = distribute.find((d) => localityMatches(client, d.from));
  if (!rule) return undefined;
  const weights = groups.map(() => 0);
  const unmatched = new Set(groups.map((_, i) => i));
  for (const [to, percent] of Object.entries(rule.to)) {
    const matched = [...unmatched].filter((i) => localityMatches(groups[i]!.locality, to));
    const total = matched.reduce((sum, i) => sum + groups[i]!.weight, 0);
    for (const i of matched) {
      unmatched.delete(i);
      const share = total > 0 ? (groups[i]!.weight * percent) / total : 0;
      weights[i] = share > 0 ? Math.ceil(share) : groups[i]!.weight;
    }
  }
  return weights;
}
