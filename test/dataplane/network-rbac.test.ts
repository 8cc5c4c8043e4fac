// The rbac network filter in a real mesh-proxy: a TLS chain (workload certificate and roots over
// the agent's real SDS) whose rbac filter allows one SPIFFE identity before tcp_proxy to a
// server-first TCP app, clients with real certificates; a plaintext chain with a DENY on the
// destination port; shadow rules; the stats Envoy names; and the HTTP-only matchers on a connection.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, connect as tcpConnect } from 'node:net';
import { connect as tlsConnect } from 'node:tls';
import type { TestContext } from 'node:test';
import { create } from '@bufbuild/protobuf';
import { RBACSchema as NetworkRbacSchema } from '../../src/gen/envoy/extensions/filters/network/rbac/v3/rbac_pb.js';
import { RBAC_Action, RBACSchema as RulesSchema, type RBAC as Rules } from '../../src/gen/envoy/config/rbac/v3/rbac_pb.js';
import { compileRbacEngine } from '../../src/envoy/rbac.js';
import { connectionView } from '../../src/envoy/request.js';
import { pack, TypeUrl } from '../../src/envoy/types.js';
import { eventually } from '../helpers/proc.js';
import { exchange } from '../helpers/tcp.js';
import { freePort } from '../../samples/local-mesh.js';
import { downstreamTls, meshCa, meshTls, sidecar, spiffe, tlsInspector, workload, type MeshCa } from './tls-fixtures.js';
import { listener, staticCluster, tcpChain } from './xds-fixtures.js';
import { fileLog, logLines } from './access-log-fixtures.js';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { clone } from '@bufbuild/protobuf';
import { ListenerSchema } from '../../src/gen/envoy/config/listener/v3/listener_pb.js';
import type { AuthorizationPolicy } from '../../src/api/types.js';
import { buildVirtualInbound } from '../../src/networking/listener.js';
import { PASSTHROUGH_CLUSTER } from '../../src/networking/names.js';
import { buildRbacFilters } from '../../src/security/authz/builder.js';
import { rbacNetworkFilter } from '../../src/security/filters.js';

const GREETING = 'hello from the app\n';

/** A server-first TCP app: greets, then echoes. */
async function tcpApp(t: TestContext): Promise<{ port: number; accepted: () => number }> {
  let accepted = 0;
  const server = createServer((s) => {
    accepted++;
    s.write(GREETING);
    s.pipe(s);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.after(() => server.close());
  return { port: (server.address() as { port: number }).port, accepted: () => accepted };
}

async function mtlsClient(ca: MeshCa, port: number, sa: string, send: string) {
  const { keyPem, chainPem } = await ca.issue(spiffe(sa));
  const socket = tlsConnect({ host: '127.0.0.1', port, key: keyPem, cert: chainPem, ca: ca.rootPem, servername: 'outbound_.9000_._.app.default.svc.cluster.local', checkServerIdentity: () => undefined });
  return exchange(socket, send, 'secureConnect');
}

const principal = (uri: string) => ({ identifier: { case: 'authenticated' as const, value: { principalName: { matchPattern: { case: 'exact' as const, value: uri } } } } });
const any = { rule: { case: 'any' as const, value: true } };

function rbacFilter(config: Parameters<typeof pack<typeof NetworkRbacSchema>>[1]) {
  return { name: 'envoy.filters.network.rbac', configType: { case: 'typedConfig' as const, value: pack(NetworkRbacSchema, config) } };
}

test('network rbac: the allowed identity exchanges bytes with a TCP app, another one is closed before any byte; DENY on a port; shadow rules and stats', async (t) => {
  const ca = await meshCa();
  const server = await workload(t, ca, 'server');
  const { ads, admin } = await sidecar(t, server);
  const app = await tcpApp(t);
  const mtlsPort = await freePort();
  const plainPort = await freePort();
  const allowOnly = { action: RBAC_Action.ALLOW, policies: { 'ns[default]-policy[tcp]-rule[0]': { permissions: [any], principals: [principal(spiffe('allowed'))] } } };
  const shadowDenyOther = { action: RBAC_Action.DENY, policies: { 'ns[default]-policy[dry]-rule[0]': { permissions: [any], principals: [principal(spiffe('other'))] } } };
  // Each connection's line says why a refused one was closed, as Envoy's tcp_proxy logs it.
  const logFile = join(mkdtempSync(join(tmpdir(), 'network-rbac-')), 'tcp.log');
  const tcpLog = { accessLog: [fileLog(logFile, { text: '%CONNECTION_TERMINATION_DETAILS% %UPSTREAM_CLUSTER% %BYTES_RECEIVED%\n' })] };
  const mtlsChain = tcpChain('app', {
    filterChainMatch: { transportProtocol: 'tls' },
    transportSocket: downstreamTls(meshTls([])),
  }, tcpLog);
  mtlsChain.filters = [rbacFilter({ statPrefix: 'tcp.', rules: allowOnly, shadowRules: shadowDenyOther, shadowRulesStatPrefix: 'mesh_dry_run_deny_' }), ...mtlsChain.filters!];
  const plainChain = tcpChain('app', {}, tcpLog);
  plainChain.filters = [rbacFilter({ statPrefix: 'plain.', rules: { action: RBAC_Action.DENY, policies: { deny: { permissions: [{ rule: { case: 'destinationPort', value: plainPort } }], principals: [{ identifier: { case: 'any', value: true } }] } } } }), ...plainChain.filters!];
  ads.set(TypeUrl.Cluster, [staticCluster('app', [app.port])]);
  ads.set(TypeUrl.Listener, [listener('mtls', mtlsPort, [mtlsChain], { listenerFilters: [tlsInspector] }), listener('plain', plainPort, [plainChain])]);
  await ads.push(TypeUrl.Cluster, TypeUrl.Listener);
  await eventually(async () => assert.equal((await fetch(`${admin}/ready`)).status, 200), 15_000);

  const allowed = await mtlsClient(ca, mtlsPort, 'allowed', 'ping-allowed');
  assert.equal(allowed.got, `${GREETING}ping-allowed`, 'the allowed identity gets the greeting and its echo');
  assert.equal(app.accepted(), 1);

  const other = await mtlsClient(ca, mtlsPort, 'other', 'ping-other');
  assert.equal(other.got, '', 'another identity: not a byte from the app (not even its greeting)');
  assert.equal(other.echoed, false, 'the proxy closed the connection');
  const denied = await exchange(tcpConnect(plainPort, '127.0.0.1'), 'ping-plain', 'connect');
  assert.equal(denied.got, '');
  assert.equal(denied.echoed, false);
  assert.equal(app.accepted(), 1, 'no upstream connection was opened for the denied ones');
  assert.deepEqual((await logLines(logFile, 3)).sort(), [`- app ${'ping-allowed'.length}`, 'rbac_access_denied_matched_policy[deny] - 0', 'rbac_access_denied_matched_policy[none] - 0']);

  const stats = await (await fetch(`${admin}/stats?format=json`)).json() as { stats: { name: string; value: number }[] };
  const stat = (name: string) => stats.stats.find((s) => s.name === name)?.value;
  assert.equal(stat('tcp.rbac.allowed'), 1);
  assert.equal(stat('tcp.rbac.denied'), 1);
  assert.equal(stat('tcp.rbac.mesh_dry_run_deny_shadow_allowed'), 1, 'the shadow DENY did not match the allowed identity');
  assert.equal(stat('tcp.rbac.mesh_dry_run_deny_shadow_denied'), 1, 'the shadow DENY matched the other identity');
  assert.equal(stat('plain.rbac.denied'), 1);
  const prom = await (await fetch(`${admin}/stats/prometheus`)).text();
  assert.match(prom, /envoy_tcp_rbac_denied\S* 1/);
});

test('network rbac: an rbac filter must come before a terminal filter; a chain ending with it is refused', async (t) => {
  const ca = await meshCa();
  const server = await workload(t, ca, 'server');
  const { ads, admin, proxy } = await sidecar(t, server);
  const nacks: string[] = [];
  proxy.xds.client.on('nack', (_type, _version, why) => nacks.push(why));
  const port = await freePort();
  ads.set(TypeUrl.Listener, [listener('bad', port, [{ filters: [rbacFilter({ statPrefix: 'x.', rules: { action: RBAC_Action.ALLOW } })] }])]);
  await ads.push(TypeUrl.Listener);
  await eventually(() => assert.match(nacks.at(-1) ?? '', /filter_chains\[0\]\.filters\[0\]: envoy\.filters\.network\.rbac is not a terminal filter/), 10_000);
  const listeners = await (await fetch(`${admin}/listeners`)).text();
  assert.doesNotMatch(listeners, /bad::/);
});

test('the shared evaluator on a connection: HTTP-only matchers never match, connection attributes do', () => {
  const rules = (permission: object): Rules => create(RulesSchema, { action: RBAC_Action.ALLOW, policies: { p: { permissions: [permission], principals: [{ identifier: { case: 'any', value: true } }] } } });
  const conn = connectionView({ source: { address: '10.0.0.1', port: 5555 }, destination: { address: '10.0.0.2', port: 3306 }, requestedServerName: 'db.example', peer: { uriSans: [spiffe('allowed')], dnsSans: [], subject: 'O=x' } });
  const allows = (permission: object) => compileRbacEngine(rules(permission)).evaluate(conn).allowed;
  assert.equal(allows({ rule: { case: 'header', value: { name: ':method', presentMatch: true } } }), false, 'a header never matches a connection');
  assert.equal(allows({ rule: { case: 'header', value: { name: ':method', presentMatch: true, invertMatch: true } } }), false, 'not even inverted');
  assert.equal(allows({ rule: { case: 'notRule', value: { rule: { case: 'header', value: { name: ':method', presentMatch: true } } } } }), true, 'NOT of a never-matching header matches, as in Envoy');
  assert.equal(allows({ rule: { case: 'urlPath', value: { rule: { case: 'path', value: { matchPattern: { case: 'prefix', value: '' } } } } } }), false);
  assert.equal(allows({ rule: { case: 'destinationPort', value: 3306 } }), true);
  assert.equal(allows({ rule: { case: 'destinationPort', value: 3307 } }), false);
  assert.equal(allows({ rule: { case: 'requestedServerName', value: { matchPattern: { case: 'exact', value: 'db.example' } } } }), true);
  assert.equal(allows({ rule: { case: 'destinationIp', value: { addressPrefix: '10.0.0.0', prefixLen: 24 } } }), true);
  const byPrincipal = (identifier: ReturnType<typeof principal>['identifier'] | { case: 'directRemoteIp' | 'remoteIp'; value: { addressPrefix: string; prefixLen: number } }) => compileRbacEngine(create(RulesSchema, { action: RBAC_Action.ALLOW, policies: { p: { permissions: [any], principals: [{ identifier }] } } })).evaluate(conn).allowed;
  assert.equal(byPrincipal(principal(spiffe('allowed')).identifier), true);
  assert.equal(byPrincipal(principal(spiffe('other')).identifier), false);
  assert.equal(byPrincipal({ case: 'directRemoteIp', value: { addressPrefix: '10.0.0.1', prefixLen: 32 } }), true);
  assert.equal(byPrincipal({ case: 'remoteIp', value: { addressPrefix: '10.0.0.1', prefixLen: 32 } }), true, 'a connection has no x-forwarded-for: remote is the peer');
});

test('virtualInbound as the discovery server builds it: a non-HTTP connection to an undeclared port of a secured workload is closed; unsecured, it passes through', async (t) => {
  const ca = await meshCa();
  const server = await workload(t, ca, 'server');
  const { ads, admin } = await sidecar(t, server);
  const app = await tcpApp(t);
  const onlyAllowed: AuthorizationPolicy = { apiVersion: 'security.mesh.io/v1beta1', kind: 'AuthorizationPolicy', metadata: { name: 'only-allowed', namespace: 'default' }, spec: { rules: [{ from: [{ source: { principals: ['cluster.local/ns/default/sa/allowed'] } }] }] } };
  const networkFilters = buildRbacFilters([onlyAllowed], undefined, 'tcp').filters.map(rbacNetworkFilter);
  // The builder's listener, bound elsewhere than 15006: a connection to it is to an undeclared port.
  const bound = (name: string, port: number, secured: boolean) => {
    const l = clone(ListenerSchema, buildVirtualInbound([{ port: 9999, protocol: 'TCP', target: { address: '127.0.0.1', port: 9999 } }], { sniffing: true, detectionTimeout: 1, ...(secured ? { networkFilters } : {}) }));
    l.name = name;
    l.address = create(ListenerSchema, { address: { address: { case: 'socketAddress', value: { address: '127.0.0.1', portSpecifier: { case: 'portValue', value: port } } } } }).address;
    return { name, any: pack(ListenerSchema, l) };
  };
  const securedPort = await freePort();
  const openPort = await freePort();
  // PassthroughCluster stands in as a static cluster to the app: whatever passes the chain reaches it.
  ads.set(TypeUrl.Cluster, [staticCluster(PASSTHROUGH_CLUSTER, [app.port]), staticCluster('BlackHoleCluster', [])]);
  ads.set(TypeUrl.Listener, [bound('secured', securedPort, true), bound('open', openPort, false)]);
  await ads.push(TypeUrl.Cluster, TypeUrl.Listener);
  await eventually(async () => assert.match(await (await fetch(`${admin}/listeners`)).text(), /open::127\.0\.0\.1:\d+/), 15_000);
  // Non-HTTP bytes: http_inspector gives up on them, the passthrough's TCP chain takes them.
  const open = await exchange(tcpConnect(openPort, '127.0.0.1'), '\x00\x01binary', 'connect');
  assert.equal(open.got, `${GREETING}\x00\x01binary`, 'no policy: the passthrough reaches the destination');
  const secured = await exchange(tcpConnect(securedPort, '127.0.0.1'), '\x00\x01binary', 'connect');
  assert.deepEqual(secured, { got: '', echoed: false }, 'an ALLOW policy the plaintext caller does not match: closed, no byte');
  assert.equal(app.accepted(), 1);
});
