// Router proxies (node id `router~...`): the Gateways that select them merged per port, and their
// listeners and route configurations. Clusters and endpoints are in gateway-clusters.ts.
import type { Listener } from '../../gen/envoy/config/listener/v3/listener_pb.js';
import type { RouteConfiguration } from '../../gen/envoy/config/route/v3/route_pb.js';
import type { HttpFilter } from '../../gen/envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager_pb.js';
import type { Filter as NetworkFilter } from '../../gen/envoy/config/listener/v3/listener_components_pb.js';
import { gatewaysForProxy, hasAutoPassthrough, mergeGateways, type MergedGateway } from '../../model/gateway.js';
import { ruleTraffic } from '../../networking/traffic-policy.js';
import type { SniTarget } from '../../networking/gateway-sni.js';
import type { Proxy } from '../../model/proxy.js';
import type { PushContext } from '../../model/push-context.js';
import type { PathNormalization } from '../../networking/common.js';
import { buildGatewayListeners } from '../../networking/gateway.js';
import { buildGatewayRouteConfig, emptyGatewayRouteConfig } from '../../networking/gateway-route.js';
import { memo } from '../cache.js';
import { proxyAccessLogs, type AccessLogging } from './access-logs.js';
import { proxyTelemetry } from './telemetry.js';
import type { TelemetryProviders } from '../../model/telemetry-providers.js';
import type { HttpRetry } from '../../networking/http-route.js';
import { hashPolicies, serviceTcpProxyPolicy } from './sidecar.js';

export interface GatewayOptions {
  /** PILOT_SCOPE_GATEWAY_TO_NAMESPACE: a gateway proxy is selected only by Gateways of its namespace. */
  readonly scopeGatewayToNamespace?: boolean;
  /** PILOT_FILTER_GATEWAY_CLUSTER_CONFIG: a gateway gets only the clusters its routes lead to. */
  readonly filterGatewayClusters?: boolean;
  /** The security filters of HTTP connection managers (jwt_authn, rbac), as for a sidecar's inbound side. */
  readonly inboundHttpFilters?: (proxy: Proxy, push: PushContext) => readonly HttpFilter[];
  /** The network rbac filters of its TCP and TLS-passthrough chains, as for a sidecar's TCP chains. */
  readonly inboundNetworkFilters?: (proxy: Proxy, push: PushContext) => readonly NetworkFilter[];
  readonly pathNormalization?: PathNormalization;
  /** MESH_DEFAULT_REQUEST_TIMEOUT, seconds. */
  readonly defaultRequestTimeout?: number;
  /** Mesh config defaultHttpRetryPolicy: the retries of routes that set none. */
  readonly defaultHttpRetryPolicy?: HttpRetry;
  /** A server dropped while merging (counted in pilot_total_rejected_configs{kind="Gateway"}). */
  readonly onGatewayRejected?: (message: string) => void;
  /** Other problems of the gateway's config (a server no VirtualService routes, a repeated SNI host). */
  readonly onProblem?: (message: string) => void;
  /** The mesh config's accessLogFile and Telemetry providers: a gateway logs as the CLIENT side, as in the Go mesh. */
  readonly accessLogging?: AccessLogging;
  /** The mesh config's metrics providers: the gateway class's metadata exchange and stats filters (./telemetry.ts); absent = none. */
  readonly metrics?: TelemetryProviders;
}

export function isRouter(proxy: Proxy): boolean {
  return proxy.type === 'router';
}

/**
 * The proxy's merged gateway, once per snapshot for proxies with the same namespace, labels and
 * service ports. A gateway service's port is listened on as its target port, as in the Go mesh.
 */
export function mergedGatewayFor(proxy: Proxy, push: PushContext, opts: GatewayOptions): MergedGateway {
  const instances = push.proxyInstances(proxy);
  const targets = new Map(instances.map((i) => [i.servicePort.port, i.endpointPort]));
  const key = `gateway:${proxy.namespace}:${JSON.stringify(Object.entries(proxy.labels).sort())}:${JSON.stringify([...targets].sort())}:${opts.scopeGatewayToNamespace ?? false}`;
  return memo(push, key, () => {
    const merged = mergeGateways(gatewaysForProxy(push.gateways.gateways, proxy, opts.scopeGatewayToNamespace ?? false), (p) => targets.get(p) ?? p);
    merged.rejected.forEach((m) => opts.onGatewayRejected?.(m));
    return merged;
  });
}

/** Every service port the proxy sees, with its DestinationRule's subset names (AUTO_PASSTHROUGH's candidates). */
export function sniTargets(proxy: Proxy, push: PushContext): SniTarget[] {
  return memo(push.sidecarScope(proxy), `sniTargets:${push.traffic.selectorKey(proxy)}`, () =>
    push.sidecarScope(proxy).services.flatMap((service) => {
      const rule = ruleTraffic(push.traffic.destinationRule(proxy, service.hostname, service.namespace));
      return service.ports.map((port) => ({ service, port, subsets: (rule?.subsets ?? []).map((s) => s.name) }));
    }),
  );
}

function servicePorts(proxy: Proxy, push: PushContext): Record<string, number[]> {
  return Object.fromEntries(push.sidecarScope(proxy).services.map((s) => [s.hostname, s.ports.map((p) => p.port)]));
}

export function gatewayListeners(proxy: Proxy, push: PushContext, opts: GatewayOptions = {}): Listener[] {
  const merged = mergedGatewayFor(proxy, push, opts);
  const logs = proxyAccessLogs(proxy, push, opts.accessLogging).client;
  const telemetry = proxyTelemetry(proxy, push, opts.metrics, 'gateway');
  return buildGatewayListeners(merged, {
    domain: push.domain,
    virtualServicesFor: (gw) => push.gateways.virtualServicesFor(gw, proxy.namespace),
    servicePorts: servicePorts(proxy, push),
    httpFilters: opts.inboundHttpFilters?.(proxy, push) ?? [],
    networkFilters: opts.inboundNetworkFilters?.(proxy, push) ?? [],
    ...(opts.pathNormalization ? { pathNormalization: opts.pathNormalization } : {}),
    ...(opts.onProblem ? { onProblem: opts.onProblem } : {}),
    ...(logs ? { accessLogs: logs } : {}),
    ...(telemetry ? { telemetry } : {}),
    ...(hasAutoPassthrough(merged) ? { sniTargets: sniTargets(proxy, push) } : {}),
    tcpPolicies: (hostname) => {
      const s = push.sidecarScope(proxy).services.find((x) => x.hostname === hostname);
      return s ? serviceTcpProxyPolicy(proxy, push, s) : undefined;
    },
  });
}

/**
 * The gateway route configurations `names` (all of the merged gateway's without names). A name no
 * server has any more is answered with an empty configuration, as the Go mesh does, so that the
 * proxy's listener does not wait for it.
 */
export function gatewayRoutes(proxy: Proxy, push: PushContext, names: ReadonlySet<string> | undefined, opts: GatewayOptions = {}): RouteConfiguration[] {
  const merged = mergedGatewayFor(proxy, push, opts);
  const routeOpts = {
    domain: push.domain,
    proxyNamespace: proxy.namespace,
    proxyLabels: proxy.labels,
    virtualServicesFor: (gw: string) => push.gateways.virtualServicesFor(gw, proxy.namespace),
    servicePorts: servicePorts(proxy, push),
    hashPolicies: hashPolicies(proxy, push),
    defaultTimeout: opts.defaultRequestTimeout ?? 0,
    ...(opts.defaultHttpRetryPolicy ? { defaultRetries: opts.defaultHttpRetryPolicy } : {}),
  };
  const wanted = names ? [...names] : [...merged.byRouteName.keys()];
  return wanted.sort().map((n) => {
    const servers = merged.byRouteName.get(n);
    return servers ? buildGatewayRouteConfig(n, servers, routeOpts) : emptyGatewayRouteConfig(n);
  });
}
