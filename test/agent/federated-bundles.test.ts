// SPIFFE_BUNDLE_ENDPOINTS: the setting's syntax, bundles fetched from a real HTTPS bundle endpoint on
// loopback, rotation picked up at the bundle's refresh hint, the last good roots kept when the
// endpoint fails, and the federated roots in the ROOTCA secret served over SDS: a real mesh-proxy's
// STRICT inbound listener (as the discovery server builds it) fed that ROOTCA accepts a foreign
// trust domain's workload only with its bundle configured and its trust domain allowed.
import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { mkdtempSync, readFileSync } from 'node:fs';
import { request } from 'node:https';
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
import { echo, meshCa, sidecar, tlsInspector, workload, type Workload } from '../dataplane/tls-fixtures.js';
import { hcmChain, listener, staticCluster } from '../dataplane/xds-fixtures.js';
import { freePort } from '../../samples/local-mesh.js';
import { configureLogging } from '../../src/common/log.js';
import { inboundMtlsSocket } from '../../src/security/mtls/tls-context.js';
import { trustDomainsForValidation } from '../../src/security/mtls/trust-domain.js';
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

/** A sidecar of `w` (its ROOTCA from `w.socket`) with two STRICT inbound listeners as the discovery server builds them: peers of cluster.local and foreign.org, and of cluster.local only. */
async function strictSidecar(t: TestContext, w: Workload, app: number): Promise<{ aliased: number; meshOnly: number; admin: string }> {
  const s = await sidecar(t, w);
  const [aliased, meshOnly] = [await freePort(), await freePort()];
  const inbound = (name: string, port: number, aliases: string[]) => {
    const trustDomains = trustDomainsForValidation({ trustDomain: 'cluster.local', aliases, skipValidation: false });
    const chain = hcmChain({ cluster: 'inbound|8080||', statPrefix: name }, { filterChainMatch: { transportProtocol: 'tls' }, transportSocket: inboundMtlsSocket('http', { trustDomains, tlsV2: true }) });
    return listener(name, port, [chain], { listenerFilters: [tlsInspector] });
  };
  s.ads.set(TypeUrl.Cluster, [staticCluster('inbound|8080||', [app])]);
  s.ads.set(TypeUrl.Listener, [inbound('aliased', aliased, ['foreign.org']), inbound('meshOnly', meshOnly, [])]);
  await s.ads.push(TypeUrl.Cluster, TypeUrl.Listener);
  await eventually(async () => assert.equal((await fetch(`${s.admin}/ready`)).status, 200), 15_000);
  return { aliased, meshOnly, admin: s.admin };
}

/** A request over a new TLS connection presenting `client`'s certificate: the status, or `refused` when the handshake fails. */
function call(port: number, client: { keyPem: string; chainPem: string }, serverRoot: string): Promise<number | 'refused'> {
  return new Promise((resolve) => {
    const req = request({ host: '127.0.0.1', port, path: '/', agent: false, key: client.keyPem, cert: client.chainPem, ca: serverRoot, checkServerIdentity: () => undefined }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
    });
    req.on('error', () => resolve('refused'));
    req.end();
  });
}

test('a real STRICT inbound listener: a foreign CA\'s workload passes once its bundle is in ROOTCA and its trust domain allowed; a malformed bundle and an endpoint down keep the last good roots', async (t) => {
  const logFile = join(mkdtempSync(join(tmpdir(), 'mesh-fed-log-')), 'agent.log');
  const logging = { asJson: false, caller: [], outputLevel: 'spiffe:info', stacktraceLevel: 'spiffe:none' };
  configureLogging({ ...logging, targets: [logFile] });
  t.after(() => configureLogging({ ...logging, targets: ['stdout'] }));
  const local = await meshCa();
  const foreign = await meshCa('foreign.org');
  const w = await workload(t, local, 'cart');
  const app = await echo(t, 'cart-app');
  const caller = await foreign.issue('spiffe://foreign.org/ns/shop/sa/client');
  const neighbour = await local.issue('spiffe://cluster.local/ns/shop/sa/local');

  // The workload's agent without SPIFFE_BUNDLE_ENDPOINTS: ROOTCA is the mesh root only.
  const plain = await strictSidecar(t, w, app);
  assert.equal(await call(plain.aliased, caller, local.rootPem), 'refused', 'no federated root: the handshake fails even with the trust domain allowed');
  assert.equal(await call(plain.aliased, neighbour, local.rootPem), 200);

  // The same workload's agent with the bundle: its SDS server serves ROOTCA with the foreign root.
  const reply = { status: 200, body: bundleOf(foreign) };
  const ep = await bundleEndpoint(t, reply);
  const bundles = new FederatedBundles({ endpoints: parseBundleEndpoints(`foreign.org|${ep.url}`), caPem: () => ep.caPem, defaultRefreshMs: 200 });
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
  assert.ok(rootca.includes(new X509Certificate(foreign.rootPem).toString().trim()), 'the foreign root follows');

  const fed = await strictSidecar(t, { ...w, socket }, app);
  assert.equal(await call(fed.aliased, caller, local.rootPem), 200, 'federated root and allowed trust domain: accepted');
  assert.equal(await call(fed.aliased, neighbour, local.rootPem), 200, 'local callers still accepted');
  assert.equal(await call(fed.meshOnly, caller, local.rootPem), 'refused', 'the roots alone do not admit foreign.org: as in the Go mesh, its trust domain must be allowed (an alias)');
  const third = await (await meshCa('other.org')).issue('spiffe://other.org/ns/a/sa/b');
  assert.equal(await call(fed.aliased, third, local.rootPem), 'refused', 'a third, unfederated CA is refused');

  // A malformed bundle: logged, refused, the last good roots kept (new handshakes still pass).
  reply.body = '{"keys": [{"use": "x509-svid", "x5c": ["bm90IGEgY2VydA=="]}]}';
  await eventually(() => assert.match(readFileSync(logFile, 'utf8'), /warn\tspiffe\tSPIFFE bundle of foreign\.org from https:\/\/localhost:\d+\/bundle failed, keeping the last good 1 root\(s\): SPIFFE bundle of foreign\.org at \S+: keys\[0\]\.x5c\[0\]/), 10_000);
  assert.equal(await call(fed.aliased, caller, local.rootPem), 200);

  // The endpoint down at refresh time.
  await ep.stop();
  await eventually(() => assert.match(readFileSync(logFile, 'utf8'), /keeping the last good 1 root\(s\): .*ECONNREFUSED/), 10_000);
  assert.equal(await call(fed.aliased, caller, local.rootPem), 200);
  assert.ok((await rootcaOf(socket)).includes(new X509Certificate(foreign.rootPem).toString().trim()), 'ROOTCA still carries the foreign root');
});
