// SPIFFE_BUNDLE_ENDPOINTS on the discovery server (the Go mesh's istiod did this until the variable
// was dropped for mesh config caCertificates): the bundles, fetched once the CA exists (bundle
// endpoints are trusted by the system roots and the mesh roots, as the agent does), and the peer
// trust the authenticator applies to client certificates on the secured port.
import type * as x509 from '@peculiar/x509';
import { FederatedBundles } from '../federation/bundle-fetcher.js';
import type { BundleEndpoint } from '../federation/bundle-format.js';
import { FederatedPeerTrust, type PeerTrust } from '../federation/peer-trust.js';
import type { MeshAuthority } from './authority.js';

/** The Go mesh's discovery server gives its bundle retrieval 10 seconds at startup. */
const STARTUP_MS = 10_000;

export class MeshFederation {
  readonly bundles: FederatedBundles;
  readonly peerTrust: PeerTrust;
  private authority: MeshAuthority | undefined;

  constructor(endpoints: readonly BundleEndpoint[], trustDomain: string) {
    this.bundles = new FederatedBundles({ endpoints, caPem: () => this.authority?.rootsPem() ?? '' });
    this.peerTrust = new FederatedPeerTrust(trustDomain, () => this.meshIssuers(), this.bundles);
  }

  /** Fetches every bundle (retrying for 10 s, then BundleLoadError), then keeps them refreshed. */
  async start(authority: MeshAuthority): Promise<void> {
    this.authority = authority;
    await this.bundles.start();
    await this.bundles.requireAll(STARTUP_MS);
  }

  close(): void {
    this.bundles.close();
  }

  /** The mesh CA's certificates: they sign TRUST_DOMAIN's client certificates. */
  private meshIssuers(): x509.X509Certificate[] {
    const b = this.authority?.bundle;
    return b ? [b.cert, ...b.chain, ...b.roots] : [];
  }
}
