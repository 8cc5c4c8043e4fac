// Transport sockets by type: `envoy.transport_sockets.tls` (DownstreamTlsContext on a filter
// chain, UpstreamTlsContext on a cluster), `raw_buffer` (plaintext) and, on a cluster,
// `upstream_proxy_protocol` (ProxyProtocolUpstreamTransport: the PROXY header before the socket it
// wraps, proxy-protocol.ts). Any other type is a ConfigError naming it. A cluster's
// transport_socket_matches pick the socket per endpoint from its `envoy.transport_socket_match`
// metadata (first match wins; none: the cluster's own socket).
import type { JsonObject, JsonValue } from '@bufbuild/protobuf';
import type { Cluster } from '../../gen/envoy/config/cluster/v3/cluster_pb.js';
import type { TransportSocket } from '../../gen/envoy/config/core/v3/base_pb.js';
import { RawBufferSchema } from '../../gen/envoy/extensions/transport_sockets/raw_buffer/v3/raw_buffer_pb.js';
import { ProxyProtocolUpstreamTransportSchema } from '../../gen/envoy/extensions/transport_sockets/proxy_protocol/v3/upstream_proxy_protocol_pb.js';
import { DownstreamTlsContextSchema, UpstreamTlsContextSchema } from '../../gen/envoy/extensions/transport_sockets/tls/v3/tls_pb.js';
import { ConfigError } from '../../envoy/config-error.js';
import { typeNameOf } from '../../envoy/types.js';
import { unpackConfig } from '../extensions.js';
import type { StatsStore } from '../stats.js';
import { DownstreamTls, sslStats } from './downstream.js';
import { SecretManager } from './secrets.js';
import { UpstreamTls } from './upstream.js';
import { compileProxyProtocol, type ProxyProtocolVersion } from './proxy-protocol.js';
import { RAW_BUFFER_TRANSPORT_SOCKET_NAME, TLS_TRANSPORT_SOCKET_NAME, UPSTREAM_PROXY_PROTOCOL_SOCKET_NAME } from '../../envoy/names.js';

const RAW_BUFFER = RawBufferSchema.typeName;
const PROXY_PROTOCOL = ProxyProtocolUpstreamTransportSchema.typeName;
/**
 * What the node announces in node.extensions, as Envoy lists its compiled extensions there: the
 * discovery server sends TLS transport sockets and the PROXY protocol one only to proxies that
 * have them.
 */
export const TRANSPORT_SOCKET_EXTENSIONS = [
  ...['downstream', 'upstream'].flatMap((side) => [TLS_TRANSPORT_SOCKET_NAME, RAW_BUFFER_TRANSPORT_SOCKET_NAME].map((name) => ({ name, category: `envoy.transport_sockets.${side}` }))),
  { name: UPSTREAM_PROXY_PROTOCOL_SOCKET_NAME, category: 'envoy.transport_sockets.upstream' },
];

/** An endpoint's transport: TLS, the PROXY protocol header (before TLS when both), or both; undefined: plaintext. */
export interface UpstreamTransport {
  readonly tls?: UpstreamTls;
  readonly proxyProtocol?: ProxyProtocolVersion;
}

/** The endpoint metadata key transport_socket_matches read. */
export const TRANSPORT_SOCKET_MATCH = 'envoy.transport_socket_match';

export interface TlsDeps {
  readonly stats: StatsStore;
  readonly secrets?: SecretManager;
}

/** Without a shared manager (tests, bootstrap validation): static secrets only, none known. */
const noSecrets = new SecretManager();

function typedConfig(ts: TransportSocket, field: string) {
  if (ts.configType.case !== 'typedConfig') throw new ConfigError(`${field}.typed_config`, `transport socket ${ts.name || '(unnamed)'} needs a typed_config`);
  return ts.configType.value;
}

/** A filter chain's transport socket: TLS, or undefined for raw_buffer. */
export function compileDownstreamTransport(ts: TransportSocket, field: string, listenerAddress: string, deps: TlsDeps): DownstreamTls | undefined {
  const any = typedConfig(ts, field);
  const type = typeNameOf(any.typeUrl);
  if (type === RAW_BUFFER) return undefined;
  if (type !== DownstreamTlsContextSchema.typeName) throw new ConfigError(`${field}.typed_config`, `transport socket type ${type} is not supported on a filter chain; use ${DownstreamTlsContextSchema.typeName} or raw_buffer`);
  const ctx = unpackConfig(any, DownstreamTlsContextSchema, `${field}.typed_config`);
  return new DownstreamTls(ctx, `${field}.typed_config`, deps.secrets ?? noSecrets, sslStats(deps.stats, 'listener', { name: 'envoy_listener_address', value: listenerAddress }));
}

function compileUpstream(ts: TransportSocket | undefined, field: string, cluster: string, deps: TlsDeps): UpstreamTransport | undefined {
  if (!ts) return undefined;
  const any = typedConfig(ts, field);
  const type = typeNameOf(any.typeUrl);
  const at = `${field}.typed_config`;
  if (type === RAW_BUFFER) return undefined;
  if (type === PROXY_PROTOCOL) {
    const pp = unpackConfig(any, ProxyProtocolUpstreamTransportSchema, at);
    const proxyProtocol = compileProxyProtocol(pp.config, `${at}.config`);
    if (!pp.transportSocket) throw new ConfigError(`${at}.transport_socket`, 'required: the socket the PROXY header goes before (raw_buffer for plaintext)');
    const inner = compileUpstream(pp.transportSocket, `${at}.transport_socket`, cluster, deps);
    // Envoy would write one header per layer; no upstream reads two.
    if (inner?.proxyProtocol) throw new ConfigError(`${at}.transport_socket`, 'a PROXY protocol socket inside another is not supported');
    return { ...inner, proxyProtocol };
  }
  if (type !== UpstreamTlsContextSchema.typeName) {
    throw new ConfigError(at, `transport socket type ${type} is not supported on a cluster; use ${UpstreamTlsContextSchema.typeName}, ${PROXY_PROTOCOL} or raw_buffer`);
  }
  const ctx = unpackConfig(any, UpstreamTlsContextSchema, at);
  return { tls: new UpstreamTls(ctx, at, deps.secrets ?? noSecrets, sslStats(deps.stats, 'cluster', { name: 'envoy_cluster_name', value: cluster })) };
}

function sameJson(a: JsonValue | undefined, b: JsonValue | undefined): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}

/** The transport of each endpoint, from its metadata; `undefined` = plaintext. */
export interface UpstreamTransports {
  readonly forEndpoint: (metadata: JsonObject | undefined) => UpstreamTransport | undefined;
  /** The cluster's own transport socket (endpoints without metadata, ORIGINAL_DST destinations). */
  readonly fallback: UpstreamTransport | undefined;
}

export function compileUpstreamTransports(c: Cluster, field: string, deps: TlsDeps): UpstreamTransports {
  const fallback = compileUpstream(c.transportSocket, `${field}.transport_socket`, c.name, deps);
  const matches = c.transportSocketMatches.map((m, i) => {
    const f = `${field}.transport_socket_matches[${i}]`;
    if (!m.name) throw new ConfigError(`${f}.name`, 'a name is required');
    return { criteria: Object.entries(m.match ?? {}), transport: compileUpstream(m.transportSocket, `${f}.transport_socket`, c.name, deps) };
  });
  if (matches.length === 0) return { forEndpoint: () => fallback, fallback };
  return {
    forEndpoint: (md) => {
      const found = matches.find((m) => m.criteria.every(([k, v]) => sameJson(md?.[k], v)));
      return found ? found.transport : fallback;
    },
    fallback,
  };
}
