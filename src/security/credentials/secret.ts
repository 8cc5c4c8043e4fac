// credentialName secrets as SDS resources, pure: which Secret an `orch://` or `orch-gateway://`
// resource name means for a proxy (only Secrets of the proxy's own namespace, and `orch-gateway://`
// ones only when a Gateway of that namespace selecting the proxy references them, as the Go mesh
// authorizes them), and the Envoy Secret built from what the store holds.
import { create } from '@bufbuild/protobuf';
import { SecretSchema, type Secret } from '../../gen/envoy/extensions/transport_sockets/tls/v3/secret_pb.js';
import { GATEWAY_CREDENTIAL_PREFIX, parseGatewayCredential, type MergedGateway } from '../../model/gateway.js';
import { clientCaResourceName, CREDENTIAL_CA_SUFFIX, CREDENTIAL_RESOURCE_PREFIX } from '../../networking/gateway-tls.js';
import type { Credential } from './store.js';

/** What an `orch://` resource name asks for. */
export interface CredentialRequest {
  readonly namespace: string;
  readonly name: string;
  /** `-cacert`: the validation context, not the certificate. */
  readonly ca: boolean;
}

export type Resolution =
  | { readonly kind: 'request'; readonly request: CredentialRequest }
  /** Not a credential name at all (the proxy's other SDS resources are not ours to serve). */
  | { readonly kind: 'foreign' }
  /** Never served to this proxy; `reason` says why, for the log. */
  | { readonly kind: 'denied'; readonly reason: string };

function request(namespace: string, name: string): Resolution {
  const ca = name.endsWith(CREDENTIAL_CA_SUFFIX);
  return { kind: 'request', request: { namespace, name: ca ? name.slice(0, -CREDENTIAL_CA_SUFFIX.length) : name, ca } };
}

/**
 * `orch-gateway://<namespace>/<name>` (both required): served only when `verified` (the references
 * of the proxy's own Gateways, see verifiedCertificateReferences) holds the name.
 */
function resolveGatewayCredential(resourceName: string, verified: ReadonlySet<string>): Resolution {
  const ref = parseGatewayCredential(resourceName);
  if (!ref) return { kind: 'denied', reason: `${GATEWAY_CREDENTIAL_PREFIX} names need <namespace>/<name>` };
  if (!verified.has(resourceName)) return { kind: 'denied', reason: `no Gateway of the proxy's namespace selecting it references ${resourceName} (a cross-namespace reference would need a ReferenceGrant, which is not supported)` };
  return request(ref.namespace, ref.name);
}

/**
 * The Secret a resource name refers to for a proxy of `proxyNamespace`: `orch://<name>` and
 * `orch://<namespace>/<name>` (the namespace must be the proxy's own), `orch-gateway://` names only
 * when in `verified`; `-cacert` asks for the CA.
 */
export function resolveCredential(resourceName: string, proxyNamespace: string, verified: ReadonlySet<string> = new Set()): Resolution {
  if (resourceName.startsWith(GATEWAY_CREDENTIAL_PREFIX)) return resolveGatewayCredential(resourceName, verified);
  if (!resourceName.startsWith(CREDENTIAL_RESOURCE_PREFIX)) return { kind: 'foreign' };
  const rest = resourceName.slice(CREDENTIAL_RESOURCE_PREFIX.length);
  const slash = rest.indexOf('/');
  const namespace = slash >= 0 ? rest.slice(0, slash) : proxyNamespace;
  const name = slash >= 0 ? rest.slice(slash + 1) : rest;
  if (namespace !== proxyNamespace || name === '' || name.includes('/')) {
    return { kind: 'denied', reason: `a Secret of namespace ${namespace || '(none)'}: a proxy only gets its own namespace's Secrets` };
  }
  return request(namespace, name);
}

/**
 * The `orch-gateway://` names a router proxy may be served, as the Go mesh verifies certificate
 * references: those its servers' `credentialName` or `credentialNames` give, when the server's
 * Gateway and the Secret are both in the proxy's (verified) namespace; with MUTUAL or
 * OPTIONAL_MUTUAL, the client CA's resource too (`-cacert`, or `caCertCredentialName`'s).
 */
export function verifiedCertificateReferences(merged: MergedGateway, proxyNamespace: string): Set<string> {
  const out = new Set<string>();
  const own = (name: string) => parseGatewayCredential(name)?.namespace === proxyNamespace;
  for (const s of merged.ports.flatMap((p) => p.servers)) {
    if (!s.tls || s.gatewayNamespace !== proxyNamespace) continue;
    const names = s.tls.credentialNames?.length ? s.tls.credentialNames : [s.tls.credentialName ?? ''];
    for (const name of names.filter(own)) out.add(name);
    const ca = clientCaResourceName(s.tls);
    const caOf = s.tls.caCertCredentialName || names[0] || '';
    if ((s.tls.mode === 'MUTUAL' || s.tls.mode === 'OPTIONAL_MUTUAL') && ca && own(caOf)) out.add(ca);
  }
  return out;
}

const inline = (bytes: Buffer) => ({ specifier: { case: 'inlineBytes' as const, value: new Uint8Array(bytes) } });

/**
 * The Envoy Secret for a request, from the credential(s) found: for `-cacert`, the CA (and CRL)
 * of the `<name>-cacert` Secret if there is one, else those of `<name>` itself; otherwise the
 * certificate and key. Undefined when what is asked for is not there.
 */
export function credentialSecret(resourceName: string, req: CredentialRequest, lookup: (name: string) => Credential | undefined): Secret | undefined {
  if (req.ca) {
    const holder = [lookup(`${req.name}${CREDENTIAL_CA_SUFFIX}`), lookup(req.name)].find((c) => c?.caCertificate);
    if (!holder?.caCertificate) return undefined;
    // The CRL beside the CA (the Secret's ca.crl), as the Go mesh serves it.
    return create(SecretSchema, { name: resourceName, type: { case: 'validationContext', value: { trustedCa: inline(holder.caCertificate), ...(holder.crl ? { crl: inline(holder.crl) } : {}) } } });
  }
  const c = lookup(req.name);
  if (!c?.certificateChain || !c.privateKey) return undefined;
  return create(SecretSchema, { name: resourceName, type: { case: 'tlsCertificate', value: { certificateChain: inline(c.certificateChain), privateKey: inline(c.privateKey) } } });
}
