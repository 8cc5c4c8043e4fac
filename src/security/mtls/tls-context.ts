// The Envoy TLS messages of mesh mutual TLS, pure: both sides take their certificate (`default`)
// and trusted roots (`ROOTCA`) over SDS from the agent (the `sds-grpc` bootstrap cluster), as the
// Go mesh's sidecars do. Servers accept peers whose URI SAN is in one of the trust domains (the
// mesh's and its aliases); clients check the SPIFFE ids of the service's accounts.
import { create, type MessageInitShape } from '@bufbuild/protobuf';
import { ApiVersion, ApiConfigSource_ApiType } from '../../gen/envoy/config/core/v3/config_source_pb.js';
import { TransportSocketSchema, type TransportSocket } from '../../gen/envoy/config/core/v3/base_pb.js';
import { SubjectAltNameMatcher_SanType, TlsParameters_TlsProtocol } from '../../gen/envoy/extensions/transport_sockets/tls/v3/common_pb.js';
import type { SdsSecretConfigSchema } from '../../gen/envoy/extensions/transport_sockets/tls/v3/secret_pb.js';
import { DownstreamTlsContextSchema, UpstreamTlsContextSchema, type CommonTlsContextSchema } from '../../gen/envoy/extensions/transport_sockets/tls/v3/tls_pb.js';
import { pack } from '../../envoy/types.js';
import { SDS_CLUSTER } from '../../agent/bootstrap.js';

export const TLS_TRANSPORT_SOCKET = 'envoy.transport_sockets.tls';
/** The agent's two secrets (served on the bootstrap's SDS_CLUSTER). */
export const SDS_DEFAULT_SECRET = 'default';
export const SDS_ROOT_SECRET = 'ROOTCA';

/**
 * ALPN tokens of in-mesh traffic (the Go mesh's `istio` and `istio-peer-exchange`, in our words):
 * a client sidecar offers them, and a PERMISSIVE server tells mesh mTLS from other TLS by them.
 */
export const MESH_ALPN = 'mesh';
export const MESH_PEER_EXCHANGE_ALPN = 'mesh-peer-exchange';
/** What a client sidecar offers: TCP clusters, and HTTP/2 clusters (h2 added). */
export const MESH_CLIENT_ALPNS = [MESH_PEER_EXCHANGE_ALPN, MESH_ALPN];
export const MESH_CLIENT_H2_ALPNS = [MESH_PEER_EXCHANGE_ALPN, MESH_ALPN, 'h2'];
/** HTTP over mesh mTLS as the Go mesh's client-side ALPN override announces it (sniffed ports). */
export const MESH_HTTP10_ALPN = 'mesh-http/1.0';
export const MESH_HTTP11_ALPN = 'mesh-http/1.1';
export const MESH_H2_ALPN = 'mesh-h2';
export const MESH_HTTP_ALPNS = [MESH_HTTP10_ALPN, MESH_HTTP11_ALPN, MESH_H2_ALPN];
/** Every ALPN a mesh client may offer: a PERMISSIVE port's mTLS chain matches any of them. */
export const ALL_MESH_ALPNS = [MESH_ALPN, MESH_PEER_EXCHANGE_ALPN, ...MESH_HTTP_ALPNS];

/** Server ALPN: HTTP chains negotiate the HTTP version; TCP chains also accept the exchange token. */
const SERVER_HTTP_ALPNS = ['h2', 'http/1.1'];
const SERVER_TCP_ALPNS = [MESH_PEER_EXCHANGE_ALPN, 'h2', 'http/1.1'];

/** PILOT_SIDECAR_ENABLE_INBOUND_TLS_V2: the Go mesh's sidecar cipher list (TLS 1.2 suites; 1.3's are fixed). */
export const INBOUND_TLS_V2_CIPHERS = [
  'ECDHE-ECDSA-AES256-GCM-SHA384',
  'ECDHE-RSA-AES256-GCM-SHA384',
  'ECDHE-ECDSA-AES128-GCM-SHA256',
  'ECDHE-RSA-AES128-GCM-SHA256',
  'AES256-GCM-SHA384',
  'AES128-GCM-SHA256',
];

type CommonInit = MessageInitShape<typeof CommonTlsContextSchema>;

/** A secret from the agent over SDS; fetched without an initial timeout, as the Go mesh does. */
export function sdsSecret(name: string): MessageInitShape<typeof SdsSecretConfigSchema> {
  return {
    name,
    sdsConfig: {
      configSourceSpecifier: {
        case: 'apiConfigSource',
        value: {
          apiType: ApiConfigSource_ApiType.GRPC,
          setNodeOnFirstMessageOnly: true,
          transportApiVersion: ApiVersion.V3,
          grpcServices: [{ targetSpecifier: { case: 'envoyGrpc', value: { clusterName: SDS_CLUSTER } } }],
        },
      },
      resourceApiVersion: ApiVersion.V3,
      initialFetchTimeout: { seconds: 0n, nanos: 0 },
    },
  };
}

type SanMatcher = { sanType: SubjectAltNameMatcher_SanType; matcher: { matchPattern: { case: 'exact' | 'prefix'; value: string } } };
const uriSan = (kind: 'exact' | 'prefix', value: string): SanMatcher => ({ sanType: SubjectAltNameMatcher_SanType.URI, matcher: { matchPattern: { case: kind, value } } });

/** The certificate, and the roots plus the SAN matchers the peer's certificate must pass. */
function meshCommon(sans: readonly SanMatcher[], alpn: readonly string[], tlsParams?: CommonInit['tlsParams']): CommonInit {
  return {
    alpnProtocols: [...alpn],
    ...(tlsParams ? { tlsParams } : {}),
    tlsCertificateSdsSecretConfigs: [sdsSecret(SDS_DEFAULT_SECRET)],
    validationContextType: {
      case: 'combinedValidationContext',
      value: { defaultValidationContext: { matchTypedSubjectAltNames: [...sans] }, validationContextSdsSecretConfig: sdsSecret(SDS_ROOT_SECRET) },
    },
  };
}

export interface InboundTlsOptions {
  /**
   * Trust domains a client's SPIFFE id may be in (the mesh's, then its aliases); empty accepts any
   * certificate the roots verify (PILOT_SKIP_VALIDATE_TRUST_DOMAIN).
   */
  readonly trustDomains: readonly string[];
  /** PILOT_SIDECAR_ENABLE_INBOUND_TLS_V2: TLS 1.2 at least, the strong cipher list. */
  readonly tlsV2: boolean;
}

/** The server side of mesh mTLS on an inbound chain: client certificate required. */
export function inboundMtlsSocket(protocol: 'http' | 'tcp', opts: InboundTlsOptions): TransportSocket {
  const params = opts.tlsV2
    ? { tlsMinimumProtocolVersion: TlsParameters_TlsProtocol.TLSv1_2, tlsMaximumProtocolVersion: TlsParameters_TlsProtocol.TLSv1_3, cipherSuites: INBOUND_TLS_V2_CIPHERS }
    : undefined;
  const sans = opts.trustDomains.map((td) => uriSan('prefix', `spiffe://${td}/`));
  const ctx = { commonTlsContext: meshCommon(sans, protocol === 'http' ? SERVER_HTTP_ALPNS : SERVER_TCP_ALPNS, params), requireClientCertificate: true };
  return create(TransportSocketSchema, { name: TLS_TRANSPORT_SOCKET, configType: { case: 'typedConfig', value: pack(DownstreamTlsContextSchema, ctx) } });
}

export interface OutboundMtls {
  /** SPIFFE ids the server may present (the service's accounts, with trust domain aliases). */
  readonly sans: readonly string[];
  readonly sni: string;
  /** The cluster speaks HTTP/2 upstream: `h2` is offered with the mesh tokens. */
  readonly http2: boolean;
}

/** The client side of mesh mTLS on an outbound cluster. */
export function outboundMtlsSocket(o: OutboundMtls): TransportSocket {
  const params = { tlsMinimumProtocolVersion: TlsParameters_TlsProtocol.TLSv1_2, tlsMaximumProtocolVersion: TlsParameters_TlsProtocol.TLSv1_3 };
  const ctx = { sni: o.sni, commonTlsContext: meshCommon(o.sans.map((s) => uriSan('exact', s)), o.http2 ? MESH_CLIENT_H2_ALPNS : MESH_CLIENT_ALPNS, params) };
  return create(TransportSocketSchema, { name: TLS_TRANSPORT_SOCKET, configType: { case: 'typedConfig', value: pack(UpstreamTlsContextSchema, ctx) } });
}
