// A DestinationRule's `proxyProtocol` on an outbound cluster, as the Go mesh's
// applyUpstreamProxyProtocol: the cluster's transport socket, and each transport_socket_matches
// entry's, is wrapped in `envoy.transport_sockets.upstream_proxy_protocol`, so the proxy writes a
// PROXY protocol header (the downstream client's addresses) before anything else, TLS included; a
// cluster without a socket wraps raw_buffer. Applied after TLS and mesh mTLS (cluster.ts).
import type { MessageInitShape } from '@bufbuild/protobuf';
import type { ClusterSchema } from '../gen/envoy/config/cluster/v3/cluster_pb.js';
import type { TransportSocketSchema } from '../gen/envoy/config/core/v3/base_pb.js';
import { ProxyProtocolConfig_Version } from '../gen/envoy/config/core/v3/proxy_protocol_pb.js';
import { ProxyProtocolUpstreamTransportSchema } from '../gen/envoy/extensions/transport_sockets/proxy_protocol/v3/upstream_proxy_protocol_pb.js';
import { UPSTREAM_PROXY_PROTOCOL_SOCKET_NAME } from '../envoy/names.js';
import { pack } from '../envoy/types.js';
import { rawBufferSocket } from './common.js';

/** TrafficPolicy.ProxyProtocol (the API's names); an unset version is V1, as the API's enum default. */
export interface ProxyProtocolSettings {
  readonly version?: string;
}

type ClusterInit = Exclude<MessageInitShape<typeof ClusterSchema>, { $typeName: string }>;
type SocketInit = MessageInitShape<typeof TransportSocketSchema>;

function wrapped(version: ProxyProtocolConfig_Version, inner: SocketInit | undefined): SocketInit {
  return {
    name: UPSTREAM_PROXY_PROTOCOL_SOCKET_NAME,
    configType: { case: 'typedConfig', value: pack(ProxyProtocolUpstreamTransportSchema, { config: { version }, transportSocket: inner ?? rawBufferSocket() }) },
  };
}

/** The cluster's transport fields with the PROXY protocol socket around each; unchanged without `settings`. */
export function withUpstreamProxyProtocol(fields: Partial<ClusterInit>, settings: ProxyProtocolSettings | undefined): Partial<ClusterInit> {
  if (!settings) return fields;
  const version = settings.version === 'V2' ? ProxyProtocolConfig_Version.V2 : ProxyProtocolConfig_Version.V1;
  const matches = fields.transportSocketMatches ?? [];
  if (!fields.transportSocket && matches.length === 0) return { ...fields, transportSocket: wrapped(version, undefined) };
  return {
    ...fields,
    ...(fields.transportSocket ? { transportSocket: wrapped(version, fields.transportSocket) } : {}),
    ...(matches.length > 0 ? { transportSocketMatches: matches.map(({ name, match, transportSocket }) => ({ name, ...(match ? { match } : {}), transportSocket: wrapped(version, transportSocket) })) } : {}),
  };
}
