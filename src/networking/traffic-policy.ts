// A DestinationRule's trafficPolicy: merged for one port and subset as the Go mesh merges it, then
// applied to an outbound cluster (load balancer, circuit breakers, HTTP protocol options, outlier
// detection, upstream TLS). Fields this module does not translate are reported when the resource is
// read (model/traffic-notices.ts), never silently dropped.
import type { MessageInitShape } from '@bufbuild/protobuf';
import type { Cluster_CommonLbConfigSchema, ClusterSchema } from '../gen/envoy/config/cluster/v3/cluster_pb.js';
import { RoutingPriority } from '../gen/envoy/config/core/v3/base_pb.js';
import type { EffectiveRule } from '../model/traffic.js';
import { isHttpProtocol, type Protocol } from '../model/service.js';
import { duration as durationInit, type TcpProxyPolicy, type TunnelSettings } from './common.js';
import type { HashPolicyInit } from './http-route.js';
import { upstreamTls, type ClientTlsSettings } from './upstream-tls.js';
import { effectiveLocalityLb, localityWeighted, type LocalityLbSetting } from './locality-lb.js';
import { loadBalancer, type LoadBalancerSettings } from './load-balancer.js';
import type { ProxyProtocolSettings } from './proxy-protocol.js';

/** The DestinationRule trafficPolicy fields this module reads (the API's own names). */
export interface TrafficPolicy {
  readonly loadBalancer?: LoadBalancerSettings;
  readonly connectionPool?: ConnectionPoolSettings;
  readonly outlierDetection?: OutlierDetectionSettings;
  readonly tls?: ClientTlsSettings;
  /** retry_budget of the circuit breaker threshold (not a port-level setting either). */
  readonly retryBudget?: RetryBudget;
  /** Not a port-level setting (the API's PortTrafficPolicy has none); applied by proxy-protocol.ts. */
  readonly proxyProtocol?: ProxyProtocolSettings;
  /** Not a port-level setting either; the TCP proxies' tunneling_config (common.ts tunnelingConfig), not the cluster's. */
  readonly tunnel?: TunnelSettings;
  readonly portLevelSettings?: readonly (Omit<TrafficPolicy, 'portLevelSettings' | 'proxyProtocol' | 'retryBudget' | 'tunnel'> & { readonly port?: { readonly number?: number } })[];
}

/** Retries in flight as a share of the requests in flight (percent), with a floor. */
export interface RetryBudget {
  readonly percent?: number;
  readonly minRetryConcurrency?: number;
}

/** A DestinationRule's (or the mesh config's) tcpKeepalive: probes, and `time` / `interval` durations. */
export interface TcpKeepaliveSettings {
  readonly probes?: number;
  readonly time?: string;
  readonly interval?: string;
}

export interface ConnectionPoolSettings {
  readonly tcp?: {
    readonly maxConnections?: number;
    readonly connectTimeout?: string;
    readonly idleTimeout?: string;
    readonly maxConnectionDuration?: string;
    readonly tcpKeepalive?: TcpKeepaliveSettings;
  };
  readonly http?: {
    readonly http1MaxPendingRequests?: number;
    readonly http2MaxRequests?: number;
    readonly maxRequestsPerConnection?: number;
    readonly maxRetries?: number;
    readonly idleTimeout?: string;
    readonly h2UpgradePolicy?: string;
    readonly useClientProtocol?: boolean;
    readonly maxConcurrentStreams?: number;
  };
}

export interface OutlierDetectionSettings {
  readonly consecutive5xxErrors?: number;
  readonly consecutiveGatewayErrors?: number;
  readonly interval?: string;
  readonly baseEjectionTime?: string;
  readonly maxEjectionPercent?: number;
  readonly minHealthPercent?: number;
  readonly splitExternalLocalOriginErrors?: boolean;
  readonly consecutiveLocalOriginFailures?: number;
}

type ClusterInit = Exclude<MessageInitShape<typeof ClusterSchema>, { $typeName: string }>;

const UINT32_MAX = 4294967295;

/** `loadBalancer.simple: PASSTHROUGH`: no balancing by the proxy, the connection goes where the client sent it (ORIGINAL_DST). */
export function passesThrough(policy: TrafficPolicy): boolean {
  return policy.loadBalancer?.simple === 'PASSTHROUGH';
}

/**
 * The policy for `port` and `subset` (its own trafficPolicy) on top of the rule's, as the Go mesh
 * merges them (MergeSubsetTrafficPolicy): a port-level entry of the port is the whole policy for
 * that port, its four fields as it sets them and the defaults for the rest (nothing of the policy
 * around it is inherited, proxyProtocol included); the subset's fields then replace the rule's
 * where they are set, and a subset's port-level entry replaces all four, set or not.
 */
export function mergeTrafficPolicy(rule: TrafficPolicy | undefined, subset: TrafficPolicy | undefined, port: number): TrafficPolicy {
  const base = forPort(rule, port).policy;
  const own = forPort(subset, port);
  if (!own.portLevel) return { ...base, ...own.policy };
  const { connectionPool: _c, loadBalancer: _l, outlierDetection: _o, tls: _t, ...rest } = base;
  return { ...rest, ...own.policy };
}

function forPort(policy: TrafficPolicy | undefined, port: number): { readonly policy: TrafficPolicy; readonly portLevel: boolean } {
  if (!policy) return { policy: {}, portLevel: false };
  const { portLevelSettings, ...base } = policy;
  const atPort = portLevelSettings?.find((p) => p.port?.number === port);
  if (!atPort) return { policy: base, portLevel: false };
  const { port: _port, ...fields } = atPort;
  return { policy: fields, portLevel: true };
}

/** Whole seconds of a duration, as the Go mesh's setKeepAliveSettings takes them. */
const wholeSeconds = (d: string): number => Number(durationInit(d).seconds);

/**
 * The mesh config's tcpKeepalive, then each field the rule's tcp.tcpKeepalive sets, as the Go
 * mesh's applyTCPKeepalive -> upstream_connection_options.tcp_keepalive: SO_KEEPALIVE, each field
 * the system's unless set. Neither: no keepalive.
 */
export function tcpKeepaliveOptions(mesh: TcpKeepaliveSettings | undefined, policy: TrafficPolicy | undefined): Pick<ClusterInit, 'upstreamConnectionOptions'> {
  const rule = policy?.connectionPool?.tcp?.tcpKeepalive;
  if (!mesh && !rule) return {};
  const k = { ...mesh, ...rule };
  return {
    upstreamConnectionOptions: {
      tcpKeepalive: {
        ...(k.probes ? { keepaliveProbes: k.probes } : {}),
        ...(k.time ? { keepaliveTime: wholeSeconds(k.time) } : {}),
        ...(k.interval ? { keepaliveInterval: wholeSeconds(k.interval) } : {}),
      },
    },
  };
}

/**
 * The circuit breaker thresholds of a connection pool, as the Go mesh gives them to every outbound,
 * inbound and passthrough cluster (with or without a rule): the pool's limits, and no limit for
 * what it leaves unset, never Envoy's defaults (1024 connections, requests and pending requests, 3
 * retries), which trip under load or pod churn where the Go mesh's clusters do not.
 */
export function circuitBreakers(pool: ConnectionPoolSettings | undefined, budget?: RetryBudget): Pick<ClusterInit, 'circuitBreakers'> {
  const tcp = pool?.tcp;
  const http = pool?.http;
  // As the Go mesh's applyRetryBudget: 20 % and at least 3 unless set (Envoy's defaults too).
  const retryBudget = budget ? { retryBudget: { budgetPercent: { value: budget.percent ?? 20 }, minRetryConcurrency: budget.minRetryConcurrency || 3 } } : {};
  return {
    circuitBreakers: {
      thresholds: [
        {
          priority: RoutingPriority.DEFAULT,
          maxConnections: tcp?.maxConnections ?? UINT32_MAX,
          maxPendingRequests: http?.http1MaxPendingRequests ?? UINT32_MAX,
          maxRequests: http?.http2MaxRequests ?? UINT32_MAX,
          maxRetries: http?.maxRetries ?? UINT32_MAX,
          trackRemaining: true,
          ...retryBudget,
        },
      ],
    },
  };
}

/** A pool's connect_timeout and circuit breaker threshold. */
export function connectionPool(pool: ConnectionPoolSettings | undefined, budget?: RetryBudget): Partial<ClusterInit> {
  const connectTimeout = pool?.tcp?.connectTimeout;
  return { ...(connectTimeout ? { connectTimeout: durationInit(connectTimeout) } : {}), ...circuitBreakers(pool, budget) };
}

type DurationInit = ReturnType<typeof durationInit>;

/**
 * `maxRequestsPerConnection`, `idleTimeout` (http's, else tcp's) and tcp's `maxConnectionDuration`
 * go into the HTTP protocol options, as the Go mesh's applyConnectionPool puts them.
 */
export function commonHttpOptions(pool: ConnectionPoolSettings | undefined): { maxRequestsPerConnection?: number; idleTimeout?: DurationInit; maxConnectionDuration?: DurationInit } | undefined {
  const http = pool?.http;
  const idleTimeout = http?.idleTimeout ?? pool?.tcp?.idleTimeout;
  const maxConnectionDuration = pool?.tcp?.maxConnectionDuration;
  if (http?.maxRequestsPerConnection === undefined && !idleTimeout && !maxConnectionDuration) return undefined;
  return {
    ...(http?.maxRequestsPerConnection ? { maxRequestsPerConnection: http.maxRequestsPerConnection } : {}),
    ...(idleTimeout ? { idleTimeout: durationInit(idleTimeout) } : {}),
    ...(maxConnectionDuration ? { maxConnectionDuration: durationInit(maxConnectionDuration) } : {}),
  };
}

/**
 * Whether the policy upgrades the cluster's HTTP/1.1 to HTTP/2, as the Go mesh's shouldH2Upgrade:
 * useClientProtocol never; the rule's h2UpgradePolicy UPGRADE on any port (the user says it is
 * HTTP), DO_NOT_UPGRADE never; otherwise the mesh's (withMeshH2Upgrade).
 */
export function upgradesToH2(policy: TrafficPolicy): boolean {
  const http = policy.connectionPool?.http;
  return !http?.useClientProtocol && http?.h2UpgradePolicy === 'UPGRADE';
}

/** The policy for a proxy without the PROXY protocol transport socket (proxyless gRPC). */
export function withoutProxyProtocol(policy: TrafficPolicy): TrafficPolicy {
  const { proxyProtocol: _absent, ...rest } = policy;
  return rest;
}

/** The mesh's h2UpgradePolicy UPGRADE for an HTTP port whose rule sets no policy of its own (DEFAULT). */
export function withMeshH2Upgrade(policy: TrafficPolicy, meshUpgrade: boolean, protocol: Protocol): TrafficPolicy {
  const http = policy.connectionPool?.http;
  if (!meshUpgrade || !isHttpProtocol(protocol) || (http?.h2UpgradePolicy !== undefined && http.h2UpgradePolicy !== 'DEFAULT')) return policy;
  return { ...policy, connectionPool: { ...policy.connectionPool, http: { ...http, h2UpgradePolicy: 'UPGRADE' } } };
}

/**
 * What a TCP proxy to a service takes from its DestinationRule, as the Go mesh: the top-level
 * connection pool's tcp limits, the rule's tunnel and each subset's own.
 */
export function tcpProxyPolicy(rule: RuleTraffic | undefined): TcpProxyPolicy | undefined {
  const tcp = rule?.trafficPolicy?.connectionPool?.tcp;
  const tunnel = rule?.trafficPolicy?.tunnel;
  const subsetTunnels = Object.fromEntries((rule?.subsets ?? []).flatMap((s) => (s.trafficPolicy?.tunnel ? [[s.name, s.trafficPolicy.tunnel]] : [])));
  const hasSubsetTunnels = Object.keys(subsetTunnels).length > 0;
  if (!tcp?.idleTimeout && !tcp?.maxConnectionDuration && !tunnel && !hasSubsetTunnels) return undefined;
  return {
    ...(tcp?.idleTimeout ? { idleTimeout: tcp.idleTimeout } : {}),
    ...(tcp?.maxConnectionDuration ? { maxConnectionDuration: tcp.maxConnectionDuration } : {}),
    ...(tunnel ? { tunnel } : {}),
    ...(hasSubsetTunnels ? { subsetTunnels } : {}),
  };
}

/** splitExternalLocalOriginErrors: local-origin failures counted apart, ejecting at their own count (100 %) when one is set; their success rate off. */
function localOrigin(consecutive: number | undefined) {
  return {
    splitExternalLocalOriginErrors: true,
    ...(consecutive !== undefined && consecutive > 0 ? { consecutiveLocalOriginFailure: consecutive, enforcingConsecutiveLocalOriginFailure: 100 } : {}),
    enforcingLocalOriginSuccessRate: 0,
  };
}

function outlierDetection(od: OutlierDetectionSettings | undefined): Partial<ClusterInit> {
  if (!od) return {};
  // As the Go mesh: a counter the rule names ejects (100 %) when it is above 0, one it leaves out
  // keeps Envoy's default (5 consecutive 5xx enforced, gateway failures not); success-rate ejection
  // stays off; a max_ejection_percent of 0 is Envoy's default (10 %).
  const counter = (n: number | undefined, count: 'consecutive5xx' | 'consecutiveGatewayFailure', enforcing: 'enforcingConsecutive5xx' | 'enforcingConsecutiveGatewayFailure') =>
    n === undefined ? {} : { [count]: n, [enforcing]: n > 0 ? 100 : 0 };
  return {
    outlierDetection: {
      enforcingSuccessRate: 0,
      ...counter(od.consecutive5xxErrors, 'consecutive5xx', 'enforcingConsecutive5xx'),
      ...counter(od.consecutiveGatewayErrors, 'consecutiveGatewayFailure', 'enforcingConsecutiveGatewayFailure'),
      ...(od.interval ? { interval: durationInit(od.interval) } : {}),
      ...(od.baseEjectionTime ? { baseEjectionTime: durationInit(od.baseEjectionTime) } : {}),
      ...(od.maxEjectionPercent !== undefined && od.maxEjectionPercent > 0 ? { maxEjectionPercent: od.maxEjectionPercent } : {}),
      ...(od.splitExternalLocalOriginErrors ? localOrigin(od.consecutiveLocalOriginFailures) : {}),
    },
  };
}

/**
 * The cluster fields a merged policy sets (the HTTP protocol options are the caller's, see
 * commonHttpOptions). `gateway`: built for a router proxy (DestinationRule credentialName applies);
 * `proxyless`: for a proxyless gRPC client (the balancers gRPC has).
 */
export function clusterPolicy(policy: TrafficPolicy, hostname: string, target: { readonly gateway?: boolean; readonly proxyless?: boolean } = {}): Partial<ClusterInit> {
  const od = policy.outlierDetection;
  const byLocality = localityWeighted(policy.loadBalancer?.localityLbSetting, od);
  const commonLbConfig: MessageInitShape<typeof Cluster_CommonLbConfigSchema> = {
    // With outlier detection always set, so that Envoy's 50 % default never applies: minHealthPercent
    // defaults to 0, panic off, as the Go mesh sets it (the Kubernetes case of few endpoints per service).
    ...(od ? { healthyPanicThreshold: { value: od.minHealthPercent ?? 0 } } : {}),
    ...(byLocality ? { localityConfigSpecifier: { case: 'localityWeightedLbConfig', value: {} } } : {}),
  };
  return {
    ...loadBalancer(policy.loadBalancer, target.proxyless),
    ...connectionPool(policy.connectionPool, policy.retryBudget),
    ...outlierDetection(od),
    ...(od || byLocality ? { commonLbConfig } : {}),
    ...upstreamTls(policy.tls, hostname, target.gateway === true),
  };
}

/**
 * The policy with the locality setting in effect for it (the rule's, else the mesh's; none when
 * off), so that what the cluster is built from says whether it balances by locality.
 */
export function withMeshLocalityLb(policy: TrafficPolicy, mesh: LocalityLbSetting | undefined): TrafficPolicy {
  const { localityLbSetting, ...lb } = policy.loadBalancer ?? {};
  const setting = effectiveLocalityLb(mesh, localityLbSetting);
  if (setting === localityLbSetting) return policy;
  return { ...policy, loadBalancer: { ...lb, ...(setting ? { localityLbSetting: setting } : {}) } };
}

/** One outbound cluster a DestinationRule asks for on a port: the port's own, then one per subset. */
export interface ClusterVariant {
  readonly subset: string;
  readonly policy: TrafficPolicy;
  /** The subset's labels (endpoints must carry all of them); undefined for the port's own cluster. */
  readonly labels?: Readonly<Record<string, string>>;
}

/** The rule's spec as this module reads it (the API keeps trafficPolicy opaque). */
export interface RuleTraffic {
  readonly trafficPolicy?: TrafficPolicy;
  readonly subsets: readonly { readonly name: string; readonly labels?: Readonly<Record<string, string>>; readonly trafficPolicy?: TrafficPolicy }[];
}

export function clusterVariants(rule: RuleTraffic | undefined, port: number): ClusterVariant[] {
  if (!rule) return [{ subset: '', policy: {} }];
  return [
    { subset: '', policy: mergeTrafficPolicy(rule.trafficPolicy, undefined, port) },
    ...rule.subsets.map((s) => ({ subset: s.name, policy: mergeTrafficPolicy(rule.trafficPolicy, s.trafficPolicy, port), labels: s.labels ?? {} })),
  ];
}

/** The model's merged rule read as traffic settings (the API validates these sub-trees structurally only). */
export function ruleTraffic(rule: EffectiveRule | undefined): RuleTraffic | undefined {
  if (!rule) return undefined;
  return {
    ...(rule.rule.spec.trafficPolicy ? { trafficPolicy: rule.rule.spec.trafficPolicy as TrafficPolicy } : {}),
    subsets: rule.subsets.map((s) => ({ name: s.name, ...(s.labels ? { labels: s.labels } : {}), ...(s.trafficPolicy ? { trafficPolicy: s.trafficPolicy as TrafficPolicy } : {}) })),
  };
}

/** The route hash policy of a consistent-hash balancer (header, cookie, source IP or query parameter). */
export function routeHashPolicy(policy: TrafficPolicy): HashPolicyInit[] {
  const ch = policy.loadBalancer?.consistentHash;
  if (!ch) return [];
  if (ch.httpHeaderName) return [{ policySpecifier: { case: 'header', value: { headerName: ch.httpHeaderName } } }];
  if (ch.httpCookie) {
    const c = ch.httpCookie;
    const attributes = (c.attributes ?? []).map((a) => ({ name: a.name, value: a.value ?? '' }));
    return [{ policySpecifier: { case: 'cookie', value: { name: c.name, ...(c.path ? { path: c.path } : {}), ...(c.ttl ? { ttl: durationInit(c.ttl) } : {}), ...(attributes.length > 0 ? { attributes } : {}) } } }];
  }
  if (ch.useSourceIp) return [{ policySpecifier: { case: 'connectionProperties', value: { sourceIp: true } } }];
  if (ch.httpQueryParameterName) return [{ policySpecifier: { case: 'queryParameter', value: { name: ch.httpQueryParameterName } } }];
  return [];
}
