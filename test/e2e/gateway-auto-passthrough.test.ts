// AUTO_PASSTHROUGH end to end: pilot-discovery in local mode, `pilot-agent proxy router` running
// mesh-proxy as the gateway, and a real TLS backend registered as a mesh service (its endpoint
// labelled as having a sidecar). A client that names the cluster as SNI
// (`outbound_.<port>_.<subset>_.<host>`) and offers a mesh mTLS ALPN reaches the backend through
// the gateway without termination: the handshake is the backend's own (its certificate, the SNI and
// ALPN the client sent). A subset whose endpoints have no sidecar, an unknown cluster name and a
// non-mesh ALPN get no connection.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { connect, createServer, type Server } from 'node:tls';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, freePorts, startLocalMesh, type LocalMesh } from '../../samples/local-mesh.js';
import { eventually } from '../helpers/proc.js';
import { meshCa, type MeshCa } from '../dataplane/tls-fixtures.js';

let mesh: LocalMesh;
let ca: MeshCa;
let backends: Server[] = [];
let gatewayPort: number;
let backendFingerprint: string;

const HOST = 'backend.default.svc.cluster.local';
const sni = (subset = '') => `outbound_.9443_.${subset}_.${HOST}`;

/** A TLS server that answers each line with what its handshake saw: its name, the SNI and the ALPN. */
async function tlsBackend(name: string, cert: { chainPem: string; keyPem: string }): Promise<number> {
  const server = createServer({ cert: cert.chainPem, key: cert.keyPem, ALPNProtocols: ['mesh', 'mesh-peer-exchange'] }, (socket) => {
    socket.once('data', () => socket.end(`${name} sni=${(socket as unknown as { servername: string }).servername} alpn=${socket.alpnProtocol || ''}\n`));
  });
  backends.push(server);
  const port = await freePort();
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
  return port;
}

interface Answer {
  readonly line: string;
  readonly fingerprint: string;
}

/** One exchange through the gateway with `servername` as SNI; rejects when the connection closes without one. */
function exchange(servername: string, alpn: string[] = ['mesh']): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: '127.0.0.1', port: gatewayPort, servername, ALPNProtocols: alpn, ca: ca.rootPem, checkServerIdentity: () => undefined, timeout: 10_000 }, () => {
      const fingerprint = socket.getPeerCertificate().fingerprint256;
      let line = '';
      socket.on('data', (d: Buffer) => (line += d.toString()));
      socket.on('end', () => (line ? resolve({ line: line.trim(), fingerprint }) : reject(new Error('closed without an answer'))));
      socket.write('hello\n');
    });
    socket.on('timeout', () => socket.destroy(new Error('timed out')));
    socket.on('error', reject);
  });
}

before(async () => {
  ca = await meshCa();
  const cert = await ca.issue('spiffe://cluster.local/ns/default/sa/backend', [HOST]);
  backendFingerprint = new X509Certificate(cert.chainPem).fingerprint256;
  const withSidecar = await tlsBackend('v1', cert);
  const withoutSidecar = await tlsBackend('v2', cert);
  mesh = await startLocalMesh({ stateDir: mkdtempSync(join(tmpdir(), 'mesh-gw-auto-')), gateway: true, ports: await freePorts(), output: 'pipe', proxyConcurrency: 1 });
  gatewayPort = await freePort();
  writeFileSync(
    join(mesh.configDir, 'auto-passthrough.yaml'),
    [
      'apiVersion: networking.mesh.io/v1',
      'kind: ServiceEntry',
      'metadata: {name: backend, namespace: default}',
      'spec:',
      `  hosts: [${HOST}]`,
      '  location: MESH_INTERNAL',
      '  resolution: STATIC',
      '  ports: [{number: 9443, name: tls, protocol: TLS}]',
      '  endpoints:',
      `  - {address: 127.0.0.1, ports: {tls: ${withSidecar}}, labels: {version: v1, security.mesh.io/tlsMode: mesh}}`,
      `  - {address: 127.0.0.1, ports: {tls: ${withoutSidecar}}, labels: {version: v2}}`,
      '---',
      'apiVersion: networking.mesh.io/v1',
      'kind: DestinationRule',
      'metadata: {name: backend, namespace: default}',
      'spec:',
      `  host: ${HOST}`,
      '  subsets: [{name: v1, labels: {version: v1}}, {name: v2, labels: {version: v2}}]',
      '---',
      'apiVersion: networking.mesh.io/v1',
      'kind: Gateway',
      'metadata: {name: cross-network, namespace: mesh-system}',
      'spec:',
      '  selector: {app: ingressgateway}',
      '  servers:',
      `  - {port: {number: ${gatewayPort}, name: tls, protocol: TLS}, hosts: ["*.default.svc.cluster.local"], tls: {mode: AUTO_PASSTHROUGH}}`,
    ].join('\n'),
  );
});

after(async () => {
  await mesh?.stop();
  await Promise.all(backends.map((s) => new Promise((resolve) => s.close(resolve))));
  backends = [];
});

test('the cluster name as SNI reaches the backend through the gateway without termination', async () => {
  const answer = await eventually(() => exchange(sni()), 60_000);
  assert.equal(answer.line, `v1 sni=${sni()} alpn=mesh`, 'the backend saw the client\'s own SNI and ALPN: only it took part in the handshake');
  const viaSubset = await eventually(() => exchange(sni('v1')), 30_000);
  assert.equal(viaSubset.line, `v1 sni=${sni('v1')} alpn=mesh`);
  assert.equal(answer.fingerprint, backendFingerprint, 'the certificate presented is the backend\'s');
  assert.equal(viaSubset.fingerprint, backendFingerprint);
  assert.ok(!/AUTO_PASSTHROUGH is not effective/.test(mesh.output()), 'no "not effective" notice');
});

test('only endpoints with a sidecar are reachable; an unknown cluster name or a non-mesh ALPN gets no connection', async () => {
  await eventually(() => exchange(sni()), 60_000);
  await assert.rejects(exchange(sni('v2')), 'v2 has no endpoint speaking mesh mTLS');
  await assert.rejects(exchange(`outbound_.9443_._.other.default.svc.cluster.local`), 'no chain for an unknown cluster');
  await assert.rejects(exchange(sni(), ['h2']), 'a client not offering a mesh ALPN matches no chain');
  for (let i = 0; i < 5; i++) assert.match((await exchange(sni())).line, /^v1 /, 'the default cluster never reaches the endpoint without a sidecar');
});
