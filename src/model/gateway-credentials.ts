// The credentials a Gateway server's TLS names, as the translation and the SDS server read them,
// and what of a server's `tls` is not honoured (one sentence per field): unknown fields, credential
// names that can never be served, and fields the server's mode or certificate source makes
// meaningless (the Go mesh ignores them there too).

/**
 * Prefix of credential names that Gateway API translation writes (the Go mesh's
 * `kubernetes-gateway://<namespace>/<name>`): served only when a Gateway of the proxy's own
 * namespace references it (security/credentials/secret.ts).
 */
export const GATEWAY_CREDENTIAL_PREFIX = 'orch-gateway://';
/** The scheme of plain credential names (the Go mesh's `kubernetes://`). */
const CREDENTIAL_PREFIX = 'orch://';

/** The Secret an `orch-gateway://<namespace>/<name>` credential names; undefined when either part is missing. */
export function parseGatewayCredential(credentialName: string): { namespace: string; name: string } | undefined {
  if (!credentialName.startsWith(GATEWAY_CREDENTIAL_PREFIX)) return undefined;
  const [namespace = '', name = '', ...extra] = credentialName.slice(GATEWAY_CREDENTIAL_PREFIX.length).split('/');
  return namespace !== '' && name !== '' && extra.length === 0 ? { namespace, name } : undefined;
}

/** Why a credential name is never served to the Gateway's proxies; undefined when it can be. */
function credentialProblem(credentialName: string, gatewayNamespace: string): string | undefined {
  if (!credentialName.startsWith(GATEWAY_CREDENTIAL_PREFIX)) {
    const scheme = /^([a-z][a-z0-9+.-]*):\/\//i.exec(credentialName)?.[0];
    return scheme && scheme !== CREDENTIAL_PREFIX ? `${scheme} credentials are not served (only ${CREDENTIAL_PREFIX} and ${GATEWAY_CREDENTIAL_PREFIX})` : undefined;
  }
  const ref = parseGatewayCredential(credentialName);
  if (!ref) return `${GATEWAY_CREDENTIAL_PREFIX} names need <namespace>/<name>`;
  if (ref.namespace !== gatewayNamespace) return `it names a Secret of namespace ${ref.namespace}: a Gateway only gets Secrets of its own namespace (a cross-namespace reference would need a ReferenceGrant, which is not supported)`;
  return undefined;
}

const TRANSLATED_TLS = new Set([
  'httpsRedirect', 'mode', 'serverCertificate', 'privateKey', 'caCertificates', 'caCrl', 'credentialName', 'credentialNames', 'tlsCertificates', 'caCertCredentialName',
  'subjectAltNames', 'verifyCertificateSpki', 'verifyCertificateHash', 'insecureSkipVerify', 'minProtocolVersion', 'maxProtocolVersion', 'cipherSuites', 'ecdhCurves',
]);

/** Fields that only matter where a client certificate is verified (MUTUAL, OPTIONAL_MUTUAL, ISTIO_MUTUAL). */
const CLIENT_VALIDATION = ['verifyCertificateSpki', 'verifyCertificateHash', 'insecureSkipVerify', 'caCertCredentialName'];

const isSet = (v: unknown) => (Array.isArray(v) ? v.length > 0 : v !== undefined && v !== '' && v !== false);

/** A server's `tls` notices (`<path>.<field> ...`). `credentialsServed`: the discovery server serves credentials over SDS. */
export function serverTlsNotices(tls: Record<string, unknown>, path: string, gatewayNamespace: string, credentialsServed: boolean): string[] {
  const out = Object.keys(tls)
    .filter((k) => !TRANSLATED_TLS.has(k))
    .map((k) => `${path}.${k} is not effective yet`);
  const mode = typeof tls['mode'] === 'string' ? tls['mode'] : 'PASSTHROUGH';
  const validatesClient = mode === 'MUTUAL' || mode === 'OPTIONAL_MUTUAL' || mode === 'ISTIO_MUTUAL';
  if (!validatesClient) {
    for (const k of CLIENT_VALIDATION.filter((f) => isSet(tls[f]))) out.push(`${path}.${k} has no effect with mode ${mode}: no client certificate is verified`);
  }
  const credentialNames = Array.isArray(tls['credentialNames']) ? (tls['credentialNames'] as unknown[]).map(String) : [];
  const credentialName = typeof tls['credentialName'] === 'string' ? tls['credentialName'] : '';
  const usesCredentials = credentialNames.length > 0 || credentialName !== '';
  if (validatesClient && mode !== 'ISTIO_MUTUAL' && isSet(tls['caCertCredentialName']) && !usesCredentials) {
    out.push(`${path}.caCertCredentialName has no effect without credentialName or credentialNames (the client CA is caCertificates)`);
  }
  (Array.isArray(tls['tlsCertificates']) ? (tls['tlsCertificates'] as Array<Record<string, unknown>>) : []).forEach((c, j) => {
    if (isSet(c?.['caCertificates'])) out.push(`${path}.tlsCertificates[${j}].caCertificates has no effect: the client CA is ${path}.caCertificates`);
  });
  const named: Array<[string, string]> = [
    ...(credentialName ? [['credentialName', credentialName] as [string, string]] : []),
    ...credentialNames.map((n, j) => [`credentialNames[${j}]`, n] as [string, string]),
    ...(validatesClient && usesCredentials && typeof tls['caCertCredentialName'] === 'string' && tls['caCertCredentialName'] ? [['caCertCredentialName', tls['caCertCredentialName']] as [string, string]] : []),
  ];
  for (const [field, name] of named) {
    const problem = credentialProblem(name, gatewayNamespace);
    if (problem) out.push(`${path}.${field} ${name} is never served: ${problem}`);
  }
  if (!credentialsServed && named.length > 0) {
    out.push(`${named.map(([f]) => `${path}.${f}`).join(', ')} ${named.length > 1 ? 'are' : 'is'} not effective yet: the discovery server does not serve credential secrets over SDS (MESHD_ENABLE_SDS_SERVER is off, or PILOT_ENABLE_XDS_IDENTITY_CHECK is off); use serverCertificate and privateKey files`);
  }
  return out;
}
