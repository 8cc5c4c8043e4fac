// HTTPS through the ingress gateway with credentialName, end to end: pilot-discovery in local mode
// serves the certificate from `<configDir>/credentials/mesh-system/<name>/` over SDS on the
// gateway's (secured, authenticated) ADS stream, and mesh-proxy terminates TLS with it. A client
// trusting the credential's CA gets 200 with the right SNI, a wrong SNI gets no handshake, a
// rotated Secret is used by the next handshake, and a MUTUAL server refuses a client without a
// certificate while serving one with a certificate of the CA its `-cacert` names. The Gateway API
// scheme `orch-gateway://mesh-system/site` serves the same Secret to the gateway of that namespace.
// credentialNames serve an RSA and an ECDSA certificate side by side (each client gets the one its
// signature algorithms allow); caCertCredentialName and verifyCertificateHash narrow who MUTUAL
// lets in.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { mkdirSync, mkdtempSync, renameSync, writeFileSync } from 'node:fs';
import { request } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, freePorts, startLocalMesh, type LocalMesh } from '../../samples/local-mesh.js';
import { eventually } from '../helpers/proc.js';
import { meshCa, type MeshCa } from '../dataplane/tls-fixtures.js';

let mesh: LocalMesh;
let serverCa: MeshCa;
let clientCa: MeshCa;
let simplePort: number;
let mutualPort: number;
let gatewaySchemePort: number;
let pairPort: number;
let pinPort: number;
let pairs: { rsa: string; ecdsa: string; root: string };
let pinCa: MeshCa;
let pinned: { keyPem: string; chainPem: string };

const HOST = 'secure.example.com';

/** Writes a credential as its Secret data would be, each file renamed in whole. */
function writeCredential(name: string, files: Record<string, string>): void {
  const dir = join(mesh.configDir, 'credentials', 'mesh-system', name);
  mkdirSync(dir, { recursive: true });
  for (const [key, text] of Object.entries(files)) {
    writeFileSync(join(dir, `.${key}.tmp`), text);
    renameSync(join(dir, `.${key}.tmp`), join(dir, key));
  }
}

interface Reply {
  status: number;
  fingerprint: string;
}

function get(port: number, opts: { servername: string; ca: string; cert?: string; key?: string; sigalgs?: string }): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const tls = { servername: opts.servername, ca: opts.ca, ...(opts.cert ? { cert: opts.cert, key: opts.key } : {}), ...(opts.sigalgs ? { sigalgs: opts.sigalgs } : {}) };
    const req = request({ host: '127.0.0.1', port, path: '/headers', headers: { host: HOST }, ...tls, agent: false, timeout: 10_000 }, (res) => {
      const fingerprint = (res.socket as import('node:tls').TLSSocket).getPeerCertificate().fingerprint256;
      res.resume();
      res.on('end', () => resolve({ status: res.statusCode ?? 0, fingerprint }));
    });
    req.on('timeout', () => req.destroy(new Error('timed out')));
    req.on('error', reject);
    req.end();
  });
}

before(async () => {
  serverCa = await meshCa();
  clientCa = await meshCa();
  mesh = await startLocalMesh({ stateDir: mkdtempSync(join(tmpdir(), 'mesh-gw-tls-')), gateway: true, secure: true, ports: await freePorts(), output: 'pipe', proxyConcurrency: 1 });
  [simplePort, mutualPort, gatewaySchemePort, pairPort, pinPort] = [await freePort(), await freePort(), await freePort(), await freePort(), await freePort()];
  const site = await serverCa.issue('spiffe://cluster.local/ns/mesh-system/sa/site', [HOST]);
  writeCredential('site', { 'tls.crt': site.chainPem, 'tls.key': site.keyPem, 'ca.crt': clientCa.rootPem });
  const rsa = await serverCa.issue('spiffe://cluster.local/ns/mesh-system/sa/site', [HOST], { kind: 'RSA', bits: 2048 });
  const ecdsa = await serverCa.issue('spiffe://cluster.local/ns/mesh-system/sa/site', [HOST]);
  writeCredential('site-rsa', { 'tls.crt': rsa.chainPem, 'tls.key': rsa.keyPem });
  writeCredential('site-ecdsa', { 'tls.crt': ecdsa.chainPem, 'tls.key': ecdsa.keyPem });
  pairs = { rsa: new X509Certificate(rsa.chainPem).fingerprint256, ecdsa: new X509Certificate(ecdsa.chainPem).fingerprint256, root: serverCa.rootPem };
  // The pinned server's client CA is its own credential, not site's ca.crt.
  pinCa = await meshCa();
  writeCredential('pinned-clients', { 'ca.crt': pinCa.rootPem });
  pinned = await pinCa.issue('spiffe://cluster.local/ns/default/sa/pinned');
  const pin = new X509Certificate(pinned.chainPem).fingerprint256;
  writeFileSync(
    join(mesh.configDir, 'secure.yaml'),
    [
      'apiVersion: networking.mesh.io/v1',
      'kind: Gateway',
      'metadata: {name: secure, namespace: mesh-system}',
      'spec:',
      '  selector: {app: ingressgateway}',
      '  servers:',
      `  - {port: {number: ${simplePort}, name: https, protocol: HTTPS}, hosts: ["default/${HOST}"], tls: {mode: SIMPLE, credentialName: site}}`,
      `  - {port: {number: ${mutualPort}, name: https-mutual, protocol: HTTPS}, hosts: ["default/${HOST}"], tls: {mode: MUTUAL, credentialName: site}}`,
      `  - {port: {number: ${gatewaySchemePort}, name: https-gw, protocol: HTTPS}, hosts: ["default/${HOST}"], tls: {mode: SIMPLE, credentialName: "orch-gateway://mesh-system/site"}}`,
      `  - {port: {number: ${pairPort}, name: https-pair, protocol: HTTPS}, hosts: ["default/${HOST}"], tls: {mode: SIMPLE, credentialNames: [site-rsa, site-ecdsa]}}`,
      `  - {port: {number: ${pinPort}, name: https-pin, protocol: HTTPS}, hosts: ["default/${HOST}"], tls: {mode: MUTUAL, credentialName: site, caCertCredentialName: pinned-clients, verifyCertificateHash: ["${pin}"]}}`,
      '---',
      'apiVersion: networking.mesh.io/v1',
      'kind: VirtualService',
      'metadata: {name: secure, namespace: default}',
      'spec:',
      `  hosts: [${HOST}]`,
      '  gateways: [mesh-system/secure]',
      '  http: [{route: [{destination: {host: httpbin}}]}]',
    ].join('\n'),
  );
});

after(async () => {
  await mesh?.stop();
});

test('SIMPLE with credentialName: 200 with the server\'s SNI and its CA; a wrong SNI gets no handshake', async () => {
  const ok = await eventually(async () => {
    const r = await get(simplePort, { servername: HOST, ca: serverCa.rootPem });
    assert.equal(r.status, 200);
    return r;
  }, 60_000);
  assert.ok(ok.fingerprint);
  await assert.rejects(get(simplePort, { servername: 'other.example.com', ca: serverCa.rootPem }), 'no server of the gateway has that SNI');
  assert.ok(!/credentialName is not effective/.test(mesh.output()), 'no "not effective" notice for credentialName');
});

test('orch-gateway://<namespace>/<name>: the Secret of the Gateway\'s own namespace is served', async () => {
  const viaScheme = await eventually(async () => {
    const r = await get(gatewaySchemePort, { servername: HOST, ca: serverCa.rootPem });
    assert.equal(r.status, 200);
    return r;
  }, 60_000);
  const viaName = await get(simplePort, { servername: HOST, ca: serverCa.rootPem });
  assert.equal(viaScheme.fingerprint, viaName.fingerprint, 'the same Secret as credentialName: site');
});

test('a rotated credential is served on the next handshake', async () => {
  const before = await eventually(() => get(simplePort, { servername: HOST, ca: serverCa.rootPem }), 60_000);
  const rotatedCa = await meshCa();
  const next = await rotatedCa.issue('spiffe://cluster.local/ns/mesh-system/sa/site', [HOST]);
  writeCredential('site', { 'tls.crt': next.chainPem, 'tls.key': next.keyPem });
  const after = await eventually(async () => {
    const r = await get(simplePort, { servername: HOST, ca: rotatedCa.rootPem });
    assert.equal(r.status, 200);
    return r;
  }, 60_000);
  assert.notEqual(after.fingerprint, before.fingerprint);
  await assert.rejects(get(simplePort, { servername: HOST, ca: serverCa.rootPem }), 'the old certificate is no longer presented');
  serverCa = rotatedCa;
});

test('MUTUAL with credentialName: a client without a certificate is refused; one with a certificate of the credential\'s CA gets 200', async () => {
  const client = await clientCa.issue('spiffe://cluster.local/ns/default/sa/client', ['client.example.com']);
  await eventually(async () => assert.equal((await get(mutualPort, { servername: HOST, ca: serverCa.rootPem, cert: client.chainPem, key: client.keyPem })).status, 200), 60_000);
  await assert.rejects(get(mutualPort, { servername: HOST, ca: serverCa.rootPem }));
  const stranger = await (await meshCa()).issue('spiffe://cluster.local/ns/default/sa/stranger');
  await assert.rejects(get(mutualPort, { servername: HOST, ca: serverCa.rootPem, cert: stranger.chainPem, key: stranger.keyPem }), 'a certificate of another CA is refused');
});

test('credentialNames: an RSA-only client gets the RSA certificate, an ECDSA-only client the ECDSA one', async () => {
  const rsaOnly = await eventually(async () => {
    const r = await get(pairPort, { servername: HOST, ca: pairs.root, sigalgs: 'rsa_pss_rsae_sha256:rsa_pkcs1_sha256' });
    assert.equal(r.status, 200);
    return r;
  }, 60_000);
  assert.equal(rsaOnly.fingerprint, pairs.rsa);
  const ecdsaOnly = await get(pairPort, { servername: HOST, ca: pairs.root, sigalgs: 'ecdsa_secp256r1_sha256' });
  assert.equal(ecdsaOnly.status, 200);
  assert.equal(ecdsaOnly.fingerprint, pairs.ecdsa);
});

test('verifyCertificateHash with caCertCredentialName: only the pinned client certificate is let in', async () => {
  await eventually(async () => assert.equal((await get(pinPort, { servername: HOST, ca: serverCa.rootPem, cert: pinned.chainPem, key: pinned.keyPem })).status, 200), 60_000);
  const samCa = await pinCa.issue('spiffe://cluster.local/ns/default/sa/other');
  await assert.rejects(get(pinPort, { servername: HOST, ca: serverCa.rootPem, cert: samCa.chainPem, key: samCa.keyPem }), 'another certificate of the same CA: the hash does not match');
  const ofSiteCa = await clientCa.issue('spiffe://cluster.local/ns/default/sa/client');
  await assert.rejects(get(pinPort, { servername: HOST, ca: serverCa.rootPem, cert: ofSiteCa.chainPem, key: ofSiteCa.keyPem }), 'the client CA is caCertCredentialName\'s, not site\'s ca.crt');
});
