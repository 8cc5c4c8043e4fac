// Envoy-style proxies: the resources of one proxy from a PushContext, per xDS type. Pure functions
// of (proxy, push, options); the ResourceGenerator adapters are in ./index.ts.
import { isIP } from 'node:net';
import type { Cluster } from '../../gen/envoy/config/cluster/v3/cluster_pb.js';
import type { Listener } from '../../gen/envoy/config/listener/v3/listener_pb.js';
import type { RouteConfiguration } from '../../gen/envoy/config/route/v3/route_pb.js';
import type { VirtualHost } from '../../gen/envoy/config/route/v3/route_components_pb.js';
import type { HttpFilter } from '../../gen/envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager_pb.js';
import type { Filter as NetworkFilter } from '../../gen/envoy/config/listener/v3/listener_components_pb.js';
import { allocatedFor, withAllocatedAddresses } from '../../model/auto-allocate.js';
import type { Proxy } from '../../model/proxy.js';
import type { PushContext, SidecarScope } from '../../model/push-context.js';
import { isHeadless, isHttpProtocol, ORCHESTRATOR_REGISTRY, type Service } from '../../model/service.js';
import { blackHoleCluster, buildInboundCluster, buildOutboundCluster, passthroughCluster, type MeshClusterDefaults } from '../../networking/cluster.js';
import { bindsOwnListener, inboundPorts, type InboundPorts } from '../../networking/inbound.js';
import { buildIngressListeners, buildOutboundListeners, buildVirtualInbound, buildVirtualOutbound, sniffedProtocol, type InboundOptions, type InboundPort, type ListenerConflict } from '../../networking/listener.js';
import { accessLogsKey, proxyAccessLogs, type AccessLogging } from './access-logs.js';
import { proxyTelemetry, telemetryKey } from './telemetry.js';
import type { TelemetryProviders } from '../../model/telemetry-providers.js';
import type { HttpRetry } from '../../networking/http-route.js';
import { usesAutoAllocation } from '../../networking/name-table.js';
import { LOCALHOST, outboundClusterName, WILDCARD_ADDRESS } from '../../networking/names.js';
import { inMeshName, nonServiceHosts, nonServiceVirtualHosts, outboundRouteConfig, routedByVirtualService, serviceVirtualHost, type OutboundRouteOptions } from '../../networking/route.js';
import { clusterVariants, routeHashPolicy, ruleTraffic, tcpProxyPolicy, withMeshH2Upgrade, withMeshLocalityLb, withoutProxyProtocol, type TcpKeepaliveSettings } from '../../networking/traffic-policy.js';
import type { TcpProxyPolicy } from '../../networking/common.js';
import { DEFAULT_LOCALITY_LB, type LocalityLbSetting } from '../../networking/locality-lb.js';
import type { HashPolicyInit } from '../../networking/http-route.js';
import type { PathNormalization } from '../../networking/common.js';
import { cachedIn, cacheKey, memo, memoPair, type XdsCache } from '../cache.js';
import { identityKey, perObject } from '../../common/same-inputs.js';
import { clusterMtls, inboundMtls, type MeshMtlsSettings } from './mtls.js';
import { subsetInstances, toEndpoints } from './sidecar-endpoints.js';
import { isGrpc } from './context.js';
import { portMtlsMode } from '../../security/mtls/peer-authentication.js';
import type { L4RouteContext } from '../../networking/tcp-route.js';

export interface SidecarOptions {
  /** The security filters of the proxy's inbound HTTP chains, in order (jwt_authn, rbac). */
  readonly inboundHttpFilters?: (proxy: Proxy, push: PushContext) => readonly HttpFilter[];
  /** The security filters of the proxy's inbound TCP chains, before tcp_proxy (network rbac). */
  readonly inboundNetworkFilters?: (proxy: Proxy, push: PushContext) => readonly NetworkFilter[];
  /** PILOT_ENABLE_PROTOCOL_SNIFFING_FOR_INBOUND. */
  readonly inboundSniffing?: boolean;
  /** PILOT_ENABLE_PROTOCOL_SNIFFING_FOR_OUTBOUND. */
  readonly outboundSniffing?: boolean;
  /** PILOT_INBOUND_PROTOCOL_DETECTION_TIMEOUT, seconds. */
  readonly detectionTimeout?: number;
  /** MESH_DEFAULT_REQUEST_TIMEOUT, seconds: the timeout of outbound routes that set none; 0 = none. */
  readonly defaultRequestTimeout?: number;
  /** Mesh config defaultHttpRetryPolicy: the retries of routes that set none (VirtualService routes and default routes). */
  readonly defaultHttpRetryPolicy?: HttpRetry;
  /** Mesh config connectTimeout, seconds: every cluster's unless its DestinationRule sets one; 10 when unset. */
  readonly connectTimeout?: number;
  /** Mesh config pathNormalization of every HTTP connection manager; default BASE. */
  readonly pathNormalization?: PathNormalization;
  /** Mesh config localityLbSetting: locality failover where a DestinationRule sets none; the mesh default when absent. */
  readonly localityLb?: LocalityLbSetting;
  /** Mesh config h2UpgradePolicy UPGRADE: outbound clusters of HTTP ports speak HTTP/2 where a DestinationRule does not say otherwise. */
  readonly h2Upgrade?: boolean;
  /** Mesh config tcpKeepalive: every outbound, inbound and passthrough cluster's, under a DestinationRule's. */
  readonly tcpKeepalive?: TcpKeepaliveSettings;
  /** PILOT_HTTP10: HTTP connection managers accept HTTP/1.0 (a proxy's HTTP10 metadata "1" asks the same). */
  readonly http10?: boolean;
  /** PILOT_ENABLE_LOOP_BLOCKER (default true): virtualOutbound refuses connections made to 15001 itself. */
  readonly loopBlocker?: boolean;
  /** PILOT_SIDECAR_USE_REMOTE_ADDRESS: outbound HTTP connection managers set use_remote_address. */
  readonly sidecarUseRemoteAddress?: boolean;
  /** Reports user errors found while generating (bad Sidecar fields). */
  readonly onProblem?: (message: string) => void;
  /** An ingress listener that loses to an earlier one on the same port. */
  readonly onInboundConflict?: (message: string) => void;
  /** Reports outbound listener conflicts (counted in the pilot_conflict_outbound_listener_* gauges). */
  readonly onConflict?: (conflict: ListenerConflict) => void;
  /** Built messages kept across snapshots, keyed by their inputs (see ../cache.ts). */
  readonly cache?: XdsCache;
  /** PILOT_ENABLE_HEADLESS_SERVICE_POD_LISTENERS: an outbound listener per Pod of a headless service. */
  readonly headlessPodListeners?: boolean;
  /** Mesh mTLS: PeerAuthentication on inbound chains, auto mTLS on outbound clusters; absent = plaintext. */
  readonly mtls?: MeshMtlsSettings;
  /** The mesh config's accessLogFile and Telemetry providers: each proxy's loggers per side (./access-logs.ts); absent = none. */
  readonly accessLogging?: AccessLogging;
  /** The mesh config's metrics providers: each proxy's metadata exchange and stats filters per listener class (./telemetry.ts); absent = none. */
  readonly metrics?: TelemetryProviders;
}

/**
 * The Pods' addresses of the orchestrator's headless services (no address, resolution NONE), as the
 * Go mesh builds per-Pod listeners for them; only IP addresses.
 */
function headlessPods(services: readonly Service[], push: PushContext): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  for (const s of services) {
    if (s.registry !== ORCHESTRATOR_REGISTRY || !isHeadless(s)) continue;
    out[`${s.namespace}/${s.hostname}`] = [...new Set(push.instances(s).map((i) => i.address).filter((a) => isIP(a) !== 0))].sort();
  }
  return out;
}

/** What the DestinationRule the proxy sees for the service gives the TCP proxies to it (tcp limits, tunnels). */
export function serviceTcpProxyPolicy(proxy: Proxy, push: PushContext, s: Service): TcpProxyPolicy | undefined {
  return tcpProxyPolicy(ruleTraffic(push.traffic.destinationRule(proxy, s.hostname, s.namespace)));
}

/** What the TCP proxies to services with a port that is not HTTP take from their DestinationRules, by hostname. */
function tcpProxyPoliciesOf(proxy: Proxy, push: PushContext, services: readonly Service[]): Record<string, TcpProxyPolicy> {
  const out: Record<string, TcpProxyPolicy> = {};
  for (const s of services) {
    if (s.ports.every((p) => isHttpProtocol(p.protocol))) continue;
    const policy = serviceTcpProxyPolicy(proxy, push, s);
    if (policy && !out[s.hostname]) out[s.hostname] = policy;
  }
  return out;
}

/** The same with a key made by the caller: its parts already hashes, identities or small values. */
function getOrBuild<T>(cache: XdsCache | undefined, key: string, build: () => T): T {
  return cache ? cache.getOrBuild(key, build) : build();
}

/**
 * An HTTP or network filter's part of a dependency key, hashed once per filter object: the security
 * filters are shared by the proxies the same policies select, and their packed configs (a large
 * RBAC config, say) would otherwise be serialized into every proxy's inbound listener key.
 */
const filterKey = perObject((f: HttpFilter | NetworkFilter) => cacheKey('filter', f));

/**
 * A service's part of a dependency key, hashed once per Service object (services are immutable and
 * shared by every scope that sees them): with 1000 services in 10 scopes, serializing each service
 * into every cluster, route and listener key of every scope was most of a new snapshot's key work.
 */
const serviceKey = perObject((s: Service) => cacheKey('service', s));

/** The proxy's inbound ports, once per (snapshot, proxy): listeners and clusters both read them (the one memoPair of that pair). */
function proxyInboundPorts(proxy: Proxy, push: PushContext): InboundPorts {
  return memoPair(push, proxy, () => inboundPorts(proxy, push));
}

function captured(proxy: Proxy): boolean {
  return proxy.interceptionMode !== 'NONE';
}

/**
 * The services the proxy has outbound listeners for. Without capture, a Sidecar's egress listeners
 * that name a port restrict outbound listeners to those ports.
 */
function outboundServices(proxy: Proxy, push: PushContext): readonly Service[] {
  const scope = push.sidecarScope(proxy);
  const ports = new Set(scope.egress.flatMap((e) => (e.port ? [e.port.number] : [])));
  // Listeners of hosts without address bind where the proxy's DNS name table says they are.
  const services = usesAutoAllocation(proxy) ? withAllocatedAddresses(scope.services, allocatedFor(push)) : scope.services;
  if (captured(proxy) || ports.size === 0) return services;
  return services.map((s) => ({ ...s, ports: s.ports.filter((p) => ports.has(p.port)) })).filter((s) => s.ports.length > 0);
}

export function sidecarListeners(proxy: Proxy, push: PushContext, opts: SidecarOptions = {}): Listener[] {
  const scope = push.sidecarScope(proxy);
  const inbound = proxyInboundPorts(proxy, push);
  inbound.problems.forEach((p) => opts.onProblem?.(p));
  inbound.conflicts.forEach((c) => opts.onInboundConflict?.(c));
  const mtls = opts.mtls ? inboundMtls(proxy, push, opts.mtls) : undefined;
  const logs = proxyAccessLogs(proxy, push, opts.accessLogging);
  const serverTelemetry = proxyTelemetry(proxy, push, opts.metrics, 'sidecar-inbound');
  const clientTelemetry = proxyTelemetry(proxy, push, opts.metrics, 'sidecar-outbound');
  const inboundPortList = mtls ? inbound.ports.map((p) => ({ ...p, mtls: portMtlsMode(mtls.modes, p.port) })) : inbound.ports;
  const inboundOpts: InboundOptions = {
    httpFilters: opts.inboundHttpFilters?.(proxy, push) ?? [],
    networkFilters: opts.inboundNetworkFilters?.(proxy, push) ?? [],
    sniffing: opts.inboundSniffing ?? false,
    ...(opts.detectionTimeout !== undefined ? { detectionTimeout: opts.detectionTimeout } : {}),
    ...(proxy.interceptionMode === 'TPROXY' ? { transparent: true } : {}),
    ...(opts.pathNormalization !== undefined ? { pathNormalization: opts.pathNormalization } : {}),
    ...(mtls ? { mtls: mtls.options } : {}),
    ...(http10(proxy, opts) ? { acceptHttp10: true } : {}),
    ...(logs.server ? { accessLogs: logs.server } : {}),
    ...(serverTelemetry ? { telemetry: serverTelemetry } : {}),
  };
  const cap = captured(proxy);
  const sniffing = opts.outboundSniffing ?? false;
  const perPod = cap && (opts.headlessPodListeners ?? false);
  const accept10 = http10(proxy, opts);
  const clientKey = `${accessLogsKey(logs.client)}:${telemetryKey(clientTelemetry)}`;
  const outboundKey = `lds:${cap}:${sniffing}:${usesAutoAllocation(proxy)}:${opts.pathNormalization ?? ''}:${perPod}:${push.traffic.sourceLabelsKey(proxy)}:${accept10}:${push.traffic.selectorKey(proxy)}:${clientKey}`;
  const outbound = memo(scope, outboundKey, () => {
    const services = outboundServices(proxy, push);
    const listenerOpts = {
      bind: cap ? WILDCARD_ADDRESS : LOCALHOST,
      bindToPort: !cap,
      sniffing,
      ...(opts.pathNormalization ? { pathNormalization: opts.pathNormalization } : {}),
      ...(perPod ? { headlessPods: headlessPods(services, push) } : {}),
      ...(accept10 ? { acceptHttp10: true } : {}),
      ...(opts.sidecarUseRemoteAddress ? { useRemoteAddress: true } : {}),
      l4Routes: l4RouteContext(proxy, push),
      tcpPolicies: tcpProxyPoliciesOf(proxy, push, services),
    };
    const client = { ...(logs.client ? { accessLogs: logs.client } : {}), ...(clientTelemetry ? { telemetry: clientTelemetry } : {}) };
    return cachedIn(opts.cache, () => ['lds-outbound', services.map(serviceKey), listenerOpts, clientKey], () => buildOutboundListeners(services, { ...listenerOpts, ...client }));
  });
  outbound.conflicts.forEach((c) => opts.onConflict?.(c));
  const tproxy = proxy.interceptionMode === 'TPROXY';
  // The proxy's own part (its ports, the filters of the policies selecting it, its mTLS) by a cheap
  // key: ports and options by value, filters by identity (the security builders share them between
  // the proxies the same policies select). Proxies with equal inputs get one list, and its
  // dependency keys (which hash every input, packed RBAC configs included) are computed once per
  // distinct inputs per snapshot instead of once per proxy (on the scope: it goes with the snapshot).
  // Loggers and telemetry filters are messages: in keys by their hashes, never serialized per proxy.
  const { httpFilters = [], networkFilters = [], accessLogs: serverLogs, telemetry: _hashed, ...inboundValues } = inboundOpts;
  const serverKey = `${accessLogsKey(serverLogs)}:${telemetryKey(serverTelemetry)}`;
  // The proxy's own Pod gets no outbound listener of its own address (the inbound side has it), as
  // the Go mesh: the address is an input only where such a listener exists (a headless service's Pod).
  const ip = perPod ? proxy.ipAddresses[0] : undefined;
  const ownIp = ip && listenerAddresses(outbound.listeners).has(ip) ? ip : '';
  const proxyKey = `${outboundKey}|${tproxy}:${ownIp}:${JSON.stringify([inboundPortList, inboundValues])}:${identityKey(httpFilters, networkFilters)}:${serverKey}`;
  return memo(scope, proxyKey, () => {
    // Ports bound by a listener of their own (a Sidecar ingress listener decides per port) and those
    // reached through capture (virtualInbound's chains).
    const own = inboundPortList.filter((p) => bindsOwnListener(p, cap));
    const redirected = inboundPortList.filter((p) => !bindsOwnListener(p, cap));
    const inboundKey = (): object => ({ ...inboundValues, httpFilters: httpFilters.map(filterKey), networkFilters: networkFilters.map(filterKey), server: serverKey });
    const ingress = own.length > 0 ? cachedIn(opts.cache, () => ['lds-ingress', own, inboundKey()], () => buildIngressListeners(own, inboundOpts)) : [];
    if (!cap) return [...ingress, ...outbound.listeners];
    const outboundListeners = ownIp ? outbound.listeners.filter((l) => !l.name.startsWith(`${ownIp}_`)) : outbound.listeners;
    const mode = scope.outboundTrafficPolicy;
    const loopBlocker = opts.loopBlocker ?? true;
    const virtualOutbound = memo(scope, `virtualOutbound:${tproxy}:${clientKey}`, () => cachedIn(opts.cache, () => ['virtualOutbound', mode, tproxy, clientKey, loopBlocker], () => buildVirtualOutbound(mode, tproxy, logs.client, loopBlocker, clientTelemetry)));
    return [virtualOutbound, cachedIn(opts.cache, () => ['virtualInbound', redirected, inboundKey()], () => buildVirtualInbound(redirected, inboundOpts)), ...ingress, ...outboundListeners];
  });
}

/** What precedes the first `_` of the listeners' names (`<address>_<port>`), once per listener list. */
function listenerAddresses(listeners: readonly Listener[]): ReadonlySet<string> {
  return memo(listeners, 'addresses', () => new Set(listeners.map((l) => l.name.slice(0, l.name.indexOf('_')))));
}

/** PILOT_HTTP10, or the proxy's own HTTP10 metadata set to "1", as the Go mesh reads them. */
function http10(proxy: Proxy, opts: SidecarOptions): boolean {
  return (opts.http10 ?? false) || proxy.metadata['HTTP10'] === '1';
}

/** The ports of the scope's services by hostname, once per scope (listeners and routes read them). */
function servicePortsOf(scope: SidecarScope): Record<string, number[]> {
  return memo(scope, 'servicePorts', () => Object.fromEntries(scope.services.map((s) => [s.hostname, s.ports.map((p) => p.port)])));
}

/** What the `tcp`/`tls` routes of the VirtualServices the proxy sees need (a port is set per listener). */
function l4RouteContext(proxy: Proxy, push: PushContext): L4RouteContext {
  const virtualServices = push.traffic.virtualServicesFor(proxy.namespace).filter((v) => v.vs.spec.tcp || v.vs.spec.tls);
  return {
    port: 0,
    proxyNamespace: proxy.namespace,
    proxyLabels: proxy.labels,
    virtualServices,
    domain: push.domain,
    servicePorts: portsForRoutes(virtualServices, push.sidecarScope(proxy)),
  };
}

const NO_SERVICE_PORTS: Readonly<Record<string, number[]>> = Object.freeze({});

/**
 * The scope's service ports where routes read them: only a VirtualService's destinations do. Without
 * one they are left out, so they are neither built nor serialized into the outbound listeners' key
 * (1000 entries per scope on every push).
 */
function portsForRoutes(virtualServices: readonly unknown[], scope: SidecarScope): Readonly<Record<string, readonly number[]>> {
  return virtualServices.length > 0 ? servicePortsOf(scope) : NO_SERVICE_PORTS;
}

/**
 * Outbound route configurations named by port, for HTTP ports and, with outbound sniffing, ports of
 * unknown protocol (their listeners' HTTP chains use them); only `names` when given.
 */
/** What routes take from the mesh where a VirtualService says nothing: MESH_DEFAULT_REQUEST_TIMEOUT (seconds), defaultHttpRetryPolicy. */
export interface RouteDefaults {
  readonly timeout?: number;
  readonly retries?: HttpRetry;
}

export function routeDefaults(o: Pick<SidecarOptions, 'defaultRequestTimeout' | 'defaultHttpRetryPolicy'>): RouteDefaults {
  return { ...(o.defaultRequestTimeout ? { timeout: o.defaultRequestTimeout } : {}), ...(o.defaultHttpRetryPolicy ? { retries: o.defaultHttpRetryPolicy } : {}) };
}

export function sidecarRoutes(proxy: Proxy, push: PushContext, names?: ReadonlySet<string>, outboundSniffing = false, cache?: XdsCache, defaults: RouteDefaults = {}): RouteConfiguration[] {
  const scope = push.sidecarScope(proxy);
  const traffic = push.traffic;
  const key = `rds:${captured(proxy)}:${outboundSniffing}:${usesAutoAllocation(proxy)}:${traffic.selectorKey(proxy)}:${traffic.sourceLabelsKey(proxy)}`;
  const all = memo(scope, key, () => {
    const byPort = new Map<number, Service[]>();
    for (const s of outboundServices(proxy, push)) {
      for (const p of s.ports) {
        if (!isHttpProtocol(p.protocol) && !sniffedProtocol(p.protocol, outboundSniffing)) continue;
        const list = byPort.get(p.port);
        if (list) list.push(s);
        else byPort.set(p.port, [s]);
      }
    }
    const opts: OutboundRouteOptions = {
      domain: push.domain,
      proxyNamespace: proxy.namespace,
      outboundTrafficPolicy: scope.outboundTrafficPolicy,
      proxyLabels: proxy.labels,
      virtualServices: traffic.virtualServicesFor(proxy.namespace),
      servicePorts: portsForRoutes(traffic.virtualServicesFor(proxy.namespace), scope),
      hashPolicies: hashPolicies(proxy, push),
      defaultTimeout: defaults.timeout ?? 0,
      ...(defaults.retries ? { defaultRetries: defaults.retries } : {}),
    };
    let hashedOpts: string | undefined;
    const optsKey = (): string => (hashedOpts ??= cacheKey('rds-options', opts));
    return [...byPort.entries()]
      .sort(([a], [b]) => a - b)
      .map(([port, services]) => {
        // Incremental: each service's virtual host by its own inputs, the configuration by its
        // hosts' identities, so a push that changes one service builds one host (and the
        // configurations that hold it), not every host of every scope.
        const hosts = [...nonServiceHostsOf(port, services, opts, cache, optsKey), ...services.map((s) => virtualHost(s, port, opts, cache, optsKey))];
        return getOrBuild(cache, `rds:${port}:${opts.outboundTrafficPolicy}:${identityKey(hosts)}`, () => outboundRouteConfig(port, hosts, opts.outboundTrafficPolicy));
      });
  });
  // One list per (snapshot scope, name set), as for EDS.
  return names ? memoPair(all, names, () => all.filter((r) => names.has(r.name))) : all;
}

/**
 * A service's virtual host on a port through the dependency tier. Without a VirtualService it reads
 * the service, the port, whether its bare name resolves from the proxy's namespace, its cluster's
 * hash policy and the default timeout: hosts are shared by every scope and kept across snapshots.
 * A VirtualService's routes read every option (the proxy's labels, the other services' ports), so
 * those hosts are keyed by all of them, hashed once per configuration (`optsKey`).
 */
function virtualHost(s: Service, port: number, opts: OutboundRouteOptions, cache: XdsCache | undefined, optsKey: () => string): VirtualHost {
  if (routedByVirtualService(s, opts)) return getOrBuild(cache, `vhost-vs:${serviceKey(s)}:${port}:${optsKey()}`, () => serviceVirtualHost(s, port, opts));
  const bareName = inMeshName(s.hostname, opts.domain)?.namespace === opts.proxyNamespace;
  const hashPolicy = opts.hashPolicies?.[outboundClusterName(port, s.hostname)] ?? [];
  const retries = opts.defaultRetries ? JSON.stringify(opts.defaultRetries) : '';
  const key = `vhost:${serviceKey(s)}:${port}:${opts.domain}:${bareName}:${opts.defaultTimeout ?? 0}:${retries}:${hashPolicy.length > 0 ? cacheKey('hash', hashPolicy) : ''}`;
  return getOrBuild(cache, key, () => serviceVirtualHost(s, port, opts));
}

/**
 * The virtual hosts of VirtualService hosts that name no service on the port (route.ts,
 * nonServiceHosts), through the dependency tier: keyed by which hosts they are and every option,
 * as a VirtualService's service hosts are, so the configuration's hosts keep their identity.
 */
function nonServiceHostsOf(port: number, services: readonly Service[], opts: OutboundRouteOptions, cache: XdsCache | undefined, optsKey: () => string): readonly VirtualHost[] {
  const groups = nonServiceHosts(port, services, opts.virtualServices ?? []);
  if (groups.length === 0) return [];
  const which = JSON.stringify(groups.map((g) => [g.vs.vs.metadata.namespace, g.vs.vs.metadata.name, g.hosts]));
  return getOrBuild(cache, `vhost-vs-hosts:${port}:${which}:${optsKey()}`, () => nonServiceVirtualHosts(port, groups, opts));
}

/** Route hash policies of the clusters whose DestinationRule balances by consistent hash. */
export function hashPolicies(proxy: Proxy, push: PushContext): Record<string, HashPolicyInit[]> {
  const out: Record<string, HashPolicyInit[]> = {};
  for (const s of push.sidecarScope(proxy).services) {
    const rule = ruleTraffic(push.traffic.destinationRule(proxy, s.hostname, s.namespace));
    if (!rule) continue;
    for (const p of s.ports) {
      for (const v of clusterVariants(rule, p.port)) {
        const policy = routeHashPolicy(v.policy);
        if (policy.length > 0) out[outboundClusterName(p.port, s.hostname, v.subset)] = policy;
      }
    }
  }
  return out;
}

/** Whether a service's outbound clusters hold its endpoints (DNS resolution) rather than leaving them to EDS or the original destination. */
function carriesEndpoints(s: Service): boolean {
  return s.resolution === 'DNS' || s.resolution === 'DNS_ROUND_ROBIN';
}

/** Outbound clusters of every visible service port, inbound clusters, BlackHole and Passthrough. */
/** The mesh config's tcpKeepalive and connectTimeout, as every cluster takes them. */
export function meshClusterDefaults(o: Pick<SidecarOptions, 'tcpKeepalive' | 'connectTimeout'>): MeshClusterDefaults {
  return { ...(o.tcpKeepalive ? { tcpKeepalive: o.tcpKeepalive } : {}), ...(o.connectTimeout !== undefined ? { connectTimeout: o.connectTimeout } : {}) };
}

export function sidecarClusters(proxy: Proxy, push: PushContext, withInbound = true, cache?: XdsCache, mtlsSettings?: MeshMtlsSettings, mesh: Pick<SidecarOptions, 'localityLb' | 'h2Upgrade' | 'tcpKeepalive' | 'connectTimeout'> = {}): Cluster[] {
  const localityLb = mesh.localityLb ?? DEFAULT_LOCALITY_LB;
  // Auto mTLS settings for a proxy with a workload certificate only (clusterMtls).
  const mtlsOf = proxy.meshMtls ? mtlsSettings : undefined;
  const mtlsOn = mtlsOf !== undefined;
  // Routers read a DestinationRule's tls.credentialName, sidecars do not: their clusters differ.
  const gateway = proxy.type === 'router';
  const h2 = mesh.h2Upgrade === true;
  const defaults = meshClusterDefaults(mesh);
  const proxyless = isGrpc(proxy);
  const clusterOpts = { gateway, proxyless, ...defaults };
  // A DestinationRule's proxyProtocol reaches only proxies that have the socket (Proxy.upstreamProxyProtocol).
  const header = proxy.upstreamProxyProtocol === true;
  // The mesh-wide settings and the client kind are part of every key: the same scope may be asked under other ones.
  const meshKey = `${h2}:${JSON.stringify(defaults)}:${proxyless}`;
  const outbound = memo(push.sidecarScope(proxy), `cds:${push.traffic.selectorKey(proxy)}:${mtlsOn}:${gateway}:${header}:${meshKey}`, () =>
    push.sidecarScope(proxy).services.flatMap((s) => {
      const rule = ruleTraffic(push.traffic.destinationRule(proxy, s.hostname, s.namespace));
      // A service's clusters read the service, its rule and whether the proxy has mTLS: built (and
      // keyed) once per snapshot for every scope that sees them alike, not once per scope.
      const key = `cds-service:${serviceKey(s)}:${rule ? JSON.stringify(rule) : ''}:${mtlsOn}:${gateway}:${header}:${meshKey}`;
      const build = (): Cluster[] =>
        s.ports.flatMap((p) =>
          clusterVariants(rule, p.port).map((variant) => {
            const v = { ...variant, policy: withMeshH2Upgrade(withMeshLocalityLb(header ? variant.policy : withoutProxyProtocol(variant.policy), localityLb), h2, p.protocol) };
            const instances = subsetInstances(push.instances(s, p.port), v.labels);
            const endpoints = toEndpoints(instances);
            // EDS clusters do not carry their endpoints: leaving them out of the key keeps the
            // cluster (and its version) when only endpoints change.
            const keyEndpoints = carriesEndpoints(s) ? endpoints : [];
            const mtls = mtlsOf ? clusterMtls(proxy, push, s, instances, mtlsOf) : undefined;
            const traffic = { ...v, ...(mtls ? { mtls } : {}) };
            return cachedIn(cache, () => ['cds', serviceKey(s), p, keyEndpoints, v.subset, v.policy, mtls, gateway, defaults, proxyless], () => buildOutboundCluster(s, p, endpoints, clusterOpts, traffic));
          }),
        );
      // Without auto mTLS, clusters that do not carry endpoints (EDS, ORIGINAL_DST) read nothing but
      // the key's parts: kept across snapshots under it, so a push fingerprints no cluster of an
      // unchanged service (the key's service part is hashed once per Service object).
      return memo(push, key, () => (!mtlsOf && !carriesEndpoints(s) ? getOrBuild(cache, key, build) : build()));
    }),
  );
  // Inbound clusters by their few inputs, once per snapshot; the whole list once per (outbound
  // list, inbound ports), so proxies given the same clusters get the same list (packed and interned once).
  const ports = withInbound ? proxyInboundPorts(proxy, push).ports : [];
  // The services of a port are for the stats filter, which proxyless clients have not.
  const servicesOf = (p: InboundPort) => (proxyless ? [] : (p.services ?? []));
  const keys = ports.map((p) => `${p.port}:${p.target ? `${p.target.address}:${p.target.port}` : 'original-dst'}:${p.protocol}:${p.connectionPool ? JSON.stringify(p.connectionPool) : ''}:${JSON.stringify(servicesOf(p))}`);
  return memo(outbound, `clusters:${keys.join(',')}`, () => {
    const inbound = ports.map((p, i) => memo(push, `cds-inbound:${keys[i]}:${meshKey}`, () => cachedIn(cache, () => ['cds-inbound', p.port, p.target, p.protocol, defaults, p.connectionPool, servicesOf(p)], () => buildInboundCluster(p.port, p.target, p.protocol, clusterOpts, p.connectionPool, servicesOf(p)))));
    return [...outbound, ...inbound, ...memo(push, `catchAll:${meshKey}`, () => cachedIn(cache, () => ['cds-catchall', defaults], () => [blackHoleCluster(defaults), passthroughCluster(clusterOpts)]))];
  });
}
