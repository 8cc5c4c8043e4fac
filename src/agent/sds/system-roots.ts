// The operating system's trust bundle, served by the agent's SDS as the validation context
// `file-root:system`: what a DestinationRule's SIMPLE or MUTUAL TLS without `caCertificates`
// verifies the server against (the Go mesh's default). The bundle is the first readable of the
// distributions' usual files, looked up as Go's crypto/x509 does (SSL_CERT_FILE, when set, is the
// only file read); on a system without one, the Mozilla roots bundled with Node.
import { readFileSync } from 'node:fs';
import { rootCertificates } from 'node:tls';

/** The SDS resource name of the system roots (the Go mesh's name). */
export const SYSTEM_ROOT_SECRET = 'file-root:system';

/** Where the distributions keep their PEM bundle, in Go's order. */
export const OS_ROOT_FILES = [
  '/etc/ssl/certs/ca-certificates.crt', // Debian, Ubuntu, Gentoo
  '/etc/pki/tls/certs/ca-bundle.crt', // Fedora, RHEL 6
  '/etc/ssl/ca-bundle.pem', // OpenSUSE
  '/etc/pki/tls/cacert.pem', // OpenELEC
  '/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem', // CentOS, RHEL 7
  '/etc/ssl/cert.pem', // Alpine
] as const;

export interface SystemRoots {
  readonly pem: string;
  /** The file read, or `node` for Node's bundled roots. */
  readonly source: string;
}

const PEM_CERT = /-----BEGIN CERTIFICATE-----/;

function readBundle(path: string): string | undefined {
  try {
    const pem = readFileSync(path, 'utf8');
    return PEM_CERT.test(pem) ? pem : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The system roots. With SSL_CERT_FILE set, that file or an error naming it: an operator's explicit
 * choice is never widened to another bundle (fail closed).
 */
export function readSystemRoots(env: NodeJS.ProcessEnv = process.env, files: readonly string[] = OS_ROOT_FILES): SystemRoots {
  const override = env['SSL_CERT_FILE'];
  if (override) {
    const pem = readBundle(override);
    if (!pem) throw new Error(`SSL_CERT_FILE=${override}: not a readable PEM certificate bundle`);
    return { pem, source: override };
  }
  for (const path of files) {
    const pem = readBundle(path);
    if (pem) return { pem, source: path };
  }
  return { pem: rootCertificates.map((c) => c.trimEnd() + '\n').join(''), source: 'node' };
}
