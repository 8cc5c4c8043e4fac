// Which CA certificates may sign a client certificate of a trust domain, on the discovery server's
// secured port once SPIFFE_BUNDLE_ENDPOINTS is set (the Go mesh's PeerCertVerifier): the mesh CA's
// for TRUST_DOMAIN, a bundle's roots for a federated trust domain, none for any other. TLS checks
// the chain against all of them together; this tells which of them the leaf's own trust domain
// allows, so that a federated CA cannot vouch for the mesh's identities or another domain's.
import 'reflect-metadata';
import * as x509 from '@peculiar/x509';
import type { FederatedBundles } from './bundle-fetcher.js';

export interface PeerTrust {
  /** The certificates that may sign a leaf of `trustDomain` directly; undefined = not trusted. */
  issuersOf(trustDomain: string): readonly x509.X509Certificate[] | undefined;
}

/** Whether `issuer` signed `leaf`: names chain and the signature verifies with its key. */
export async function signedBy(leaf: x509.X509Certificate, issuer: x509.X509Certificate): Promise<boolean> {
  return leaf.issuer === issuer.subject && (await leaf.verify({ publicKey: issuer.publicKey, signatureOnly: true }));
}

export class FederatedPeerTrust implements PeerTrust {
  private readonly parsed = new Map<string, x509.X509Certificate>();

  constructor(
    private readonly meshTrustDomain: string,
    /** The mesh CA's roots and chain, current (they rotate). */
    private readonly meshIssuers: () => readonly x509.X509Certificate[],
    private readonly bundles: Pick<FederatedBundles, 'rootsOf'>,
  ) {}

  issuersOf(trustDomain: string): readonly x509.X509Certificate[] | undefined {
    const federated = this.bundles.rootsOf(trustDomain).map((pem) => this.parse(pem));
    if (trustDomain === this.meshTrustDomain) return [...this.meshIssuers(), ...federated];
    return federated.length > 0 ? federated : undefined;
  }

  private parse(pem: string): x509.X509Certificate {
    let c = this.parsed.get(pem);
    if (!c) this.parsed.set(pem, (c = new x509.X509Certificate(pem)));
    return c;
  }
}
