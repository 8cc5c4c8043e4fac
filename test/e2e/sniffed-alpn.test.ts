// HTTP over mesh mTLS to a sniffed port, end to end: pilot-discovery with its CA, a server workload
// whose port declares no protocol (the server sidecar sniffs it) and a client workload, each a real
// `pilot-agent proxy`. The client sidecar's `mesh.alpn` filter makes its auto-mTLS connection offer
// `mesh-http/1.1`, so the server sidecar picks its HTTP mTLS chain: a path-based ALLOW policy lets
// `/allowed` reach the app and answers `/other` with the HTTP rbac filter's 403, under PERMISSIVE
// and STRICT. Without the override the request would land on the sniffed TCP chain, whose network
// rbac cannot see paths and closes the connection (a 503 from the client's sidecar). An h2c
// request stays HTTP/2 all the way to an app that speaks both (use_downstream_protocol_config on
// both sidecars' clusters of the sniffed port, as the Go mesh), and an HTTP/1.1 one stays HTTP/1.1.
import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer, request as httpRequest, type RequestListener } from 'node:http';
import { createServer as createH2Server } from 'node:http2';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../../samples/local-mesh.js';
import { caFixture } from '../helpers/mesh-ca.js';
import { agentState, meshAgent, serverWorkloadYaml } from '../helpers/mesh-agents.js';
import { discoveryArgs, eventually } from '../helpers/proc.js';
import { bothProtocolsFront, h2Get, portOf } from '../helpers/h2c.js';

const HOST = 'web.default.svc.cluster.local';

interface Mesh {
  readonly configDir: string;
  /** The client sidecar's outbound listener for the service port. */
  readonly outbound: number;
  /** The server sidecar's inbound port. */
  readonly inbound: number;
  logs(): Promise<string>;
}

/**
 * The app on `port`: HTTP/1.1 by default; `both`: a front handing each connection to an HTTP/1.1
 * or an h2c server by its first bytes, each answering with the protocol the request came in.
 */
async function startApp(t: TestContext, port: number, both: boolean): Promise<void> {
  const answer: RequestListener = (req, res) => res.end(both ? `app HTTP/${req.httpVersion}` : `app ${req.url}`);
  const h1 = createServer(answer);
  const listening = (s: { listen(port: number, host: string, cb: () => void): unknown }, at: number) => new Promise<void>((r) => s.listen(at, '127.0.0.1', r));
  if (!both) {
    await listening(h1, port);
    t.after(() => new Promise((r) => h1.close(r)));
    return;
  }
  const h2 = createH2Server((req, res) => res.end(`app HTTP/${req.httpVersion}`));
  await listening(h1, 0);
  await listening(h2, 0);
  const front = await bothProtocolsFront(port, portOf(h1), portOf(h2));
  t.after(() => {
    front.close();
    h1.close();
    h2.close();
  });
}

async function startMesh(t: TestContext, bothProtocols = false): Promise<Mesh> {
  const configDir = mkdtempSync(join(tmpdir(), 'mesh-sniffed-alpn-config-'));
  const p = { app: await freePort(), inbound: await freePort(), service: await freePort(), unused: await freePort() };
  // `web` names no protocol: both sidecars sniff the port.
  writeFileSync(join(configDir, 'workloads.yaml'), serverWorkloadYaml({ host: HOST, serviceName: 'web', portName: 'web', ...p }));
  await startApp(t, p.app, bothProtocols);
  const { issuer, d } = await caFixture(t, { MESHD_CUSTOM_HOST: 'localhost' }, discoveryArgs(configDir));
  const server = await meshAgent(t, d, await issuer.token('default', 'server'), 'server', '127.0.0.1');
  const client = await meshAgent(t, d, await issuer.token('default', 'client'), 'client', '127.0.0.2');
  const logs = async () => `${await agentState('server', server)}\n${await agentState('client', client)}\n--- discovery\n${d.proc.output}`;
  return { configDir, outbound: p.service, inbound: p.inbound, logs };
}

/** An HTTP/1.1 request from the client app, through its sidecar. */
const viaSidecar = (m: Mesh, path: string) => get(m.outbound, path);

function get(port: number, path: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: '127.0.0.1', port, path, headers: { host: HOST } }, (res) => {
      let body = '';
      res.on('data', (d: Buffer) => (body += d.toString()));
      res.on('end', () => resolve({ status: res.statusCode!, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

const apply = (m: Mesh, file: string, yaml: string) => writeFileSync(join(m.configDir, file), yaml);

const ALLOW_PATH = `apiVersion: security.mesh.io/v1
kind: AuthorizationPolicy
metadata: {namespace: default, name: allowed-path}
spec:
  selector: {matchLabels: {app: server}}
  rules: [{to: [{operation: {paths: [/allowed]}}]}]
`;

const peerAuthentication = (mode: string) => `apiVersion: security.mesh.io/v1\nkind: PeerAuthentication\nmetadata: {namespace: default, name: mode}\nspec: {mtls: {mode: ${mode}}}\n`;

async function assertHttpPolicy(m: Mesh, mode: string): Promise<void> {
  const allowed = await viaSidecar(m, '/allowed');
  assert.deepEqual(allowed, { status: 200, body: 'app /allowed' }, `${mode}: /allowed reaches the app\n${allowed.status === 200 ? '' : await m.logs()}`);
  const other = await viaSidecar(m, '/other');
  assert.deepEqual(other, { status: 403, body: 'RBAC: access denied' }, `${mode}: /other is denied by the server's HTTP rbac, not closed\n${other.status === 403 ? '' : await m.logs()}`);
}

test('HTTP over mesh mTLS to a sniffed port reaches the server sidecar HTTP chain: a path ALLOW policy gives 200 and 403', async (t) => {
  const m = await startMesh(t);
  await eventually(async () => assert.equal((await viaSidecar(m, '/before')).status, 200), 30_000).catch(async (e: Error) => {
    throw new Error(`no 200 through the client's sidecar: ${e.message}\n${await m.logs()}`);
  });

  apply(m, 'authz.yaml', ALLOW_PATH);
  await eventually(async () => assert.equal((await viaSidecar(m, '/other')).status, 403), 30_000).catch(async (e: Error) => {
    throw new Error(`PERMISSIVE: /other never denied with 403: ${e.message}\n${await m.logs()}`);
  });
  await assertHttpPolicy(m, 'PERMISSIVE');

  // STRICT: the sniffed port keeps only its mTLS chains; the HTTP one is still chosen.
  apply(m, 'peer.yaml', peerAuthentication('STRICT'));
  // Once STRICT is in force, plaintext HTTP straight to the server's sidecar is refused.
  await eventually(async () => assert.notEqual(await get(m.inbound, '/allowed').then((r) => r.status, () => 'refused'), 200), 30_000);
  await assertHttpPolicy(m, 'STRICT');
});

test('a sniffed port keeps the client protocol: h2c stays HTTP/2 to the app, HTTP/1.1 stays HTTP/1.1', async (t) => {
  const m = await startMesh(t, true);
  await eventually(async () => assert.equal((await viaSidecar(m, '/')).body, 'app HTTP/1.1'), 30_000).catch(async (e: Error) => {
    throw new Error(`no HTTP/1.1 answer through the client's sidecar: ${e.message}\n${await m.logs()}`);
  });
  assert.equal(await h2Get(m.outbound, HOST), 'app HTTP/2.0', 'the h2c request reached the app over HTTP/2');
});
