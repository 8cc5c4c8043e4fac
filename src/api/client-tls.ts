// A DestinationRule's `tls` (ClientTLSSettings), as the Go mesh validates it: insecureSkipVerify
// excludes what would verify the server, and credentialName excludes the file fields (the Secret
// holds the certificate, the CA and its CRL). Checked in the rule's policy, its port-level
// settings and its subsets'.
import { asRecord, type Fields } from './values.js';
import { forEachTrafficPolicy } from './traffic-policies.js';

function clientTls(tls: Fields, path: string, add: (path: string, message: string) => void): void {
  const mode = tls['mode'];
  const set = (k: string) => tls[k] !== undefined && tls[k] !== '';
  if (tls['insecureSkipVerify'] === true) {
    const verifying = mode === 'SIMPLE' ? ['caCertificates', 'credentialName', 'subjectAltNames'] : mode === 'MUTUAL' ? ['caCertificates', 'subjectAltNames'] : [];
    for (const k of verifying.filter(set)) add(`${path}.${k}`, 'cannot be set when insecureSkipVerify is true (the server is not verified)');
  }
  if ((mode === 'SIMPLE' || mode === 'MUTUAL') && set('credentialName')) {
    for (const k of ['clientCertificate', 'privateKey', 'caCertificates', 'caCrl'].filter(set)) add(`${path}.${k}`, 'cannot be set with credentialName (the credential holds the certificates and the CRL)');
  }
}

/** The rule's `tls` settings everywhere they may appear. */
export function destinationRuleTls(spec: Fields, path: string, add: (path: string, message: string) => void): void {
  forEachTrafficPolicy(spec, path, (policy, at) => {
    const tls = asRecord(policy['tls']);
    if (tls) clientTls(tls, `${at}.tls`, add);
  });
}
