// The ALPN override filter of outbound connection managers (sidecar outbound and gateways, not
// sidecar inbound, as the Go mesh adds `istio.alpn`): a request sent over mesh mTLS offers the
// HTTP token of its upstream protocol first, so that a server sidecar's sniffed port picks its HTTP
// mTLS chain; `mesh` and the plain HTTP token follow, for servers that match on those.
import { create } from '@bufbuild/protobuf';
import { HttpFilterSchema, type HttpFilter } from '../gen/envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager_pb.js';
import { FilterConfig_Protocol, FilterConfigSchema } from '../gen/mesh/envoy/config/filter/http/alpn/v2alpha1/config_pb.js';
import { ALPN_FILTER_NAME } from '../envoy/names.js';
import { pack } from '../envoy/types.js';
import { MESH_ALPN, MESH_H2_ALPN, MESH_HTTP10_ALPN, MESH_HTTP11_ALPN } from '../security/mtls/tls-context.js';

const OVERRIDES: ReadonlyArray<readonly [FilterConfig_Protocol, readonly string[]]> = [
  [FilterConfig_Protocol.HTTP10, [MESH_HTTP10_ALPN, MESH_ALPN, 'http/1.0']],
  [FilterConfig_Protocol.HTTP11, [MESH_HTTP11_ALPN, MESH_ALPN, 'http/1.1']],
  [FilterConfig_Protocol.HTTP2, [MESH_H2_ALPN, MESH_ALPN, 'h2']],
];

export function alpnFilter(): HttpFilter {
  const config = pack(FilterConfigSchema, { alpnOverride: OVERRIDES.map(([upstreamProtocol, alpn]) => ({ upstreamProtocol, alpnOverride: [...alpn] })) });
  return create(HttpFilterSchema, { name: ALPN_FILTER_NAME, configType: { case: 'typedConfig', value: config } });
}
