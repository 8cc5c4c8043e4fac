// Small message pieces every builder needs: addresses, the ADS config source, durations, the
// plaintext transport socket, and the HTTP connection manager with its ordered filter list.
import { create, type MessageInitShape } from '@bufbuild/protobuf';
import type { Any } from '@bufbuild/protobuf/wkt';
import { AddressSchema, type Address } from '../gen/envoy/config/core/v3/address_pb.js';
import { TransportSocketSchema, type TransportSocket } from '../gen/envoy/config/core/v3/base_pb.js';
import { RawBufferSchema } from '../gen/envoy/extensions/transport_sockets/raw_buffer/v3/raw_buffer_pb.js';
import { ApiVersion, ConfigSourceSchema, type ConfigSource } from '../gen/envoy/config/core/v3/config_source_pb.js';
import type { RouteConfigurationSchema } from '../gen/envoy/config/route/v3/route_pb.js';
import { RouterSchema } from '../gen/envoy/extensions/filters/http/router/v3/router_pb.js';
import {
  HttpConnectionManager_CodecType,
  HttpConnectionManager_PathWithEscapedSlashesAction,
  HttpConnectionManagerSchema,
  HttpFilterSchema,
  type HttpFilter,
} from '../gen/envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager_pb.js';
import { TcpProxySchema } from '../gen/envoy/extensions/filters/network/tcp_proxy/v3/tcp_proxy_pb.js';
import { FilterSchema, type Filter } from '../gen/envoy/config/listener/v3/listener_components_pb.js';
import { CORS_FILTER_NAME, FAULT_FILTER_NAME, HCM_FILTER_NAME, RAW_BUFFER_TRANSPORT_SOCKET_NAME, ROUTER_FILTER_NAME, TCP_PROXY_FILTER_NAME } from '../envoy/names.js';
import { CorsSchema } from '../gen/envoy/extensions/filters/http/cors/v3/cors_pb.js';
import { HTTPFaultSchema } from '../gen/envoy/extensions/filters/http/fault/v3/fault_pb.js';
import { pack } from '../envoy/types.js';
import { parseDuration } from '../common/duration.js';
import { accessLogField, type AccessLogs } from './access-log.js';


/**
 * max_direct_response_body_size_bytes of the sidecars' and gateways' route configurations, as the
 * Go mesh sets it: 1 MiB instead of Envoy's 4 KiB default, which would make Envoy reject a route
 * configuration holding a larger direct response body (the whole configuration, not the route).
 */
export const MAX_DIRECT_RESPONSE_BODY_BYTES = 1024 * 1024;

export function socketAddress(address: string, port: number): Address {
  return create(AddressSchema, {
    address: { case: 'socketAddress', value: { address, portSpecifier: { case: 'portValue', value: port } } },
  });
}

/** Resources of this type come over the same ADS stream. */
/** The plaintext transport socket, spelled out where a socket is required. */
export function rawBufferSocket(): TransportSocket {
  return create(TransportSocketSchema, { name: RAW_BUFFER_TRANSPORT_SOCKET_NAME, configType: { case: 'typedConfig', value: pack(RawBufferSchema, {}) } });
}

export function adsConfigSource(): ConfigSource {
  return create(ConfigSourceSchema, { configSourceSpecifier: { case: 'ads', value: {} }, resourceApiVersion: ApiVersion.V3 });
}

/**
 * ADS for the RDS of HCMs and the EDS of clusters, with initial_fetch_timeout 0s as the Go mesh
 * sets it there: the proxy waits for them without limit instead of Envoy's default 15 s, after
 * which a listener or cluster would start without its routes or endpoints. (SDS keeps the default.)
 */
export function adsConfigSourceWaiting(): ConfigSource {
  return create(ConfigSourceSchema, { configSourceSpecifier: { case: 'ads', value: {} }, initialFetchTimeout: seconds(0), resourceApiVersion: ApiVersion.V3 });
}

export function seconds(s: number): { seconds: bigint; nanos: number } {
  const whole = Math.floor(s);
  return { seconds: BigInt(whole), nanos: Math.round((s - whole) * 1e9) };
}

/** A Go duration string (`1.5s`, `100ms`) as a protobuf Duration; throws DurationError naming the text. */
export function duration(text: string): { seconds: bigint; nanos: number } {
  const ns = parseDuration(text);
  return { seconds: ns / 1_000_000_000n, nanos: Number(ns % 1_000_000_000n) };
}

export function routerFilter(): HttpFilter {
  return create(HttpFilterSchema, { name: ROUTER_FILTER_NAME, configType: { case: 'typedConfig', value: pack(RouterSchema, {}) } });
}

/**
 * The fault and CORS filters, placed before the router as the Go mesh does, with empty configs: the
 * VirtualService's per-route configs switch them on.
 */
export function routeConfiguredFilters(): HttpFilter[] {
  return [
    create(HttpFilterSchema, { name: FAULT_FILTER_NAME, configType: { case: 'typedConfig', value: pack(HTTPFaultSchema, {}) } }),
    create(HttpFilterSchema, { name: CORS_FILTER_NAME, configType: { case: 'typedConfig', value: pack(CorsSchema, {}) } }),
  ];
}

export type RouteSource = { rds: string } | { inline: MessageInitShape<typeof RouteConfigurationSchema> };

/**
 * Mesh config `pathNormalization.normalization`: how the connection managers normalize request
 * paths before filters and routes see them. BASE (the default) is RFC 3986 normalization.
 */
export type PathNormalization = 'NONE' | 'BASE' | 'MERGE_SLASHES' | 'DECODE_AND_MERGE_SLASHES';

export const PATH_NORMALIZATIONS: readonly PathNormalization[] = ['NONE', 'BASE', 'MERGE_SLASHES', 'DECODE_AND_MERGE_SLASHES'];

/** The HCM fields of a normalization, as the production mesh sets them. */
function pathNormalizationFields(mode: PathNormalization) {
  return {
    normalizePath: mode !== 'NONE',
    mergeSlashes: mode === 'MERGE_SLASHES' || mode === 'DECODE_AND_MERGE_SLASHES',
    pathWithEscapedSlashesAction:
      mode === 'DECODE_AND_MERGE_SLASHES'
        ? HttpConnectionManager_PathWithEscapedSlashesAction.UNESCAPE_AND_FORWARD
        : HttpConnectionManager_PathWithEscapedSlashesAction.KEEP_UNCHANGED,
  };
}

/**
 * An HTTP connection manager: `extraFilters` (e.g. jwt_authn, rbac from the security builders) run
 * in the given order, the router always last; paths normalized as `pathNormalization` says.
 */
export function httpConnectionManager(
  statPrefix: string,
  routes: RouteSource,
  extraFilters: readonly HttpFilter[] = [],
  pathNormalization: PathNormalization = 'BASE',
  extras: HcmExtras = {},
): Any {
  return pack(HttpConnectionManagerSchema, {
    statPrefix,
    ...extras,
    codecType: HttpConnectionManager_CodecType.AUTO,
    ...pathNormalizationFields(pathNormalization),
    routeSpecifier:
      'rds' in routes
        ? { case: 'rds', value: { configSource: adsConfigSourceWaiting(), routeConfigName: routes.rds } }
        : { case: 'routeConfig', value: routes.inline },
    httpFilters: [...extraFilters, routerFilter()],
    // As the Go mesh's HCMs: WebSocket upgrades pass (through the same filters as any request).
    upgradeConfigs: [{ upgradeType: 'websocket' }],
    // As the Go mesh's HCMs: no stream idle timeout (Envoy's default is 5 minutes); route timeouts bound requests.
    streamIdleTimeout: { seconds: 0n },
  });
}

/**
 * Per-listener fields of a connection manager: client certificate handling (x-forwarded-client-cert)
 * of inbound ones, HTTP/1.0 (http10Fields), and the edge's use of the remote address (EDGE_HCM).
 */
export type HcmExtras = Pick<MessageInitShape<typeof HttpConnectionManagerSchema>, 'forwardClientCertDetails' | 'setCurrentClientCertDetails' | 'httpProtocolOptions' | 'useRemoteAddress' | 'accessLog'>;

/** A gateway is the edge: the client's address is the downstream peer, appended to x-forwarded-for. */
export const EDGE_HCM: HcmExtras = { useRemoteAddress: true };

/** PILOT_HTTP10 (or the proxy's HTTP10 metadata): HTTP/1.0 clients are served instead of getting 426. */
export function http10Fields(accept: boolean | undefined): HcmExtras {
  return accept ? { httpProtocolOptions: { acceptHttp10: true } } : {};
}

export function hcmFilter(statPrefix: string, routes: RouteSource, extraFilters: readonly HttpFilter[] = [], pathNormalization?: PathNormalization, extras?: HcmExtras): Filter {
  const hcm = httpConnectionManager(statPrefix, routes, extraFilters, pathNormalization, extras);
  return create(FilterSchema, { name: HCM_FILTER_NAME, configType: { case: 'typedConfig', value: hcm } });
}

/** A tcp_proxy to `cluster` with what its DestinationRule gives it (`policy`; `subset`: the destination's) and the mesh's access logs. */
export function tcpProxyFilter(cluster: string, policy?: TcpProxyPolicy, subset = '', logs?: AccessLogs): Filter {
  return create(FilterSchema, {
    name: TCP_PROXY_FILTER_NAME,
    configType: {
      case: 'typedConfig',
      value: pack(TcpProxySchema, { statPrefix: cluster, clusterSpecifier: { case: 'cluster', value: cluster }, ...tcpProxyTimeouts(policy), ...tunnelingConfig(policy, subset), ...accessLogField(logs, 'tcp') }),
    },
  });
}

/** A DestinationRule's trafficPolicy.tunnel (validated: protocol CONNECT or POST, a host, a port). */
export interface TunnelSettings {
  readonly protocol?: string;
  readonly targetHost: string;
  readonly targetPort: number;
}

/** What a TCP proxy to a service takes from its DestinationRule: tcp limits (Go duration strings) and tunnels. */
export interface TcpProxyPolicy {
  readonly idleTimeout?: string;
  readonly maxConnectionDuration?: string;
  /** The rule's trafficPolicy.tunnel. */
  readonly tunnel?: TunnelSettings;
  /** The subsets' own trafficPolicy.tunnel, by subset name (only those that set one). */
  readonly subsetTunnels?: Readonly<Record<string, TunnelSettings>>;
}

/** The tcp_proxy fields of the tcp limits: idle_timeout and max_downstream_connection_duration. */
export function tcpProxyTimeouts(limits: TcpProxyPolicy | undefined): { idleTimeout?: ReturnType<typeof duration>; maxDownstreamConnectionDuration?: ReturnType<typeof duration> } {
  return {
    ...(limits?.idleTimeout ? { idleTimeout: duration(limits.idleTimeout) } : {}),
    ...(limits?.maxConnectionDuration ? { maxDownstreamConnectionDuration: duration(limits.maxConnectionDuration) } : {}),
  };
}

/**
 * tunneling_config as the Go mesh's tunnelingconfig.Apply: a destination naming a subset takes that
 * subset's tunnel only (none when the subset sets none, not the rule's), any other the rule's. The
 * hostname is host:port, an IPv6 host bracketed.
 */
export function tunnelingConfig(policy: TcpProxyPolicy | undefined, subset: string): { tunnelingConfig?: { hostname: string; usePost: boolean } } {
  const t = subset ? policy?.subsetTunnels?.[subset] : policy?.tunnel;
  if (!t) return {};
  const host = t.targetHost.includes(':') ? `[${t.targetHost}]` : t.targetHost;
  return { tunnelingConfig: { hostname: `${host}:${t.targetPort}`, usePost: t.protocol === 'POST' } };
}
