// Workload identity end to end: the local mesh's agent gets its certificate from the discovery
// server's CA and takes its config over the secured port; a proxy claiming another namespace than
// its certificate's is refused there, with the reason on both sides.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { create } from '@bufbuild/protobuf';
import { credentials, type ClientDuplexStream } from '@grpc/grpc-js';
import { freePort, freePorts, startLocalMesh } from '../../samples/local-mesh.js';
import { SecretSchema } from '../../src/gen/envoy/extensions/transport_sockets/tls/v3/secret_pb.js';
import { AggregatedDiscoveryService } from '../../src/gen/envoy/service/discovery/v3/ads_pb.js';
import { DiscoveryRequestSchema, type DiscoveryRequest, type DiscoveryResponse } from '../../src/gen/envoy/service/discovery/v3/discovery_pb.js';
import { SecretDiscoveryService } from '../../src/gen/envoy/service/secret/v3/sds_pb.js';
import { grpcClient } from '../../src/envoy/grpc-service.js';
import { TypeUrl, unpack } from '../../src/envoy/types.js';
import { caFixture, issue, SERVER_NAME } from '../helpers/mesh-ca.js';
import { get } from '../helpers/http.js';
import { eventually, Running, start } from '../helpers/proc.js';

test('npm start (secure): the agent gets a certificate from the CA, serves it over SDS and takes its config over the TLS port; the sleep sidecar calls the app over mTLS', async (t) => {
  const state = mkdtempSync(join(tmpdir(), 'mesh-local-secure-'));
  const mesh = await startLocalMesh({ stateDir: state, secure: true, client: true, ports: await freePorts(), output: 'pipe' });
  t.after(() => mesh.stop());
  const out = mesh.output();
  assert.match(out, /workload certificate for spiffe:\/\/cluster\.local\/ns\/default\/sa\/httpbin issued/);
  assert.match(out, new RegExp(`upstream xDS stream to localhost:${mesh.ports.secureGrpc} established`));

  const bootstrap = JSON.parse(readFileSync(join(state, 'agent', 'proxy', 'mesh-proxy-rev.json'), 'utf8')) as { static_resources: { clusters: { name: string; load_assignment: { endpoints: { lb_endpoints: { endpoint: { address: { pipe?: { path: string } } } }[] }[] } }[] } };
  const sdsCluster = bootstrap.static_resources.clusters.find((c) => c.name === 'sds-grpc');
  const socket = sdsCluster?.load_assignment.endpoints[0]?.lb_endpoints[0]?.endpoint.address.pipe?.path;
  assert.equal(socket, join(state, 'agent', 'var/run/secrets/workload-spiffe-uds/socket'));

  interface Fetch {
    fetchSecrets(req: DiscoveryRequest, cb: (err: Error | null, res?: DiscoveryResponse) => void): void;
    close(): void;
  }
  const sds = grpcClient(SecretDiscoveryService, `unix:${socket}`, credentials.createInsecure()) as unknown as Fetch;
  t.after(() => sds.close());
  const res = await new Promise<DiscoveryResponse>((resolve, reject) =>
    sds.fetchSecrets(create(DiscoveryRequestSchema, { typeUrl: TypeUrl.Secret, resourceNames: ['default', 'ROOTCA'] }), (e, r) => (e ? reject(e) : resolve(r!))),
  );
  assert.deepEqual(res.resources.map((a) => unpack(a, SecretSchema).name), ['default', 'ROOTCA']);

  // The proxy serves the config it got over the TLS port.
  const r = await fetch(`http://127.0.0.1:${mesh.ports.inbound}/headers`);
  assert.equal(r.status, 200);

  // The printed command: the sleep sidecar's outbound listener, mesh mTLS to the app's sidecar, whose
  // inbound connection manager tells the app the caller's SPIFFE id.
  assert.match(out, /workload certificate for spiffe:\/\/cluster\.local\/ns\/sleep\/sa\/sleep issued/);
  const hop = await get(false, mesh.ports.service, '/headers', { host: 'httpbin.default.svc.cluster.local' });
  assert.equal(hop.status, 200, `${hop.body}\n${mesh.output()}`);
  const xfccOf = (body: string): string => Object.entries((JSON.parse(body) as { headers: Record<string, string> }).headers).find(([k]) => k.toLowerCase() === 'x-forwarded-client-cert')?.[1] ?? '';
  const xfcc = xfccOf(hop.body);
  assert.match(xfcc, /(^|;)URI=spiffe:\/\/cluster\.local\/ns\/sleep\/sa\/sleep(;|,|$)/, `XFCC: ${xfcc}`);
  assert.match(xfcc, /(^|;)By=spiffe:\/\/cluster\.local\/ns\/default\/sa\/httpbin(;|,|$)/, `XFCC: ${xfcc}`);
  // The outbound route configuration ignores the port of the host, as the Go mesh's: with the
  // service port, another port or none, a name of the service reaches it.
  for (const host of ['httpbin.default.svc.cluster.local:9080', 'httpbin.default:9080', 'httpbin.default.svc:80']) {
    const r = await get(false, mesh.ports.service, '/headers', { host });
    assert.equal(r.status, 200, `${host}: ${r.body}`);
    assert.match(xfccOf(r.body), /(^|;)URI=spiffe:\/\/cluster\.local\/ns\/sleep\/sa\/sleep(;|,|$)/, `${host} went to httpbin over mesh mTLS`);
  }
});

test('identity check on the secured port: a proxy claiming another namespace is refused with the reason', async (t) => {
  const { issuer, d } = await caFixture(t, { MESHD_CUSTOM_HOST: 'localhost' });
  const cert = await issue(d, 'spiffe://cluster.local/ns/shop/sa/cart', { token: await issuer.token('shop', 'cart') });

  interface Ads {
    streamAggregatedResources(): ClientDuplexStream<DiscoveryRequest, DiscoveryResponse>;
    close(): void;
  }
  const mtls = credentials.createSsl(Buffer.from(d.rootPem()), Buffer.from(cert.keys.pem), Buffer.from(cert.chain.join('')));
  const ads = grpcClient(AggregatedDiscoveryService, d.secureAddress, mtls, { 'grpc.ssl_target_name_override': SERVER_NAME }) as unknown as Ads;
  t.after(() => ads.close());
  const open = (ns: string, sa: string) => {
    const stream = ads.streamAggregatedResources();
    const result = new Promise<{ code: number; details: string } | DiscoveryResponse>((resolve) => {
      stream.on('data', (r: DiscoveryResponse) => resolve(r));
      stream.on('error', (e: { code: number; details: string }) => resolve(e));
    });
    stream.write(
      create(DiscoveryRequestSchema, {
        typeUrl: TypeUrl.Cluster,
        node: { id: `sidecar~10.1.0.1~app-1.${ns}~${ns}.svc.cluster.local`, metadata: { NAMESPACE: ns, SERVICE_ACCOUNT: sa } },
      }),
    );
    return { stream, result };
  };

  const bad = open('bank', 'cart');
  const refused = (await bad.result) as { code: number; details: string };
  assert.equal(refused.code, 7, 'PERMISSION_DENIED');
  assert.match(refused.details, /identity check failed: proxy sidecar~10\.1\.0\.1~app-1\.bank~bank\.svc\.cluster\.local claims namespace bank but its credential is for shop\/cart/);
  await d.proc.waitFor(/xDS stream from .* refused: identity check failed/);

  const otherSa = open('shop', 'admin');
  assert.match(((await otherSa.result) as { details: string }).details, /claims service account shop\/admin/);

  const good = open('shop', 'cart');
  const answer = await good.result;
  assert.ok('typeUrl' in answer && answer.typeUrl === TypeUrl.Cluster, `the matching proxy is served: ${JSON.stringify((answer as { details?: string }).details)}`);
  good.stream.end();

  // Without a credential the TLS port refuses; the plaintext port does not ask (XDS_AUTH_PLAINTEXT=false).
  const anon = grpcClient(AggregatedDiscoveryService, d.secureAddress, credentials.createSsl(Buffer.from(d.rootPem())), { 'grpc.ssl_target_name_override': SERVER_NAME }) as unknown as Ads;
  t.after(() => anon.close());
  const s = anon.streamAggregatedResources();
  const e = await new Promise<{ code: number; details: string }>((resolve) => {
    s.on('error', resolve);
    s.write(create(DiscoveryRequestSchema, { typeUrl: TypeUrl.Cluster, node: { id: 'sidecar~10.1.0.1~app-1.shop~shop.svc.cluster.local', metadata: {} } }));
  });
  assert.equal(e.code, 16, 'UNAUTHENTICATED');
  assert.match(e.details, /no credential/);
});

test('the agent side of a refusal: an agent whose certificate is for shop but claims bank logs the reason', async (t) => {
  const { issuer, d } = await caFixture(t, { MESHD_CUSTOM_HOST: 'localhost' });
  const cert = await issue(d, 'spiffe://cluster.local/ns/shop/sa/cart', { token: await issuer.token('shop', 'cart') });
  const dir = mkdtempSync(join(tmpdir(), 'mesh-agent-bank-'));
  mkdirSync(join(dir, 'etc', 'certs'), { recursive: true });
  writeFileSync(join(dir, 'etc', 'certs', 'key.pem'), cert.keys.pem);
  writeFileSync(join(dir, 'etc', 'certs', 'cert-chain.pem'), cert.chain.slice(0, -1).join(''));
  writeFileSync(join(dir, 'etc', 'certs', 'root-cert.pem'), d.rootPem());
  const port = d.secureAddress.split(':').pop();
  const pc = { discoveryAddress: `localhost:${port}`, proxyAdminPort: await freePort(), statusPort: 0, metricsPort: 0, xdsProxyPort: 0, interceptionMode: 'NONE', configPath: join(dir, 'proxy'), concurrency: 1 };
  const agent = new Running(
    start('pilot-agent', ['proxy'], {
      cwd: dir,
      env: { POD_NAME: 'cart-1', POD_NAMESPACE: 'bank', SERVICE_ACCOUNT: 'cart', INSTANCE_IP: '127.0.0.1', FILE_MOUNTED_CERTS: 'true', XDS_ROOT_CA: join(d.caDir, 'root-cert.pem'), PROXY_CONFIG: JSON.stringify(pc) },
    }),
  );
  t.after(() => agent.stop());
  await agent.waitFor(/upstream xDS stream to localhost:\d+ failed \(7 identity check failed: proxy sidecar~127\.0\.0\.1~cart-1\.bank~bank\.svc\.cluster\.local claims namespace bank but its credential is for shop\/cart\)/, 30_000);
  await eventually(() => assert.match(d.proc.output, /refused: identity check failed: proxy sidecar~127\.0\.0\.1~cart-1\.bank/));
});
