// SPIFFE_BUNDLE_ENDPOINTS on a real pilot-discovery: the secured port (:15012) accepts xDS and CSR
// callers whose certificate comes from a federated trust domain's CA, its bundle fetched from a
// real HTTPS bundle endpoint on loopback; a CA of no configured trust domain, and a federated CA
// claiming the mesh's own trust domain or a third one, are refused; a bad value or an unreachable endpoint stops
// the server with the reason.
import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { create } from '@bufbuild/protobuf';
import { credentials, type ClientDuplexStream } from '@grpc/grpc-js';
import 'reflect-metadata';
import * as x509 from '@peculiar/x509';
import { CaError } from '../../src/agent/sds/ca-client.js';
import { saveSelfSigned } from '../../src/security/ca/bundle.js';
import { createSelfSignedRoot, generateKeyPair, signLeaf } from '../../src/security/ca/pki.js';
import { AggregatedDiscoveryService } from '../../src/gen/envoy/service/discovery/v3/ads_pb.js';
import { DiscoveryRequestSchema, type DiscoveryRequest, type DiscoveryResponse } from '../../src/gen/envoy/service/discovery/v3/discovery_pb.js';
import { grpcClient } from '../../src/envoy/grpc-service.js';
import { TypeUrl } from '../../src/envoy/types.js';
import { issue, SERVER_NAME, startCaDiscovery, type CaDiscovery } from '../helpers/mesh-ca.js';
import { discoveryArgs, eventually, run } from '../helpers/proc.js';
import { meshCa, type MeshCa } from '../dataplane/tls-fixtures.js';
import { bundleEndpoint, bundleOf } from '../helpers/spiffe-bundle.js';

/**
 * A mesh CA persisted where pilot-discovery keeps its self-signed root, so that the test can issue
 * the bundle endpoint's serving certificate from it (the discovery server trusts the mesh root for
 * bundle endpoints, as the agent does).
 */
async function meshCaDir(): Promise<{ dir: string; serving: { key: string; cert: string } }> {
  const dir = mkdtempSync(join(tmpdir(), 'mesh-fed-ca-'));
  const keys = await generateKeyPair({ kind: 'ECDSA', curve: 'P-256' });
  const root = await createSelfSignedRoot(keys, 'cluster.local', 24 * 3600_000);
  saveSelfSigned(dir, { cert: root, key: keys.privateKey, keyPem: keys.pem, chain: [], roots: [root] });
  const leafKeys = await generateKeyPair({ kind: 'ECDSA', curve: 'P-256' });
  const leaf = await signLeaf({ cert: root, key: keys.privateKey }, { publicKey: await x509.PublicKey.create(leafKeys.publicKey), uris: [], dnsNames: ['localhost'], ttlMs: 3600_000 });
  return { dir, serving: { key: leafKeys.pem, cert: leaf.toString('pem') } };
}

interface Ads {
  streamAggregatedResources(): ClientDuplexStream<DiscoveryRequest, DiscoveryResponse>;
  close(): void;
}

type Outcome = { served: true } | { served: false; code: number; details: string };

/** One ADS stream on the secured port presenting `cert`, claiming namespace shop / service account client. */
async function xds(t: TestContext, d: CaDiscovery, cert: { keyPem: string; chainPem: string }): Promise<Outcome> {
  const mtls = credentials.createSsl(Buffer.from(d.rootPem()), Buffer.from(cert.keyPem), Buffer.from(cert.chainPem));
  const ads = grpcClient(AggregatedDiscoveryService, d.secureAddress, mtls, { 'grpc.ssl_target_name_override': SERVER_NAME }) as unknown as Ads;
  t.after(() => ads.close());
  const stream = ads.streamAggregatedResources();
  const out = await new Promise<Outcome>((resolve) => {
    stream.on('data', () => resolve({ served: true }));
    stream.on('error', (e: { code: number; details: string }) => resolve({ served: false, code: e.code, details: e.details }));
    stream.write(create(DiscoveryRequestSchema, { typeUrl: TypeUrl.Cluster, node: { id: 'sidecar~10.1.0.1~client-1.shop~shop.svc.cluster.local', metadata: { NAMESPACE: 'shop', SERVICE_ACCOUNT: 'client' } } }));
  });
  stream.end();
  return out;
}

const FOREIGN_ID = 'spiffe://foreign.org/ns/shop/sa/client';

test('the secured port accepts a federated trust domain\'s workloads for xDS and CSRs, and only its own identities', async (t) => {
  const { dir, serving } = await meshCaDir();
  const foreign: MeshCa = await meshCa('foreign.org');
  const reply = { status: 200, body: bundleOf(foreign, 0.3) };
  const ep = await bundleEndpoint(t, reply, serving);
  const url = ep.url;
  const caller = await foreign.issue(FOREIGN_ID);

  // Without the variable the mesh roots alone are trusted: TLS does not verify the foreign leaf, so the call has no credential.
  const plain = await startCaDiscovery({ MESHD_CUSTOM_HOST: 'localhost' }, dir);
  const before = await xds(t, plain, caller);
  await plain.proc.stop();
  assert.deepEqual(before.served ? before : [before.code, /no credential/.test(before.details)], [16, true], 'UNAUTHENTICATED, no verified certificate');

  const d = await startCaDiscovery({ MESHD_CUSTOM_HOST: 'localhost', SPIFFE_BUNDLE_ENDPOINTS: `foreign.org|${url}` }, dir);
  t.after(() => d.proc.stop());
  assert.match(d.proc.output, /SPIFFE bundle of foreign\.org: 1 root\(s\) from https:\/\/localhost:\d+\/bundle/);
  assert.doesNotMatch(d.proc.output, /SPIFFE_BUNDLE_ENDPOINTS.*not yet effective/);

  assert.deepEqual(await xds(t, d, caller), { served: true }, 'a federated workload is served config (its namespace and service account match)');

  // The CSR path (the Go mesh signs for the caller's identities, whatever their trust domain).
  const renewed = await issue(d, FOREIGN_ID, { keyPem: caller.keyPem, chainPem: caller.chainPem });
  assert.equal(renewed.leaf.subjectAltName, `URI:${FOREIGN_ID}`);
  assert.ok(renewed.leaf.verify(new X509Certificate(d.rootPem()).publicKey), 'signed by the mesh CA');
  await assert.rejects(issue(d, 'spiffe://cluster.local/ns/shop/sa/client', { keyPem: caller.keyPem, chainPem: caller.chainPem }), (e: CaError) => e.code === 7 && /caller \(certificate\) is spiffe:\/\/foreign\.org/.test(e.message));

  // The federated CA may not vouch for the mesh's own trust domain.
  const impostor = await foreign.issue('spiffe://cluster.local/ns/shop/sa/client');
  const refused = await xds(t, d, impostor);
  assert.deepEqual(refused.served ? refused : refused.code, 16);
  assert.match(refused.served ? '' : refused.details, /client certificate for trust domain cluster\.local is not signed by a CA of cluster\.local \(issuer "O=foreign\.org"\)/);

  // A CA of a trust domain that is not configured: TLS does not verify it.
  const other = await (await meshCa('other.org')).issue('spiffe://other.org/ns/shop/sa/client');
  const third = await xds(t, d, other);
  assert.deepEqual(third.served ? third : [third.code, /no credential/.test(third.details)], [16, true]);

  // foreign.org's CA signs for a third trust domain: TLS verifies it (a trusted root), the trust domain check does not.
  const elsewhere = await xds(t, d, await foreign.issue('spiffe://elsewhere.org/ns/shop/sa/client'));
  assert.equal(elsewhere.served ? 'served' : elsewhere.code, 16);
  assert.match(elsewhere.served ? '' : elsewhere.details, /trust domain elsewhere\.org, which is neither cluster\.local nor one of SPIFFE_BUNDLE_ENDPOINTS/);

  // foreign.org rotates its root: refreshed at the bundle's hint, trusted without a restart (the Go
  // mesh read these bundles once); then its endpoint fails and the last good root is kept.
  const rotated = await meshCa('foreign.org');
  const next = await rotated.issue(FOREIGN_ID);
  reply.body = bundleOf(rotated, 0.3);
  await eventually(async () => assert.deepEqual(await xds(t, d, next), { served: true }), 15_000);
  Object.assign(reply, { status: 503, body: 'down' });
  const hits = ep.hits();
  await eventually(() => assert.ok(ep.hits() >= hits + 2, 'two more fetches of the bundle endpoint'), 15_000);
  assert.match(d.proc.output, /SPIFFE bundle of foreign\.org from https:\/\/localhost:\d+\/bundle failed, keeping the last good 1 root\(s\): HTTP 503/);
  assert.deepEqual(await xds(t, d, next), { served: true }, 'the last good root still verifies');
});

test('pilot-discovery stops on a bad SPIFFE_BUNDLE_ENDPOINTS, and when a bundle cannot be fetched at startup', async () => {
  const bad = await run('pilot-discovery', discoveryArgs(), { env: { SPIFFE_BUNDLE_ENDPOINTS: 'foreign.org|http://localhost:1/bundle' } });
  assert.equal(bad.code, 1);
  assert.match(bad.stderr, /Error: SPIFFE_BUNDLE_ENDPOINTS: "foreign\.org\|http:\/\/localhost:1\/bundle": "http:\/\/localhost:1\/bundle" is not an https URL/);

  const { dir } = await meshCaDir();
  const down = await run('pilot-discovery', discoveryArgs(), { env: { AUTHORITY_SELF_SIGNED_CA_DIR: dir, SPIFFE_BUNDLE_ENDPOINTS: 'foreign.org|https://localhost:1/bundle' }, timeoutMs: 60_000 });
  assert.equal(down.code, 1);
  assert.match(down.stderr, /Error: SPIFFE_BUNDLE_ENDPOINTS: no bundle after 10s for foreign\.org \(https:\/\/localhost:1\/bundle\): .*ECONNREFUSED/);
});
