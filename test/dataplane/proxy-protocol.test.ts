// DestinationRule proxyProtocol end to end in mesh-proxy: clusters built by the discovery server's
// builder (networking/proxy-protocol.ts, and upstream-tls.ts for TLS origination), served over a
// real ADS stream; the upstreams are real servers on loopback behind a front that parses each
// connection's PROXY header (proxy-protocol-fixtures.ts). Clients connect from 127.0.0.2 and
// 127.0.0.3, so the header's source is theirs and not the proxy's. As in Envoy, the HTTP pools
// keep the connections of different downstream connections apart (the header names one), while a
// cluster without the header shares them.
import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { Agent, createServer as createHttpServer, request } from 'node:http';
import { createServer as createH2Server } from 'node:http2';
import { createServer as createHttpsServer } from 'node:https';
import { connect, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TLSSocket } from 'node:tls';
import { ProxyProtocolUpstreamTransportSchema } from '../../src/gen/envoy/extensions/transport_sockets/proxy_protocol/v3/upstream_proxy_protocol_pb.js';
import { HttpProtocolOptionsSchema } from '../../src/gen/envoy/extensions/upstreams/http/v3/http_protocol_options_pb.js';
import { loadBootstrap } from '../../src/dataplane/bootstrap.js';
import { Http1Pool } from '../../src/dataplane/upstream-pools.js';
import { proxyProtocolHeader, writeProxyProtocolHeader } from '../../src/dataplane/tls/proxy-protocol.js';
import { UPSTREAM_PROXY_PROTOCOL_SOCKET_NAME } from '../../src/envoy/names.js';
import { pack, TypeUrl } from '../../src/envoy/types.js';
import { parseProxy } from '../../src/model/proxy.js';
import { rawBufferSocket } from '../../src/networking/common.js';
import { withUpstreamProxyProtocol } from '../../src/networking/proxy-protocol.js';
import { upstreamTls } from '../../src/networking/upstream-tls.js';
import { selfSignedCertificate } from '../../src/webhooks/selfsigned.js';
import { freePort } from '../../samples/local-mesh.js';
import { eventually } from '../helpers/proc.js';
import { parseProxyHeader, proxyProtocolFront, type ParsedHeader } from './proxy-protocol-fixtures.js';
import { answerUpgrades, upgradeVia } from './upgrade-fixtures.js';
import { FixtureAds, hcmChain, listener, startBoundProxy, startFixtureProxy, staticCluster, tcpChain, writeBootstrap } from './xds-fixtures.js';

const HOST = 'api.example.com';
const V1 = withUpstreamProxyProtocol({}, { version: 'V1' });
const V2 = withUpstreamProxyProtocol({}, { version: 'V2' });
const H2 = { typedExtensionProtocolOptions: { 'envoy.extensions.upstreams.http.v3.HttpProtocolOptions': pack(HttpProtocolOptionsSchema, { upstreamProtocolOptions: { case: 'explicitHttpConfig', value: { protocolConfig: { case: 'http2ProtocolOptions', value: {} } } } }) } };

/** The header a client at `source` connecting to the proxy's listener port `port` is announced by. */
const announced = (version: 1 | 2, source: { address: string; port: number }, port: number) => ({ version, command: 'PROXY', family: 'TCP4', source, destination: { address: '127.0.0.1', port } });

async function listening(t: TestContext, server: { listen(port: number, host: string, cb: () => void): unknown; address(): unknown; close(): unknown }): Promise<number> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.after(() => server.close());
  return (server.address() as { port: number }).port;
}

/** Bytes written to the proxy's TCP listener from `localAddress` come back: the client's port. */
function echoed(port: number, localAddress: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = connect({ host: '127.0.0.1', port, localAddress });
    let got = '';
    s.on('connect', () => s.write('ping'));
    s.on('data', (d: Buffer) => {
      got += d.toString();
      if (got === 'ping') {
        resolve(s.localPort!);
        s.destroy();
      }
    });
    s.on('error', reject);
  });
}

/** A GET through the proxy's HTTP listener on `agent`'s connection from `localAddress`. */
function get(port: number, agent: Agent, localAddress: string): Promise<{ status: number; body: string; from: { address: string; port: number } }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path: '/', agent, localAddress }, (res) => {
      // Read now: the agent takes the socket back at the response's end.
      const from = { address: localAddress, port: res.socket.localPort! };
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body, from }));
    });
    req.on('error', reject);
    req.end();
  });
}

/** One keep-alive downstream connection per client. */
function client(t: TestContext): Agent {
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  t.after(() => agent.destroy());
  return agent;
}

test('tcp_proxy: the PROXY header (v1 text, v2 binary) names the downstream client and the listener, then the bytes flow', async (t) => {
  const echo = await listening(t, createServer((s) => s.pipe(s)));
  const [f1, f2] = [await proxyProtocolFront(t, echo), await proxyProtocolFront(t, echo)];
  const [p1, p2] = [await freePort(), await freePort()];
  const { stop } = await startFixtureProxy([staticCluster('v1', [f1.port], V1), staticCluster('v2', [f2.port], V2)], [listener('v1', p1, [tcpChain('v1')]), listener('v2', p2, [tcpChain('v2')])]);
  t.after(stop);

  const a = await echoed(p1, '127.0.0.2');
  const b = await echoed(p2, '127.0.0.3');
  assert.deepEqual(f1.headers, [announced(1, { address: '127.0.0.2', port: a }, p1)]);
  assert.deepEqual(f2.headers, [announced(2, { address: '127.0.0.3', port: b }, p2)]);
});

test('HTTP router: each downstream connection gets upstream connections of its own (HTTP/1.1 and HTTP/2); without the header they are shared', async (t) => {
  let plainConnections = 0;
  const plain = createHttpServer((_req, res) => res.end('ok'));
  plain.on('connection', () => plainConnections++);
  const http1 = await listening(t, createHttpServer((_req, res) => res.end('ok')));
  const h2 = createH2Server((_req, res) => res.end('ok'));
  const h2Port = await listening(t, h2);
  const [f1, f2] = [await proxyProtocolFront(t, http1), await proxyProtocolFront(t, h2Port)];
  const [p1, p2, p3] = [await freePort(), await freePort(), await freePort()];
  const { stop } = await startFixtureProxy(
    [staticCluster('http1', [f1.port], V1), staticCluster('h2', [f2.port], { ...V2, ...H2 }), staticCluster('plain', [await listening(t, plain)])],
    [listener('http1', p1, [hcmChain({ cluster: 'http1' })]), listener('h2', p2, [hcmChain({ cluster: 'h2' })]), listener('plain', p3, [hcmChain({ cluster: 'plain' })])],
  );
  t.after(stop);

  for (const [port, front, version] of [[p1, f1, 1], [p2, f2, 2]] as const) {
    const [a, b] = [client(t), client(t)];
    const first = await get(port, a, '127.0.0.2');
    const again = await get(port, a, '127.0.0.2');
    const other = await get(port, b, '127.0.0.3');
    assert.deepEqual([first.status, again.status, other.status], [200, 200, 200]);
    assert.equal(again.from.port, first.from.port, 'the client kept its connection');
    // Two requests of one downstream connection share its upstream connection; the other client's gets its own.
    assert.deepEqual(front.headers, [announced(version, first.from, port), announced(version, other.from, port)]);
  }
  const [a, b] = [client(t), client(t)];
  assert.equal((await get(p3, a, '127.0.0.2')).status, 200);
  assert.equal((await get(p3, b, '127.0.0.3')).status, 200);
  assert.equal(plainConnections, 1, 'without a PROXY header both clients share the upstream connection');
});

test('an upgrade (WebSocket) opens its own connection with the PROXY header naming the downstream connection', async (t) => {
  const app = createHttpServer((_req, res) => res.end('not an upgrade'));
  answerUpgrades(app);
  const front = await proxyProtocolFront(t, await listening(t, app));
  const port = await freePort();
  const { stop } = await startFixtureProxy([staticCluster('ws', [front.port], V2)], [listener('ws', port, [hcmChain({ cluster: 'ws', upgrades: ['websocket'] })])]);
  t.after(stop);

  assert.deepEqual(await upgradeVia(port), { status: 101, echoed: 'HELLO', xPath: '/ws' });
  assert.equal(front.headers.length, 1);
  // The client's port is its own: the rest of the header is known.
  const { source, ...rest } = front.headers[0] as ParsedHeader;
  assert.equal(source?.address, '127.0.0.1');
  const { source: _, ...expected } = announced(2, { address: '127.0.0.1', port: 0 }, port);
  assert.deepEqual(rest, expected);
});

test("a pool keeps a downstream connection's HTTP/1.1 connections apart, and only while it has some", async (t) => {
  const sink = await listening(t, createServer((s) => s.resume()));
  const pool = new Http1Pool({ transportOf: () => ({ proxyProtocol: 1 }) });
  t.after(() => pool.destroy());
  const ep = { host: '127.0.0.1', port: sink };
  const downstream = (port: number) => ({ downstream: { source: { address: '127.0.0.2', port }, destination: { address: '127.0.0.1', port: 80 } } });
  const list = pool.connections(ep, downstream(1000));
  const c = list.acquire();
  assert.equal(pool.connections(ep, downstream(1000)), list, 'the same downstream connection: the same list');
  assert.notEqual(pool.connections(ep, downstream(1001)), list, 'another downstream connection: another list');
  const plain = new Http1Pool();
  t.after(() => plain.destroy());
  const shared = plain.connections(ep, downstream(1000));
  shared.acquire();
  assert.equal(plain.connections(ep, downstream(1001)), shared, 'without a PROXY header the downstream connection does not matter');
  c.socket.destroy();
  await eventually(() => assert.notEqual(pool.connections(ep, downstream(1000)), list, 'its last connection closed: the list is gone'));
});

test('a TLS cluster: the PROXY header goes first, in plaintext, and the TLS handshake follows it', async (t) => {
  const cert = await selfSignedCertificate([HOST]);
  const dir = mkdtempSync(join(tmpdir(), 'proxy-protocol-tls-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(join(dir, 'ca.pem'), cert.certPem);
  const https = await listening(t, createHttpsServer({ key: cert.keyPem, cert: cert.certPem }, (req, res) => res.end(`tls ${(req.socket as TLSSocket).servername}`)));
  const front = await proxyProtocolFront(t, https);
  const port = await freePort();
  const tls = upstreamTls({ mode: 'SIMPLE', caCertificates: join(dir, 'ca.pem'), subjectAltNames: [HOST] }, HOST, false);
  const { stop } = await startFixtureProxy([staticCluster('tls', [front.port], withUpstreamProxyProtocol(tls, { version: 'V2' }))], [listener('tls', port, [hcmChain({ cluster: 'tls' })])]);
  t.after(stop);

  const r = await get(port, client(t), '127.0.0.2');
  assert.deepEqual([r.status, r.body], [200, `tls ${HOST}`], 'the server verified, the request served over TLS');
  assert.deepEqual(front.headers, [announced(2, r.from, port)]);
});

test('a malformed PROXY protocol socket is NACKed naming the field; the last good config stays', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'proxy-protocol-nack-'));
  const ads = await new FixtureAds().listen();
  const proxy = await startBoundProxy(dir, ads.port, 0);
  t.after(async () => {
    await proxy.stop(0);
    ads.close();
    rmSync(dir, { recursive: true, force: true });
  });
  const nacks: string[] = [];
  proxy.xds.client.on('nack', (_type, _version, why) => nacks.push(why));
  const socket = (value: object) => ({ transportSocket: { name: UPSTREAM_PROXY_PROTOCOL_SOCKET_NAME, configType: { case: 'typedConfig' as const, value: pack(ProxyProtocolUpstreamTransportSchema, value) } } });

  ads.set(TypeUrl.Cluster, [staticCluster('bad-version', [9], socket({ config: { version: 7 }, transportSocket: rawBufferSocket() }))]);
  await ads.push(TypeUrl.Cluster);
  await eventually(() => assert.match(nacks.at(-1) ?? '', /cluster bad-version\.transport_socket\.typed_config\.config\.version: unknown PROXY protocol version 7; expected V1 or V2/));
  ads.set(TypeUrl.Cluster, [staticCluster('no-inner', [9], socket({ config: {} }))]);
  await ads.push(TypeUrl.Cluster);
  await eventually(() => assert.match(nacks.at(-1) ?? '', /cluster no-inner\.transport_socket\.typed_config\.transport_socket: required/));
  ads.set(TypeUrl.Cluster, [staticCluster('nested', [9], socket({ transportSocket: V2.transportSocket }))]);
  await ads.push(TypeUrl.Cluster);
  await eventually(() => assert.match(nacks.at(-1) ?? '', /cluster nested\.transport_socket\.typed_config\.transport_socket: a PROXY protocol socket inside another is not supported/));
  assert.equal(proxy.clusters.get('bad-version') ?? proxy.clusters.get('no-inner') ?? proxy.clusters.get('nested'), undefined, 'no rejected cluster was applied');
});

test('without a downstream connection the v1 header names the upstream connection itself and v2 is LOCAL, as in Envoy', async (t) => {
  const sink = await listening(t, createServer((s) => s.resume()));
  const front = await proxyProtocolFront(t, sink);
  const ends: { address: string; port: number }[] = [];
  for (const version of [1, 2] as const) {
    const tcp = connect({ host: '127.0.0.1', port: front.port });
    writeProxyProtocolHeader(tcp, version, undefined);
    await new Promise<void>((resolve) => tcp.once('connect', resolve));
    ends.push({ address: tcp.localAddress!, port: tcp.localPort! });
    await eventually(() => assert.equal(front.headers.length, version));
    tcp.destroy();
  }
  assert.deepEqual(front.headers, [{ version: 1, command: 'PROXY', family: 'TCP4', source: ends[0], destination: { address: '127.0.0.1', port: front.port } }, { version: 2, command: 'LOCAL' }]);
});

test('IPv6 and IPv4-mapped addresses: TCP6 with the full addresses; a mapped pair is IPv4; mixed families are both IPv6', () => {
  const parsed = (version: 1 | 2, source: string, destination: string) => parseProxyHeader(proxyProtocolHeader(version, { source: { address: source, port: 1000 }, destination: { address: destination, port: 80 } }))!.header;
  assert.deepEqual(parsed(1, '2001:db8::1', 'fe80::2%eth0'), { version: 1, command: 'PROXY', family: 'TCP6', source: { address: '2001:db8::1', port: 1000 }, destination: { address: 'fe80::2', port: 80 } });
  assert.deepEqual(parsed(2, '2001:db8::1', '::ffff:10.0.0.1'), { version: 2, command: 'PROXY', family: 'TCP6', source: { address: '2001:db8:0:0:0:0:0:1', port: 1000 }, destination: { address: '0:0:0:0:0:ffff:a00:1', port: 80 } });
  assert.deepEqual(parsed(2, '::ffff:10.0.0.2', '::ffff:10.0.0.1'), { version: 2, command: 'PROXY', family: 'TCP4', source: { address: '10.0.0.2', port: 1000 }, destination: { address: '10.0.0.1', port: 80 } });
});

test('mesh-proxy announces the PROXY protocol socket, so the discovery server sends it', () => {
  const dir = mkdtempSync(join(tmpdir(), 'proxy-protocol-node-'));
  try {
    const { node } = loadBootstrap({ path: writeBootstrap(dir, 15010, 0) });
    assert.ok(node.extensions.some((e) => e.name === UPSTREAM_PROXY_PROTOCOL_SOCKET_NAME && e.category === 'envoy.transport_sockets.upstream'));
    assert.equal(parseProxy(node.id, {}, node.extensions.map((e) => e.name)).upstreamProxyProtocol, true);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
