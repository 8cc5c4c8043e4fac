// CDS: outbound clusters per service port, inbound clusters to the local application, and the two
// catch-alls (BlackHoleCluster drops, PassthroughCluster forwards to the original destination).
import { create, type MessageInitShape } from '@bufbuild/protobuf';
import { Cluster_DiscoveryType, Cluster_LbPolicy, ClusterSchema, type Cluster } from '../gen/envoy/config/cluster/v3/cluster_pb.js';
import { HttpProtocolOptionsSchema } from '../gen/envoy/extensions/upstreams/http/v3/http_protocol_options_pb.js';
import { isHttp2Protocol, type Protocol, type Service, type ServicePort } from '../model/service.js';
import { pack } from '../envoy/types.js';
import { adsConfigSourceWaiting, seconds } from './common.js';
import { buildLoadAssignment, type EndpointInput } from './endpoint.js';
import { BLACKHOLE_CLUSTER, inboundClusterName, outboundClusterName, PASSTHROUGH_CLUSTER } from './names.js';
import { circuitBreakers, clusterPolicy, commonHttpOptions, connectionPool, type ConnectionPoolSettings, passesThrough, tcpKeepaliveOptions, upgradesToH2, type TcpKeepaliveSettings, type TrafficPolicy } from './traffic-policy.js';
import { meshMtlsFields, type ClusterMtls } from './outbound-mtls.js';
import { withUpstreamProxyProtocol } from './proxy-protocol.js';
import { servicesMetadata, telemetryService, type TelemetryService } from './telemetry-metadata.js';

export interface ClusterOptions {
  /** Seconds (the mesh config's connectTimeout); 10 unless set; a DestinationRule's wins. */
  readonly connectTimeout?: number;
  /** The cluster's name when not the outbound one (a gateway's SNI-DNAT clusters). */
  readonly name?: string;
  /** Built for a router proxy: a DestinationRule's tls.credentialName applies (upstream-tls.ts). */
  readonly gateway?: boolean;
  /** Built for a proxyless gRPC client: the balancers gRPC's xDS client takes (load-balancer.ts). */
  readonly proxyless?: boolean;
  /** The mesh config's tcpKeepalive, under a rule's. */
  readonly tcpKeepalive?: TcpKeepaliveSettings;
}

/** What every cluster takes from the mesh config where its DestinationRule says nothing. */
export type MeshClusterDefaults = Pick<ClusterOptions, 'tcpKeepalive' | 'connectTimeout'>;

/** A DestinationRule's part in one outbound cluster: the subset it is for and the merged policy. */
export interface ClusterTraffic {
  /** Subset name; '' for the service port's own cluster. */
  readonly subset: string;
  readonly policy: TrafficPolicy;
  /** Mesh mTLS of the cluster (auto mTLS, ISTIO_MUTUAL); absent for a proxy without a workload certificate. */
  readonly mtls?: ClusterMtls;
}

type ClusterInit = Exclude<MessageInitShape<typeof ClusterSchema>, Cluster>;

const HTTP_PROTOCOL_OPTIONS = 'envoy.extensions.upstreams.http.v3.HttpProtocolOptions';
const DEFAULT_CONNECT_TIMEOUT = 10;

function cluster(name: string, type: Cluster_DiscoveryType, opts: ClusterOptions, init: Omit<ClusterInit, 'name' | 'clusterDiscoveryType'> = {}): Cluster {
  return create(ClusterSchema, {
    name,
    clusterDiscoveryType: { case: 'type' as const, value: type },
    connectTimeout: seconds(opts.connectTimeout ?? DEFAULT_CONNECT_TIMEOUT),
    ...init,
  });
}

type UpstreamProtocolOptions = NonNullable<MessageInitShape<typeof HttpProtocolOptionsSchema>['upstreamProtocolOptions']>;

/**
 * The upstream protocol, as the Go mesh's setUpstreamProtocol then its traffic policy: HTTP/2 for
 * gRPC and h2c ports (the rule's http.maxConcurrentStreams its streams per connection); on a sidecar, the downstream's protocol for a port of unknown protocol (it is
 * sniffed, and an h2c client must stay HTTP/2); a rule's h2UpgradePolicy UPGRADE makes it HTTP/2,
 * and its useClientProtocol the downstream's on any port; HTTP/1.1 otherwise.
 */
function upstreamProtocol(protocol: Protocol, policy: TrafficPolicy | undefined, sidecar: boolean): UpstreamProtocolOptions {
  const downstream: UpstreamProtocolOptions = { case: 'useDownstreamProtocolConfig', value: { httpProtocolOptions: {}, http2ProtocolOptions: {} } };
  if (policy?.connectionPool?.http?.useClientProtocol) return downstream;
  if (isHttp2Protocol(protocol) || (policy !== undefined && upgradesToH2(policy))) {
    // maxConcurrentStreams reaches explicit HTTP/2 only, as in the Go mesh.
    const streams = policy?.connectionPool?.http?.maxConcurrentStreams;
    return { case: 'explicitHttpConfig', value: { protocolConfig: { case: 'http2ProtocolOptions', value: streams ? { maxConcurrentStreams: streams } : {} } } };
  }
  if (sidecar && protocol === 'UNSUPPORTED') return downstream;
  return { case: 'explicitHttpConfig', value: { protocolConfig: { case: 'httpProtocolOptions', value: {} } } };
}

/**
 * The upstream protocol (HTTP/1.1, Envoy's default, needs no options) and the connection pool's
 * idle timeout, requests per connection and connection duration. `sidecar`: not built for a router.
 */
function protocolOptions(protocol: Protocol, policy: TrafficPolicy | undefined, sidecar: boolean): Pick<ClusterInit, 'typedExtensionProtocolOptions'> {
  const common = commonHttpOptions(policy?.connectionPool);
  const upstream = upstreamProtocol(protocol, policy, sidecar);
  const http1 = upstream.case === 'explicitHttpConfig' && upstream.value.protocolConfig?.case === 'httpProtocolOptions';
  if (http1 && !common) return {};
  return {
    typedExtensionProtocolOptions: {
      [HTTP_PROTOCOL_OPTIONS]: pack(HttpProtocolOptionsSchema, { ...(common ? { commonHttpProtocolOptions: common } : {}), upstreamProtocolOptions: upstream }),
    },
  };
}

/**
 * `outbound|<port>|<subset>|<host>`: by resolution, EDS over ADS (STATIC), STRICT_DNS / LOGICAL_DNS
 * with the endpoints inline (DNS, DNS_ROUND_ROBIN; a subset's already filtered by its labels), or
 * ORIGINAL_DST (NONE, or any resolution under `loadBalancer.simple: PASSTHROUGH`, as the Go mesh:
 * the client's own destination, no endpoints); then the DestinationRule's merged policy, when there
 * is one, its proxyProtocol around the transport the rest gives.
 */
export function buildOutboundCluster(
  service: Service,
  port: ServicePort,
  endpoints: readonly EndpointInput[],
  opts: ClusterOptions = {},
  traffic: ClusterTraffic = { subset: '', policy: {} },
): Cluster {
  const name = opts.name ?? outboundClusterName(port.port, service.hostname, traffic.subset);
  const transport = withUpstreamProxyProtocol({ ...clusterPolicy(traffic.policy, service.hostname, opts), ...meshMtlsFields(service, port, traffic.subset, traffic.policy, traffic.mtls) }, traffic.policy.proxyProtocol);
  // The service for the stats filter's destination labels; proxyless clients have no stats filter (nor does the Go mesh give them the metadata).
  const metadata = opts.proxyless ? {} : servicesMetadata([telemetryService(service)]);
  const proto = { ...protocolOptions(port.protocol, traffic.policy, opts.gateway !== true), ...tcpKeepaliveOptions(opts.tcpKeepalive, traffic.policy), ...transport, ...metadata };
  if (service.resolution === 'NONE' || passesThrough(traffic.policy)) {
    // The original destination is the only choice: a rule's balancer cannot apply.
    return cluster(name, Cluster_DiscoveryType.ORIGINAL_DST, opts, { ...proto, lbPolicy: Cluster_LbPolicy.CLUSTER_PROVIDED, lbConfig: { case: undefined } });
  }
  switch (service.resolution) {
    case 'STATIC':
      return cluster(name, Cluster_DiscoveryType.EDS, opts, {
        edsClusterConfig: { edsConfig: adsConfigSourceWaiting(), serviceName: name },
        lbPolicy: Cluster_LbPolicy.ROUND_ROBIN,
        ...proto,
      });
    case 'DNS':
    case 'DNS_ROUND_ROBIN':
      return cluster(name, service.resolution === 'DNS' ? Cluster_DiscoveryType.STRICT_DNS : Cluster_DiscoveryType.LOGICAL_DNS, opts, {
        loadAssignment: buildLoadAssignment(name, service.resolution === 'DNS' ? endpoints : endpoints.slice(0, 1)),
        lbPolicy: Cluster_LbPolicy.ROUND_ROBIN,
        ...proto,
      });
  }
}

/**
 * `inbound|<port>||`: STATIC, to the application at `address:targetPort` (usually 127.0.0.1), or,
 * without a target, ORIGINAL_DST: to the connection's own destination (the pod's address). `pool`:
 * its connection pool (inbound.ts), applied as the Go mesh applies one to an inbound cluster:
 * limits, timeouts, keepalive and useClientProtocol, never an h2 upgrade. `services`: the services
 * the workload serves on the port (inbound.ts), in the metadata the stats filter reads.
 */
export function buildInboundCluster(port: number, target: { address: string; port: number } | undefined, protocol: Protocol, opts: ClusterOptions = {}, pool?: ConnectionPoolSettings, services: readonly TelemetryService[] = []): Cluster {
  const name = inboundClusterName(port);
  const http = pool?.http ? { ...pool.http, h2UpgradePolicy: undefined } : undefined;
  const policy = pool ? { connectionPool: { ...pool, ...(http ? { http } : {}) } } : undefined;
  const common = { ...protocolOptions(protocol, policy, true), ...tcpKeepaliveOptions(opts.tcpKeepalive, policy), ...connectionPool(pool), ...servicesMetadata(services) };
  if (!target) return cluster(name, Cluster_DiscoveryType.ORIGINAL_DST, opts, { lbPolicy: Cluster_LbPolicy.CLUSTER_PROVIDED, ...common });
  return cluster(name, Cluster_DiscoveryType.STATIC, opts, {
    loadAssignment: buildLoadAssignment(name, [{ address: target.address, port: target.port, locality: { region: '', zone: '', subZone: '' }, weight: 1 }]),
    ...common,
  });
}

/** A cluster with no endpoints: connections routed to it fail (REGISTRY_ONLY, unknown routes). */
export function blackHoleCluster(opts: ClusterOptions = {}): Cluster {
  return cluster(BLACKHOLE_CLUSTER, Cluster_DiscoveryType.STATIC, opts);
}

/** Forwards to the connection's original destination (ALLOW_ANY traffic to unknown hosts). */
export function passthroughCluster(opts: ClusterOptions = {}): Cluster {
  return cluster(PASSTHROUGH_CLUSTER, Cluster_DiscoveryType.ORIGINAL_DST, opts, { lbPolicy: Cluster_LbPolicy.CLUSTER_PROVIDED, ...tcpKeepaliveOptions(opts.tcpKeepalive, undefined), ...circuitBreakers(undefined) });
}
