// x-forwarded-client-cert as the HTTP connection manager's forward_client_cert_details and
// set_current_client_cert_details ask: removed, passed on, appended to or replaced with the
// details of the connection's client certificate, in Envoy's format
// (`By=<own URI SAN>;Hash=<sha256>;Cert="…";Chain="…";Subject="…";URI=…;DNS=…`).
import { createHash, X509Certificate } from 'node:crypto';
import type { TLSSocket } from 'node:tls';
import {
  HttpConnectionManager_ForwardClientCertDetails as Forward,
  type HttpConnectionManager,
} from '../../gen/envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager_pb.js';
import type { RequestHeaders } from '../../envoy/request.js';
import type { PeerCert } from './context.js';
import { peerCertOfSocket, subjectOf } from './peer.js';

const XFCC = 'x-forwarded-client-cert';

type Detail = (c: PeerCert, s: TLSSocket) => string[];

function pemOf(x: X509Certificate): string {
  return x.toString();
}

/** The peer's chain as it verified: the leaf, then each issuer up to a self-signed one. */
function chainPem(s: TLSSocket): string {
  let pem = '';
  const seen = new Set<string>();
  for (let c = s.getPeerCertificate(true); c?.raw && !seen.has(c.fingerprint256); c = c.issuerCertificate) {
    seen.add(c.fingerprint256);
    pem += pemOf(new X509Certificate(c.raw));
  }
  return pem;
}

/** The connection manager's XFCC handling, applied to each request's headers. */
export function compileXfcc(hcm: HttpConnectionManager): (headers: RequestHeaders, socket: object) => void {
  const mode = hcm.forwardClientCertDetails;
  const set = hcm.setCurrentClientCertDetails;
  // Envoy's order of the optional details, whatever order the config lists them in.
  const details: Detail[] = [
    ...(set?.cert ? [(c: PeerCert) => [`Cert="${encodeURIComponent(pemOf(c.x509))}"`]] : []),
    ...(set?.chain ? [(_c: PeerCert, s: TLSSocket) => [`Chain="${encodeURIComponent(chainPem(s))}"`]] : []),
    ...(set?.subject ? [(c: PeerCert) => [`Subject="${subjectOf(c)}"`]] : []),
    ...(set?.uri ? [(c: PeerCert) => [`URI=${c.uris[0] ?? ''}`]] : []),
    ...(set?.dns ? [(c: PeerCert) => c.dns.map((d) => `DNS=${d}`)] : []),
  ];
  /** This connection manager's own details of a connection: they change only with the connection. */
  const ofConnection = (peer: PeerCert, s: TLSSocket): string => {
    const own = s.getX509Certificate();
    const ownUri = own ? peerUri(own) : undefined;
    const parts = [
      ...(ownUri ? [`By=${ownUri}`] : []),
      `Hash=${createHash('sha256').update(peer.x509.raw).digest('hex')}`,
      ...details.flatMap((d) => d(peer, s)),
    ];
    return parts.join(';');
  };
  // Parsing the proxy's own certificate and hashing the peer's cost about 0.9 ms a request: once per connection.
  const values = new WeakMap<object, string>();
  return (headers, socket) => {
    if (mode === Forward.ALWAYS_FORWARD_ONLY) return;
    const peer = peerCertOfSocket(socket);
    if (mode === Forward.SANITIZE || !peer) {
      headers.remove(XFCC);
      return;
    }
    if (mode === Forward.FORWARD_ONLY) return;
    let value = values.get(socket);
    if (value === undefined) {
      value = ofConnection(peer, socket as TLSSocket);
      values.set(socket, value);
    }
    const prior = headers.joined(XFCC);
    if (mode === Forward.APPEND_FORWARD && prior) headers.set(XFCC, `${prior},${value}`);
    else headers.set(XFCC, value);
  };
}

function peerUri(x: X509Certificate): string | undefined {
  return /(?:^|, )URI:([^,]*)/.exec(x.subjectAltName ?? '')?.[1];
}
