// Envoy's extension names, as the control plane writes them into filter lists and the proxy reads
// them back (a filter's name is also the dynamic-metadata namespace it writes under).

/** HTTP filter name of jwt_authn; also the dynamic-metadata namespace its payload is written to. */
export const JWT_AUTHN_FILTER_NAME = 'envoy.filters.http.jwt_authn';
/** HTTP filter name of every rbac filter (the mesh suffixes `.allow`, `.deny`, ...). */
export const RBAC_FILTER_NAME = 'envoy.filters.http.rbac';
/** Network filter of the rbac rules on TCP chains; also the dynamic-metadata namespace of its shadow results. */
export const NETWORK_RBAC_FILTER_NAME = 'envoy.filters.network.rbac';
/** HTTP filter that asks an external authorizer (CUSTOM AuthorizationPolicies). */
export const EXT_AUTHZ_FILTER_NAME = 'envoy.filters.http.ext_authz';
export const ROUTER_FILTER_NAME = 'envoy.filters.http.router';
export const HCM_FILTER_NAME = 'envoy.filters.network.http_connection_manager';
export const TCP_PROXY_FILTER_NAME = 'envoy.filters.network.tcp_proxy';
export const HTTP_INSPECTOR_FILTER_NAME = 'envoy.filters.listener.http_inspector';
export const TLS_INSPECTOR_FILTER_NAME = 'envoy.filters.listener.tls_inspector';
export const ORIGINAL_SRC_FILTER_NAME = 'envoy.filters.listener.original_src';
/** The TLS transport socket (Downstream/UpstreamTlsContext). */
export const TLS_TRANSPORT_SOCKET_NAME = 'envoy.transport_sockets.tls';
/** Plaintext (raw_buffer). */
export const RAW_BUFFER_TRANSPORT_SOCKET_NAME = 'envoy.transport_sockets.raw_buffer';
/** The PROXY protocol header before a cluster's own transport socket (ProxyProtocolUpstreamTransport). */
export const UPSTREAM_PROXY_PROTOCOL_SOCKET_NAME = 'envoy.transport_sockets.upstream_proxy_protocol';
/** The mesh's ALPN override HTTP filter (the Go mesh's `istio.alpn`). */
export const ALPN_FILTER_NAME = 'mesh.alpn';
/** HTTP filter of VirtualService fault injection (per-route config under the same name). */
export const FAULT_FILTER_NAME = 'envoy.filters.http.fault';
/** HTTP filter of VirtualService CORS policies (per-route config under the same name). */
export const CORS_FILTER_NAME = 'envoy.filters.http.cors';
/** The stats filter, HTTP and network (the Go mesh's `istio.stats`). */
export const STATS_FILTER_NAME = 'mesh.stats';
/** The peer metadata HTTP filter (the Go mesh's `istio.metadata_exchange`). */
export const METADATA_EXCHANGE_FILTER_NAME = 'mesh.metadata_exchange';
