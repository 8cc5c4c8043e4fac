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
import { maglev, MAGLEV_TABLE_SIZE, RING_DEFAULTS, ringHash, type HashTable } from './load-balancers.js';
import { ActiveRequests, compileLeastRequest, leastRequestPick, type LeastRequestSpec } from './least-request.js';
import { unpackConfig } from './extensions.js';
import { scope } from '../common/log.js';
import {
  Cluster_DiscoveryType,
  Cluster_LbPolicy,
  ClusterSchema,
  type Cluster,
} from '../gen/envoy/config/cluster/v3/cluster_pb.js';
import type { Address as EnvoyAddress } from '../gen/envoy/config/core/v3/address_pb.js';
import { HealthStatus } from '../gen/envoy/config/core/v3/health_check_pb.js';
import type { ClusterLoadAssignment } from '../gen/envoy/config/endpoint/v3/endpoint_pb.js';
import { HttpProtocolOptionsSchema } from '../gen/envoy/extensions/upstreams/http/v3/http_protocol_options_pb.js';
import { CircuitBreaker, compileCircuitBreakers, compileOutlierDetection, OutlierDetector, type CircuitLimits, type OutlierSpec } from './cluster-health.js';
import { Http1Pool, Http2Pool, type Endpoint, type UpstreamCluster } from './upstream-pools.js';
import { compileUpstreamTransports, TRANSPORT_SOCKET_MATCH, type TlsDeps, type UpstreamTransports } from './tls/transport-sockets.js';
import { SecretManager } from './tls/secrets.js';
import type { UpstreamTls } from './tls/upstream.js';
import { ConfigError, unappliedFields } from '../envoy/config-error.js';
import { typeNameOf } from '../envoy/types.js';
import type { RequestView } from '../envoy/request.js';
import { durationMs } from '../common/duration.js';
import { statName, StatsStore, type StatCounter, type StatSample } from './stats.js';

/** How the router and the TCP proxy reach upstreams: by cluster name. */
export interface ClusterManager {
  /** undefined when no cluster of that name exists (the route's cluster_not_found_response_code). */
  get(name: string): UpstreamCluster | undefined;
}

const log = scope('upstream');

/** Envoy's default connect_timeout. */
const DEFAULT_CONNECT_TIMEOUT_MS = 5_000;
const ORIGINAL_DST_HEADER = 'x-envoy-original-dst-host';
const HTTP_PROTOCOL_OPTIONS = 'envoy.extensions.upstreams.http.v3.HttpProtocolOptions';

/** Set fields of a Cluster this proxy accepts without applying them (logged, never dropped silently). */
const UNAPPLIED_CLUSTER = [
  'healthChecks', 'commonLbConfig',
  'upstreamConnectionOptions', 'dnsLookupFamily', 'dnsRefreshRate', 'perConnectionBufferLimitBytes',
  'maxRequestsPerConnection', 'lrsServer', 'filters', 'loadBalancingPolicy',
];

export interface WeightedEndpoint extends Endpoint {
  readonly weight: number;
  readonly health: 'healthy' | 'unknown';
  readonly priority: number;
  /** From the cluster's transport_socket_matches on the endpoint's metadata, else its transport_socket. */
  readonly transport?: UpstreamTls;
}

/** A cluster as compiled from its message, before it serves. */
interface ClusterSpec {
  readonly name: string;
  readonly message: Cluster;
  readonly kind: 'static' | 'eds' | 'original_dst';
  readonly edsName?: string;
  readonly connectTimeoutMs: number;
  readonly random: boolean;
  /** RING_HASH or MAGLEV: requests with a hash (the route's hash_policy) map to an endpoint consistently. */
  readonly consistent?: { readonly kind: 'ring'; readonly min: number; readonly max: number } | { readonly kind: 'maglev'; readonly size: number };
  /** LEAST_REQUEST: picks by the endpoints' active requests. */
  readonly leastRequest?: LeastRequestSpec;
  /** The upstream HTTP protocol (HTTP/2 = h2c with prior knowledge; upstream TLS is not done yet). */
  readonly protocol: 'http1' | 'http2';
  /** For ORIGINAL_DST: the header naming the destination, when use_http_header is on. */
  readonly originalDstHeader?: string;
  /** The endpoints pick() chooses from (healthy or unknown, best priority). */
  readonly endpoints: readonly WeightedEndpoint[];
  /** Every endpoint of the assignment, for /clusters. */
  readonly allEndpoints: readonly WeightedEndpoint[];
  readonly circuit: CircuitLimits;
  readonly outlier?: OutlierSpec;
  readonly transports: UpstreamTransports;
}

/** The output of `prepare`: the complete next cluster set. */
export interface ClusterPlan {
  readonly specs: ReadonlyMap<string, ClusterSpec>;
}

/** host and port of a socket address; a pipe or a named port is a ConfigError naming the field. */
export function socketAddressOf(a: EnvoyAddress | undefined, field: string): Endpoint {
  if (a?.address.case !== 'socketAddress') throw new ConfigError(field, 'a socket_address is required (pipes and internal addresses are not supported)');
  const sa = a.address.value;
  if (sa.portSpecifier.case !== 'portValue') throw new ConfigError(`${field}.socket_address`, 'port_value is required (named ports are not supported)');
  if (!sa.address) throw new ConfigError(`${field}.socket_address.address`, 'an address is required');
  return { host: sa.address, port: sa.portSpecifier.value };
}

/**
 * The endpoints of an assignment: HEALTHY and UNKNOWN ones only (what Envoy load balances to
 * without active health checks), with their weights; `usable` is the lowest priority that has any.
 */
export function compileAssignment(cla: ClusterLoadAssignment | undefined, field: string, transports?: UpstreamTransports): { all: WeightedEndpoint[]; usable: WeightedEndpoint[] } {
  const all: WeightedEndpoint[] = [];
  (cla?.endpoints ?? []).forEach((locality, li) => {
    locality.lbEndpoints.forEach((lb, ei) => {
      const f = `${field}.endpoints[${li}].lb_endpoints[${ei}]`;
      if (lb.hostIdentifier.case !== 'endpoint') throw new ConfigError(f, 'an endpoint is required (endpoint_name is not supported)');
      const at = socketAddressOf(lb.hostIdentifier.value.address, `${f}.endpoint.address`);
      const weight = lb.loadBalancingWeight ?? 1;
      if (weight < 1) throw new ConfigError(`${f}.load_balancing_weight`, `must be at least 1, got ${weight}`);
      const status = lb.healthStatus;
      if (status !== HealthStatus.HEALTHY && status !== HealthStatus.UNKNOWN) return;
      const transport = transports?.forEndpoint(lb.metadata?.filterMetadata[TRANSPORT_SOCKET_MATCH]);
      all.push({ ...at, weight, health: status === HealthStatus.HEALTHY ? 'healthy' : 'unknown', priority: locality.priority, ...(transport ? { transport } : {}) });
    });
  });
  const best = Math.min(...all.map((e) => e.priority));
  return { all, usable: all.filter((e) => e.priority === best) };
}

/**
 * The upstream protocol from `typed_extension_protocol_options` (HttpProtocolOptions with an
 * explicit HTTP/1 or HTTP/2 config) or the legacy `http2_protocol_options`. The protocol
 * settings inside (window sizes, concurrent streams) are node:http2's defaults.
 */
function upstreamProtocol(c: Cluster, field: string): 'http1' | 'http2' {
  let protocol: 'http1' | 'http2' = c.http2ProtocolOptions ? 'http2' : 'http1';
  for (const [name, any] of Object.entries(c.typedExtensionProtocolOptions)) {
    const f = `${field}.typed_extension_protocol_options[${JSON.stringify(name)}]`;
    const typeName = typeNameOf(any.typeUrl);
    if (typeName !== HTTP_PROTOCOL_OPTIONS) {
      log.warn(`${f}: protocol options of type ${typeName} are not applied`);
      continue;
    }
    const opts = unpackConfig(any, HttpProtocolOptionsSchema, f);
    const u = opts.upstreamProtocolOptions;
    if (u.case === 'explicitHttpConfig') {
      const p = u.value.protocolConfig.case;
      if (p === 'http3ProtocolOptions') throw new ConfigError(`${f}.explicit_http_config`, 'HTTP/3 upstreams are not supported; use http_protocol_options or http2_protocol_options');
      protocol = p === 'http2ProtocolOptions' ? 'http2' : 'http1';
    } else if (u.case !== undefined) {
      log.warn(`${f}: ${u.case === 'autoConfig' ? 'auto_config' : 'use_downstream_protocol_config'} is not supported yet; using ${protocol === 'http2' ? 'HTTP/2' : 'HTTP/1.1'}`);
    }
  }
  return protocol;
}

/** A RING_HASH or MAGLEV cluster's table settings (Envoy's defaults when unset). */
function consistentHash(c: Cluster): NonNullable<ClusterSpec['consistent']> {
  const cfg = c.lbConfig;
  if (c.lbPolicy === Cluster_LbPolicy.MAGLEV) return { kind: 'maglev', size: Number(cfg.case === 'maglevLbConfig' ? (cfg.value.tableSize ?? BigInt(MAGLEV_TABLE_SIZE)) : MAGLEV_TABLE_SIZE) };
  const ring = cfg.case === 'ringHashLbConfig' ? cfg.value : undefined;
  return { kind: 'ring', min: Number(ring?.minimumRingSize ?? BigInt(RING_DEFAULTS.min)), max: Number(ring?.maximumRingSize ?? BigInt(RING_DEFAULTS.max)) };
}

/**
 * Compiles one Cluster; `assignments` are the accepted ClusterLoadAssignments by name (EDS); `tls`
 * the secrets and stats its transport sockets use (absent: a validation without them).
 */
export function compileCluster(c: Cluster, assignments: ReadonlyMap<string, ClusterLoadAssignment>, field: string, tls?: TlsDeps): ClusterSpec {
  if (!c.name) throw new ConfigError(`${field}.name`, 'a cluster name is required');
  if (c.clusterDiscoveryType.case === 'clusterType') throw new ConfigError(`${field}.cluster_type`, 'custom cluster types are not supported; use type');
  // An unset `type` is its proto default, STATIC.
  const dt = { value: c.clusterDiscoveryType.case === 'type' ? c.clusterDiscoveryType.value : Cluster_DiscoveryType.STATIC };
  const connectTimeoutMs = durationMs(c.connectTimeout, DEFAULT_CONNECT_TIMEOUT_MS);
  let random = false;
  let consistent: ClusterSpec['consistent'];
  let leastRequest: LeastRequestSpec | undefined;
  if (dt.value !== Cluster_DiscoveryType.ORIGINAL_DST) {
    if (c.lbPolicy === Cluster_LbPolicy.RANDOM) random = true;
    else if (c.lbPolicy === Cluster_LbPolicy.RING_HASH || c.lbPolicy === Cluster_LbPolicy.MAGLEV) consistent = consistentHash(c);
    else if (c.lbPolicy === Cluster_LbPolicy.LEAST_REQUEST) leastRequest = compileLeastRequest(c, field);
    else if (c.lbPolicy !== Cluster_LbPolicy.ROUND_ROBIN) log.warn(`${field} (${c.name}): lb_policy ${Cluster_LbPolicy[c.lbPolicy]} is not supported yet; using round robin`);
  }
  const unapplied = unappliedFields(ClusterSchema, c, UNAPPLIED_CLUSTER);
  if (unapplied.length > 0) log.warn(`cluster ${c.name}: accepted but not applied yet: ${unapplied.join(', ')}`);
  const protocol = upstreamProtocol(c, field);
  const transports = compileUpstreamTransports(c, field, tls ?? { stats: new StatsStore() });
  const base = {
    transports,
    name: c.name,
    message: c,
    connectTimeoutMs,
    random,
    ...(consistent ? { consistent } : {}),
    ...(leastRequest ? { leastRequest } : {}),
    protocol,
    circuit: compileCircuitBreakers(c.circuitBreakers, protocol === 'http1'),
    ...(c.outlierDetection ? { outlier: compileOutlierDetection(c.outlierDetection) } : {}),
  };
  switch (dt.value) {
    case Cluster_DiscoveryType.STATIC:
    case Cluster_DiscoveryType.STRICT_DNS:
    case Cluster_DiscoveryType.LOGICAL_DNS: {
      // A DNS cluster's host name is resolved by the socket on each new connection.
      const { all, usable } = compileAssignment(c.loadAssignment, `${field}.load_assignment`, transports);
      return { ...base, kind: 'static', endpoints: usable, allEndpoints: all };
    }
    case Cluster_DiscoveryType.EDS: {
      if (c.edsClusterConfig?.edsConfig && c.edsClusterConfig.edsConfig.configSourceSpecifier.case !== 'ads') {
        throw new ConfigError(`${field}.eds_cluster_config.eds_config`, 'only ads is supported as the EDS config source');
      }
      const edsName = c.edsClusterConfig?.serviceName || c.name;
      const { all, usable } = compileAssignment(assignments.get(edsName), `ClusterLoadAssignment ${edsName}`, transports);
      return { ...base, kind: 'eds', edsName, endpoints: usable, allEndpoints: all };
    }
    case Cluster_DiscoveryType.ORIGINAL_DST: {
      if (c.lbPolicy !== Cluster_LbPolicy.CLUSTER_PROVIDED) throw new ConfigError(`${field}.lb_policy`, 'an ORIGINAL_DST cluster needs lb_policy CLUSTER_PROVIDED');
      const cfg = c.lbConfig.case === 'originalDstLbConfig' ? c.lbConfig.value : undefined;
      return {
        ...base,
        kind: 'original_dst',
        ...(cfg?.useHttpHeader ? { originalDstHeader: (cfg.httpHeaderName || ORIGINAL_DST_HEADER).toLowerCase() } : {}),
        endpoints: [],
        allEndpoints: [],
      };
    }
    default:
      throw new ConfigError(`${field}.type`, `cluster type ${String(dt.value)} is not supported`);
  }
}

/** `host:port` / `[v6]:port` from a header, or undefined. */
function parseHostPort(v: string): Endpoint | undefined {
  const m = /^(?:\[([^\]]+)\]|([^:[\]]+)):(\d{1,5})$/.exec(v.trim());
  if (!m) return undefined;
  const port = Number(m[3]);
  return port >= 1 && port <= 65535 ? { host: (m[1] ?? m[2])!, port } : undefined;
}

interface ClusterStats {
  readonly rq: StatCounter;
  readonly noneHealthy: StatCounter;
  readonly cx: StatCounter;
  readonly connectTimeout: StatCounter;
}

/** A serving cluster: the spec can be swapped under it (EDS updates) while its pool stays. */
class LiveCluster implements UpstreamCluster {
  readonly http1: Http1Pool;
  private pool?: Http2Pool;
  private rr = 0;
  /** Smooth weighted round robin state, one per endpoint of the current spec. */
  private current: number[] = [];
  readonly breaker: CircuitBreaker;
  private outlier?: OutlierDetector;
  /** Kept across spec updates: requests in flight stay counted on their endpoint. */
  private readonly active = new ActiveRequests();

  constructor(
    public spec: ClusterSpec,
    private readonly stats: ClusterStats,
  ) {
    this.http1 = new Http1Pool(spec.connectTimeoutMs, () => stats.cx.inc(), () => stats.connectTimeout.inc(), (ep) => this.transportOf(ep));
    this.breaker = new CircuitBreaker(spec.circuit);
    this.setOutlier(spec.outlier);
  }

  private setOutlier(o: OutlierSpec | undefined): void {
    if (!o) this.outlier = undefined;
    else if (this.outlier) this.outlier.spec = o;
    else this.outlier = new OutlierDetector(o);
  }

  begin(endpoint: Endpoint): () => void {
    return this.active.begin(endpoint);
  }

  report(endpoint: Endpoint, outcome: number | 'failure'): void {
    this.outlier?.report(endpoint, outcome, this.spec.endpoints);
  }

  /** The HTTP/2 sessions, made on first use; undefined while the cluster speaks HTTP/1.1. */
  get http2(): Http2Pool | undefined {
    if (this.spec.protocol !== 'http2') return undefined;
    this.pool ??= new Http2Pool(this.spec.connectTimeoutMs, () => this.stats.cx.inc(), () => this.stats.connectTimeout.inc(), (ep) => this.transportOf(ep));
    return this.pool;
  }

  /** The current transport of an endpoint: its match among the cluster's endpoints, else the cluster's own. */
  transportOf(ep: Endpoint): UpstreamTls | undefined {
    const known = this.spec.allEndpoints.find((e) => e.host === ep.host && e.port === ep.port);
    return known ? known.transport : this.spec.transports.fallback;
  }

  /** Lets in-flight requests finish and keeps no connection. */
  retire(): void {
    this.http1.retire();
    this.pool?.retire();
  }

  destroy(): void {
    this.http1.destroy();
    this.pool?.destroy();
  }

  get name(): string {
    return this.spec.name;
  }

  get connectTimeoutMs(): number {
    return this.spec.connectTimeoutMs;
  }

  update(spec: ClusterSpec): void {
    // A protocol change starts a fresh session pool; the old one finishes its streams.
    if (spec.protocol !== this.spec.protocol && this.pool) {
      this.pool.retire();
      this.pool = undefined;
    }
    this.spec = spec;
    this.breaker.limits = spec.circuit;
    this.setOutlier(spec.outlier);
    this.http1.connectTimeoutMs = spec.connectTimeoutMs;
    if (this.pool) this.pool.connectTimeoutMs = spec.connectTimeoutMs;
    this.current = [];
  }

  pick(req: RequestView, hash?: () => bigint | undefined): Endpoint | undefined {
    const ep = this.choose(req, hash);
    if (ep) this.stats.rq.inc();
    else this.stats.noneHealthy.inc();
    return ep;
  }

  /** The consistent-hash table of the current endpoint set, rebuilt when the set changes. */
  private table?: { key: string; lookup: HashTable };

  private consistentPick(eps: readonly WeightedEndpoint[], hash: bigint): Endpoint {
    const c = this.spec.consistent!;
    const key = eps.map((e) => `${e.host}:${e.port}/${e.weight}`).join(',');
    if (this.table?.key !== key) this.table = { key, lookup: c.kind === 'ring' ? ringHash(eps, c.min, c.max) : maglev(eps, c.size) };
    return eps[this.table.lookup(hash)]!;
  }

  private choose(req: RequestView, hashKey: (() => bigint | undefined) | undefined): Endpoint | undefined {
    const s = this.spec;
    if (s.kind === 'original_dst') {
      // The header when the cluster reads one, else where the client sent the connection, as
      // restored by a use_original_dst listener (never the proxy's own listener address).
      const v = s.originalDstHeader ? req.header(s.originalDstHeader) : undefined;
      if (v) return parseHostPort(v);
      const d = req.destination;
      return d.restored ? { host: d.address, port: d.port } : undefined;
    }
    const eps = this.outlier ? this.outlier.filter(s.endpoints) : s.endpoints;
    if (eps.length === 0) return undefined;
    const hash = s.consistent ? hashKey?.() : undefined;
    if (hash !== undefined) return this.consistentPick(eps, hash);
    if (s.leastRequest) return leastRequestPick(eps, s.leastRequest, this.active, this.current);
    if (s.random || s.consistent) return eps[Math.floor(Math.random() * eps.length)];
    if (eps.every((e) => e.weight === eps[0]!.weight)) return eps[this.rr++ % eps.length];
    // Smooth weighted round robin: each endpoint gets its weight's share, interleaved.
    if (this.current.length !== eps.length) this.current = eps.map(() => 0);
    let total = 0;
    let best = 0;
    eps.forEach((e, i) => {
      this.current[i]! += e.weight;
      total += e.weight;
      if (this.current[i]! > this.current[best]!) best = i;
    });
    this.current[best]! -= total;
    return eps[best];
  }
}

export interface ClusterInfo {
  readonly name: string;
  readonly kind: ClusterSpec['kind'];
  readonly endpoints: readonly WeightedEndpoint[];
  readonly message: Cluster;
  readonly static: boolean;
}

export class DynamicClusterManager implements ClusterManager {
  private readonly live = new Map<string, LiveCluster>();
  private readonly staticNames = new Set<string>();

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
      message: c.spec.message,
      static: this.staticNames.has(c.name),
    }));
  }

  close(): void {
    for (const c of this.live.values()) c.destroy();
    this.live.clear();
  }

  private clusterStats(name: string): ClusterStats {
    const tag = { name: 'envoy_cluster_name', value: name };
    const c = (stat: string) => this.stats.counter(statName('cluster', stat, tag));
    return { rq: c('upstream_rq_total'), noneHealthy: c('upstream_cx_none_healthy'), cx: c('upstream_cx_total'), connectTimeout: c('upstream_cx_connect_timeout') };
  }

  private *gauges(): Iterable<StatSample> {
    yield { ...statName('cluster_manager', 'active_clusters'), kind: 'gauge', value: this.live.size };
    for (const c of this.live.values()) {
      const tag = { name: 'envoy_cluster_name', value: c.name };
      yield { ...statName('cluster', 'membership_total', tag), kind: 'gauge', value: c.spec.allEndpoints.length };
      yield { ...statName('cluster', 'membership_healthy', tag), kind: 'gauge', value: c.spec.endpoints.length };
    }
  }
}
