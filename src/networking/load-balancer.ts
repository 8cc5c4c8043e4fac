// A DestinationRule's loadBalancer as the cluster's lb_policy and lb_config, in the Go mesh's
// order: the simple policy first (unset: LEAST_REQUEST, the Go mesh's default for every outbound
// cluster), with warmup as the round robin or least request config's slow start; then a
// consistent hash replaces both (MAGLEV, or RING_HASH with its minimum ring size).
import type { MessageInitShape } from '@bufbuild/protobuf';
import { Cluster_LbPolicy, type Cluster_SlowStartConfigSchema, type ClusterSchema } from '../gen/envoy/config/cluster/v3/cluster_pb.js';
import { duration } from './common.js';
import type { LocalityLbSetting } from './locality-lb.js';

export interface ConsistentHash {
  readonly httpHeaderName?: string;
  readonly httpCookie?: { readonly name: string; readonly path?: string; readonly ttl?: string; readonly attributes?: readonly { readonly name: string; readonly value?: string }[] };
  readonly useSourceIp?: boolean;
  readonly httpQueryParameterName?: string;
  readonly minimumRingSize?: number;
  readonly ringHash?: { readonly minimumRingSize?: number };
  readonly maglev?: { readonly tableSize?: number };
}

/** `warmup`: the slow start window, the weight it starts from (percent) and how fast it ramps. */
export interface Warmup {
  readonly duration: string;
  readonly minimumPercent?: number;
  readonly aggression?: number;
}

export interface LoadBalancerSettings {
  readonly simple?: string;
  readonly consistentHash?: ConsistentHash;
  /** Locality failover (EDS priorities, locality-lb.ts); the cluster itself is unchanged. */
  readonly localityLbSetting?: LocalityLbSetting;
  readonly warmup?: Warmup;
  /** Deprecated for `warmup`: the window alone. */
  readonly warmupDurationSecs?: string;
}

type ClusterInit = Exclude<MessageInitShape<typeof ClusterSchema>, { $typeName: string }>;
type SlowStartInit = MessageInitShape<typeof Cluster_SlowStartConfigSchema>;

/** Envoy's min_weight_percent default, which the Go mesh writes out when warmup leaves it unset. */
const DEFAULT_MIN_PERCENT = 10;
/**
 * A RuntimeDouble needs a runtime key; this one no runtime layer can hold, so the proxy always
 * reads the default_value (the key the Go mesh writes, kept so config dumps compare equal).
 */
const NO_RUNTIME_KEY = '(';

function slowStart(lb: LoadBalancerSettings): SlowStartInit | undefined {
  if (lb.warmup) {
    return {
      slowStartWindow: duration(lb.warmup.duration),
      aggression: { defaultValue: lb.warmup.aggression ?? 1, runtimeKey: NO_RUNTIME_KEY },
      minWeightPercent: { value: lb.warmup.minimumPercent ?? DEFAULT_MIN_PERCENT },
    };
  }
  return lb.warmupDurationSecs ? { slowStartWindow: duration(lb.warmupDurationSecs) } : undefined;
}

function simple(lb: LoadBalancerSettings): Partial<ClusterInit> {
  const warm = slowStart(lb);
  switch (lb.simple) {
    case 'RANDOM':
      return { lbPolicy: Cluster_LbPolicy.RANDOM };
    case 'ROUND_ROBIN':
      return { lbPolicy: Cluster_LbPolicy.ROUND_ROBIN, ...(warm ? { lbConfig: { case: 'roundRobinLbConfig', value: { slowStartConfig: warm } } } : {}) };
    default:
      // LEAST_REQUEST, LEAST_CONN (its deprecated name), and unset.
      return { lbPolicy: Cluster_LbPolicy.LEAST_REQUEST, ...(warm ? { lbConfig: { case: 'leastRequestLbConfig', value: { slowStartConfig: warm } } } : {}) };
  }
}

function consistent(hash: ConsistentHash): Partial<ClusterInit> {
  if (hash.maglev) {
    const size = hash.maglev.tableSize;
    return { lbPolicy: Cluster_LbPolicy.MAGLEV, lbConfig: size ? { case: 'maglevLbConfig', value: { tableSize: BigInt(size) } } : { case: undefined } };
  }
  if (hash.ringHash) {
    const min = hash.ringHash.minimumRingSize;
    return { lbPolicy: Cluster_LbPolicy.RING_HASH, lbConfig: min ? { case: 'ringHashLbConfig', value: { minimumRingSize: BigInt(min) } } : { case: undefined } };
  }
  // The deprecated top-level minimumRingSize, Envoy's 1024 when unset.
  return { lbPolicy: Cluster_LbPolicy.RING_HASH, lbConfig: { case: 'ringHashLbConfig', value: { minimumRingSize: BigInt(hash.minimumRingSize || 1024) } } };
}

/**
 * A proxyless gRPC client's: its own default (round robin, no lb_policy), LEAST_REQUEST when the
 * rule says so, a consistent hash; nothing else, as the Go mesh's gRPC generator (gRPC's xDS client
 * refuses the rest, LEAST_CONN and warmup included).
 */
function proxylessBalancer(lb: LoadBalancerSettings): Partial<ClusterInit> {
  if (lb.consistentHash) return consistent(lb.consistentHash);
  return lb.simple === 'LEAST_REQUEST' ? { lbPolicy: Cluster_LbPolicy.LEAST_REQUEST } : {};
}

/**
 * The outbound cluster's lb_policy and lb_config (PASSTHROUGH is the cluster builder's:
 * ORIGINAL_DST). `proxyless`: built for a proxyless gRPC client.
 */
export function loadBalancer(lb: LoadBalancerSettings | undefined, proxyless = false): Partial<ClusterInit> {
  const settings = lb ?? {};
  if (proxyless) return proxylessBalancer(settings);
  return settings.consistentHash ? consistent(settings.consistentHash) : simple(settings);
}
