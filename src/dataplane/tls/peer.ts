// The verified peer certificate of a downstream TLS connection, kept per socket once the
// handshake's checks passed: what RBAC (principal_name, source.principal), the request view and
// x-forwarded-client-cert read.
import type { Socket } from 'node:net';
import type { PeerIdentity } from '../../envoy/request.js';
import type { PeerCert } from './context.js';

const peers = new WeakMap<object, PeerCert>();
/** The request view's identity of a connection, made on its first request and shared by the rest (it is read-only). */
const identities = new WeakMap<object, PeerIdentity>();

export function rememberPeer(socket: Socket, cert: PeerCert): void {
  peers.set(socket, cert);
}

/** The verified peer certificate of the connection a request came on, if any. */
export function peerCertOfSocket(socket: object): PeerCert | undefined {
  return peers.get(socket);
}

/** The identity the request view carries: URI SANs (the SPIFFE id), DNS SANs, the subject. */
export function peerIdentityOf(socket: object): PeerIdentity | undefined {
  const known = identities.get(socket);
  if (known) return known;
  const c = peers.get(socket);
  if (!c) return undefined;
  const identity = { uriSans: c.uris, dnsSans: c.dns, subject: subjectOf(c) };
  identities.set(socket, identity);
  return identity;
}

/** The subject in RFC 2253 order and form (`CN=a,O=b`), as Envoy prints it. */
export function subjectOf(c: PeerCert): string {
  return (c.x509.subject ?? '').split('\n').filter(Boolean).reverse().join(',');
}
