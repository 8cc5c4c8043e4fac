// Envoy's CertificateValidationContext compiled: the trusted CA and its CRLs (handed to OpenSSL,
// which checks the chain and revocation), the SAN matchers and certificate pins (checked on the
// peer certificate after the handshake), and `trust_chain_verification`. Envoy's semantics: the
// pins alone verify a peer (no CA needed), ACCEPT_UNTRUSTED lets every failure through (counted
// in the stats all the same), a CRL needs a trusted CA. Malformed pins and CRLs are ConfigErrors
// naming the field: a check that cannot be compiled never turns into "accept everyone".
import { createHash, type KeyObject, type X509Certificate } from 'node:crypto';
import { createSecureContext } from 'node:tls';
import { scope } from '../../common/log.js';
import {
  CertificateValidationContext_TrustChainVerification as TrustChain,
  SubjectAltNameMatcher_SanType as SanType,
  type CertificateValidationContext,
} from '../../gen/envoy/extensions/transport_sockets/tls/v3/common_pb.js';
import { certificateHashHex, HASH_PIN_FORMAT, isSpkiPin, SPKI_PIN_FORMAT } from '../../envoy/cert-pins.js';
import { ConfigError } from '../../envoy/config-error.js';
import { compileStringMatcher, readDataSource } from '../../envoy/matchers.js';

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

/** A compiled validation context. */
export interface Validation {
  readonly trustedCa?: string;
  /** PEM CRLs (each one block) of the `crl` field and of the trusted CA bundle. */
  readonly crls: readonly string[];
  readonly acceptUntrusted: boolean;
  /** Certificate pins are set: they verify a peer even without a trusted CA. */
  readonly pinned: boolean;
  readonly checks: readonly ((c: PeerCert) => VerifyFailure | undefined)[];
}

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

function certificateHash(pin: string, field: string): string {
  const hex = certificateHashHex(pin);
  if (hex === undefined) throw new ConfigError(field, `${JSON.stringify(pin)} ${HASH_PIN_FORMAT}`);
  return hex;
}

function spkiPin(pin: string, field: string): string {
  if (!isSpkiPin(pin)) throw new ConfigError(field, `${JSON.stringify(pin)} ${SPKI_PIN_FORMAT}`);
  return pin;
}

/** The certificate hash and SPKI pins (either list matching passes, as in Envoy). */
function compilePins(v: CertificateValidationContext, field: string): ((c: PeerCert) => boolean) | undefined {
  if (v.verifyCertificateHash.length === 0 && v.verifyCertificateSpki.length === 0) return undefined;
  const hashes = new Set(v.verifyCertificateHash.map((h, i) => certificateHash(h, `${field}.verify_certificate_hash[${i}]`)));
  const spkis = new Set(v.verifyCertificateSpki.map((s, i) => spkiPin(s, `${field}.verify_certificate_spki[${i}]`)));
  return (c) => {
    if (hashes.has(c.x509.fingerprint256.replaceAll(':', '').toLowerCase())) return true;
    const der = (c.x509.publicKey as KeyObject).export({ type: 'spki', format: 'der' });
    return spkis.has(createHash('sha256').update(der).digest('base64'));
  };
}

const CRL_BLOCK = /-----BEGIN X509 CRL-----[\s\S]+?-----END X509 CRL-----/g;

/** The CRLs of a PEM text, each checked by OpenSSL (node:tls takes one CRL per entry). */
function crlBlocks(pem: string, field: string, required: boolean): string[] {
  const blocks = pem.match(CRL_BLOCK) ?? [];
  if (required && blocks.length === 0) throw new ConfigError(field, 'holds no PEM CRL (-----BEGIN X509 CRL-----)');
  blocks.forEach((crl, i) => {
    try {
      createSecureContext({ crl });
    } catch (e) {
      throw new ConfigError(field, `CRL ${i + 1} does not parse: ${(e as Error).message}`);
    }
  });
  return blocks;
}

/** A CertificateValidationContext compiled; fields this proxy cannot honour are ConfigErrors. */
export function compileValidation(v: CertificateValidationContext, field: string): Validation {
  const refused: Array<[keyof CertificateValidationContext & string, string]> = [
    ['customValidatorConfig', 'custom_validator_config'], ['caCertificateProviderInstance', 'ca_certificate_provider_instance'],
    ['systemRootCerts', 'system_root_certs'], ['watchedDirectory', 'watched_directory'], ['requireSignedCertificateTimestamp', 'require_signed_certificate_timestamp'],
    ['onlyVerifyLeafCertCrl', 'only_verify_leaf_cert_crl'],
  ];
  for (const [local, name] of refused) {
    if (v[local] !== undefined && v[local] !== false) throw new ConfigError(`${field}.${name}`, 'is not supported by this proxy');
  }
  if (v.allowExpiredCertificate) throw new ConfigError(`${field}.allow_expired_certificate`, 'is not supported by this proxy (expired certificates are always refused)');
  if (v.trustChainVerification !== TrustChain.VERIFY_TRUST_CHAIN && v.trustChainVerification !== TrustChain.ACCEPT_UNTRUSTED) {
    throw new ConfigError(`${field}.trust_chain_verification`, `unknown value ${v.trustChainVerification}`);
  }
  if (v.maxVerifyDepth !== undefined) log.warn(`${field}.max_verify_depth: accepted but not applied`);
  const san = compileSanMatchers(v, field);
  const pins = compilePins(v, field);
  const checks: Array<(c: PeerCert) => VerifyFailure | undefined> = [];
  if (san) checks.push((c) => (san(c) ? undefined : 'fail_verify_san'));
  if (pins) checks.push((c) => (pins(c) ? undefined : 'fail_verify_cert_hash'));
  const trustedCa = v.trustedCa ? readDataSource(v.trustedCa, `${field}.trusted_ca`) : undefined;
  // As in Envoy, CRLs in the CA bundle are loaded too.
  const crls = [...(trustedCa ? crlBlocks(trustedCa, `${field}.trusted_ca`, false) : []), ...(v.crl ? crlBlocks(readDataSource(v.crl, `${field}.crl`), `${field}.crl`, true) : [])];
  return { ...(trustedCa !== undefined ? { trustedCa } : {}), crls, acceptUntrusted: v.trustChainVerification === TrustChain.ACCEPT_UNTRUSTED, pinned: pins !== undefined, checks };
}

/**
 * A combined validation context: Envoy merges the SDS one into the default one (its trusted CA
 * and CRL win when set, checks add up, ACCEPT_UNTRUSTED from either).
 */
export function mergeValidation(base: Validation | undefined, dynamic: Validation): Validation {
  const trustedCa = dynamic.trustedCa ?? base?.trustedCa;
  return {
    ...(trustedCa !== undefined ? { trustedCa } : {}),
    crls: dynamic.crls.length > 0 ? dynamic.crls : (base?.crls ?? []),
    acceptUntrusted: dynamic.acceptUntrusted || base?.acceptUntrusted === true,
    pinned: dynamic.pinned || base?.pinned === true,
    checks: [...(base?.checks ?? []), ...dynamic.checks],
  };
}

/**
 * What a validation context can be used for, or a ConfigError: a CRL needs a CA to check it
 * against, SAN checks alone verify nothing (the chain is not checked), and on the client side the
 * pins cannot stand without a CA (node:tls runs its checks only on a chain it verified).
 */
export function checkUsable(v: Validation, field: string, side: 'server' | 'client'): void {
  if (v.crls.length > 0 && v.trustedCa === undefined) throw new ConfigError(`${field}.crl`, 'a CRL needs trusted_ca (no chain would be checked against it)');
  if (v.trustedCa !== undefined || v.acceptUntrusted || v.checks.length === 0) return;
  if (!v.pinned) throw new ConfigError(field, 'SAN or certificate pin checks without trusted_ca are refused (nothing would verify the chain)');
  if (side === 'client') throw new ConfigError(field, 'certificate pins without trusted_ca are not supported on upstream connections: set trusted_ca');
}

/** The first check a peer certificate fails, or undefined. */
export function failedCheck(v: Pick<Validation, 'checks'>, c: PeerCert): VerifyFailure | undefined {
  for (const check of v.checks) {
    const why = check(c);
    if (why) return why;
  }
  return undefined;
}
