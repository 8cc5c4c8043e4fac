// LDS: the capture listeners (virtualOutbound :15001, virtualInbound :15006, both use_original_dst),
// the inbound filter chains of the workload's ports, the outbound listeners per service port, and,
// without traffic capture, listeners bound on the Sidecar's ingress ports.
import { create, type MessageInitShape } from '@bufbuild/protobuf';
import { TrafficDirection } from '../gen/envoy/config/core/v3/base_pb.js';
import { ListenerSchema, type Listener } from '../gen/envoy/config/listener/v3/listener_pb.js';
import { FilterChainSchema, ListenerFilterSchema, type Filter, type FilterChain, type ListenerFilter } from '../gen/envoy/config/listener/v3/listener_components_pb.js';
import { HttpInspectorSchema } from '../gen/envoy/extensions/filters/listener/http_inspector/v3/http_inspector_pb.js';
import { OriginalSrcSchema } from '../gen/envoy/extensions/filters/listener/original_src/v3/original_src_pb.js';
import { HttpConnectionManager_ForwardClientCertDetails, type HttpFilter } from '../gen/envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager_pb.js';
import type { CaptureMode } from '../api/types.js';
import type { OutboundTrafficMode } from '../model/push-context.js';
import { isHttpProtocol, type Protocol, type Service } from '../model/service.js';
import { HTTP_INSPECTOR_FILTER_NAME, ORIGINAL_SRC_FILTER_NAME } from '../envoy/names.js';
import { pack } from '../envoy/types.js';
import { alpnFilter } from './alpn-filter.js';
import { hcmFilter, http10Fields, routeConfiguredFilters, seconds, socketAddress, tcpProxyFilter, type HcmExtras, type PathNormalization, type TcpProxyPolicy } from './common.js';
import { accessLogField, type AccessLogs } from './access-log.js';
import {
  BLACKHOLE_CLUSTER,
  inboundClusterName,
  listenerName,
  outboundClusterName,
  outboundRouteName,
  PASSTHROUGH_CLUSTER,
  VIRTUAL_INBOUND,
  VIRTUAL_INBOUND_PORT,
  VIRTUAL_OUTBOUND,
  VIRTUAL_OUTBOUND_PORT,
  WILDCARD_ADDRESS,
} from './names.js';
import { buildInboundRouteConfig } from './route.js';
import { needsTlsInspector, securedChains, tlsInspector, type ChainKind, type InboundMtlsOptions } from './inbound-mtls.js';
import type { EffectiveMtlsMode } from '../security/mtls/peer-authentication.js';
import { l4RouteChains, type FilterChainInit, type L4RouteContext } from './tcp-route.js';
import type { ConnectionPoolSettings } from './traffic-policy.js';
import type { TelemetryService } from './telemetry-metadata.js';
import { withHttpTelemetry, withTcpTelemetry, type ListenerTelemetry } from './telemetry-filters.js';

/** What http_inspector reports for plaintext HTTP. */
const HTTP_APPLICATION_PROTOCOLS = ['http/1.0', 'http/1.1', 'h2c'];

/** A port the workload receives traffic on, and where its application listens. */
export interface InboundPort {
  /** The port the traffic arrives on (workload port, or the Sidecar ingress port). */
  readonly port: number;
  readonly protocol: Protocol;
  /**
   * The application: `127.0.0.1:<targetPort>` or a Sidecar's defaultEndpoint; absent, the
   * connection's original destination (TPROXY capture: the pod's own address and the port).
   */
  readonly target?: { readonly address: string; readonly port: number };
  /** Address to bind, for explicit (non-captured) ingress listeners. */
  readonly bind?: string;
  /**
   * A Sidecar ingress listener's captureMode: `NONE` gets a listener bound on its port in any
   * proxy mode, `IPTABLES` is reached through capture; unset or `DEFAULT` follows the proxy's mode.
   */
  readonly captureMode?: CaptureMode;
  /** The port's PeerAuthentication mode; unset takes InboundOptions.mtls.mode. */
  readonly mtls?: EffectiveMtlsMode;
  /** The inbound cluster's connection pool: the Sidecar's for the port, else its service's DestinationRule's (inbound.ts). */
  readonly connectionPool?: ConnectionPoolSettings;
  /** The services served on the port, for the inbound cluster's metadata (telemetry-metadata.ts); absent: none known. */
  readonly services?: readonly TelemetryService[];
}

export interface InboundOptions {
  /** HTTP filters placed before the router, in this order (jwt_authn, rbac from the security builders). */
  readonly httpFilters?: readonly HttpFilter[];
  /** Network filters placed before tcp_proxy on the TCP chains (network rbac from the security builders). */
  readonly networkFilters?: readonly Filter[];
  /** Ports of unknown protocol get an HTTP and a TCP chain chosen by http_inspector. */
  readonly sniffing?: boolean;
  /** Seconds http_inspector may wait for the first bytes. */
  readonly detectionTimeout?: number;
  /** TPROXY capture: virtualInbound receives connections addressed elsewhere (IP_TRANSPARENT). */
  readonly transparent?: boolean;
  /** Mesh config pathNormalization of the HTTP chains; default BASE. */
  readonly pathNormalization?: PathNormalization;
  /** PeerAuthentication: the chains of each port's mTLS mode (see inbound-mtls.ts); absent = plaintext only. */
  readonly mtls?: InboundMtlsOptions;
  /** PILOT_HTTP10: the HTTP chains accept HTTP/1.0. */
  readonly acceptHttp10?: boolean;
  /** The mesh config's access logs (access-log.ts); unset: none. */
  readonly accessLogs?: AccessLogs;
  /** The sidecar-inbound class's metadata exchange and stats filters (telemetry-filters.ts); unset: none. */
  readonly telemetry?: ListenerTelemetry;
}

/**
 * As the Go mesh's sidecar inbound connection managers: the client certificate's details are
 * appended to x-forwarded-client-cert (subject, URI and DNS SANs) and the header forwarded.
 */
function clientCertDetails(opts: InboundOptions): HcmExtras {
  return opts.mtls?.tls ? { forwardClientCertDetails: HttpConnectionManager_ForwardClientCertDetails.APPEND_FORWARD, setCurrentClientCertDetails: { subject: true, uri: true, dns: true } } : {};
}

function httpChain(p: InboundPort, opts: InboundOptions, matchPort: boolean, sniffed: boolean): FilterChain {
  const cluster = inboundClusterName(p.port);
  return create(FilterChainSchema, {
    name: `${listenerName(WILDCARD_ADDRESS, p.port)}${sniffed ? '_http' : ''}`,
    filterChainMatch: {
      ...(matchPort ? { destinationPort: p.port } : {}),
      ...(sniffed ? { applicationProtocols: HTTP_APPLICATION_PROTOCOLS } : {}),
    },
    filters: [hcmFilter(`inbound_${listenerName(WILDCARD_ADDRESS, p.port)}`, { inline: buildInboundRouteConfig(cluster, cluster) }, withHttpTelemetry(opts.telemetry, opts.httpFilters ?? []), opts.pathNormalization, { ...clientCertDetails(opts), ...http10Fields(opts.acceptHttp10), ...accessLogField(opts.accessLogs, 'http') })],
  });
}

/** tcp_proxy to `cluster`, after the workload's network filters (a TCP chain's policy is enforced there) and the stats filters. */
function tcpFilters(cluster: string, opts: InboundOptions): Filter[] {
  return withTcpTelemetry(opts.telemetry, opts.networkFilters ?? [], tcpProxyFilter(cluster, undefined, '', opts.accessLogs));
}

function tcpChain(p: InboundPort, opts: InboundOptions, matchPort: boolean): FilterChain {
  return create(FilterChainSchema, {
    name: listenerName(WILDCARD_ADDRESS, p.port),
    filterChainMatch: matchPort ? { destinationPort: p.port } : {},
    filters: tcpFilters(inboundClusterName(p.port), opts),
  });
}

/** A port whose protocol is unknown is sniffed (HTTP and TCP chains behind http_inspector) when sniffing is on. */
export function sniffedProtocol(protocol: Protocol, sniffing: boolean | undefined): boolean {
  return !!sniffing && protocol === 'UNSUPPORTED';
}

function sniffs(p: InboundPort, opts: InboundOptions): boolean {
  return sniffedProtocol(p.protocol, opts.sniffing);
}

function httpInspector(): ListenerFilter[] {
  return [create(ListenerFilterSchema, { name: HTTP_INSPECTOR_FILTER_NAME, configType: { case: 'typedConfig', value: pack(HttpInspectorSchema, {}) } })];
}

/**
 * The chains of one inbound port: an HTTP connection manager (extra filters, then router) for HTTP
 * protocols, a TCP proxy otherwise, and both (HTTP first) when the protocol is sniffed.
 */
export function buildInboundFilterChains(p: InboundPort, opts: InboundOptions, matchPort = true): FilterChain[] {
  const plain: { kind: ChainKind; chain: FilterChain }[] = isHttpProtocol(p.protocol)
    ? [{ kind: 'http', chain: httpChain(p, opts, matchPort, false) }]
    : sniffs(p, opts)
      ? [
          { kind: 'sniffed-http', chain: httpChain(p, opts, matchPort, true) },
          { kind: 'sniffed-tcp', chain: tcpChain(p, opts, matchPort) },
        ]
      : [{ kind: 'tcp', chain: tcpChain(p, opts, matchPort) }];
  return securedChains(plain, p.mtls, opts.mtls);
}

type ListenerInit = Exclude<MessageInitShape<typeof ListenerSchema>, Listener>;

/**
 * tls_inspector when some chain matches on TLS, then http_inspector when some port's protocol is
 * sniffed, bounded by the detection timeout. `passthrough`: virtualInbound, with its own chains.
 */
function sniffingFilters(ports: readonly InboundPort[], opts: InboundOptions, passthrough = false): Pick<ListenerInit, 'listenerFilters' | 'listenerFiltersTimeout'> {
  const passthroughMode = passthrough ? opts.mtls?.mode : undefined;
  const tls = needsTlsInspector([...ports.map((p) => p.mtls), ...(passthroughMode ? [passthroughMode] : [])], opts.mtls) ? [tlsInspector()] : [];
  // virtualInbound's passthrough is sniffed whenever sniffing is on.
  const sniffed = ports.some((p) => sniffs(p, opts)) || (passthrough && !!opts.sniffing);
  if (!sniffed) return tls.length > 0 ? { listenerFilters: tls } : {};
  return {
    listenerFilters: [...tls, ...httpInspector()],
    ...(opts.detectionTimeout !== undefined ? { listenerFiltersTimeout: seconds(opts.detectionTimeout) } : {}),
  };
}

/**
 * The chains the Go mesh always puts in virtualInbound besides the ports': connections to 15006
 * itself go to BlackHoleCluster (no loop), and captured connections to any other port pass through
 * to their original destination, per IP family. Our PassthroughCluster stands for the Go mesh's
 * InboundPassthroughClusterIpv4/6, which only add a 127.0.0.6 source address. As the Go mesh, the
 * passthrough is a port of unknown protocol: with sniffing, an HTTP chain (the workload's HTTP
 * filters) for what http_inspector recognises and a TCP chain for the rest, else the TCP chain
 * only; its TCP chain runs the workload's network rbac filters before tcp_proxy, so a policy is
 * not bypassed by picking an undeclared port.
 */
function passthroughChains(opts: InboundOptions): FilterChain[] {
  const chain = (family: string, prefix: string, http: boolean): FilterChain =>
    create(FilterChainSchema, {
      name: `${VIRTUAL_INBOUND}-${family}-passthrough${http ? '_http' : ''}`,
      filterChainMatch: { prefixRanges: [{ addressPrefix: prefix, prefixLen: 0 }], ...(http ? { applicationProtocols: HTTP_APPLICATION_PROTOCOLS } : {}) },
      filters: http
        ? [hcmFilter('InboundPassthroughCluster', { inline: buildInboundRouteConfig('InboundPassthroughCluster', PASSTHROUGH_CLUSTER) }, withHttpTelemetry(opts.telemetry, opts.httpFilters ?? []), opts.pathNormalization, { ...clientCertDetails(opts), ...http10Fields(opts.acceptHttp10), ...accessLogField(opts.accessLogs, 'http') })]
        : tcpFilters(PASSTHROUGH_CLUSTER, opts),
    });
  return [
    // The stats filters count these too, as the Go mesh's buildInboundBlackhole.
    create(FilterChainSchema, { name: `${VIRTUAL_INBOUND}-blackhole`, filterChainMatch: { destinationPort: VIRTUAL_INBOUND_PORT }, filters: withTcpTelemetry(opts.telemetry, [], tcpProxyFilter(BLACKHOLE_CLUSTER)) }),
    ...(
      [
        ['ipv4', '0.0.0.0'],
        ['ipv6', '::'],
      ] as const
    ).flatMap(([family, prefix]) => {
      const kinds: { kind: ChainKind; chain: FilterChain }[] = opts.sniffing
        ? [
            { kind: 'sniffed-http', chain: chain(family, prefix, true) },
            { kind: 'sniffed-tcp', chain: chain(family, prefix, false) },
          ]
        : [{ kind: 'tcp', chain: chain(family, prefix, false) }];
      // Undeclared ports take the workload's mode: STRICT must not be bypassed through them.
      return securedChains(kinds, undefined, opts.mtls);
    }),
  ];
}

/**
 * The SO_MARK of original_src's upstream sockets, as the Go mesh sets it whatever `-t` says: the
 * default TPROXY mark, whose `ip rule` routes the app's replies to the client's address back to lo.
 */
export const ORIGINAL_SRC_MARK = 1337;

/** original_src: under TPROXY the app's connections come from the client's address, not the proxy's. */
function originalSrc(): ListenerFilter {
  return create(ListenerFilterSchema, { name: ORIGINAL_SRC_FILTER_NAME, configType: { case: 'typedConfig', value: pack(OriginalSrcSchema, { mark: ORIGINAL_SRC_MARK }) } });
}

/**
 * virtualInbound: 0.0.0.0:15006, use_original_dst, a chain per inbound port matched on destination
 * port, and the passthrough chains (so it has chains even when the workload declares no port).
 * Under TPROXY it is transparent and its first listener filter is original_src.
 */
export function buildVirtualInbound(ports: readonly InboundPort[], opts: InboundOptions = {}): Listener {
  const sniffing = sniffingFilters(ports, opts, true);
  const listenerFilters = [...(opts.transparent ? [originalSrc()] : []), ...(sniffing.listenerFilters ?? [])];
  return create(ListenerSchema, {
    name: VIRTUAL_INBOUND,
    address: socketAddress(WILDCARD_ADDRESS, VIRTUAL_INBOUND_PORT),
    useOriginalDst: true,
    ...(opts.transparent ? { transparent: true } : {}),
    trafficDirection: TrafficDirection.INBOUND,
    ...sniffing,
    ...(listenerFilters.length > 0 ? { listenerFilters } : {}),
    filterChains: [...ports.flatMap((p) => buildInboundFilterChains(p, opts)), ...passthroughChains(opts)],
    ...accessLogField(opts.accessLogs, 'listener'),
  });
}

/**
 * virtualOutbound: 0.0.0.0:15001, use_original_dst: connections for a known service port are handed
 * to that port's listener; the rest go to PassthroughCluster (ALLOW_ANY) or BlackHoleCluster.
 * Transparent under TPROXY capture, as the Go mesh makes both virtual listeners.
 */
export function buildVirtualOutbound(mode: OutboundTrafficMode, transparent = false, logs?: AccessLogs, loopBlocker = true, telemetry?: ListenerTelemetry): Listener {
  const cluster = mode === 'ALLOW_ANY' ? PASSTHROUGH_CLUSTER : BLACKHOLE_CLUSTER;
  // PILOT_ENABLE_LOOP_BLOCKER: a connection made to 15001 itself would otherwise pass through to its
  // original destination, 15001 again, without end (no access log, as the Go mesh's chain; its
  // stats filters count it, as there).
  const blackhole = { name: `${VIRTUAL_OUTBOUND}-blackhole`, filterChainMatch: { destinationPort: VIRTUAL_OUTBOUND_PORT }, filters: withTcpTelemetry(telemetry, [], tcpProxyFilter(BLACKHOLE_CLUSTER)) };
  return create(ListenerSchema, {
    name: VIRTUAL_OUTBOUND,
    address: socketAddress(WILDCARD_ADDRESS, VIRTUAL_OUTBOUND_PORT),
    useOriginalDst: true,
    ...(transparent ? { transparent: true } : {}),
    trafficDirection: TrafficDirection.OUTBOUND,
    filterChains: [...(loopBlocker ? [blackhole] : []), { name: `${VIRTUAL_OUTBOUND}-catchall-tcp`, filters: withTcpTelemetry(telemetry, [], tcpProxyFilter(cluster, undefined, '', logs)) }],
    ...accessLogField(logs, 'listener'),
  });
}

/** Without capture: a listener bound on each ingress port (`<bind>_<port>`), to its target. */
export function buildIngressListeners(ports: readonly InboundPort[], opts: InboundOptions = {}): Listener[] {
  return ports.map((p) => {
    const bind = p.bind || WILDCARD_ADDRESS;
    return create(ListenerSchema, {
      name: listenerName(bind, p.port),
      address: socketAddress(bind, p.port),
      trafficDirection: TrafficDirection.INBOUND,
      ...sniffingFilters([p], opts),
      filterChains: buildInboundFilterChains(p, opts, false),
      ...accessLogField(opts.accessLogs, 'listener'),
    });
  });
}

/** A service port that lost its listener to an earlier service (`kind`: new protocol over current). */
export interface ListenerConflict {
  readonly kind: 'http_over_tcp' | 'tcp_over_http' | 'tcp_over_tcp';
  readonly listener: string;
  readonly service: string;
}

export interface OutboundListenerOptions {
  /** Address outbound listeners use: 0.0.0.0 under capture, 127.0.0.1 without. */
  readonly bind: string;
  /** False under capture (virtualOutbound hands connections over), true when clients connect directly. */
  readonly bindToPort: boolean;
  /** HTTP filters before the router on outbound HTTP listeners. */
  readonly httpFilters?: readonly HttpFilter[];
  /**
   * PILOT_ENABLE_PROTOCOL_SNIFFING_FOR_OUTBOUND: ports of unknown protocol get http_inspector, an
   * HTTP chain (RDS `<port>`) for plaintext HTTP and the TCP proxy for the rest; off, only the TCP proxy.
   */
  readonly sniffing?: boolean;
  /** Mesh config pathNormalization of the HTTP chains; default BASE. */
  readonly pathNormalization?: PathNormalization;
  /**
   * PILOT_ENABLE_HEADLESS_SERVICE_POD_LISTENERS, under capture: headless services (by
   * `namespace/hostname`) and their Pods' addresses. Their TCP and sniffed ports get a listener per
   * Pod address instead of one on the wildcard, as the Go mesh does (HTTP is told apart by the Host
   * header). A plain record: it is part of the XDS cache's key.
   */
  readonly headlessPods?: Readonly<Record<string, readonly string[]>>;
  /** PILOT_HTTP10: the HTTP chains accept HTTP/1.0. */
  readonly acceptHttp10?: boolean;
  /** PILOT_SIDECAR_USE_REMOTE_ADDRESS: the HTTP chains' connection managers use the peer address as the client's (use_remote_address). */
  readonly useRemoteAddress?: boolean;
  /** VirtualService `tcp`/`tls` routes of TCP and TLS ports (see tcp-route.ts). */
  readonly l4Routes?: L4RouteContext;
  /** By hostname: what the TCP proxies to a service take from its DestinationRule (tcp limits, tunnels). A plain record: part of the XDS cache's key. */
  readonly tcpPolicies?: Readonly<Record<string, TcpProxyPolicy>>;
  /** The mesh config's access logs (access-log.ts); unset: none. */
  readonly accessLogs?: AccessLogs;
  /** The sidecar-outbound class's metadata exchange and stats filters (telemetry-filters.ts); unset: none. */
  readonly telemetry?: ListenerTelemetry;
}

/** Where a service port's outbound listeners go: its Pods' addresses, its VIP, or the bind address. */
function listenerAddresses(s: Service, protocol: Protocol, opts: OutboundListenerOptions): string[] {
  const http = isHttpProtocol(protocol);
  // TCP and sniffed ports only, as the Go mesh.
  const pods = http || protocol === 'UDP' ? undefined : opts.headlessPods?.[`${s.namespace}/${s.hostname}`];
  if (pods) return [...pods];
  const vip = !http && opts.bindToPort === false ? s.addresses.find((a) => !a.includes('/')) : undefined;
  return [vip ?? opts.bind];
}

/**
 * One listener per service port. HTTP ports share `<bind>_<port>`, routed by RDS config `<port>`;
 * a TCP port gets `<vip>_<port>` when the service has a VIP, else `<bind>_<port>`, proxying to its
 * cluster (or its `tcp`/`tls` routes' chains). A sniffed port is named and placed like a TCP port
 * (its TCP fallback likewise) and adds an HTTP chain in front. A headless service's TCP port may get
 * one `<pod ip>_<port>` listener per Pod instead (`headlessPods`). When two services claim the same
 * address and port, the first (services come sorted) keeps it; the others are returned in `conflicts`.
 */
export function buildOutboundListeners(services: readonly Service[], opts: OutboundListenerOptions): { listeners: Listener[]; conflicts: ListenerConflict[] } {
  const byName = new Map<string, { http: boolean; listener: ListenerInit }>();
  const conflicts: ListenerConflict[] = [];
  for (const s of services) {
    for (const port of s.ports) {
      const http = isHttpProtocol(port.protocol);
      for (const address of listenerAddresses(s, port.protocol, opts)) {
        const name = listenerName(address, port.port);
        const existing = byName.get(name);
        if (existing) {
          if (!(existing.http && http)) {
            const kind = http ? 'http_over_tcp' : existing.http ? 'tcp_over_http' : 'tcp_over_tcp';
            conflicts.push({ kind, listener: name, service: `${s.hostname}:${port.port}` });
          }
          continue;
        }
        const httpFilter = (): Filter => hcmFilter(`outbound_${name}`, { rds: outboundRouteName(port.port) }, withHttpTelemetry(opts.telemetry, [...(opts.httpFilters ?? []), alpnFilter(), ...routeConfiguredFilters()]), opts.pathNormalization, { ...http10Fields(opts.acceptHttp10), ...(opts.useRemoteAddress ? { useRemoteAddress: true } : {}), ...accessLogField(opts.accessLogs, 'http') });
        const sniffed = sniffedProtocol(port.protocol, opts.sniffing);
        // A sniffed port's TCP fallback follows the `tcp` routes too, as the Go mesh builds the
        // TCP chains of an auto-detected port before adding its HTTP chain.
        const limits = opts.tcpPolicies?.[s.hostname];
        const routed = !http && opts.l4Routes ? l4RouteChains(s, port.port, name, address !== opts.bind, { ...opts.l4Routes, port: port.port, ...(limits ? { limits } : {}), ...(opts.tcpPolicies ? { policies: opts.tcpPolicies } : {}), ...(opts.accessLogs ? { accessLogs: opts.accessLogs } : {}), ...(opts.telemetry ? { telemetry: opts.telemetry } : {}) }) : undefined;
        const tcpChains: FilterChainInit[] = routed?.chains ?? [{ name, filters: withTcpTelemetry(opts.telemetry, [], tcpProxyFilter(outboundClusterName(port.port, s.hostname), limits, '', opts.accessLogs)) }];
        const listenerFilters = [...(routed?.tls ? [tlsInspector()] : []), ...(sniffed ? httpInspector() : [])];
        byName.set(name, {
          http,
          listener: {
            name,
            address: socketAddress(address, port.port),
            bindToPort: opts.bindToPort,
            trafficDirection: TrafficDirection.OUTBOUND,
            ...(listenerFilters.length > 0 ? { listenerFilters } : {}),
            filterChains: http
              ? [{ name, filters: [httpFilter()] }]
              : sniffed
                ? [{ name: `${name}_http`, filterChainMatch: { applicationProtocols: HTTP_APPLICATION_PROTOCOLS }, filters: [httpFilter()] }, ...tcpChains]
                : tcpChains,
          },
        });
      }
    }
  }
  return { listeners: [...byName.values()].map((e) => create(ListenerSchema, e.listener)), conflicts };
}
