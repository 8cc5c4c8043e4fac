// CDS and EDS for router proxies: a sidecar's outbound clusters (every visible service, or with
// PILOT_FILTER_GATEWAY_CLUSTER_CONFIG only the services the gateway's routes lead to), and, when
// one of its servers is AUTO_PASSTHROUGH, the SNI-DNAT clusters of every service port it sees
// (networking/gateway-sni.ts), as the Go mesh builds them.
import type { Cluster } from '../../gen/envoy/config/cluster/v3/cluster_pb.js';
import type { TcpKeepaliveSettings } from '../../networking/traffic-policy.js';
import type { ClusterLoadAssignment } from '../../gen/envoy/config/endpoint/v3/endpoint_pb.js';
import { hasAutoPassthrough } from '../../model/gateway.js';
import { virtualServiceDestinations } from '../../model/gateway-destinations.js';
import type { Proxy } from '../../model/proxy.js';
import type { PushContext } from '../../model/push-context.js';
import type { ServiceInstance } from '../../model/service.js';
import { buildLoadAssignment } from '../../networking/endpoint.js';
import { buildSniDnatCluster, mtlsInstances, reachableBySni, sniDnatClusterName, type SniTarget } from '../../networking/gateway-sni.js';
import { parseClusterName } from '../../networking/names.js';
import { clusterVariants, ruleTraffic, type ClusterVariant } from '../../networking/traffic-policy.js';
import { labelsMatch } from '../../model/selection.js';
import { portMtlsMode, workloadMtls } from '../../security/mtls/peer-authentication.js';
import { memo, type XdsCache } from '../cache.js';
import { mergedGatewayFor, sniTargets, type GatewayOptions } from './gateway.js';
import { clusterLoadAssignments, toEndpoints } from './sidecar-endpoints.js';
import type { LocalityLbSetting } from '../../networking/locality-lb.js';
import { meshClusterDefaults, sidecarClusters } from './sidecar.js';
import type { MeshMtlsSettings } from './mtls.js';

/**
 * PILOT_FILTER_GATEWAY_CLUSTER_CONFIG: the hosts the routes of VirtualServices naming the proxy's
 * Gateways lead to; undefined when the setting is off (every visible service).
 */
export function gatewayServiceHosts(proxy: Proxy, push: PushContext, opts: GatewayOptions): ReadonlySet<string> | undefined {
  if (!opts.filterGatewayClusters) return undefined;
  const merged = mergedGatewayFor(proxy, push, opts);
  const gateways = [...new Set(merged.ports.flatMap((p) => p.servers.map((s) => s.gateway)))].sort();
  const scoped = opts.scopeGatewayToNamespace ?? false;
  return memo(push, `gatewayHosts:${scoped}:${gateways.join(',')}`, () => {
    const hosts = new Set<string>();
    for (const gw of gateways) {
      const gwNamespace = gw.slice(0, gw.indexOf('/'));
      for (const vs of push.gateways.boundTo(gw)) virtualServiceDestinations(vs, push.domain, scoped ? gwNamespace : undefined).forEach((h) => hosts.add(h));
    }
    return hosts;
  });
}

/** Whether an outbound cluster (or its load assignment) is for one of `hosts`; other clusters (BlackHole) are kept. */
function keeps(name: string, hosts: ReadonlySet<string> | undefined): boolean {
  const parts = parseClusterName(name);
  return !hosts || !parts || parts.direction !== 'outbound' || hosts.has(parts.hostname);
}

/** The DestinationRule TLS mode of a cluster; `DISABLE` when it sets `tls` without a mode, as the API's default. */
function ruleTlsMode(v: ClusterVariant): string | undefined {
  return v.policy.tls ? (v.policy.tls.mode ?? 'DISABLE') : undefined;
}

interface SniCluster {
  readonly target: SniTarget;
  readonly variant: ClusterVariant;
  readonly name: string;
  readonly instances: readonly ServiceInstance[];
}

/** The SNI-DNAT clusters of every service port the proxy sees (service, port, subset), with the instances they may reach. */
function sniClusters(proxy: Proxy, push: PushContext): SniCluster[] {
  return memo(push.sidecarScope(proxy), `sniClusters:${push.traffic.selectorKey(proxy)}`, () => {
    const mtlsDisabled = (i: ServiceInstance) => {
      const policies = [...push.policiesInNamespace('PeerAuthentication', push.rootNamespace), ...(i.namespace === push.rootNamespace ? [] : push.policiesInNamespace('PeerAuthentication', i.namespace))];
      return portMtlsMode(workloadMtls({ namespace: i.namespace, labels: i.labels }, policies, push.rootNamespace), i.endpointPort) === 'DISABLE';
    };
    return sniTargets(proxy, push)
      .filter(reachableBySni)
      .flatMap((target) => {
        const rule = ruleTraffic(push.traffic.destinationRule(proxy, target.service.hostname, target.service.namespace));
        const all = push.instances(target.service, target.port.port);
        return clusterVariants(rule, target.port.port).map((variant) => ({
          target,
          variant,
          name: sniDnatClusterName(target.port.port, target.service.hostname, variant.subset),
          instances: mtlsInstances(variant.labels ? all.filter((i) => labelsMatch(variant.labels, i.labels)) : all, ruleTlsMode(variant), mtlsDisabled),
        }));
      });
  });
}

export interface GatewayClusterOptions extends GatewayOptions {
  readonly cache?: XdsCache;
  readonly mtls?: MeshMtlsSettings;
  readonly localityLb?: LocalityLbSetting;
  readonly h2Upgrade?: boolean;
  readonly tcpKeepalive?: TcpKeepaliveSettings;
  readonly connectTimeout?: number;
}

/** The router proxy's clusters: outbound ones (filtered), BlackHole and Passthrough, then the SNI-DNAT ones. */
export function gatewayClusters(proxy: Proxy, push: PushContext, opts: GatewayClusterOptions): Cluster[] {
  const hosts = gatewayServiceHosts(proxy, push, opts);
  const clusters = sidecarClusters(proxy, push, false, opts.cache, opts.mtls, opts).filter((c) => keeps(c.name, hosts));
  if (!hasAutoPassthrough(mergedGatewayFor(proxy, push, opts))) return clusters;
  // Built once per scope and snapshot: every gateway proxy of the scope gets the same messages.
  const mesh = meshClusterDefaults(opts);
  const sni = memo(push.sidecarScope(proxy), `sniDnatCds:${push.traffic.selectorKey(proxy)}:${JSON.stringify(mesh)}`, () =>
    sniClusters(proxy, push).map((c) => buildSniDnatCluster(c.target.service, c.target.port, toEndpoints(c.instances), c.variant, mesh)),
  );
  return [...clusters, ...sni];
}

/** The router proxy's load assignments (`names`, or all): the outbound ones (filtered) and those of its SNI-DNAT clusters. */
export function gatewayLoadAssignments(proxy: Proxy, push: PushContext, names: ReadonlySet<string> | undefined, opts: GatewayClusterOptions): ClusterLoadAssignment[] {
  const hosts = gatewayServiceHosts(proxy, push, opts);
  const outbound = clusterLoadAssignments(proxy, push, names, opts.cache, opts.localityLb).filter((c) => keeps(c.clusterName, hosts));
  if (!hasAutoPassthrough(mergedGatewayFor(proxy, push, opts))) return outbound;
  const sni = memo(push.sidecarScope(proxy), `sniDnatEds:${push.traffic.selectorKey(proxy)}`, () =>
    sniClusters(proxy, push)
      .filter((c) => c.target.service.resolution === 'STATIC')
      .map((c) => buildLoadAssignment(c.name, toEndpoints(c.instances))),
  );
  return [...outbound, ...sni.filter((c) => !names || names.has(c.clusterName))];
}
