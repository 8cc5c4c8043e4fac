// Mutual TLS between two sidecars, end to end: pilot-discovery with its CA, two `pilot-agent proxy`
// workloads (client and server, each with its certificate over SDS) and the sample app behind the
// server. PeerAuthentication decides what the server's inbound port accepts; auto mTLS makes the
// client's sidecar speak mesh mTLS to it; an AuthorizationPolicy names the caller's SPIFFE id.
import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { request, type RequestOptions } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../../samples/local-mesh.js';
import { startHttpbin } from '../../samples/apps/httpbin.js';
import { caFixture, issue, type CaDiscovery, type Issued } from '../helpers/mesh-ca.js';
import { discoveryArgs, eventually } from '../helpers/proc.js';
import { agentState, meshAgent, serverWorkloadYaml } from '../helpers/mesh-agents.js';

const HOST = 'server.default.svc.cluster.local';

interface Mesh {
  readonly configDir: string;
  /** The client sidecar's outbound listener for the server's service port. */
  readonly outbound: string;
  /** The server sidecar's inbound port (what the WorkloadEntry advertises). */
  readonly inbound: number;
  readonly d: CaDiscovery;
  /** A certificate of the mesh CA for another workload (`sa/other`), for a caller without a sidecar. */
  readonly other: Issued;
  /** Both agents' and the discovery server's output, for failure messages. */
  logs(): Promise<string>;
}

async function startMesh(t: TestContext): Promise<Mesh> {
  const configDir = mkdtempSync(join(tmpdir(), 'mesh-mtls-config-'));
  const p = { app: await freePort(), inbound: await freePort(), service: await freePort(), unused: await freePort() };
  writeFileSync(join(configDir, 'workloads.yaml'), serverWorkloadYaml({ host: HOST, serviceName: 'server', portName: 'http', protocol: 'HTTP', ...p }));
  const app = await startHttpbin(p.app);
  t.after(() => new Promise((r) => app.server.close(r)));
  const { issuer, d } = await caFixture(t, { MESHD_CUSTOM_HOST: 'localhost' }, discoveryArgs(configDir));
  const server = await meshAgent(t, d, await issuer.token('default', 'server'), 'server', '127.0.0.1');
  // Another address, so that the server's WorkloadEntry is not the client's own instance.
  const client = await meshAgent(t, d, await issuer.token('default', 'client'), 'client', '127.0.0.2');
  const other = await issue(d, 'spiffe://cluster.local/ns/default/sa/other', { token: await issuer.token('default', 'other') });
  const logs = async () => `${await agentState('server', server)}\n${await agentState('client', client)}\n--- discovery\n${d.proc.output}`;
  return { configDir, outbound: `http://127.0.0.1:${p.service}`, inbound: p.inbound, d, other, logs };
}

/** Through the client's sidecar: its outbound listener (Host names the service), mTLS to the server's sidecar. */
function viaSidecar(m: Mesh, path = '/headers'): Promise<{ status: number; headers: Record<string, string> }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(`${m.outbound}${path}`, { headers: { host: HOST } }, (res) => {
      let body = '';
      res.on('data', (d: Buffer) => (body += d.toString()));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.statusCode === 200 ? (JSON.parse(body) as { headers: Record<string, string> }).headers : {} }));
    });
    req.on('error', reject);
    req.end();
  });
}

/** The x-forwarded-client-cert the app saw (httpbin echoes header names capitalized). */
function xfcc(headers: Record<string, string>): string {
  return Object.entries(headers).find(([k]) => k.toLowerCase() === 'x-forwarded-client-cert')?.[1] ?? '';
}

/** Straight to the server's inbound port in plaintext, as a client without a sidecar. */
async function plaintext(m: Mesh): Promise<number | string> {
  try {
    const res = await fetch(`http://127.0.0.1:${m.inbound}/headers`, { signal: AbortSignal.timeout(5000) });
    await res.body?.cancel();
    return res.status;
  } catch (e) {
    return `refused (${((e as Error).cause as Error | undefined)?.message ?? (e as Error).message})`;
  }
}

/** Mesh mTLS without a sidecar: the certificate of `sa/other`, offering the mesh ALPN. */
function asOther(m: Mesh): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request(
      <RequestOptions & { ALPNProtocols: string[] }>{
        host: '127.0.0.1',
        port: m.inbound,
        path: '/headers',
        key: m.other.keys.pem,
        cert: m.other.chain.slice(0, -1).join(''),
        ca: m.d.rootPem(),
        ALPNProtocols: ['mesh'],
        checkServerIdentity: () => undefined,
      },
      (res) => {
        res.resume();
        resolve(res.statusCode!);
      },
    );
    req.on('error', reject);
    req.end();
  });
}

function apply(m: Mesh, file: string, yaml: string): void {
  writeFileSync(join(m.configDir, file), yaml);
}

test('mesh mTLS between two sidecars: PERMISSIVE by default, STRICT refuses plaintext, source.principals allows one caller', async (t) => {
  const m = await startMesh(t);

  // Default PERMISSIVE: the client's sidecar uses mTLS (the app sees the caller's SPIFFE id in
  // x-forwarded-client-cert), and a plaintext client is served too.
  const first = await eventually(async () => {
    const r = await viaSidecar(m);
    if (r.status !== 200) assert.fail(`${r.status} through the client's sidecar\n${await m.logs()}`);
    return r;
  }, 30_000);
  assert.match(xfcc(first.headers), /URI=spiffe:\/\/cluster\.local\/ns\/default\/sa\/client/, `${JSON.stringify(first.headers)}\n${await m.logs()}`);
  assert.equal(await plaintext(m), 200);

  // STRICT: plaintext is refused at the TLS chain, the sidecar's mTLS still works.
  apply(m, 'strict.yaml', 'apiVersion: security.mesh.io/v1\nkind: PeerAuthentication\nmetadata: {namespace: default, name: strict}\nspec: {mtls: {mode: STRICT}}\n');
  await eventually(async () => assert.match(String(await plaintext(m)), /^refused/), 30_000);
  const strict = await viaSidecar(m);
  assert.equal(strict.status, 200);
  assert.match(xfcc(strict.headers), /URI=spiffe:\/\/cluster\.local\/ns\/default\/sa\/client/);

  // source.principals: the client's identity is allowed, another mesh identity is denied (403).
  apply(m, 'authz.yaml', 'apiVersion: security.mesh.io/v1\nkind: AuthorizationPolicy\nmetadata: {namespace: default, name: only-client}\nspec:\n  selector: {matchLabels: {app: server}}\n  rules: [{from: [{source: {principals: [cluster.local/ns/default/sa/client]}}]}]\n');
  await eventually(async () => assert.equal(await asOther(m), 403), 30_000);
  assert.equal((await viaSidecar(m)).status, 200);

  // Back to PERMISSIVE: plaintext reaches the proxy again, but without a peer identity the
  // principals rule cannot match: denied, fail closed.
  apply(m, 'strict.yaml', 'apiVersion: security.mesh.io/v1\nkind: PeerAuthentication\nmetadata: {namespace: default, name: strict}\nspec: {mtls: {mode: PERMISSIVE}}\n');
  await eventually(async () => assert.equal(await plaintext(m), 403), 30_000);
  assert.equal((await viaSidecar(m)).status, 200);
});
