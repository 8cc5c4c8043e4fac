// AUTO_PASSTHROUGH gateway servers, as the Go mesh builds them: the client (a sidecar of another
// network, say) sets the SNI to the name of the cluster it wants, `outbound_.<port>_.<subset>_.<host>`,
// and the gateway forwards the still-encrypted mesh mTLS bytes there. One filter chain per service
// port and DestinationRule subset whose host the server's hosts cover, matched by that name as SNI
// and by the mesh's mTLS ALPNs, proxying TCP to an "SNI-DNAT" cluster of the same name: the
// service's outbound cluster without any TLS of its own, whose endpoints are only those that speak
// mesh mTLS (the gateway cannot see whether the passed-through bytes are mTLS).
import type { MessageInitShape } from '@bufbuild/protobuf';
import type { Cluster } from '../gen/envoy/config/cluster/v3/cluster_pb.js';
import type { FilterChainSchema } from '../gen/envoy/config/listener/v3/listener_components_pb.js';
import { hostMatches } from '../model/selection.js';
import type { Service, ServiceInstance, ServicePort } from '../model/service.js';
import { ALL_MESH_ALPNS } from '../security/mtls/tls-context.js';
import { buildOutboundCluster, type ClusterTraffic, type MeshClusterDefaults } from './cluster.js';
import type { EndpointInput } from './endpoint.js';
import { MESH_TLS_MODE, TLS_MODE_LABEL } from './outbound-mtls.js';
import { tcpProxyFilter } from './common.js';
import type { AccessLogs } from './access-log.js';
import { withTcpTelemetry, type ListenerTelemetry } from './telemetry-filters.js';

type ChainInit = Exclude<MessageInitShape<typeof FilterChainSchema>, { $typeName: string }>;

/** The Go mesh's DNS-SRV style subset key, the SNI an AUTO_PASSTHROUGH client sends: `outbound_.<port>_.<subset>_.<host>`. */
export function sniDnatClusterName(port: number, hostname: string, subset = ''): string {
  return `outbound_.${port}_.${subset}_.${hostname}`;
}

/** A service port an AUTO_PASSTHROUGH server may forward to, with its DestinationRule's subset names. */
export interface SniTarget {
  readonly service: Service;
  readonly port: ServicePort;
  readonly subsets: readonly string[];
}

/** Service ports inside the mesh (not MESH_EXTERNAL) and not UDP: those SNI-DNAT clusters exist for. */
export function reachableBySni(t: SniTarget): boolean {
  return !t.service.external && t.port.protocol !== 'UDP';
}

/** The service ports an AUTO_PASSTHROUGH server reaches: those whose host one of its SNI hosts covers, in the order given. */
export function sniTargetsFor(serverHosts: readonly string[], targets: readonly SniTarget[]): SniTarget[] {
  return targets.filter((t) => reachableBySni(t) && serverHosts.some((h) => hostMatches(h, t.service.hostname)));
}

/**
 * The chains of an AUTO_PASSTHROUGH server: per target, its port's own cluster then each subset,
 * each matched by the cluster name as SNI and the mesh mTLS ALPNs. A name already claimed on the
 * listener (another server covering the same host) is not repeated: Envoy refuses two chains with
 * one match. No security filters (as the Go mesh), the gateway's stats filters.
 */
export function autoPassthroughChains(serverHosts: readonly string[], targets: readonly SniTarget[], claimed: Set<string>, logs?: AccessLogs, telemetry?: ListenerTelemetry): ChainInit[] {
  const chains: ChainInit[] = [];
  for (const t of sniTargetsFor(serverHosts, targets)) {
    for (const subset of ['', ...t.subsets]) {
      const name = sniDnatClusterName(t.port.port, t.service.hostname, subset);
      if (claimed.has(name)) continue;
      claimed.add(name);
      chains.push({ name, filterChainMatch: { serverNames: [name], applicationProtocols: [...ALL_MESH_ALPNS] }, filters: withTcpTelemetry(telemetry, [], tcpProxyFilter(name, undefined, '', logs)) });
    }
  }
  return chains;
}

/**
 * The SNI-DNAT cluster of a service port (subset): its outbound cluster under the SNI name, with the
 * DestinationRule's policy but none of its TLS, no mesh mTLS (the client's TLS passes through) and
 * no PROXY protocol header (the Go mesh applies neither in its SNI-DNAT cluster mode);
 * `mesh`: the mesh config's tcpKeepalive and connectTimeout.
 */
export function buildSniDnatCluster(service: Service, port: ServicePort, endpoints: readonly EndpointInput[], traffic: ClusterTraffic, mesh: MeshClusterDefaults = {}): Cluster {
  const { tls: _clientTls, proxyProtocol: _header, ...policy } = traffic.policy;
  const name = sniDnatClusterName(port.port, service.hostname, traffic.subset);
  return buildOutboundCluster(service, port, endpoints, { name, ...mesh }, { subset: traffic.subset, policy });
}

/**
 * The instances an SNI-DNAT cluster may send to: all of them when the DestinationRule's TLS mode for
 * the cluster is ISTIO_MUTUAL, none when it sets another mode, else those with a sidecar
 * (`security.mesh.io/tlsMode: mesh`) whose PeerAuthentication does not DISABLE mTLS (`mtlsDisabled`).
 */
export function mtlsInstances(instances: readonly ServiceInstance[], ruleTlsMode: string | undefined, mtlsDisabled: (i: ServiceInstance) => boolean): ServiceInstance[] {
  if (ruleTlsMode !== undefined) return ruleTlsMode === 'ISTIO_MUTUAL' ? [...instances] : [];
  return instances.filter((i) => i.labels[TLS_MODE_LABEL] === MESH_TLS_MODE && !mtlsDisabled(i));
}
