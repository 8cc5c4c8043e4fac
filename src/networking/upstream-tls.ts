// A DestinationRule's `tls` (SIMPLE, MUTUAL) as a cluster's UpstreamTlsContext, as the Go mesh
// builds it (cluster_tls.go): the client certificate and CA from files (`clientCertificate`,
// `privateKey`, `caCertificates`, the CRL `caCrl`; without `caCertificates` the server is verified
// against the operating system's roots, `file-root:system` from the agent's SDS, the SANs and the
// CRL checked as with a CA file), or, on a gateway, from the `credentialName`
// Secret over SDS on the ADS stream (`orch://<name>`, its CA as `orch://<name>-cacert`, its CRL with
// it); `insecureSkipVerify` connects without verifying the server (Envoy's ACCEPT_UNTRUSTED, no
// SAN check). Sidecars do not read `credentialName` (the Go mesh does not give them the
// credential either); what they do instead is reported when the rule is read (traffic-notices.ts).
import type { MessageInitShape } from '@bufbuild/protobuf';
import type { ClusterSchema } from '../gen/envoy/config/cluster/v3/cluster_pb.js';
import { CertificateValidationContext_TrustChainVerification as TrustChain, SubjectAltNameMatcher_SanType, type CertificateValidationContextSchema } from '../gen/envoy/extensions/transport_sockets/tls/v3/common_pb.js';
import { UpstreamTlsContextSchema, type CommonTlsContextSchema } from '../gen/envoy/extensions/transport_sockets/tls/v3/tls_pb.js';
import { TLS_TRANSPORT_SOCKET_NAME } from '../envoy/names.js';
import { pack } from '../envoy/types.js';
import { adsConfigSource } from './common.js';
import { clientCaResourceName, credentialResourceName, fromAgent, SYSTEM_ROOT_SECRET } from './gateway-tls.js';

/** The ClientTLSSettings fields the translation reads (the API's names). */
export interface ClientTlsSettings {
  readonly mode?: string;
  readonly clientCertificate?: string;
  readonly privateKey?: string;
  readonly caCertificates?: string;
  readonly caCrl?: string;
  readonly credentialName?: string;
  readonly insecureSkipVerify?: boolean;
  readonly subjectAltNames?: readonly string[];
  readonly sni?: string;
}

type ClusterInit = Exclude<MessageInitShape<typeof ClusterSchema>, { $typeName: string }>;
type CommonInit = Exclude<MessageInitShape<typeof CommonTlsContextSchema>, { $typeName: string }>;
type ValidationInit = Exclude<MessageInitShape<typeof CertificateValidationContextSchema>, { $typeName: string }>;

const file = (path: string) => ({ specifier: { case: 'filename' as const, value: path } });
const dnsSans = (sans: readonly string[] | undefined) => (sans ?? []).map((s) => ({ sanType: SubjectAltNameMatcher_SanType.DNS, matcher: { matchPattern: { case: 'exact' as const, value: s } } }));

/** insecureSkipVerify: whatever the server presents is accepted (no CA, no SAN check). */
const SKIP_VERIFY: Pick<CommonInit, 'validationContextType'> = { validationContextType: { case: 'validationContext', value: { trustChainVerification: TrustChain.ACCEPT_UNTRUSTED } } };

/** The client certificate and server validation from a credential's Secret over SDS (gateways). */
function fromCredential(tls: ClientTlsSettings & { credentialName: string }): Partial<CommonInit> {
  const name = credentialResourceName(tls.credentialName);
  return {
    ...(tls.mode === 'MUTUAL' ? { tlsCertificateSdsSecretConfigs: [{ name, sdsConfig: adsConfigSource() }] } : {}),
    ...(tls.insecureSkipVerify
      ? SKIP_VERIFY
      : {
          validationContextType: {
            case: 'combinedValidationContext' as const,
            value: { defaultValidationContext: { matchTypedSubjectAltNames: dnsSans(tls.subjectAltNames) }, validationContextSdsSecretConfig: { name: clientCaResourceName(tls)!, sdsConfig: adsConfigSource() } },
          },
        }),
  };
}

/** The client certificate and server validation from files. */
function fromFiles(tls: ClientTlsSettings): Partial<CommonInit> {
  const certificates = tls.mode === 'MUTUAL' && tls.clientCertificate && tls.privateKey ? [{ certificateChain: file(tls.clientCertificate), privateKey: file(tls.privateKey) }] : [];
  if (tls.insecureSkipVerify) return { tlsCertificates: certificates, ...SKIP_VERIFY };
  const checks: ValidationInit = { ...(tls.caCrl ? { crl: file(tls.caCrl) } : {}), matchTypedSubjectAltNames: dnsSans(tls.subjectAltNames) };
  if (tls.caCertificates) return { tlsCertificates: certificates, validationContextType: { case: 'validationContext', value: { trustedCa: file(tls.caCertificates), ...checks } } };
  // No CA named: the system's roots, which the proxy must have before it connects (fail closed).
  return {
    tlsCertificates: certificates,
    validationContextType: { case: 'combinedValidationContext', value: { defaultValidationContext: checks, validationContextSdsSecretConfig: fromAgent(SYSTEM_ROOT_SECRET) } },
  };
}

/**
 * SIMPLE and MUTUAL originate TLS; DISABLE and unset leave the cluster plain (ISTIO_MUTUAL is the
 * mesh's, outbound-mtls.ts). `gateway`: the proxy is a router, which reads `credentialName`.
 */
export function upstreamTls(tls: ClientTlsSettings | undefined, hostname: string, gateway: boolean): Partial<ClusterInit> {
  if (!tls || (tls.mode !== 'SIMPLE' && tls.mode !== 'MUTUAL')) return {};
  const common = gateway && tls.credentialName ? fromCredential({ ...tls, credentialName: tls.credentialName }) : fromFiles(tls);
  return {
    transportSocket: {
      name: TLS_TRANSPORT_SOCKET_NAME,
      configType: { case: 'typedConfig', value: pack(UpstreamTlsContextSchema, { sni: tls.sni || hostname, commonTlsContext: common }) },
    },
  };
}
