// A SPIFFE bundle endpoint for tests: the bundle document of a CA (its root as the x509-svid key,
// beside a jwt-svid key that must be ignored) served over HTTPS on loopback.
import type { TestContext } from 'node:test';
import { X509Certificate } from 'node:crypto';
import { createServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { meshCa, type MeshCa } from '../dataplane/tls-fixtures.js';

export const bundleOf = (ca: MeshCa, hintS?: number): string =>
  JSON.stringify({ keys: [{ use: 'x509-svid', kty: 'EC', x5c: [new X509Certificate(ca.rootPem).raw.toString('base64')] }, { use: 'jwt-svid', kty: 'EC', kid: 'k1' }], ...(hintS ? { spiffe_refresh_hint: hintS } : {}) });

export interface BundleEndpoint {
  readonly url: string;
  /** The root of the endpoint's serving certificate (its own CA unless one was given). */
  readonly caPem: string;
  /** Requests served so far. */
  hits(): number;
  /** Takes the endpoint down (connections refused from then on). */
  stop(): Promise<void>;
}

/** Serves whatever `reply` holds when asked; `serving` = its certificate (else one from a CA of its own). */
export async function bundleEndpoint(t: TestContext, reply: { status: number; body: string }, serving?: { key: string; cert: string }): Promise<BundleEndpoint> {
  let caPem = '';
  if (!serving) {
    const own = await meshCa('bundles.test');
    const { keyPem, chainPem } = await own.issue('spiffe://bundles.test/endpoint', ['localhost']);
    serving = { key: keyPem, cert: chainPem };
    caPem = own.rootPem;
  }
  let hits = 0;
  const server = createServer(serving, (_req, res) => {
    hits++;
    res.writeHead(reply.status, { 'content-type': 'application/json' }).end(reply.body);
  });
  await new Promise<void>((resolve) => server.listen(0, 'localhost', resolve));
  const stop = (): Promise<void> =>
    new Promise((resolve) => {
      if (!server.listening) return resolve();
      server.close(() => resolve());
      server.closeAllConnections();
    });
  t.after(stop);
  return { url: `https://localhost:${(server.address() as AddressInfo).port}/bundle`, caPem, hits: () => hits, stop };
}
