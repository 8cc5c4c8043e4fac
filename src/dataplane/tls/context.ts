// Envoy's CommonTlsContext compiled for node:tls: certificates (inline or by SDS name), the
// validation context (inline, by SDS name, or combined: the default one merged with the SDS one),
// ALPN and the TLS parameters. What it cannot honour is a ConfigError naming the field: a
// security setting is never dropped. The node:tls options are built from the current secrets on
// the first handshake after a change, so rotation needs no recompile.
import { createHash, type KeyObject, type X509Certificate } from 'node:crypto';
import { create } from '@bufbuild/protobuf';
import type { SecureContextOptions } from 'node:tls';
import { scope } from '../../common/log.js';
import {
  CertificateValidationContext_TrustChainVerification as TrustChain,
  CertificateValidationContextSchema,
  SubjectAltNameMatcher_SanType as SanType,
  TlsParameters_TlsProtocol as TlsProtocol,
  type CertificateValidationContext,
  type TlsCertificate,
  type TlsParameters,
} from '../../gen/envoy/extensions/transport_sockets/tls/v3/common_pb.js';
import { CommonTlsContextSchema, type CommonTlsContext } from '../../gen/envoy/extensions/transport_sockets/tls/v3/tls_pb.js';
import { ConfigError, unappliedFields } from '../../envoy/config-error.js';
import { compileStringMatcher, readDataSource } from '../../envoy/matchers.js';
import type { SecretManager, SecretRef } from './secrets.js';

const log = scope('connection');

/** A peer certificate's names, as validation and identity read them. */
export interface PeerCert {
  readonly x509: X509Certificate;
  readonly uris: readonly string[];
  readonly dns: readonly string[];
  readonly emails: readonly string[];
  readonly ips: readonly string[];
}

/** Why a peer certificate was refused, as Envoy's ssl.fail_verify_* stats name it. */
export type VerifyFailure = 'fail_verify_error' | 'fail_verify_san' | 'fail_verify_cert_hash';

/** The names of a certificate's subjectAltName (node's `DNS:a, URI:b, IP Address:c` text, entries with commas quoted). */
export function peerCertOf(x509: X509Certificate): PeerCert {
  const out = { uris: [] as string[], dns: [] as string[], emails: [] as string[], ips: [] as string[] };
  const text = x509.subjectAltName ?? '';
  for (const m of text.matchAll(/(DNS|URI|IP Address|email):("(?:[^"\\]|\\.)*"|[^,]*)(?:, |$)/g)) {
    const value = m[2]!.startsWith('"') ? (JSON.parse(m[2]!) as string) : m[2]!;
    ({ DNS: out.dns, URI: out.uris, 'IP Address': out.ips, email: out.emails })[m[1] as 'DNS' | 'URI' | 'IP Address' | 'email'].push(value);
  }
  return { x509, ...out };
}

const VERSION: Record<number, SecureContextOptions['minVersion']> = {
  [TlsProtocol.TLSv1_0]: 'TLSv1',
  [TlsProtocol.TLSv1_1]: 'TLSv1.1',
  [TlsProtocol.TLSv1_2]: 'TLSv1.2',
  [TlsProtocol.TLSv1_3]: 'TLSv1.3',
};

const UNAPPLIED_COMMON = ['keyLog'];

/** A compiled validation context: what the peer's certificate must satisfy beyond the trust chain. */
interface Validation {
  readonly trustedCa?: string;
  readonly checks: readonly ((c: PeerCert) => VerifyFailure | undefined)[];
}

function compileSanMatchers(v: CertificateValidationContext, field: string): ((c: PeerCert) => boolean) | undefined {
  const typed = v.matchTypedSubjectAltNames.map((m, i) => {
    const f = `${field}.match_typed_subject_alt_names[${i}]`;
    const s = compileStringMatcher(m.matcher, `${f}.matcher`);
    const pick: Record<number, (c: PeerCert) => readonly string[]> = {
      [SanType.EMAIL]: (c) => c.emails,
      [SanType.DNS]: (c) => c.dns,
      [SanType.URI]: (c) => c.uris,
      [SanType.IP_ADDRESS]: (c) => c.ips,
    };
    const names = pick[m.sanType];
    if (!names) throw new ConfigError(`${f}.san_type`, `${SanType[m.sanType] ?? m.sanType} is not supported; use EMAIL, DNS, URI or IP_ADDRESS`);
    return (c: PeerCert) => names(c).some(s);
  });
  // The deprecated untyped form matches a SAN of any type.
  const untyped = v.matchSubjectAltNames.map((m, i) => {
    const s = compileStringMatcher(m, `${field}.match_subject_alt_names[${i}]`);
    return (c: PeerCert) => [...c.dns, ...c.uris, ...c.emails, ...c.ips].some(s);
  });
  const all = [...typed, ...untyped];
  return all.length > 0 ? (c) => all.some((f) => f(c)) : undefined;
}

/** The certificate hash and SPKI pins (either list matching passes, as in Envoy). */
function compilePins(v: CertificateValidationContext): ((c: PeerCert) => boolean) | undefined {
  if (v.verifyCertificateHash.length === 0 && v.verifyCertificateSpki.length === 0) return undefined;
  const hashes = new Set(v.verifyCertificateHash.map((h) => h.replaceAll(':', '').toLowerCase()));
  const spkis = new Set(v.verifyCertificateSpki);
  return (c) => {
    if (hashes.has(c.x509.fingerprint256.replaceAll(':', '').toLowerCase())) return true;
    const der = (c.x509.publicKey as KeyObject).export({ type: 'spki', format: 'der' });
    return spkis.has(createHash('sha256').update(der).digest('base64'));
  };
}

/** A CertificateValidationContext as checks; fields that would loosen or change verification and are not done are ConfigErrors. */
export function compileValidation(v: CertificateValidationContext, field: string): Validation {
  const refused: Array<[keyof CertificateValidationContext & string, string]> = [
    ['crl', 'crl'], ['customValidatorConfig', 'custom_validator_config'], ['caCertificateProviderInstance', 'ca_certificate_provider_instance'],
    ['systemRootCerts', 'system_root_certs'], ['watchedDirectory', 'watched_directory'], ['requireSignedCertificateTimestamp', 'require_signed_certificate_timestamp'],
  ];
  for (const [local, name] of refused) {
    if (v[local] !== undefined && v[local] !== false) throw new ConfigError(`${field}.${name}`, 'is not supported by this proxy');
  }
  if (v.allowExpiredCertificate) throw new ConfigError(`${field}.allow_expired_certificate`, 'is not supported by this proxy (expired certificates are always refused)');
  if (v.trustChainVerification !== TrustChain.VERIFY_TRUST_CHAIN) throw new ConfigError(`${field}.trust_chain_verification`, 'only VERIFY_TRUST_CHAIN is supported');
  if (v.maxVerifyDepth !== undefined) log.warn(`${field}.max_verify_depth: accepted but not applied`);
  const san = compileSanMatchers(v, field);
  const pins = compilePins(v);
  const checks: Array<(c: PeerCert) => VerifyFailure | undefined> = [];
  if (san) checks.push((c) => (san(c) ? undefined : 'fail_verify_san'));
  if (pins) checks.push((c) => (pins(c) ? undefined : 'fail_verify_cert_hash'));
  return { ...(v.trustedCa ? { trustedCa: readDataSource(v.trustedCa, `${field}.trusted_ca`) } : {}), checks };
}

/** The certificate and key of a TlsCertificate (inline data sources; other ways are refused). */
function certificateOf(c: TlsCertificate, field: string): { cert: string; key: string } {
  if (c.privateKeyProvider) throw new ConfigError(`${field}.private_key_provider`, 'is not supported by this proxy');
  if (c.password) throw new ConfigError(`${field}.password`, 'encrypted private keys are not supported');
  if (c.pkcs12) throw new ConfigError(`${field}.pkcs12`, 'PKCS#12 is not supported; use certificate_chain and private_key');
  if (c.watchedDirectory || c.ocspStaple || c.signedCertificateTimestamp.length > 0) log.warn(`${field}: watched_directory, ocsp_staple and signed_certificate_timestamp are accepted but not applied`);
  return { cert: readDataSource(c.certificateChain, `${field}.certificate_chain`), key: readDataSource(c.privateKey, `${field}.private_key`) };
}

export interface TlsOptions {
  readonly context: SecureContextOptions;
  /** Whether a peer certificate is verified (a trusted CA is configured). */
  readonly verifies: boolean;
  readonly checks: readonly ((c: PeerCert) => VerifyFailure | undefined)[];
}

/** A compiled CommonTlsContext; `options()` reads the current secrets. */
export class CompiledTls {
  private cached?: { generation: number; result: TlsOptions | string };

  constructor(
    private readonly secrets: SecretManager,
    /** Every secret this context needs (warming waits for the dynamic ones). */
    readonly refs: readonly SecretRef[],
    private readonly build: () => TlsOptions,
    readonly alpn: readonly string[],
  ) {}

  /** The node:tls options from the current secrets, or why there are none (a secret not there yet, or unusable). */
  options(): TlsOptions | string {
    const g = this.secrets.generation;
    if (this.cached?.generation !== g) {
      let result: TlsOptions | string;
      const missing = this.secrets.missing(this.refs);
      if (missing.length > 0) result = `secret ${missing.join(', ')} has not arrived`;
      else {
        try {
          result = this.build();
        } catch (e) {
          result = (e as Error).message;
          log.error(`TLS context unusable: ${result}`);
        }
      }
      this.cached = { generation: g, result };
    }
    return this.cached.result;
  }
}

function tlsParams(p: TlsParameters | undefined, field: string, side: 'server' | 'client'): SecureContextOptions {
  const minVersion = p?.tlsMinimumProtocolVersion ? VERSION[p.tlsMinimumProtocolVersion] : 'TLSv1.2';
  // Envoy's defaults: up to TLS 1.3 as a server, 1.2 as a client.
  const maxVersion = p?.tlsMaximumProtocolVersion ? VERSION[p.tlsMaximumProtocolVersion] : side === 'server' ? 'TLSv1.3' : 'TLSv1.2';
  if (!minVersion || !maxVersion) throw new ConfigError(`${field}.tls_params`, 'unknown TLS protocol version');
  // BoringSSL's equal-preference groups [A|B] become a plain preference list for OpenSSL.
  const ciphers = (p?.cipherSuites ?? []).flatMap((c) => c.replace(/^\[|\]$/g, '').split('|')).join(':');
  return {
    minVersion,
    maxVersion,
    ...(ciphers ? { ciphers } : {}),
    ...(p?.ecdhCurves.length ? { ecdhCurve: p.ecdhCurves.join(':') } : {}),
    ...(p?.signatureAlgorithms.length ? { sigalgs: p.signatureAlgorithms.join(':') } : {}),
  };
}

/** Compiles a CommonTlsContext; `side` picks Envoy's defaults for a server (downstream) or client (upstream). */
export function compileCommonTls(c: CommonTlsContext | undefined, field: string, side: 'server' | 'client', secrets: SecretManager): CompiledTls {
  const f = `${field}.common_tls_context`;
  if (c?.tlsCertificateProviderInstance || c?.tlsCertificateCertificateProvider || c?.tlsCertificateCertificateProviderInstance) {
    throw new ConfigError(f, 'certificate providers are not supported; use tls_certificates or tls_certificate_sds_secret_configs');
  }
  if (c?.customHandshaker) throw new ConfigError(`${f}.custom_handshaker`, 'is not supported by this proxy');
  const unapplied = c ? unappliedFields(CommonTlsContextSchema, c, UNAPPLIED_COMMON) : [];
  if (unapplied.length > 0) log.warn(`${f}: accepted but not applied: ${unapplied.join(', ')}`);
  const params = tlsParams(c?.tlsParams, f, side);
  const inlineCerts = (c?.tlsCertificates ?? []).map((t, i) => certificateOf(t, `${f}.tls_certificates[${i}]`));
  const certRefs = (c?.tlsCertificateSdsSecretConfigs ?? []).map((s, i) => secrets.reference(s, `${f}.tls_certificate_sds_secret_configs[${i}]`));
  let inlineValidation: Validation | undefined;
  let validationRef: SecretRef | undefined;
  const vc = c?.validationContextType;
  switch (vc?.case) {
    case 'validationContext':
      inlineValidation = compileValidation(vc.value, `${f}.validation_context`);
      break;
    case 'validationContextSdsSecretConfig':
      validationRef = secrets.reference(vc.value, `${f}.validation_context_sds_secret_config`);
      break;
    case 'combinedValidationContext':
      inlineValidation = compileValidation(vc.value.defaultValidationContext ?? create(CertificateValidationContextSchema), `${f}.combined_validation_context.default_validation_context`);
      if (!vc.value.validationContextSdsSecretConfig) throw new ConfigError(`${f}.combined_validation_context.validation_context_sds_secret_config`, 'is required');
      validationRef = secrets.reference(vc.value.validationContextSdsSecretConfig, `${f}.combined_validation_context.validation_context_sds_secret_config`);
      break;
    case undefined:
      break;
    default:
      throw new ConfigError(`${f}.${vc?.case ?? 'validation_context_type'}`, 'certificate providers are not supported');
  }
  if (inlineValidation && !inlineValidation.trustedCa && !validationRef && inlineValidation.checks.length > 0) {
    throw new ConfigError(`${f}.validation_context`, 'SAN or certificate pin checks without trusted_ca are refused (nothing would verify the chain)');
  }
  const build = (): TlsOptions => {
    const certs = [...inlineCerts];
    for (const ref of certRefs) {
      const s = secrets.get(ref);
      if (s?.type.case !== 'tlsCertificate') throw new ConfigError(`secret ${ref.name}`, 'is not a tls_certificate');
      certs.push(certificateOf(s.type.value, `secret ${ref.name}.tls_certificate`));
    }
    let validation = inlineValidation;
    if (validationRef) {
      const s = secrets.get(validationRef);
      if (s?.type.case !== 'validationContext') throw new ConfigError(`secret ${validationRef.name}`, 'is not a validation_context');
      const dynamic = compileValidation(s.type.value, `secret ${validationRef.name}.validation_context`);
      // Envoy merges the SDS context into the default one: its trusted CA wins, checks add up.
      const trustedCa = dynamic.trustedCa ?? inlineValidation?.trustedCa;
      validation = { ...(trustedCa !== undefined ? { trustedCa } : {}), checks: [...(inlineValidation?.checks ?? []), ...dynamic.checks] };
    }
    // Checks without a trust chain would verify nothing: the context is unusable (fail closed).
    if (validation && !validation.trustedCa && validation.checks.length > 0) throw new ConfigError(`${f}`, 'SAN or certificate pin checks without a trusted CA (the validation secret has no trusted_ca)');
    return {
      context: {
        ...params,
        ...(certs.length > 0 ? { cert: certs.map((x) => x.cert), key: certs.map((x) => x.key) } : {}),
        ...(validation?.trustedCa ? { ca: validation.trustedCa } : {}),
      },
      verifies: validation?.trustedCa !== undefined,
      checks: validation?.checks ?? [],
    };
  };
  return new CompiledTls(secrets, [...certRefs, ...(validationRef ? [validationRef] : [])], build, c?.alpnProtocols ?? []);
}

/** The first check a peer certificate fails, or undefined. */
export function failedCheck(o: TlsOptions, c: PeerCert): VerifyFailure | undefined {
  for (const check of o.checks) {
    const why = check(c);
    if (why) return why;
  }
  return undefined;
}
