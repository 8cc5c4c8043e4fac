// DestinationRule TLS origination end to end in mesh-proxy: the clusters are built by the discovery
// server's builder (networking/upstream-tls.ts) from a rule's `tls`, pushed over a real ADS stream,
// and mesh-proxy connects to real HTTPS servers on loopback: insecureSkipVerify reaches a server no
// CA vouches for, a CRL beside the CA refuses a revoked server, and on a gateway `credentialName`
// brings the client certificate and the CA over SDS (the Secrets as the discovery server builds
// them from its credential store). Without caCertificates the server is verified against the system
// roots, `file-root:system` from the agent's real SDS server (SSL_CERT_FILE names a test bundle).
import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TLSSocket } from 'node:tls';
import { anyPack } from '@bufbuild/protobuf/wkt';
import { SecretSchema } from '../../src/gen/envoy/extensions/transport_sockets/tls/v3/secret_pb.js';
import { TypeUrl } from '../../src/envoy/types.js';
import { upstreamTls, type ClientTlsSettings } from '../../src/networking/upstream-tls.js';
import { credentialSecret, resolveCredential } from '../../src/security/credentials/secret.js';
import { freePort } from '../../samples/local-mesh.js';
import { eventually } from '../helpers/proc.js';
import { meshCa, sidecar, spiffe, workload } from './tls-fixtures.js';
import { hcmChain, listener, staticCluster } from './xds-fixtures.js';

const HOST = 'api.example.com';

/** An HTTPS server answering with the client certificate's fingerprint ('none' without one). */
async function server(t: TestContext, creds: { keyPem: string; chainPem: string }, clientCa?: string): Promise<number> {
  const s = createServer({ key: creds.keyPem, cert: creds.chainPem, ...(clientCa ? { ca: clientCa, requestCert: true, rejectUnauthorized: true } : {}) }, (req, res) => {
    res.end((req.socket as TLSSocket).getPeerX509Certificate()?.fingerprint256 ?? 'none');
  });
  await new Promise<void>((resolve) => s.listen(0, '127.0.0.1', resolve));
  t.after(() => {
    s.closeAllConnections();
    s.close();
  });
  return (s.address() as { port: number }).port;
}

test('DestinationRule tls through mesh-proxy: insecureSkipVerify, caCrl, and credentialName over SDS on a gateway', async (t) => {
  const ca = await meshCa();
  const stranger = await meshCa('stranger.domain');
  const dir = mkdtempSync(join(tmpdir(), 'tls-origination-'));
  const file = (name: string, text: string) => {
    writeFileSync(join(dir, name), text);
    return join(dir, name);
  };
  const good = await ca.issue(spiffe('api'), [HOST]);
  const revoked = await ca.issue(spiffe('api'), [HOST]);
  const unknown = await stranger.issue(spiffe('api'), [HOST]);
  const caFile = file('ca.pem', ca.rootPem);
  const crlFile = file('ca.crl', await ca.crl([new X509Certificate(revoked.chainPem).serialNumber]));
  const clientCa = await meshCa('clients.domain');
  const client = await clientCa.issue(spiffe('egress'));
  const [goodPort, revokedPort, unknownPort, mutualPort] = [await server(t, good), await server(t, revoked), await server(t, unknown), await server(t, good, clientCa.rootPem)];

  const { ads, admin } = await sidecar(t, await workload(t, ca, 'egress'));
  const cluster = (name: string, port: number, tls: ClientTlsSettings, gateway = false) => staticCluster(name, [port], upstreamTls(tls, HOST, gateway));
  const clusters = [
    cluster('lax', unknownPort, { mode: 'SIMPLE', insecureSkipVerify: true }),
    cluster('strict', unknownPort, { mode: 'SIMPLE', caCertificates: caFile }),
    cluster('crl-good', goodPort, { mode: 'SIMPLE', caCertificates: caFile, caCrl: crlFile, subjectAltNames: [HOST] }),
    cluster('crl-revoked', revokedPort, { mode: 'SIMPLE', caCertificates: caFile, caCrl: crlFile, subjectAltNames: [HOST] }),
    cluster('credential', mutualPort, { mode: 'MUTUAL', credentialName: 'api-client', subjectAltNames: [HOST] }, true),
  ];
  ads.set(TypeUrl.Cluster, clusters);
  const ports = new Map<string, number>();
  for (const c of clusters) ports.set(c.name, await freePort());
  // The strict cluster again, behind a route that retries connect failures.
  const retriedPort = await freePort();
  ads.set(TypeUrl.Listener, [
    ...clusters.map((c) => listener(c.name, ports.get(c.name)!, [hcmChain({ cluster: c.name })])),
    listener('strict-retried', retriedPort, [hcmChain({ cluster: 'strict', retry: { retryOn: 'connect-failure', numRetries: 1 } })]),
  ]);
  // The credential's Secrets as the discovery server serves them: the client certificate, and the CA of the server.
  const store = new Map([['api-client', { certificateChain: Buffer.from(client.chainPem), privateKey: Buffer.from(client.keyPem), caCertificate: Buffer.from(ca.rootPem) }]]);
  ads.set(
    TypeUrl.Secret,
    ['orch://api-client', 'orch://api-client-cacert'].map((name) => {
      const r = resolveCredential(name, 'default');
      assert.equal(r.kind, 'request');
      const secret = credentialSecret(name, (r as { request: Parameters<typeof credentialSecret>[1] }).request, (n) => store.get(n))!;
      return { name, any: anyPack(SecretSchema, secret) };
    }),
  );
  await ads.push(TypeUrl.Cluster, TypeUrl.Listener, TypeUrl.Secret);
  await eventually(async () => assert.equal((await fetch(`${admin}/ready`)).status, 200), 15_000);
  const get = async (name: string) => {
    const r = await fetch(`http://127.0.0.1:${ports.get(name)}/`);
    return { status: r.status, body: await r.text() };
  };

  assert.deepEqual(await get('lax'), { status: 200, body: 'none' }, 'insecureSkipVerify: a server of an unknown CA');
  const strict = await get('strict');
  assert.equal(strict.status, 503, 'the same server, verified against the CA: refused');
  // Envoy's reset reason of a failed handshake; its transport failure reason names the TLS error.
  assert.match(strict.body, /^upstream connect error or disconnect\/reset before headers\. reset reason: remote connection failure, transport failure reason: TLS error: \S/);
  // A failed handshake is a connect failure to retry_on, as Envoy's pool reports it: retried, and failed again.
  const retried = await fetch(`http://127.0.0.1:${retriedPort}/`);
  assert.equal(retried.status, 503);
  assert.match(await retried.text(), /^upstream connect error or disconnect\/reset before headers\. retried and the latest reset reason: remote connection failure, transport failure reason: TLS error: \S/);
  assert.deepEqual(await get('crl-good'), { status: 200, body: 'none' });
  assert.equal((await get('crl-revoked')).status, 503, 'a revoked server certificate');
  assert.deepEqual(await get('credential'), { status: 200, body: new X509Certificate(client.chainPem).fingerprint256 }, 'the client certificate of the credential, the server verified with its CA');
});

test('DestinationRule SIMPLE without caCertificates through mesh-proxy: the server verified against the system roots from the agent', async (t) => {
  const system = await meshCa('system.example');
  const stranger = await meshCa('stranger.domain');
  const bundle = join(mkdtempSync(join(tmpdir(), 'tls-origination-system-')), 'ca-certificates.crt');
  writeFileSync(bundle, system.rootPem);
  // The agent's SDS reads the system bundle on the first request for it (after this test's clusters arrive).
  const saved = process.env['SSL_CERT_FILE'];
  process.env['SSL_CERT_FILE'] = bundle;
  t.after(() => (saved === undefined ? delete process.env['SSL_CERT_FILE'] : (process.env['SSL_CERT_FILE'] = saved)));
  const [trustedPort, unknownPort, otherNamePort] = [
    await server(t, await system.issue(spiffe('api'), [HOST])),
    await server(t, await stranger.issue(spiffe('api'), [HOST])),
    await server(t, await system.issue(spiffe('api'), ['other.example.com'])),
  ];

  const { ads, admin } = await sidecar(t, await workload(t, await meshCa(), 'egress'));
  const simple = (name: string, port: number, sans?: string[]) => staticCluster(name, [port], upstreamTls({ mode: 'SIMPLE', ...(sans ? { subjectAltNames: sans } : {}) }, HOST, false));
  const clusters = [simple('trusted', trustedPort), simple('trusted-san', trustedPort, [HOST]), simple('unknown-ca', unknownPort), simple('san-mismatch', otherNamePort, [HOST])];
  ads.set(TypeUrl.Cluster, clusters);
  const ports = new Map<string, number>();
  for (const c of clusters) ports.set(c.name, await freePort());
  // The strict cluster again, behind a route that retries connect failures.
  const retriedPort = await freePort();
  ads.set(TypeUrl.Listener, [
    ...clusters.map((c) => listener(c.name, ports.get(c.name)!, [hcmChain({ cluster: c.name })])),
    listener('strict-retried', retriedPort, [hcmChain({ cluster: 'strict', retry: { retryOn: 'connect-failure', numRetries: 1 } })]),
  ]);
  await ads.push(TypeUrl.Cluster, TypeUrl.Listener);
  await eventually(async () => assert.equal((await fetch(`${admin}/ready`)).status, 200), 15_000);
  const status = async (name: string) => (await fetch(`http://127.0.0.1:${ports.get(name)}/`)).status;

  assert.equal(await status('trusted'), 200, 'a server whose CA is in the system bundle');
  assert.equal(await status('trusted-san'), 200, 'the same, its SAN matched');
  assert.equal(await status('unknown-ca'), 503, 'a server of a CA outside the system bundle');
  assert.equal(await status('san-mismatch'), 503, 'a server of a system CA, another name than subjectAltNames');
});

test('SIMPLE without caCertificates, the agent without system roots (unreadable SSL_CERT_FILE): the proxy is not ready and connects nothing', async (t) => {
  const system = await meshCa('system.example');
  const saved = process.env['SSL_CERT_FILE'];
  process.env['SSL_CERT_FILE'] = join(mkdtempSync(join(tmpdir(), 'tls-origination-none-')), 'absent.crt');
  t.after(() => (saved === undefined ? delete process.env['SSL_CERT_FILE'] : (process.env['SSL_CERT_FILE'] = saved)));
  const serverPort = await server(t, await system.issue(spiffe('api'), [HOST]));

  const { ads, admin } = await sidecar(t, await workload(t, await meshCa(), 'egress'));
  const port = await freePort();
  ads.set(TypeUrl.Cluster, [staticCluster('api', [serverPort], upstreamTls({ mode: 'SIMPLE' }, HOST, false))]);
  ads.set(TypeUrl.Listener, [listener('api', port, [hcmChain({ cluster: 'api' })])]);
  await ads.push(TypeUrl.Cluster, TypeUrl.Listener);
  await eventually(async () => {
    const r = await fetch(`${admin}/ready`);
    assert.equal(r.status, 503);
    assert.match(await r.text(), /secret file-root:system/);
  }, 10_000);
  assert.equal((await fetch(`http://127.0.0.1:${port}/`)).status, 503, 'no request reaches the server without the roots');
});
