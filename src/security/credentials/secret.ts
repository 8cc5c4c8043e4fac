// credentialName secrets as SDS resources, pure: which Secret an `orch://` resource name means for
// a proxy (only Secrets of the proxy's own namespace, as the Go mesh authorizes them), and the
// Envoy Secret built from what the store holds.
import { create } from '@bufbuild/protobuf';
import { SecretSchema, type Secret } from '../../gen/envoy/extensions/transport_sockets/tls/v3/secret_pb.js';
import { CREDENTIAL_CA_SUFFIX, CREDENTIAL_RESOURCE_PREFIX } from '../../networking/gateway-tls.js';
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
  /** A Secret of another namespace: never served. */
  | { readonly kind: 'denied'; readonly namespace: string };

/**
 * The Secret a resource name refers to for a proxy of `proxyNamespace`: `orch://<name>` and
 * `orch://<namespace>/<name>` (the namespace must be the proxy's own), `-cacert` asking for the CA.
 */
export function resolveCredential(resourceName: string, proxyNamespace: string): Resolution {
  if (!resourceName.startsWith(CREDENTIAL_RESOURCE_PREFIX)) return { kind: 'foreign' };
  const rest = resourceName.slice(CREDENTIAL_RESOURCE_PREFIX.length);
  const slash = rest.indexOf('/');
  const namespace = slash >= 0 ? rest.slice(0, slash) : proxyNamespace;
  const name = slash >= 0 ? rest.slice(slash + 1) : rest;
  if (namespace !== proxyNamespace || name === '' || name.includes('/')) return { kind: 'denied', namespace };
  const ca = name.endsWith(CREDENTIAL_CA_SUFFIX);
  return { kind: 'request', request: { namespace, name: ca ? name.slice(0, -CREDENTIAL_CA_SUFFIX.length) : name, ca } };
}

const inline = (bytes: Buffer) => ({ specifier: { case: 'inlineBytes' as const, value: new Uint8Array(bytes) } });

/**
 * The Envoy Secret for a request, from the credential(s) found: for `-cacert`, the CA of the
 * `<name>-cacert` Secret if there is one, else the CA bundle of `<name>` itself; otherwise the
 * certificate and key. Undefined when what is asked for is not there.
 */
export function credentialSecret(resourceName: string, req: CredentialRequest, lookup: (name: string) => Credential | undefined): Secret | undefined {
  if (req.ca) {
    const ca = lookup(`${req.name}${CREDENTIAL_CA_SUFFIX}`)?.caCertificate ?? lookup(req.name)?.caCertificate;
    return ca ? create(SecretSchema, { name: resourceName, type: { case: 'validationContext', value: { trustedCa: inline(ca) } } }) : undefined;
  }
  const c = lookup(req.name);
  if (!c?.certificateChain || !c.privateKey) return undefined;
  return create(SecretSchema, { name: resourceName, type: { case: 'tlsCertificate', value: { certificateChain: inline(c.certificateChain), privateKey: inline(c.privateKey) } } });
}
