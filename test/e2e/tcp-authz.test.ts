// AuthorizationPolicy on TCP traffic, end to end: pilot-discovery with its CA, a server workload
// whose port is declared TCP (a server-first echo app behind it) and a client workload, each a real
// `pilot-agent proxy` with its certificate over SDS. The server's inbound TCP chains run the network
// rbac filter before tcp_proxy: the client's identity, named by `from.source.principals`, exchanges
// bytes with the app; another identity, a plaintext client, and a DENY on the port get the
// connection closed without a byte from the app.
import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { connect as tcpConnect, createServer } from 'node:net';
import { connect as tlsConnect } from 'node:tls';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../../samples/local-mesh.js';
import { caFixture, issue, type CaDiscovery, type Issued } from '../helpers/mesh-ca.js';
import { agentState, meshAgent, serverWorkloadYaml } from '../helpers/mesh-agents.js';
import { discoveryArgs, eventually } from '../helpers/proc.js';
import { exchange, type Exchange } from '../helpers/tcp.js';

const HOST = 'db.default.svc.cluster.local';
const GREETING = 'db ready\n';

interface Mesh {
  readonly configDir: string;
  /** The client sidecar's outbound TCP listener for the service. */
  readonly outbound: number;
  readonly inbound: number;
  readonly d: CaDiscovery;
  readonly other: Issued;
  logs(): Promise<string>;
}

async function startMesh(t: TestContext): Promise<Mesh> {
  const configDir = mkdtempSync(join(tmpdir(), 'mesh-tcp-authz-config-'));
  const p = { app: await freePort(), inbound: await freePort(), service: await freePort(), unused: await freePort() };
  writeFileSync(join(configDir, 'workloads.yaml'), serverWorkloadYaml({ host: HOST, serviceName: 'db', portName: 'tcp', protocol: 'TCP', ...p }));
  const app = createServer((s) => {
    s.write(GREETING);
    s.pipe(s);
  });
  await new Promise<void>((resolve) => app.listen(p.app, '127.0.0.1', resolve));
  t.after(() => new Promise((r) => app.close(r)));
  const { issuer, d } = await caFixture(t, { MESHD_CUSTOM_HOST: 'localhost' }, discoveryArgs(configDir));
  const server = await meshAgent(t, d, await issuer.token('default', 'server'), 'server', '127.0.0.1');
  const client = await meshAgent(t, d, await issuer.token('default', 'client'), 'client', '127.0.0.2');
  const other = await issue(d, 'spiffe://cluster.local/ns/default/sa/other', { token: await issuer.token('default', 'other') });
  const logs = async () => `${await agentState('server', server)}\n${await agentState('client', client)}\n--- discovery\n${d.proc.output}`;
  return { configDir, outbound: p.service, inbound: p.inbound, d, other, logs };
}

const viaSidecar = (m: Mesh, send: string) => exchange(tcpConnect(m.outbound, '127.0.0.1'), send, 'connect');
const plaintext = (m: Mesh, send: string) => exchange(tcpConnect(m.inbound, '127.0.0.1'), send, 'connect');

/** Mesh mTLS without a sidecar, as `sa/other`, offering the mesh ALPN. */
function asOther(m: Mesh, send: string): Promise<Exchange> {
  const socket = tlsConnect({ host: '127.0.0.1', port: m.inbound, key: m.other.keys.pem, cert: m.other.chain.slice(0, -1).join(''), ca: m.d.rootPem(), ALPNProtocols: ['mesh'], checkServerIdentity: () => undefined });
  return exchange(socket, send, 'secureConnect');
}

function policy(name: string, spec: string): string {
  return `apiVersion: security.mesh.io/v1\nkind: AuthorizationPolicy\nmetadata: {namespace: default, name: ${name}}\nspec:\n  selector: {matchLabels: {app: server}}\n${spec}`;
}

test('AuthorizationPolicy on a TCP port: source.principals lets one identity through, others and DENY get the connection closed with no byte from the app', async (t) => {
  const m = await startMesh(t);
  const apply = (file: string, yaml: string) => writeFileSync(join(m.configDir, file), yaml);

  // Without a policy every caller reaches the app.
  await eventually(async () => {
    const r = await viaSidecar(m, 'ping-0');
    if (!r.echoed) assert.fail(`no echo through the client's sidecar: ${JSON.stringify(r.got)}\n${await m.logs()}`);
  }, 30_000);
  assert.equal((await asOther(m, 'other-0')).got, `${GREETING}other-0`);

  // ALLOW from the client's identity only: it still exchanges bytes; `sa/other` over mesh mTLS and
  // a plaintext client are closed before the app sends its greeting.
  apply('authz.yaml', policy('only-client', '  rules: [{from: [{source: {principals: [cluster.local/ns/default/sa/client]}}]}]\n'));
  await eventually(async () => assert.equal((await asOther(m, 'other-1')).got, ''), 30_000);
  const other = await asOther(m, 'other-2');
  assert.deepEqual(other, { got: '', echoed: false }, 'another identity: closed, not a byte from the app');
  assert.deepEqual(await plaintext(m, 'plain-1'), { got: '', echoed: false }, 'no peer identity: closed');
  const allowed = await viaSidecar(m, 'ping-1');
  assert.deepEqual(allowed, { got: `${GREETING}ping-1`, echoed: true }, `the client's identity reaches the app\n${allowed.echoed ? '' : await m.logs()}`);

  // The policy names an identity the client does not have: its sidecar's connection is closed too.
  apply('authz.yaml', policy('only-client', '  rules: [{from: [{source: {principals: [cluster.local/ns/default/sa/allowed-sa]}}]}]\n'));
  await eventually(async () => assert.deepEqual(await viaSidecar(m, 'ping-2'), { got: '', echoed: false }), 30_000);

  // DENY on the port, beside an ALLOW that matches the client: the DENY wins, closed.
  apply('authz.yaml', policy('only-client', '  rules: [{from: [{source: {principals: [cluster.local/ns/default/sa/client]}}]}]\n'));
  await eventually(async () => assert.equal((await viaSidecar(m, 'ping-3')).echoed, true), 30_000);
  apply('deny.yaml', policy('deny-port', `  action: DENY\n  rules: [{to: [{operation: {ports: ['${m.inbound}']}}]}]\n`));
  await eventually(async () => assert.deepEqual(await viaSidecar(m, 'ping-4'), { got: '', echoed: false }), 30_000);
  // /debug/authorizationz shows the network filters the server's TCP chains got.
  const http = (await m.d.proc.waitFor(/http server listening on (\S+)/))[1]!;
  const syncz = (await (await fetch(`http://${http}/debug/syncz`)).json()) as Array<{ proxyId: string }>;
  const serverId = syncz.map((s) => s.proxyId).find((id) => id.includes('server-1'))!;
  const authz = (await (await fetch(`http://${http}/debug/authorizationz?proxyID=${encodeURIComponent(serverId)}`)).json()) as { networkFilters: { name: string; typedConfig: { rules: { action?: string; policies: Record<string, unknown> } } }[] };
  assert.deepEqual(
    authz.networkFilters.map((f) => [f.name, f.typedConfig.rules.action ?? 'ALLOW', Object.keys(f.typedConfig.rules.policies)]),
    [
      ['envoy.filters.network.rbac', 'DENY', ['ns[default]-policy[deny-port]-rule[0]']],
      ['envoy.filters.network.rbac', 'ALLOW', ['ns[default]-policy[only-client]-rule[0]']],
    ],
  );
  // A DENY whose only field is HTTP-only (methods) applies to every TCP connection: broader, fail closed.
  apply('deny.yaml', policy('deny-port', `  action: DENY\n  rules: [{to: [{operation: {methods: [POST]}}]}]\n`));
  await eventually(async () => assert.deepEqual(await viaSidecar(m, 'ping-5'), { got: '', echoed: false }), 30_000);
  apply('deny.yaml', '');
  await eventually(async () => assert.equal((await viaSidecar(m, 'ping-6')).echoed, true), 30_000);
});
