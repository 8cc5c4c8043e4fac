// Envoy's CommonTlsContext compiled for node:tls: certificates (inline or by SDS name), the
// validation context (inline, by SDS name, or combined: the default one merged with the SDS one),
// ALPN and the TLS parameters. What it cannot honour is a ConfigError naming the field: a
// security setting is never dropped. The node:tls options are built from the current secrets on
// the first handshake after a change, so rotation needs no recompile.
import { createPrivateKey } from 'node:crypto';
import { create } from '@bufbuild/protobuf';
import type { SecureContextOptions } from 'node:tls';
import { scope } from '../../common/log.js';
import {
  CertificateValidationContextSchema,
  TlsParameters_TlsProtocol as TlsProtocol,
  type TlsCertificate,
  type TlsParameters,
} from '../../gen/envoy/extensions/transport_sockets/tls/v3/common_pb.js';
import { CommonTlsContextSchema, type CommonTlsContext } from '../../gen/envoy/extensions/transport_sockets/tls/v3/tls_pb.js';
import { ConfigError, unappliedFields } from '../../envoy/config-error.js';
import { readDataSource } from '../../envoy/matchers.js';
import type { SecretManager, SecretRef } from './secrets.js';
import { checkUsable, compileValidation, mergeValidation, type PeerCert, type Validation, type VerifyFailure } from './validation.js';

export { failedCheck, peerCertOf, type PeerCert, type VerifyFailure } from './validation.js';

const log = scope('connection');

const VERSION: Record<number, SecureContextOptions['minVersion']> = {
  [TlsProtocol.TLSv1_0]: 'TLSv1',
  [TlsProtocol.TLSv1_1]: 'TLSv1.1',
  [TlsProtocol.TLSv1_2]: 'TLSv1.2',
  [TlsProtocol.TLSv1_3]: 'TLSv1.3',
};

const UNAPPLIED_COMMON = ['keyLog'];

/** The certificate and key of a TlsCertificate (inline data sources; other ways are refused). */
function certificateOf(c: TlsCertificate, field: string): { cert: string; key: string } {
  if (c.privateKeyProvider) throw new ConfigError(`${field}.private_key_provider`, 'is not supported by this proxy');
  if (c.password) throw new ConfigError(`${field}.password`, 'encrypted private keys are not supported');
  if (c.pkcs12) throw new ConfigError(`${field}.pkcs12`, 'PKCS#12 is not supported; use certificate_chain and private_key');
  if (c.watchedDirectory || c.ocspStaple || c.signedCertificateTimestamp.length > 0) log.warn(`${field}: watched_directory, ocsp_staple and signed_certificate_timestamp are accepted but not applied`);
  return { cert: readDataSource(c.certificateChain, `${field}.certificate_chain`), key: readDataSource(c.privateKey, `${field}.private_key`) };
}

/**
 * Several certificates are served side by side, the client's signature algorithms picking one
 * (an RSA and an ECDSA certificate, the Go mesh's credentialNames). OpenSSL holds one per key
 * type, so a second of the same type would silently replace the first: refused instead (Envoy
 * would pick between them by SNI, which this proxy does not do).
 */
function oneCertificatePerKeyType(certs: readonly { key: string }[], field: string): void {
  const seen = new Set<string>();
  for (const c of certs) {
    let type: string;
    try {
      type = createPrivateKey(c.key).asymmetricKeyType ?? 'unknown';
    } catch (e) {
      throw new ConfigError(`${field}.tls_certificates`, `a private key does not parse: ${(e as Error).message}`);
    }
    if (seen.has(type)) throw new ConfigError(`${field}.tls_certificates`, `two certificates with ${type.toUpperCase()} keys: several certificates are served by key type (one RSA, one ECDSA), selection by SNI is not supported`);
    seen.add(type);
  }
}

export interface TlsOptions {
  readonly context: SecureContextOptions;
  /** Whether OpenSSL verifies the peer's chain (a trusted CA is configured; its CRLs apply). */
  readonly verifies: boolean;
  /** trust_chain_verification ACCEPT_UNTRUSTED: failures are counted, the peer is let through. */
  readonly acceptUntrusted: boolean;
  /** The SAN and pin checks on the peer certificate. */
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
  if (inlineCerts.length > 1) oneCertificatePerKeyType(inlineCerts, f);
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
  if (inlineValidation && !validationRef) checkUsable(inlineValidation, `${f}.validation_context`, side);
  const build = (): TlsOptions => {
    const certs = [...inlineCerts];
    for (const ref of certRefs) {
      const s = secrets.get(ref);
      if (s?.type.case !== 'tlsCertificate') throw new ConfigError(`secret ${ref.name}`, 'is not a tls_certificate');
      certs.push(certificateOf(s.type.value, `secret ${ref.name}.tls_certificate`));
    }
    if (certs.length > 1) oneCertificatePerKeyType(certs, f);
    let validation = inlineValidation;
    if (validationRef) {
      const s = secrets.get(validationRef);
      if (s?.type.case !== 'validationContext') throw new ConfigError(`secret ${validationRef.name}`, 'is not a validation_context');
      validation = mergeValidation(inlineValidation, compileValidation(s.type.value, `secret ${validationRef.name}.validation_context`));
      // Unusable with this secret: the context refuses its connections until a usable one comes (fail closed).
      checkUsable(validation, f, side);
    }
    return {
      context: {
        ...params,
        ...(certs.length > 0 ? { cert: certs.map((x) => x.cert), key: certs.map((x) => x.key) } : {}),
        ...(validation?.trustedCa ? { ca: validation.trustedCa } : {}),
        ...(validation?.crls.length ? { crl: [...validation.crls] } : {}),
      },
      verifies: validation?.trustedCa !== undefined,
      acceptUntrusted: validation?.acceptUntrusted === true,
      checks: validation?.checks ?? [],
    };
  };
  return new CompiledTls(secrets, [...certRefs, ...(validationRef ? [validationRef] : [])], build, c?.alpnProtocols ?? []);
}
