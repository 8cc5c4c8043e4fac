// The DownstreamTlsContext of a gateway server that terminates TLS (SIMPLE, MUTUAL, ISTIO_MUTUAL):
// certificates from `credentialName` over SDS on the ADS stream (`orch://<name>`, its CA as
// `orch://<name>-cacert`), from the files `serverCertificate`/`privateKey`/`caCertificates`, or,
// for ISTIO_MUTUAL, the workload certificate and mesh roots the agent serves (`default`, `ROOTCA`).
import { create, type MessageInitShape } from '@bufbuild/protobuf';
import { ApiConfigSource_ApiType, ApiVersion } from '../gen/envoy/config/core/v3/config_source_pb.js';
import { TransportSocketSchema, type TransportSocket } from '../gen/envoy/config/core/v3/base_pb.js';
import { TlsParameters_TlsProtocol } from '../gen/envoy/extensions/transport_sockets/tls/v3/common_pb.js';
import type { SdsSecretConfigSchema } from '../gen/envoy/extensions/transport_sockets/tls/v3/secret_pb.js';
import { DownstreamTlsContextSchema, type CommonTlsContextSchema } from '../gen/envoy/extensions/transport_sockets/tls/v3/tls_pb.js';
import type { ServerTls } from '../model/gateway.js';
import { TLS_TRANSPORT_SOCKET_NAME } from '../envoy/names.js';
import { pack } from '../envoy/types.js';
import { adsConfigSource } from './common.js';

type CommonInit = Exclude<MessageInitShape<typeof CommonTlsContextSchema>, { $typeName: string }>;
type SdsInit = MessageInitShape<typeof SdsSecretConfigSchema>;

/** Prefix of the SDS resource names of credentialName secrets (the Go mesh's `kubernetes://`). */
export const CREDENTIAL_RESOURCE_PREFIX = 'orch://';
/** Suffix of the resource holding a credential's CA certificate. */
export const CREDENTIAL_CA_SUFFIX = '-cacert';
/** The agent's SDS cluster and resources (DESIGN.md, workload identity). */
const AGENT_SDS_CLUSTER = 'sds-grpc';
const WORKLOAD_SECRET = 'default';
const ROOT_SECRET = 'ROOTCA';

/** ALPN a terminating gateway offers, as the Go mesh: HTTP/2 first. */
const ALPN_HTTP = ['h2', 'http/1.1'];

const TLS_VERSIONS: Readonly<Record<string, TlsParameters_TlsProtocol>> = {
  TLS_AUTO: TlsParameters_TlsProtocol.TLS_AUTO,
  TLSV1_0: TlsParameters_TlsProtocol.TLSv1_0,
  TLSV1_1: TlsParameters_TlsProtocol.TLSv1_1,
  TLSV1_2: TlsParameters_TlsProtocol.TLSv1_2,
  TLSV1_3: TlsParameters_TlsProtocol.TLSv1_3,
};

/** The SDS resource name of a credentialName (names already carrying a scheme are kept). */
export function credentialResourceName(credentialName: string): string {
  return credentialName.includes('://') ? credentialName : `${CREDENTIAL_RESOURCE_PREFIX}${credentialName}`;
}

function overAds(name: string): SdsInit {
  return { name, sdsConfig: adsConfigSource() };
}

function fromAgent(name: string): SdsInit {
  return {
    name,
    sdsConfig: {
      resourceApiVersion: ApiVersion.V3,
      configSourceSpecifier: {
        case: 'apiConfigSource',
        value: {
          apiType: ApiConfigSource_ApiType.GRPC,
          transportApiVersion: ApiVersion.V3,
          setNodeOnFirstMessageOnly: true,
          grpcServices: [{ targetSpecifier: { case: 'envoyGrpc', value: { clusterName: AGENT_SDS_CLUSTER } } }],
        },
      },
    },
  };
}

const file = (path: string) => ({ specifier: { case: 'filename' as const, value: path } });
const exactSans = (sans: readonly string[] | undefined) => (sans ?? []).map((s) => ({ matchPattern: { case: 'exact' as const, value: s } }));

function certificates(tls: ServerTls, validateClient: boolean): Partial<Pick<CommonInit, 'tlsCertificates' | 'tlsCertificateSdsSecretConfigs' | 'validationContextType'>> {
  const sans = exactSans(tls.subjectAltNames);
  if (tls.mode === 'ISTIO_MUTUAL') {
    return {
      tlsCertificateSdsSecretConfigs: [fromAgent(WORKLOAD_SECRET)],
      validationContextType: { case: 'combinedValidationContext', value: { defaultValidationContext: { matchSubjectAltNames: sans }, validationContextSdsSecretConfig: fromAgent(ROOT_SECRET) } },
    };
  }
  if (tls.credentialName) {
    const name = credentialResourceName(tls.credentialName);
    return {
      tlsCertificateSdsSecretConfigs: [overAds(name)],
      ...(validateClient
        ? { validationContextType: { case: 'combinedValidationContext' as const, value: { defaultValidationContext: { matchSubjectAltNames: sans }, validationContextSdsSecretConfig: overAds(`${name}${CREDENTIAL_CA_SUFFIX}`) } } }
        : sans.length > 0
          ? { validationContextType: { case: 'validationContext' as const, value: { matchSubjectAltNames: sans } } }
          : {}),
    };
  }
  return {
    tlsCertificates: [{ certificateChain: file(tls.serverCertificate ?? ''), privateKey: file(tls.privateKey ?? '') }],
    ...(validateClient
      ? { validationContextType: { case: 'validationContext' as const, value: { ...(tls.caCertificates ? { trustedCa: file(tls.caCertificates) } : {}), matchSubjectAltNames: sans } } }
      : {}),
  };
}

function tlsParams(tls: ServerTls): CommonInit['tlsParams'] | undefined {
  if (tls.mode === 'ISTIO_MUTUAL') return undefined;
  const min = TLS_VERSIONS[tls.minProtocolVersion ?? 'TLS_AUTO'] ?? TlsParameters_TlsProtocol.TLS_AUTO;
  const max = TLS_VERSIONS[tls.maxProtocolVersion ?? 'TLS_AUTO'] ?? TlsParameters_TlsProtocol.TLS_AUTO;
  const ciphers = tls.cipherSuites ?? [];
  if (min === TlsParameters_TlsProtocol.TLS_AUTO && max === TlsParameters_TlsProtocol.TLS_AUTO && ciphers.length === 0) return undefined;
  return { tlsMinimumProtocolVersion: min, tlsMaximumProtocolVersion: max, cipherSuites: [...ciphers] };
}

/** The `envoy.transport_sockets.tls` socket of a terminating server; MUTUAL and ISTIO_MUTUAL require a client certificate. */
export function gatewayTransportSocket(tls: ServerTls): TransportSocket {
  const requireClient = tls.mode === 'MUTUAL' || tls.mode === 'ISTIO_MUTUAL';
  const validateClient = requireClient || tls.mode === 'OPTIONAL_MUTUAL';
  const params = tlsParams(tls);
  const context = pack(DownstreamTlsContextSchema, {
    commonTlsContext: { alpnProtocols: ALPN_HTTP, ...certificates(tls, validateClient), ...(params ? { tlsParams: params } : {}) },
    requireClientCertificate: requireClient,
  });
  return create(TransportSocketSchema, { name: TLS_TRANSPORT_SOCKET_NAME, configType: { case: 'typedConfig', value: context } });
}
