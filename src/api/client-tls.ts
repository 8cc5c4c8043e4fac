// A DestinationRule's `tls` (ClientTLSSettings), as the Go mesh validates it: insecureSkipVerify
// excludes what would verify the server, and credentialName excludes the file fields (the Secret
// holds the certificate, the CA and its CRL). Checked in the rule's policy, its port-level
// settings and its subsets'.
import { joinPath } from './errors.js';
import { asRecord, type Fields } from './values.js';

const asArray = (value: unknown): unknown[] => (Array.isArray(value) ? value : []);

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

function policyTls(policy: unknown, path: string, add: (path: string, message: string) => void): void {
  const p = asRecord(policy);
  if (!p) return;
  const tls = asRecord(p['tls']);
  if (tls) clientTls(tls, `${path}.tls`, add);
  asArray(p['portLevelSettings']).forEach((s, i) => {
    const t = asRecord(asRecord(s)?.['tls']);
    if (t) clientTls(t, `${joinPath(`${path}.portLevelSettings`, i)}.tls`, add);
  });
}

/** The rule's `tls` settings everywhere they may appear. */
export function destinationRuleTls(spec: Fields, path: string, add: (path: string, message: string) => void): void {
  policyTls(spec['trafficPolicy'], `${path}.trafficPolicy`, add);
  asArray(spec['subsets']).forEach((s, i) => policyTls(asRecord(s)?.['trafficPolicy'], `${joinPath(`${path}.subsets`, i)}.trafficPolicy`, add));
}
