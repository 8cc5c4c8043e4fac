// Two hops of mutual TLS between in-process mesh-proxies, each fed by its own ADS stream and its
// own agent's SDS server: the client sidecar's cluster picks TLS for endpoints labelled
// `tlsMode: mesh` (transport_socket_matches), verifies the server's SPIFFE id, and the server
// sidecar's RBAC allows one caller's identity and denies another's. Then the server's
// certificate is renewed over SDS while a keep-alive connection is open, and the client's, whose
// new upstream connections must present the renewed one.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { createServer as createHttpServer } from 'node:http';
import { Agent, createServer as createHttpsServer, request } from 'node:https';
import { connect as tlsConnect, type TLSSocket } from 'node:tls';
import { Cluster_DiscoveryType, ClusterSchema } from '../../src/gen/envoy/config/cluster/v3/cluster_pb.js';
import { pack, TypeUrl, unpack } from '../../src/envoy/types.js';
import { RawBufferSchema } from '../../src/gen/envoy/extensions/transport_sockets/raw_buffer/v3/raw_buffer_pb.js';
import { HttpProtocolOptionsSchema } from '../../src/gen/envoy/extensions/upstreams/http/v3/http_protocol_options_pb.js';
import { connect as netConnect, createServer as createNetServer } from 'node:net';
import { freePort } from '../../samples/local-mesh.js';
import { eventually } from '../helpers/proc.js';
import { downstreamTls, echo, meshCa, meshTls, sidecar, spiffe, tlsInspector, tlsModeMetadata, upstreamTls, workload, type MeshCa, type Workload } from './tls-fixtures.js';
import { hcmChain, listener, staticCluster, tcpChain } from './xds-fixtures.js';
import { answerUpgrades, upgradeVia } from './upgrade-fixtures.js';
import { listen } from '../helpers/http.js';
import type { TestContext } from 'node:test';

const SNI = 'outbound_.8080_._.server.default.svc.cluster.local';

/** The outbound cluster the Go mesh emits for a sidecar'd service: mTLS for endpoints that say tlsMode mesh. */
function meshCluster(name: string, port: number, serverSan: string) {
  return {
    name,
    any: pack(ClusterSchema, {
      name,
      clusterDiscoveryType: { case: 'type', value: Cluster_DiscoveryType.STATIC },
      connectTimeout: { seconds: 1n },
      loadAssignment: {
        clusterName: name,
        endpoints: [{ lbEndpoints: [{ metadata: tlsModeMetadata('mesh'), hostIdentifier: { case: 'endpoint', value: { address: { address: { case: 'socketAddress', value: { address: '127.0.0.1', portSpecifier: { case: 'portValue', value: port } } } } } } }] }],
      },
      transportSocketMatches: [
        { name: 'tlsMode-mesh', match: { tlsMode: 'mesh' }, transportSocket: upstreamTls(meshTls([serverSan]), SNI) },
        { name: 'tlsMode-disabled', match: {}, transportSocket: { name: 'envoy.transport_sockets.raw_buffer', configType: { case: 'typedConfig', value: pack(RawBufferSchema, {}) } } },
      ],
    }),
  };
}

/** A client sidecar: a plaintext outbound listener routing to the server through `cluster`; `upgrades` its HCM enables. */
async function clientSidecar(t: TestContext, ca: MeshCa, sa: string, serverPort: number, serverSan = spiffe('server'), upgrades?: readonly string[]) {
  const w = await workload(t, ca, sa);
  const s = await sidecar(t, w);
  const port = await freePort();
  s.ads.set(TypeUrl.Cluster, [meshCluster('outbound|8080||server', serverPort, serverSan)]);
  s.ads.set(TypeUrl.Listener, [listener('outbound', port, [hcmChain({ cluster: 'outbound|8080||server', statPrefix: 'outbound', ...(upgrades ? { upgrades } : {}) })])]);
  await s.ads.push(TypeUrl.Cluster, TypeUrl.Listener);
  await eventually(async () => assert.equal((await fetch(`${s.admin}/ready`)).status, 200), 15_000);
  return { ...s, w, port };
}

/** The server's sidecar: mTLS only, RBAC allowing the `client` identity, to `app` (else an echo app); `upgrades` its HCM enables. */
async function serverSidecar(t: TestContext, ca: MeshCa, o: { app?: number; upgrades?: readonly string[] } = {}): Promise<{ w: Workload; admin: string; port: number }> {
  const w = await workload(t, ca, 'server');
  const s = await sidecar(t, w);
  const app = o.app ?? (await echo(t, 'server-app'));
  const port = await freePort();
  const chain = hcmChain(
    {
      cluster: 'inbound|8080||',
      statPrefix: 'inbound_8080',
      ...(o.upgrades ? { upgrades: o.upgrades } : {}),
      policies: { 'ns[default]-policy[allow-client]-rule[0]': { permissions: [{ rule: { case: 'any', value: true } }], principals: [{ identifier: { case: 'authenticated', value: { principalName: { matchPattern: { case: 'exact', value: spiffe('client') } } } } }] } },
    },
    { filterChainMatch: { transportProtocol: 'tls' }, transportSocket: downstreamTls(meshTls([])) },
  );
  s.ads.set(TypeUrl.Cluster, [staticCluster('inbound|8080||', [app])]);
  s.ads.set(TypeUrl.Listener, [listener('virtualInbound', port, [chain], { listenerFilters: [tlsInspector] })]);
  await s.ads.push(TypeUrl.Cluster, TypeUrl.Listener);
  await eventually(async () => assert.equal((await fetch(`${s.admin}/ready`)).status, 200), 15_000);
  return { w, admin: s.admin, port };
}

const stat = async (admin: string, name: string): Promise<number> => Number(new RegExp(`^${name.replaceAll('.', '\\.').replaceAll('|', '\\|')}: (\\d+)$`, 'm').exec(await (await fetch(`${admin}/stats`)).text())?.[1] ?? NaN);

test('sidecar to sidecar over mTLS: transport_socket_matches, server SAN check, RBAC on the caller SPIFFE id', async (t) => {
  const ca = await meshCa();
  const server = await serverSidecar(t, ca);
  const allowed = await clientSidecar(t, ca, 'client', server.port);
  const denied = await clientSidecar(t, ca, 'other', server.port);
  const misnamed = await clientSidecar(t, ca, 'client', server.port, spiffe('not-the-server'));

  const ok = await fetch(`http://127.0.0.1:${allowed.port}/hello`);
  assert.equal(ok.status, 200);
  const body = (await ok.json()) as { who: string; headers: Record<string, string> };
  assert.equal(body.who, 'server-app');
  assert.equal(body.headers['x-forwarded-proto'], 'https', 'the server sidecar got the request over TLS');
  assert.equal(body.headers['x-forwarded-client-cert'], undefined, 'SANITIZE (the default) removes XFCC');

  const no = await fetch(`http://127.0.0.1:${denied.port}/hello`);
  assert.equal(no.status, 403);
  assert.equal(await no.text(), 'RBAC: access denied');

  // The client sidecar refuses a server whose certificate is not the expected identity.
  const wrong = await fetch(`http://127.0.0.1:${misnamed.port}/hello`);
  assert.equal(wrong.status, 503);
  assert.equal(await wrong.text(), 'upstream connect error or disconnect/reset before headers. reset reason: remote connection failure, transport failure reason: TLS error: upstream TLS: server certificate refused (fail_verify_san)');
  assert.ok((await stat(misnamed.admin, 'cluster.outbound|8080||server.ssl.fail_verify_san')) >= 1);
  assert.ok((await stat(allowed.admin, 'cluster.outbound|8080||server.ssl.handshake')) >= 1);
  const dump = await fetch(`${allowed.admin}/config_dump`);
  assert.equal(dump.status, 200, 'config_dump prints the raw_buffer transport socket');
  assert.match(await dump.text(), /envoy\.extensions\.transport_sockets\.raw_buffer\.v3\.RawBuffer/);
  assert.ok((await stat(server.admin, `listener.127.0.0.1_${server.port}.ssl.handshake`)) >= 2, 'both callers completed a handshake with the server sidecar');
});

test('a WebSocket upgrade goes over the cluster mTLS: the server sidecar sees the caller identity', async (t) => {
  const ca = await meshCa();
  const app = createHttpServer((_req, res) => res.end('not an upgrade'));
  answerUpgrades(app);
  t.after(() => app.close());
  const server = await serverSidecar(t, ca, { app: await listen(app), upgrades: ['websocket'] });
  const allowed = await clientSidecar(t, ca, 'client', server.port, spiffe('server'), ['websocket']);
  const denied = await clientSidecar(t, ca, 'other', server.port, spiffe('server'), ['websocket']);
  const misnamed = await clientSidecar(t, ca, 'client', server.port, spiffe('not-the-server'), ['websocket']);

  assert.deepEqual(await upgradeVia(allowed.port), { status: 101, echoed: 'HELLO', xPath: '/ws' });
  assert.equal((await upgradeVia(denied.port)).status, 403, 'RBAC on the server sidecar refuses the other identity');
  assert.equal((await upgradeVia(misnamed.port)).status, 503, 'the client sidecar refuses a server of another identity');
  assert.ok((await stat(misnamed.admin, 'cluster.outbound|8080||server.ssl.fail_verify_san')) >= 1);
  assert.ok((await stat(allowed.admin, 'cluster.outbound|8080||server.ssl.handshake')) >= 1);
  assert.ok((await stat(allowed.admin, 'cluster.outbound|8080||server.upstream_cx_total')) >= 1, 'the upgrade connection is the cluster one');
});

test('a certificate renewed over SDS: a keep-alive connection keeps working, new handshakes get the new certificate', async (t) => {
  const ca = await meshCa();
  const server = await serverSidecar(t, ca);
  const { keyPem, chainPem } = await ca.issue(spiffe('client'));
  const agent = new Agent({ keepAlive: true, maxSockets: 1, ca: ca.rootPem, cert: chainPem, key: keyPem, checkServerIdentity: () => undefined });
  t.after(() => agent.destroy());
  const get = (): Promise<{ status: number; socket: TLSSocket; reused: boolean }> =>
    new Promise((resolve, reject) => {
      const req = request({ host: '127.0.0.1', port: server.port, path: '/', agent }, (res) => {
        const socket = res.socket as TLSSocket;
        res.resume();
        res.on('end', () => resolve({ status: res.statusCode ?? 0, socket, reused: req.reusedSocket }));
      });
      req.on('error', reject);
      req.end();
    });
  const first = await get();
  assert.equal(first.status, 200);
  const before = first.socket.getPeerX509Certificate()!.serialNumber;

  const renewed = new X509Certificate(await server.w.renew());
  assert.notEqual(renewed.serialNumber, before);
  // The new secret is applied once config_dump shows it (the agent re-read its files and pushed it).
  await eventually(async () => {
    const dump = (await (await fetch(`${server.admin}/config_dump`)).json()) as { configs: Array<{ dynamic_active_secrets?: Array<{ name: string; secret: { tls_certificate?: { certificate_chain: { inline_bytes: string } } } }> }> };
    const secret = dump.configs.flatMap((c) => c.dynamic_active_secrets ?? []).find((s) => s.name === 'default');
    const pem = Buffer.from(secret!.secret.tls_certificate!.certificate_chain.inline_bytes, 'base64').toString();
    assert.equal(new X509Certificate(pem).serialNumber, renewed.serialNumber);
  }, 15_000);

  const again = await get();
  assert.equal(again.status, 200);
  assert.ok(again.reused, 'the keep-alive connection made before the renewal still serves');
  assert.equal(again.socket, first.socket, 'the same TLS connection, handshaken with the old certificate');

  const fresh = await new Promise<TLSSocket>((resolve, reject) => {
    const s = tlsConnect({ host: '127.0.0.1', port: server.port, ca: ca.rootPem, cert: chainPem, key: keyPem, checkServerIdentity: () => undefined }, () => resolve(s));
    s.on('error', reject);
  });
  t.after(() => fresh.destroy());
  assert.equal(fresh.getPeerX509Certificate()!.serialNumber, renewed.serialNumber, 'a new handshake gets the renewed certificate');
});

test('TCP proxy and HTTP/2 (h2c inside TLS) upstreams over mTLS', async (t) => {
  const ca = await meshCa();
  const sw = await workload(t, ca, 'server');
  const s = await sidecar(t, sw);
  const app = await echo(t, 'h2-app');
  const tcpApp = createNetServer((c) => c.pipe(c));
  await new Promise<void>((resolve) => tcpApp.listen(0, '127.0.0.1', resolve));
  t.after(() => tcpApp.close());
  const [httpPort, tcpPort] = [await freePort(), await freePort()];
  const inbound = { filterChainMatch: { transportProtocol: 'tls' }, transportSocket: downstreamTls(meshTls([spiffe('client')], ['h2', 'http/1.1'])) };
  s.ads.set(TypeUrl.Cluster, [staticCluster('app', [app]), staticCluster('tcp-app', [(tcpApp.address() as { port: number }).port])]);
  s.ads.set(TypeUrl.Listener, [
    listener('in-http', httpPort, [hcmChain({ cluster: 'app' }, inbound)], { listenerFilters: [tlsInspector] }),
    listener('in-tcp', tcpPort, [tcpChain('tcp-app', inbound)], { listenerFilters: [tlsInspector] }),
  ]);
  await s.ads.push(TypeUrl.Cluster, TypeUrl.Listener);

  const cw = await workload(t, ca, 'client');
  const c = await sidecar(t, cw);
  const [outHttp, outTcp] = [await freePort(), await freePort()];
  const h2 = meshCluster('to-http', httpPort, spiffe('server'));
  const h2Cluster = unpack(h2.any, ClusterSchema);
  h2Cluster.typedExtensionProtocolOptions['envoy.extensions.upstreams.http.v3.HttpProtocolOptions'] = pack(HttpProtocolOptionsSchema, { upstreamProtocolOptions: { case: 'explicitHttpConfig', value: { protocolConfig: { case: 'http2ProtocolOptions', value: {} } } } });
  c.ads.set(TypeUrl.Cluster, [{ name: 'to-http', any: pack(ClusterSchema, h2Cluster) }, meshCluster('to-tcp', tcpPort, spiffe('server'))]);
  c.ads.set(TypeUrl.Listener, [listener('out-http', outHttp, [hcmChain({ cluster: 'to-http' })]), listener('out-tcp', outTcp, [tcpChain('to-tcp')])]);
  await c.ads.push(TypeUrl.Cluster, TypeUrl.Listener);
  for (const admin of [s.admin, c.admin]) await eventually(async () => assert.equal((await fetch(`${admin}/ready`)).status, 200), 15_000);

  const r = await fetch(`http://127.0.0.1:${outHttp}/h2`);
  assert.equal(r.status, 200);
  assert.equal(((await r.json()) as { who: string }).who, 'h2-app');
  const echoed = await new Promise<string>((resolve, reject) => {
    const sock = netConnect(outTcp, '127.0.0.1', () => sock.write('ping over mtls'));
    sock.on('data', (d: Buffer) => {
      resolve(d.toString());
      sock.destroy();
    });
    sock.on('error', reject);
  });
  assert.equal(echoed, 'ping over mtls');
  assert.ok((await stat(c.admin, 'cluster.to-tcp.ssl.handshake')) >= 1);
  assert.ok((await stat(c.admin, 'cluster.to-http.ssl.handshake')) >= 1);
});

test('the client sidecar certificate renewed over SDS: new upstream connections present the new one', async (t) => {
  const ca = await meshCa();
  const { keyPem, chainPem } = await ca.issue(spiffe('server'));
  // The server answers with the serial of the client certificate of the connection, then closes it: every request is a new upstream connection.
  const server = createHttpsServer({ key: keyPem, cert: chainPem, ca: ca.rootPem, requestCert: true, rejectUnauthorized: true }, (req, res) => {
    res.setHeader('connection', 'close');
    res.end((req.socket as TLSSocket).getPeerX509Certificate()?.serialNumber ?? 'none');
  });
  const serverPort = await freePort();
  await new Promise<void>((r) => server.listen(serverPort, '127.0.0.1', r));
  t.after(() => server.close());
  const client = await clientSidecar(t, ca, 'client', serverPort);
  const seen = async (): Promise<string> => {
    const res = await fetch(`http://127.0.0.1:${client.port}/who`);
    assert.equal(res.status, 200);
    return res.text();
  };
  const before = await seen();
  assert.equal(await seen(), before, 'the same certificate on the next connection');
  const renewed = new X509Certificate(await client.w.renew()).serialNumber;
  assert.notEqual(renewed, before);
  await eventually(async () => assert.equal(await seen(), renewed, 'a new upstream connection presents the renewed certificate'), 15_000);
  assert.ok((await stat(client.admin, 'cluster.outbound|8080||server.ssl.handshake')) >= 3);
});
