// A Cluster message compiled into what serves: the endpoints of its load assignment (STATIC,
// STRICT_DNS, LOGICAL_DNS) or of EDS with their weights, priorities and transport sockets, the
// load-balancing policy, the upstream protocol, circuit breakers and outlier detection. Pure: a
// bad field is a ConfigError naming it, and nothing here serves traffic (live-cluster.ts does).
import { MAGLEV_TABLE_SIZE, RING_DEFAULTS } from './load-balancers.js';
import { compileLeastRequest, type LeastRequestSpec } from './least-request.js';
import { compileSlowStart, type SlowStartSpec } from './slow-start.js';
import { scope } from '../common/log.js';
import {
  Cluster_DiscoveryType,
  Cluster_CommonLbConfigSchema,
  Cluster_LbPolicy,
  ClusterSchema,
  type Cluster,
} from '../gen/envoy/config/cluster/v3/cluster_pb.js';
import type { Address as EnvoyAddress } from '../gen/envoy/config/core/v3/address_pb.js';
import { HealthStatus } from '../gen/envoy/config/core/v3/health_check_pb.js';
import { ClusterLoadAssignment_PolicySchema, type ClusterLoadAssignment } from '../gen/envoy/config/endpoint/v3/endpoint_pb.js';
import { compileCircuitBreakers, compileOutlierDetection, type CircuitLimits, type OutlierSpec } from './cluster-health.js';
import type { Endpoint } from './upstream-pools.js';
import { compileUpstreamTransports, TRANSPORT_SOCKET_MATCH, type TlsDeps, type UpstreamTransport, type UpstreamTransports } from './tls/transport-sockets.js';
import { ConfigError, unappliedFields } from '../envoy/config-error.js';
import { durationMs } from '../common/duration.js';
import type { ConnectionLimits } from './connection-limits.js';
import { compileUpstreamProtocol, type UpstreamProtocolChoice } from './upstream-protocol.js';
import { compileTcpKeepalive, type TcpKeepaliveSpec } from './tcp-keepalive.js';
import { StatsStore } from './stats.js';

const log = scope('upstream');


/** Envoy's default connect_timeout. */
const DEFAULT_CONNECT_TIMEOUT_MS = 5_000;
const ORIGINAL_DST_HEADER = 'x-envoy-original-dst-host';

/** Set fields of a Cluster this proxy accepts without applying them (logged, never dropped silently). */
const UNAPPLIED_CLUSTER = [
  'healthChecks',
  'dnsLookupFamily', 'dnsRefreshRate', 'perConnectionBufferLimitBytes',
  'lrsServer', 'filters', 'loadBalancingPolicy',
];

/** An endpoint's EDS health status; only healthy and unknown ones are load balanced to outside panic. */
export type EdsHealth = 'healthy' | 'unknown' | 'unhealthy' | 'draining' | 'timeout' | 'degraded';

export interface WeightedEndpoint extends Endpoint {
  readonly weight: number;
  readonly health: EdsHealth;
  readonly priority: number;
  /** `region/zone/sub_zone` of its LocalityLbEndpoints, and that entry's load_balancing_weight (0 when unset). */
  readonly locality: string;
  readonly localityWeight: number;
  /** From the cluster's transport_socket_matches on the endpoint's metadata, else its transport_socket. */
  readonly transport?: UpstreamTransport;
}


export interface ClusterSpec {
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
  /** ROUND_ROBIN or LEAST_REQUEST with a slow start window: endpoints that join ramp up over it. */
  readonly slowStart?: SlowStartSpec;
  /**
   * The upstream HTTP protocol (HTTP/2 = h2c with prior knowledge, or h2 over TLS); `downstream`:
   * use_downstream_protocol_config, HTTP/2 for requests that came over HTTP/2, else HTTP/1.1.
   */
  readonly protocol: UpstreamProtocolChoice;
  readonly connection: ConnectionLimits;
  /** http2_protocol_options.max_concurrent_streams: streams per HTTP/2 session before another opens (0: no limit of ours). */
  readonly maxConcurrentStreams: number;
  /** upstream_connection_options.tcp_keepalive on every upstream connection; unset: none. */
  readonly tcpKeepalive?: TcpKeepaliveSpec;
  /** For ORIGINAL_DST: the header naming the destination, when use_http_header is on. */
  readonly originalDstHeader?: string;
  /** The endpoints by priority level, best first (levels without endpoints left out). */
  readonly levels: readonly PriorityLevel[];
  /** The assignment's overprovisioning_factor (140 = 1.4, Envoy's default). */
  readonly overprovisioningFactor: number;
  /** common_lb_config.healthy_panic_threshold in percent (Envoy's default 50; 0 = never panic). */
  readonly panicThreshold: number;
  /** common_lb_config.locality_weighted_lb_config: a locality is picked by weight before a host. */
  readonly localityWeighted: boolean;
  /** Every endpoint of the assignment, whatever its health (for /clusters and transports). */
  readonly allEndpoints: readonly WeightedEndpoint[];
  readonly circuit: CircuitLimits;
  readonly outlier?: OutlierSpec;
  readonly transports: UpstreamTransports;
}


/** host and port of a socket address; a pipe or a named port is a ConfigError naming the field. */
export function socketAddressOf(a: EnvoyAddress | undefined, field: string): Endpoint {
  if (a?.address.case !== 'socketAddress') throw new ConfigError(field, 'a socket_address is required (pipes and internal addresses are not supported)');
  const sa = a.address.value;
  if (sa.portSpecifier.case !== 'portValue') throw new ConfigError(`${field}.socket_address`, 'port_value is required (named ports are not supported)');
  if (!sa.address) throw new ConfigError(`${field}.socket_address.address`, 'an address is required');
  return { host: sa.address, port: sa.portSpecifier.value };
}

/** One priority level of an assignment. */
export interface PriorityLevel {
  readonly priority: number;
  /** All of its endpoints, whatever their EDS health (what a level in panic balances over). */
  readonly hosts: readonly WeightedEndpoint[];
  /** Its HEALTHY and UNKNOWN endpoints (what Envoy load balances to without active health checks). */
  readonly healthy: readonly WeightedEndpoint[];
  /** All of `healthy` have one weight (plain round robin). */
  readonly equalWeights: boolean;
}

const EDS_HEALTH: Readonly<Record<HealthStatus, EdsHealth>> = {
  [HealthStatus.UNKNOWN]: 'unknown',
  [HealthStatus.HEALTHY]: 'healthy',
  [HealthStatus.UNHEALTHY]: 'unhealthy',
  [HealthStatus.DRAINING]: 'draining',
  [HealthStatus.TIMEOUT]: 'timeout',
  [HealthStatus.DEGRADED]: 'degraded',
};

/** Whether Envoy load balances to an endpoint of this EDS health outside panic. */
export const lbHealthy = (h: EdsHealth): boolean => h === 'healthy' || h === 'unknown';

/** The Policy fields applied: overprovisioning_factor; the others are logged. */
const UNAPPLIED_ASSIGNMENT_POLICY = ['dropOverloads', 'endpointStaleAfter', 'weightedPriorityHealth'];
/** The overprovisioning factor Envoy uses when the assignment gives none. */
const DEFAULT_OVERPROVISIONING = 140;

/**
 * The endpoints of an assignment with their weights and EDS health, by priority level (best
 * first), and its overprovisioning factor.
 */
export function compileAssignment(
  cla: ClusterLoadAssignment | undefined,
  field: string,
  transports?: UpstreamTransports,
): { all: WeightedEndpoint[]; levels: PriorityLevel[]; overprovisioningFactor: number } {
  const all: WeightedEndpoint[] = [];
  (cla?.endpoints ?? []).forEach((locality, li) => {
    locality.lbEndpoints.forEach((lb, ei) => {
      const f = `${field}.endpoints[${li}].lb_endpoints[${ei}]`;
      if (lb.hostIdentifier.case !== 'endpoint') throw new ConfigError(f, 'an endpoint is required (endpoint_name is not supported)');
      const at = socketAddressOf(lb.hostIdentifier.value.address, `${f}.endpoint.address`);
      const weight = lb.loadBalancingWeight ?? 1;
      if (weight < 1) throw new ConfigError(`${f}.load_balancing_weight`, `must be at least 1, got ${weight}`);
      const transport = transports?.forEndpoint(lb.metadata?.filterMetadata[TRANSPORT_SOCKET_MATCH]);
      const l = locality.locality;
      all.push({
        ...at,
        weight,
        health: EDS_HEALTH[lb.healthStatus] ?? 'unhealthy',
        priority: locality.priority,
        locality: `${l?.region ?? ''}/${l?.zone ?? ''}/${l?.subZone ?? ''}`,
        localityWeight: locality.loadBalancingWeight ?? 0,
        ...(transport ? { transport } : {}),
      });
    });
  });
  const policy = cla?.policy;
  if (policy) {
    const unapplied = unappliedFields(ClusterLoadAssignment_PolicySchema, policy, UNAPPLIED_ASSIGNMENT_POLICY);
    if (unapplied.length > 0) log.warn(`${field}.policy: accepted but not applied yet: ${unapplied.join(', ')}`);
  }
  const overprovisioningFactor = policy?.overprovisioningFactor ?? DEFAULT_OVERPROVISIONING;
  if (overprovisioningFactor < 1) throw new ConfigError(`${field}.policy.overprovisioning_factor`, `must be at least 1, got ${overprovisioningFactor}`);
  return { all, levels: priorityLevels(all), overprovisioningFactor };
}

function priorityLevels(all: readonly WeightedEndpoint[]): PriorityLevel[] {
  const priorities = [...new Set(all.map((e) => e.priority))].sort((a, b) => a - b);
  return priorities.map((priority) => {
    const hosts = all.filter((e) => e.priority === priority);
    const healthy = hosts.filter((e) => lbHealthy(e.health));
    return { priority, hosts, healthy, equalWeights: equalWeights(healthy) };
  });
}

/** The set fields of common_lb_config applied: healthy_panic_threshold, locality_weighted_lb_config; the others are logged. */
const APPLIED_COMMON_LB = ['healthyPanicThreshold', 'localityWeightedLbConfig'];
/** Envoy's healthy_panic_threshold when the cluster gives none. */
const DEFAULT_PANIC_THRESHOLD = 50;

/** healthy_panic_threshold in percent. */
function panicThresholdOf(c: Cluster, field: string): number {
  const common = c.commonLbConfig;
  if (!common) return DEFAULT_PANIC_THRESHOLD;
  const unapplied = unappliedFields(Cluster_CommonLbConfigSchema, common, Cluster_CommonLbConfigSchema.fields.map((f) => f.localName).filter((n) => !APPLIED_COMMON_LB.includes(n)));
  if (unapplied.length > 0) log.warn(`${field}.common_lb_config (${c.name}): accepted but not applied yet: ${unapplied.join(', ')}`);
  const value = common.healthyPanicThreshold?.value ?? DEFAULT_PANIC_THRESHOLD;
  if (!(value >= 0 && value <= 100)) throw new ConfigError(`${field}.common_lb_config.healthy_panic_threshold`, `must be between 0 and 100, got ${value}`);
  return value;
}

/** Whether every endpoint has the same weight. */
export function equalWeights(eps: readonly WeightedEndpoint[]): boolean {
  return eps.every((e) => e.weight === eps[0]!.weight);
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
  let slowStart: SlowStartSpec | undefined;
  if (dt.value !== Cluster_DiscoveryType.ORIGINAL_DST) {
    if (c.lbPolicy === Cluster_LbPolicy.ROUND_ROBIN || c.lbPolicy === Cluster_LbPolicy.LEAST_REQUEST) slowStart = compileSlowStart(c, field);
    if (c.lbPolicy === Cluster_LbPolicy.RANDOM) random = true;
    else if (c.lbPolicy === Cluster_LbPolicy.RING_HASH || c.lbPolicy === Cluster_LbPolicy.MAGLEV) consistent = consistentHash(c);
    else if (c.lbPolicy === Cluster_LbPolicy.LEAST_REQUEST) leastRequest = compileLeastRequest(c, field);
    else if (c.lbPolicy !== Cluster_LbPolicy.ROUND_ROBIN) log.warn(`${field} (${c.name}): lb_policy ${Cluster_LbPolicy[c.lbPolicy]} is not supported yet; using round robin`);
  }
  const unapplied = unappliedFields(ClusterSchema, c, UNAPPLIED_CLUSTER);
  if (unapplied.length > 0) log.warn(`cluster ${c.name}: accepted but not applied yet: ${unapplied.join(', ')}`);
  const { protocol, connection, maxConcurrentStreams } = compileUpstreamProtocol(c, field);
  const tcpKeepalive = compileTcpKeepalive(c.upstreamConnectionOptions, field);
  const transports = compileUpstreamTransports(c, field, tls ?? { stats: new StatsStore() });
  const base = {
    transports,
    name: c.name,
    message: c,
    connectTimeoutMs,
    random,
    ...(consistent ? { consistent } : {}),
    ...(leastRequest ? { leastRequest } : {}),
    ...(slowStart ? { slowStart } : {}),
    protocol,
    connection,
    maxConcurrentStreams,
    ...(tcpKeepalive ? { tcpKeepalive } : {}),
    circuit: compileCircuitBreakers(c.circuitBreakers, protocol === 'http1'),
    ...(c.outlierDetection ? { outlier: compileOutlierDetection(c.outlierDetection, c.name) } : {}),
    panicThreshold: panicThresholdOf(c, field),
    localityWeighted: c.commonLbConfig?.localityConfigSpecifier.case === 'localityWeightedLbConfig',
  };
  switch (dt.value) {
    case Cluster_DiscoveryType.STATIC:
    case Cluster_DiscoveryType.STRICT_DNS:
    case Cluster_DiscoveryType.LOGICAL_DNS: {
      // A DNS cluster's host name is resolved by the socket on each new connection.
      const { all, levels, overprovisioningFactor } = compileAssignment(c.loadAssignment, `${field}.load_assignment`, transports);
      return { ...base, kind: 'static', levels, overprovisioningFactor, allEndpoints: all };
    }
    case Cluster_DiscoveryType.EDS: {
      if (c.edsClusterConfig?.edsConfig && c.edsClusterConfig.edsConfig.configSourceSpecifier.case !== 'ads') {
        throw new ConfigError(`${field}.eds_cluster_config.eds_config`, 'only ads is supported as the EDS config source');
      }
      const edsName = c.edsClusterConfig?.serviceName || c.name;
      const { all, levels, overprovisioningFactor } = compileAssignment(assignments.get(edsName), `ClusterLoadAssignment ${edsName}`, transports);
      return { ...base, kind: 'eds', edsName, levels, overprovisioningFactor, allEndpoints: all };
    }
    case Cluster_DiscoveryType.ORIGINAL_DST: {
      if (c.lbPolicy !== Cluster_LbPolicy.CLUSTER_PROVIDED) throw new ConfigError(`${field}.lb_policy`, 'an ORIGINAL_DST cluster needs lb_policy CLUSTER_PROVIDED');
      const cfg = c.lbConfig.case === 'originalDstLbConfig' ? c.lbConfig.value : undefined;
      return {
        ...base,
        kind: 'original_dst',
        ...(cfg?.useHttpHeader ? { originalDstHeader: (cfg.httpHeaderName || ORIGINAL_DST_HEADER).toLowerCase() } : {}),
        levels: [],
        overprovisioningFactor: DEFAULT_OVERPROVISIONING,
        allEndpoints: [],
      };
    }
    default:
      throw new ConfigError(`${field}.type`, `cluster type ${String(dt.value)} is not supported`);
  }
}
