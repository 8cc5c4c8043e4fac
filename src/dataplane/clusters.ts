// The cluster manager behind the router and the TCP proxy: clusters from CDS (and the bootstrap's
// static clusters) with endpoints from their load_assignment (STATIC, STRICT_DNS, LOGICAL_DNS) or
// from EDS, load balancing (round robin, random, least request, ring hash, Maglev) over the healthy
// endpoints of the best priority, and a keep-alive connection pool per cluster with the cluster's
// connect timeout.
//
// Updates are two-phase so that a CDS or EDS response applies atomically: `prepare` validates and
// compiles everything (throwing ConfigError, which the xDS client turns into a NACK) without
// touching what serves traffic; `commit` swaps it in. Pools of clusters that survive an update are
// kept (their connections stay warm); the pools of removed clusters let in-flight requests finish.
import type { Cluster } from '../gen/envoy/config/cluster/v3/cluster_pb.js';
import type { ClusterLoadAssignment } from '../gen/envoy/config/endpoint/v3/endpoint_pb.js';
import type { UpstreamCluster } from './upstream-pools.js';
import { SecretManager } from './tls/secrets.js';
import { ConfigError } from '../envoy/config-error.js';
import { promName, statName, type StatName, type StatsStore, type StatSample } from './stats.js';
import { codeTags, ResponseStats } from './response-stats.js';
import { compileCluster, type ClusterSpec, type WeightedEndpoint } from './cluster-spec.js';
import { LiveCluster, type ClusterStats } from './live-cluster.js';
import { UpstreamCxStats } from './upstream-cx-stats.js';
import { RequestGauges } from './upstream-rq-stats.js';

export { compileCluster, socketAddressOf } from './cluster-spec.js';

/** How the router and the TCP proxy reach upstreams: by cluster name. */
export interface ClusterManager {
  /** undefined when no cluster of that name exists (the route's cluster_not_found_response_code). */
  get(name: string): UpstreamCluster | undefined;
}
/** The output of `prepare`: the complete next cluster set. */
export interface ClusterPlan {
  readonly specs: ReadonlyMap<string, ClusterSpec>;
}

export interface ClusterInfo {
  readonly name: string;
  readonly kind: ClusterSpec['kind'];
  readonly endpoints: readonly WeightedEndpoint[];
  /** Whether outlier detection has an endpoint ejected now. */
  readonly ejected: (e: WeightedEndpoint) => boolean;
  readonly message: Cluster;
  readonly static: boolean;
}

export class DynamicClusterManager implements ClusterManager {
  private readonly live = new Map<string, LiveCluster>();
  private readonly staticNames = new Set<string>();
  /** Removed clusters whose connections are still open: their bytes still count (openBytes). */
  private readonly removed = new Set<LiveCluster>();

  constructor(
    private readonly stats: StatsStore,
    private readonly secrets: SecretManager = new SecretManager(),
  ) {
    stats.addSource(() => this.gauges());
  }

  get(name: string): UpstreamCluster | undefined {
    return this.live.get(name);
  }

  /** Installs the bootstrap's static clusters; they never change and CDS cannot replace them. */
  addStatic(clusters: readonly Cluster[]): void {
    clusters.forEach((c, i) => {
      const spec = compileCluster(c, new Map(), `static_resources.clusters[${i}]`, { stats: this.stats, secrets: this.secrets });
      this.live.set(spec.name, new LiveCluster(spec, this.clusterStats(spec.name)));
      this.staticNames.add(spec.name);
    });
  }

  /** Validates and compiles the next set; throws ConfigError and changes nothing on a bad one. */
  prepare(clusters: readonly Cluster[], assignments: ReadonlyMap<string, ClusterLoadAssignment>): ClusterPlan {
    const specs = new Map<string, ClusterSpec>();
    clusters.forEach((c, i) => {
      const field = `cluster ${c.name || `[${i}]`}`;
      if (this.staticNames.has(c.name)) throw new ConfigError(`${field}.name`, 'a static cluster of the bootstrap has this name');
      if (specs.has(c.name)) throw new ConfigError(`${field}.name`, 'duplicate cluster name');
      specs.set(c.name, compileCluster(c, assignments, field, { stats: this.stats, secrets: this.secrets }));
    });
    return { specs };
  }

  /** Recompiles the current clusters against new EDS assignments. */
  prepareEndpoints(assignments: ReadonlyMap<string, ClusterLoadAssignment>): ClusterPlan {
    return this.prepare(this.dynamicMessages(), assignments);
  }

  commit(plan: ClusterPlan): void {
    for (const [name, c] of this.live) {
      if (this.staticNames.has(name) || plan.specs.has(name)) continue;
      c.retire();
      this.live.delete(name);
      this.removed.add(c);
    }
    for (const [name, spec] of plan.specs) {
      const existing = this.live.get(name);
      if (existing) existing.update(spec);
      else this.live.set(name, new LiveCluster(spec, this.clusterStats(name)));
    }
  }

  /** The current dynamic clusters' messages (for recompiling on EDS, and config_dump). */
  dynamicMessages(): Cluster[] {
    return [...this.live.values()].filter((c) => !this.staticNames.has(c.name)).map((c) => c.spec.message);
  }

  info(): ClusterInfo[] {
    return [...this.live.values()].map((c) => ({
      name: c.name,
      kind: c.spec.kind,
      endpoints: c.spec.allEndpoints,
      ejected: (e: WeightedEndpoint) => c.ejected(e),
      message: c.spec.message,
      static: this.staticNames.has(c.name),
    }));
  }

  close(): void {
    for (const c of this.live.values()) c.destroy();
    this.live.clear();
    this.removed.clear();
  }

  private clusterStats(name: string): ClusterStats {
    const tag = { name: 'envoy_cluster_name', value: name };
    const c = (stat: string) => this.stats.counter(statName('cluster', stat, tag));
    return {
      noneHealthy: c('upstream_cx_none_healthy'),
      panic: c('lb_healthy_panic'),
      timeout: { route: c('upstream_rq_timeout'), perTry: c('upstream_rq_per_try_timeout') },
      cx: new UpstreamCxStats(c),
      requests: new RequestGauges(c('upstream_rq_pending_total'), c('upstream_rq_total')),
      responses: new ResponseStats(this.stats, (stat) => clusterCodeStatName(name, stat)),
    };
  }

  private *gauges(): Iterable<StatSample> {
    for (const c of this.removed) if (c.stats.cx.active === 0) this.removed.delete(c);
    yield { ...statName('cluster_manager', 'active_clusters'), kind: 'gauge', value: this.live.size };
    for (const c of this.live.values()) {
      const tag = { name: 'envoy_cluster_name', value: c.name };
      yield { ...statName('cluster', 'membership_total', tag), kind: 'gauge', value: c.spec.allEndpoints.length };
      yield { ...statName('cluster', 'membership_healthy', tag), kind: 'gauge', value: c.healthyCount };
      yield { ...statName('cluster', 'upstream_cx_active', tag), kind: 'gauge', value: c.stats.cx.active };
      yield { ...statName('cluster', 'upstream_rq_active', tag), kind: 'gauge', value: c.stats.requests.active };
      yield { ...statName('cluster', 'upstream_rq_pending_active', tag), kind: 'gauge', value: c.stats.requests.pending };
    }
    for (const c of [...this.live.values(), ...this.removed]) yield* openBytes(c);
  }
}

/** A cluster stat's names with Envoy's code tags (`envoy_cluster_upstream_rq{envoy_response_code}`). */
function clusterCodeStatName(cluster: string, stat: string): StatName {
  const { leaf, labels } = codeTags(stat);
  const plain = statName('cluster', stat, { name: 'envoy_cluster_name', value: cluster });
  return { name: plain.name, prom: promName(`cluster.${leaf}`), labels: { ...plain.labels, ...labels } };
}

/**
 * The bytes a cluster's open connections carried so far, added to the counters of its closed ones
 * (same names: the store sums them), so that the counters grow while a connection is open and never
 * go back, also while a removed cluster's last connections finish.
 */
function* openBytes(c: LiveCluster): Iterable<StatSample> {
  const tag = { name: 'envoy_cluster_name', value: c.name };
  const b = c.stats.cx.openBytes();
  yield { ...statName('cluster', 'upstream_cx_rx_bytes_total', tag), kind: 'counter', value: b.rx };
  yield { ...statName('cluster', 'upstream_cx_tx_bytes_total', tag), kind: 'counter', value: b.tx };
}
