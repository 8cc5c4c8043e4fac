// A Gateway server's `tls`, as the Go mesh validates ServerTLSSettings: a known mode, one
// certificate source (credentialName, credentialNames, serverCertificate/privateKey,
// tlsCertificates), at most two certificates, certificates where the mode terminates TLS, caCrl
// only where a client certificate is verified against files, and certificate pins Envoy accepts.
import { certificateHashHex, HASH_PIN_FORMAT, isSpkiPin, SPKI_PIN_FORMAT } from '../envoy/cert-pins.js';
import { joinPath } from './errors.js';
import { SERVER_TLS_MODES } from './types.js';
import { asRecord, type Fields } from './values.js';

/** Where findings go (semantic.ts's collector). */
export interface TlsFindings {
  add(path: string, message: string): void;
  strings(value: unknown, path: string, check: (value: string) => string | undefined): void;
}

const asArray = (value: unknown): unknown[] => (Array.isArray(value) ? value : []);

/** The certificate sources of a server's TLS; the Go mesh takes exactly one. */
const CERT_SOURCES = ['credentialName', 'credentialNames', 'serverCertificate/privateKey', 'tlsCertificates'] as const;

function certificateSources(tls: Fields): string[] {
  const set = (v: unknown) => (Array.isArray(v) ? v.length > 0 : typeof v === 'string' && v !== '');
  const has: Record<(typeof CERT_SOURCES)[number], boolean> = {
    credentialName: set(tls['credentialName']),
    credentialNames: set(tls['credentialNames']),
    'serverCertificate/privateKey': set(tls['serverCertificate']) && set(tls['privateKey']),
    tlsCertificates: set(tls['tlsCertificates']),
  };
  return CERT_SOURCES.filter((k) => has[k]);
}

/** Certificate pins Envoy would NACK (the listener, and every server on it, would be refused). */
function serverPins(tls: Fields, path: string, out: TlsFindings): void {
  out.strings(tls['verifyCertificateHash'], `${path}.verifyCertificateHash`, (v) => (certificateHashHex(v) === undefined ? HASH_PIN_FORMAT : undefined));
  out.strings(tls['verifyCertificateSpki'], `${path}.verifyCertificateSpki`, (v) => (isSpkiPin(v) ? undefined : SPKI_PIN_FORMAT));
}

/** A server's TLS settings, as the Go mesh validates them: a known mode, one certificate source, certificates where the mode terminates TLS. */
export function serverTls(server: Fields, path: string, out: TlsFindings): void {
  const protocol = String(asRecord(server['port'])?.['protocol'] ?? '').toUpperCase();
  const tls = asRecord(server['tls']);
  if (!tls) {
    if (protocol === 'HTTPS' || protocol === 'TLS') out.add(`${path}.tls`, `required for a ${protocol} server`);
    return;
  }
  const mode = tls['mode'] ?? 'PASSTHROUGH';
  if (typeof mode !== 'string' || !(SERVER_TLS_MODES as readonly string[]).includes(mode)) {
    out.add(`${path}.tls.mode`, `expected one of ${SERVER_TLS_MODES.join(', ')}`);
    return;
  }
  serverPins(tls, `${path}.tls`, out);
  const sources = certificateSources(tls);
  if (sources.length > 1) out.add(`${path}.tls`, `only one of ${CERT_SOURCES.join(', ')} may be set (${sources.join(' and ')} are)`);
  for (const list of ['credentialNames', 'tlsCertificates']) {
    if (asArray(tls[list]).length > 2) out.add(`${path}.tls.${list}`, 'at most 2 entries (an RSA and an ECDSA certificate)');
  }
  const credentials = sources.includes('credentialName') || sources.includes('credentialNames');
  if (tls['caCrl'] && credentials) out.add(`${path}.tls.caCrl`, 'not supported with credentialName(s): the CRL comes with the credential (its ca.crl)');
  if (tls['caCrl'] && mode === 'SIMPLE') out.add(`${path}.tls.caCrl`, 'not supported with mode SIMPLE (no client certificate is verified)');
  if (tls['httpsRedirect'] === true && tls['mode'] === undefined) return;
  const terminates = mode === 'SIMPLE' || mode === 'MUTUAL' || mode === 'OPTIONAL_MUTUAL';
  if (!terminates || credentials) return;
  const pairs = asArray(tls['tlsCertificates']);
  if (pairs.length > 0) {
    pairs.forEach((p, i) => {
      for (const key of ['serverCertificate', 'privateKey']) if (!asRecord(p)?.[key]) out.add(`${joinPath(`${path}.tls.tlsCertificates`, i)}.${key}`, `required with mode ${mode}`);
    });
  } else {
    if (!tls['serverCertificate']) out.add(`${path}.tls.serverCertificate`, `required with mode ${mode} unless credentialName is set`);
    if (!tls['privateKey']) out.add(`${path}.tls.privateKey`, `required with mode ${mode} unless credentialName is set`);
  }
  if (mode !== 'SIMPLE' && !tls['caCertificates']) out.add(`${path}.tls.caCertificates`, `required with mode ${mode} unless credentialName is set`);
}
