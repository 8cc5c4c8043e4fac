// SPIFFE_BUNDLE_ENDPOINTS: the setting's syntax, bundles fetched from a real HTTPS bundle endpoint on
// loopback, rotation picked up at the bundle's refresh hint, the last good roots kept when the
// endpoint fails, and the federated roots in the ROOTCA secret served over SDS: a validation
// trusting that ROOTCA accepts a foreign trust domain's workload only with its bundle configured.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseBundleEndpoints, parseSpiffeBundle } from '../../src/security/federation/bundle-format.js';
import { FederatedBundles } from '../../src/security/federation/bundle-fetcher.js';
import { SdsServer } from '../../src/agent/sds/server.js';
import { SecretManager } from '../../src/agent/sds/secret-manager.js';
import { SecretSchema } from '../../src/gen/envoy/extensions/transport_sockets/tls/v3/secret_pb.js';
import { SecretDiscoveryService } from '../../src/gen/envoy/service/secret/v3/sds_pb.js';
import { DiscoveryRequestSchema, type DiscoveryRequest, type DiscoveryResponse } from '../../src/gen/envoy/service/discovery/v3/discovery_pb.js';
import { grpcClient } from '../../src/envoy/grpc-service.js';
import { TypeUrl, unpack } from '../../src/envoy/types.js';
import { create } from '@bufbuild/protobuf';
import { credentials, type Client, type ClientUnaryCall, type ServiceError } from '@grpc/grpc-js';
import { meshCa, workload } from '../dataplane/tls-fixtures.js';
import { eventually } from '../helpers/proc.js';
import { bundleEndpoint, bundleOf } from '../helpers/spiffe-bundle.js';

test('SPIFFE_BUNDLE_ENDPOINTS: tuples parse; a bad tuple is an error naming it', () => {
  assert.deepEqual(parseBundleEndpoints(''), []);
  const two = parseBundleEndpoints('foo.org|https://a.example/b||bar.com|https://c.example:8443/');
  assert.deepEqual(two.map((e) => [e.trustDomain, e.url.href]), [['foo.org', 'https://a.example/b'], ['bar.com', 'https://c.example:8443/']]);
  assert.throws(() => parseBundleEndpoints('foo.org|https://a.example||bar.com'), /"bar\.com": not one trust domain and one URL/);
  assert.throws(() => parseBundleEndpoints('foo.org|http://a.example'), /"foo\.org\|http:\/\/a\.example": .*not an https URL/);
  assert.throws(() => parseBundleEndpoints('Foo Org|https://a.example'), /"Foo Org" is not a trust domain/);
  assert.throws(() => parseBundleEndpoints('foo.org|https://a||foo.org|https://b'), /trust domain foo\.org is given twice/);
  assert.throws(() => parseSpiffeBundle('{"keys":[{"use":"jwt-svid"}]}', 'bundle X'), /bundle X: no x509-svid key/);
  assert.throws(() => parseSpiffeBundle('{"keys":[{"use":"x509-svid","x5c":["AAAA"]}]}', 'bundle X'), /bundle X: keys\[0\]\.x5c\[0\]/);
});

test('bundles are fetched over HTTPS, rotation is picked up, and a failing endpoint keeps the last good roots', async (t) => {
  const [fed1, fed2] = [await meshCa('foreign.org'), await meshCa('foreign.org')];
  const reply = { status: 200, body: bundleOf(fed1, 0.2) };
  const ep = await bundleEndpoint(t, reply);
  const bundles = new FederatedBundles({
    endpoints: parseBundleEndpoints(`foreign.org|${ep.url}||down.org|https://localhost:1/bundle`),
    caPem: () => ep.caPem,
    defaultRefreshMs: 200,
  });
  t.after(() => bundles.close());
  let updates = 0;
  bundles.on('update', () => updates++);
  await bundles.start();
  assert.deepEqual(bundles.rootsOf('foreign.org'), [new X509Certificate(fed1.rootPem).toString()]);
  assert.deepEqual(bundles.rootsOf('down.org'), [], 'an unreachable endpoint gives no roots and does not stop the others');

  reply.body = bundleOf(fed2, 0.2);
  await eventually(() => assert.deepEqual(bundles.rootsOf('foreign.org'), [new X509Certificate(fed2.rootPem).toString()]), 10_000);
  const seen = updates;

  for (const bad of [{ status: 500, body: 'oops' }, { status: 200, body: '{"keys":[]}' }, { status: 200, body: 'not json' }]) {
    Object.assign(reply, bad);
    const before = ep.hits();
    await eventually(() => assert.ok(ep.hits() >= before + 2, 'the endpoint was asked again'), 10_000);
    assert.deepEqual(bundles.rootsOf('foreign.org'), [new X509Certificate(fed2.rootPem).toString()], `after ${bad.status} ${bad.body}: last good roots kept`);
  }
  assert.equal(updates, seen, 'failures do not push anything');
});

interface SdsGrpc extends Client {
  fetchSecrets(req: DiscoveryRequest, cb: (e: ServiceError | null, r?: DiscoveryResponse) => void): ClientUnaryCall;
}

async function rootcaOf(socket: string): Promise<string> {
  const client = grpcClient(SecretDiscoveryService, `unix:${socket}`, credentials.createInsecure()) as unknown as SdsGrpc;
  try {
    const res = await new Promise<DiscoveryResponse>((resolve, reject) =>
      client.fetchSecrets(create(DiscoveryRequestSchema, { typeUrl: TypeUrl.Secret, resourceNames: ['ROOTCA'] }), (e, r) => (e ? reject(e) : resolve(r!))),
    );
    const s = unpack(res.resources[0]!, SecretSchema);
    assert.equal(s.type.case, 'validationContext');
    return Buffer.from(s.type.value.trustedCa!.specifier.value as Uint8Array).toString();
  } finally {
    client.close();
  }
}

/** Whether a peer validation trusting `rootca` accepts `client`'s leaf: issued and signed by one of its roots. */
function accepts(rootca: string, client: { chainPem: string }): boolean {
  const leaf = new X509Certificate(client.chainPem);
  const roots = rootca.split(/(?<=-----END CERTIFICATE-----)\s*/).filter((p) => p.includes('BEGIN')).map((p) => new X509Certificate(p));
  return roots.some((r) => leaf.checkIssued(r) && leaf.verify(r.publicKey));
}

test('ROOTCA over SDS carries the federated roots: a foreign workload is accepted only once its bundle is configured', async (t) => {
  const local = await meshCa();
  const foreign = await meshCa('foreign.org');
  const w = await workload(t, local, 'cart');
  const caller = await foreign.issue('spiffe://foreign.org/ns/shop/sa/client');

  // Without SPIFFE_BUNDLE_ENDPOINTS: ROOTCA is the mesh root only; the foreign caller is refused.
  assert.equal(accepts(await rootcaOf(w.socket), caller), false);

  const ep = await bundleEndpoint(t, { status: 200, body: bundleOf(foreign) });
  const bundles = new FederatedBundles({ endpoints: parseBundleEndpoints(`foreign.org|${ep.url}`), caPem: () => ep.caPem });
  t.after(() => bundles.close());
  await bundles.start();
  const secrets = new SecretManager({ source: { kind: 'files', dir: w.certDir }, graceRatio: 0.5 });
  await secrets.start();
  const socket = join(mkdtempSync(join(tmpdir(), 'mesh-fed-')), 'sds.sock');
  const sds = new SdsServer(secrets, socket, bundles);
  await sds.start();
  t.after(() => {
    sds.close();
    secrets.close();
  });
  const rootca = await rootcaOf(socket);
  assert.ok(rootca.startsWith(local.rootPem.trim()), 'the mesh root stays first');
  assert.equal(accepts(rootca, caller), true, 'the foreign caller chains to a federated root');
  assert.equal(accepts(rootca, await local.issue('spiffe://cluster.local/ns/shop/sa/local')), true, 'local callers still accepted');
  assert.equal(accepts(rootca, await (await meshCa('other.org')).issue('spiffe://other.org/ns/a/sa/b')), false, 'a third, unfederated CA is still refused');
});
