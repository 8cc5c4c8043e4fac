// The DownstreamTlsContext of a gateway server that terminates TLS (SIMPLE, MUTUAL,
// OPTIONAL_MUTUAL, ISTIO_MUTUAL): certificates from `credentialName` or `credentialNames` over SDS
// on the ADS stream (`orch://<name>`; the client CA as `orch://<first name>-cacert`, or from
// `caCertCredentialName`), from the files `serverCertificate`/`privateKey` or `tlsCertificates`
// with `caCertificates`, or, for ISTIO_MUTUAL, the workload certificate and mesh roots the agent
// serves (`default`, `ROOTCA`). Where the client is verified, the default validation context
// carries the SANs, the certificate pins, the CRL file and, for insecureSkipVerify,
// ACCEPT_UNTRUSTED, as the Go mesh writes them (pins everywhere a client is verified, where the Go
// mesh applies them with credentials only; docs/traffic.md).
import { create, type MessageInitShape } from '@bufbuild/protobuf';
import { ApiConfigSource_ApiType, ApiVersion } from '../gen/envoy/config/core/v3/config_source_pb.js';
import { TransportSocketSchema, type TransportSocket } from '../gen/envoy/config/core/v3/base_pb.js';
import { CertificateValidationContext_TrustChainVerification as TrustChain, TlsParameters_TlsProtocol, type CertificateValidationContextSchema } from '../gen/envoy/extensions/transport_sockets/tls/v3/common_pb.js';
import type { SdsSecretConfigSchema } from '../gen/envoy/extensions/transport_sockets/tls/v3/secret_pb.js';
import { DownstreamTlsContextSchema, type CommonTlsContextSchema } from '../gen/envoy/extensions/transport_sockets/tls/v3/tls_pb.js';
import type { ServerTls } from '../model/gateway.js';
import { TLS_TRANSPORT_SOCKET_NAME } from '../envoy/names.js';
import { pack } from '../envoy/types.js';
import { adsConfigSource } from './common.js';

type CommonInit = Exclude<MessageInitShape<typeof CommonTlsContextSchema>, { $typeName: string }>;
type SdsInit = MessageInitShape<typeof SdsSecretConfigSchema>;
type ValidationInit = Exclude<MessageInitShape<typeof CertificateValidationContextSchema>, { $typeName: string }>;

/** Prefix of the SDS resource names of credentialName secrets (the Go mesh's `kubernetes://`). */
export const CREDENTIAL_RESOURCE_PREFIX = 'orch://';
/** Suffix of the resource holding a credential's CA certificate. */
export const CREDENTIAL_CA_SUFFIX = '-cacert';
/** The agent's SDS cluster and resources (DESIGN.md, workload identity). */
const AGENT_SDS_CLUSTER = 'sds-grpc';
const WORKLOAD_SECRET = 'default';
const ROOT_SECRET = 'ROOTCA';
/** The operating system's roots the agent serves (the Go mesh's name). */
export const SYSTEM_ROOT_SECRET = 'file-root:system';

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

/**
 * The SDS resource of a server's client CA: `caCertCredentialName` (its own CA resource, the
 * suffix added unless the name has it), else the first credential's `-cacert`.
 */
export function clientCaResourceName(tls: Pick<ServerTls, 'credentialName' | 'credentialNames' | 'caCertCredentialName'>): string | undefined {
  const name = tls.caCertCredentialName || tls.credentialNames?.[0] || tls.credentialName;
  if (!name) return undefined;
  const resource = credentialResourceName(name);
  return resource.endsWith(CREDENTIAL_CA_SUFFIX) ? resource : `${resource}${CREDENTIAL_CA_SUFFIX}`;
}

function overAds(name: string): SdsInit {
  return { name, sdsConfig: adsConfigSource() };
}

/** A secret from the agent's SDS server (the bootstrap's `sds-grpc` cluster). */
export function fromAgent(name: string): SdsInit {
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

/** What a verified client certificate must satisfy beyond its chain: SANs, pins, the CRL file, insecureSkipVerify. */
function clientChecks(tls: ServerTls, withCrl: boolean): ValidationInit {
  return {
    matchSubjectAltNames: exactSans(tls.subjectAltNames),
    verifyCertificateSpki: [...(tls.verifyCertificateSpki ?? [])],
    verifyCertificateHash: [...(tls.verifyCertificateHash ?? [])],
    ...(withCrl && tls.caCrl ? { crl: file(tls.caCrl) } : {}),
    ...(tls.insecureSkipVerify ? { trustChainVerification: TrustChain.ACCEPT_UNTRUSTED } : {}),
  };
}

type Certificates = Partial<Pick<CommonInit, 'tlsCertificates' | 'tlsCertificateSdsSecretConfigs' | 'validationContextType'>>;

function combined(defaults: ValidationInit, sds: SdsInit): Certificates['validationContextType'] {
  return { case: 'combinedValidationContext', value: { defaultValidationContext: defaults, validationContextSdsSecretConfig: sds } };
}

function certificates(tls: ServerTls, validateClient: boolean): Certificates {
  if (tls.mode === 'ISTIO_MUTUAL') {
    return { tlsCertificateSdsSecretConfigs: [fromAgent(WORKLOAD_SECRET)], validationContextType: combined(clientChecks(tls, true), fromAgent(ROOT_SECRET)) };
  }
  const credentials = tls.credentialNames?.length ? tls.credentialNames : tls.credentialName ? [tls.credentialName] : [];
  if (credentials.length > 0) {
    const sans = exactSans(tls.subjectAltNames);
    const ca = clientCaResourceName(tls)!;
    return {
      tlsCertificateSdsSecretConfigs: credentials.map((n) => overAds(credentialResourceName(n))),
      // The CRL of a credential comes with its CA (the Secret's ca.crl), so caCrl is not read here.
      ...(validateClient
        ? { validationContextType: combined(clientChecks(tls, false), overAds(ca)) }
        : sans.length > 0
          ? { validationContextType: { case: 'validationContext' as const, value: { matchSubjectAltNames: sans } } }
          : {}),
    };
  }
  const pairs = tls.tlsCertificates?.length ? tls.tlsCertificates : [{ serverCertificate: tls.serverCertificate, privateKey: tls.privateKey }];
  return {
    tlsCertificates: pairs.map((p) => ({ certificateChain: file(p.serverCertificate ?? ''), privateKey: file(p.privateKey ?? '') })),
    ...(validateClient
      ? { validationContextType: { case: 'validationContext' as const, value: { ...(tls.caCertificates ? { trustedCa: file(tls.caCertificates) } : {}), ...clientChecks(tls, true) } } }
      : {}),
  };
}

function tlsParams(tls: ServerTls): CommonInit['tlsParams'] | undefined {
  if (tls.mode === 'ISTIO_MUTUAL') return undefined;
  const min = TLS_VERSIONS[tls.minProtocolVersion ?? 'TLS_AUTO'] ?? TlsParameters_TlsProtocol.TLS_AUTO;
  const max = TLS_VERSIONS[tls.maxProtocolVersion ?? 'TLS_AUTO'] ?? TlsParameters_TlsProtocol.TLS_AUTO;
  const ciphers = tls.cipherSuites ?? [];
  const curves = tls.ecdhCurves ?? [];
  if (min === TlsParameters_TlsProtocol.TLS_AUTO && max === TlsParameters_TlsProtocol.TLS_AUTO && ciphers.length === 0 && curves.length === 0) return undefined;
  return { tlsMinimumProtocolVersion: min, tlsMaximumProtocolVersion: max, cipherSuites: [...ciphers], ecdhCurves: [...curves] };
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
