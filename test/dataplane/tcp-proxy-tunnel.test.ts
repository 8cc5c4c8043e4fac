// tcp_proxy tunneling_config over real sockets: a mesh-proxy whose TCP listeners tunnel to a real
// HTTP proxy on loopback (node:http's CONNECT and POST handling, node:http2 for HTTP/2 clusters,
// behind TLS for a TLS cluster), which checks the request and relays to a real echo server. The
// bytes go through both ways; a refusal (403) closes the downstream connection and counts as a
// failed connect (tcp upstream_connect_fail).
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createServer as createHttpServer, type IncomingHttpHeaders, type Server as HttpServer } from 'node:http';
import { createServer as createH2Server, type Http2Server } from 'node:http2';
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { createServer as createTlsServer, type Server as TlsServer } from 'node:tls';
import type { Duplex } from 'node:stream';
import { TcpProxySchema } from '../../src/gen/envoy/extensions/filters/network/tcp_proxy/v3/tcp_proxy_pb.js';
import { UpstreamTlsContextSchema } from '../../src/gen/envoy/extensions/transport_sockets/tls/v3/tls_pb.js';
import type { MeshProxy } from '../../src/dataplane/proxy.js';
import { pack } from '../../src/envoy/types.js';
import { get } from '../helpers/http.js';
import { eventually } from '../helpers/proc.js';
import { httpCluster } from './cluster-stats-fixtures.js';
import { boundPort, listener, startFixtureProxy } from './xds-fixtures.js';
import { meshCa } from './tls-fixtures.js';
import { create } from '@bufbuild/protobuf';
import { TcpProxy_TunnelingConfigSchema } from '../../src/gen/envoy/extensions/filters/network/tcp_proxy/v3/tcp_proxy_pb.js';
import { compileTunnel } from '../../src/dataplane/listener/tcp-tunnel.js';
import { ConfigError } from '../../src/envoy/config-error.js';

const TARGET = 'db.foo.svc.cluster.local:5432';

/** What the tunnel's proxy was asked: method, target (request line or :path / :authority), headers. */
interface Asked {
  readonly method: string;
  readonly target: string;
  readonly headers: IncomingHttpHeaders;
}

const listenOn = (server: Server | HttpServer | Http2Server | TlsServer): Promise<number> => new Promise((r) => server.listen(0, '127.0.0.1', () => r((server.address() as AddressInfo).port)));

/** Relays `tunnel` to the echo server both ways. */
function relay(tunnel: Duplex, echoPort: number, head?: Buffer): void {
  const up = connect(echoPort, '127.0.0.1', () => {
    if (head && head.length > 0) up.write(head);
    tunnel.pipe(up).pipe(tunnel);
  });
  up.on('error', () => tunnel.destroy());
  tunnel.on('error', () => up.destroy());
}

/** An HTTP/1.1 tunnel proxy: CONNECT to TARGET or POST to /tunnel relayed; anything else 403. */
function http1Proxy(echoPort: number, asked: Asked[]): HttpServer {
  const server = createHttpServer((req, res) => {
    asked.push({ method: req.method ?? '', target: req.url ?? '', headers: req.headers });
    if (req.method !== 'POST' || req.url !== '/tunnel') return void res.writeHead(403).end();
    // Sent at once: the tunnel waits for the response head before any byte goes through.
    res.writeHead(200).flushHeaders();
    const up = connect(echoPort, '127.0.0.1');
    req.pipe(up);
    up.on('data', (d: Buffer) => res.write(d));
    up.on('end', () => res.end());
  });
  server.on('connect', (req, socket: Socket, head: Buffer) => {
    asked.push({ method: req.method ?? '', target: req.url ?? '', headers: req.headers });
    if (req.url !== TARGET) return void socket.end('HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n');
    socket.write('HTTP/1.1 200 Connection Established\r\n\r\n');
    relay(socket, echoPort, head);
  });
  return server;
}

/** An HTTP/2 tunnel proxy (h2c): CONNECT streams to TARGET relayed, others 403. */
function http2Proxy(echoPort: number, asked: Asked[]): Http2Server {
  const server = createH2Server();
  server.on('stream', (stream, headers) => {
    const method = String(headers[':method']);
    asked.push({ method, target: String(method === 'CONNECT' ? headers[':authority'] : headers[':path']), headers: headers as IncomingHttpHeaders });
    if (headers[':authority'] !== TARGET) return void stream.respond({ ':status': 403 }, { endStream: true });
    stream.respond({ ':status': 200 });
    relay(stream, echoPort);
  });
  return server;
}

function tunnelChain(cluster: string, tunnelingConfig: Record<string, unknown>) {
  return { filters: [{ name: 'envoy.filters.network.tcp_proxy', configType: { case: 'typedConfig' as const, value: pack(TcpProxySchema, { statPrefix: cluster, clusterSpecifier: { case: 'cluster', value: cluster }, tunnelingConfig }) } }] };
}

/** Writes `text` through the listener, ends its side once it is all back, and resolves with what came back before the close. */
function roundTrip(port: number, text: string): Promise<string> {
  return new Promise((resolve) => {
    const s = connect(port, '127.0.0.1', () => s.write(text));
    let data = '';
    s.setEncoding('utf8').on('data', (d: string) => {
      data += d;
      if (data.length >= text.length) s.end();
    });
    s.on('error', () => undefined);
    s.on('close', () => resolve(data));
  });
}

describe('tcp_proxy tunneling_config', { timeout: 30_000 }, () => {
  const asked: Record<string, Asked[]> = { h1: [], h2: [], tls: [] };
  const servers: { close(cb: () => void): unknown }[] = [];
  let fixture: { proxy: MeshProxy; stop(): Promise<void> };

  before(async () => {
    const echo = createServer({ allowHalfOpen: true }, (s) => s.pipe(s));
    const echoPort = await listenOn(echo);
    const h1 = http1Proxy(echoPort, asked['h1']!);
    const h2 = http2Proxy(echoPort, asked['h2']!);
    const ca = await meshCa();
    const cert = await ca.issue('spiffe://cluster.local/ns/foo/sa/tunnel', ['tunnel.test']);
    const tlsProxy = http1Proxy(echoPort, asked['tls']!);
    const tls = createTlsServer({ key: cert.keyPem, cert: cert.chainPem }, (s) => tlsProxy.emit('connection', s));
    servers.push(echo, h1, h2, tls);
    const [h1Port, h2Port, tlsPort] = [await listenOn(h1), await listenOn(h2), await listenOn(tls)];
    const upstreamTls = { name: 'envoy.transport_sockets.tls', configType: { case: 'typedConfig' as const, value: pack(UpstreamTlsContextSchema, { sni: 'tunnel.test', commonTlsContext: { validationContextType: { case: 'validationContext', value: { trustedCa: { specifier: { case: 'inlineString', value: ca.rootPem } } } } } }) } };
    const connectTo = { hostname: TARGET, headersToAdd: [{ header: { key: 'x-tunnel', value: 'yes' } }] };
    fixture = await startFixtureProxy(
      [httpCluster('h1', h1Port), httpCluster('h2', h2Port, { h2: true }), httpCluster('tls', tlsPort, {}, { transportSocket: upstreamTls })],
      [
        listener('connect', 0, [tunnelChain('h1', connectTo)]),
        listener('post', 0, [tunnelChain('h1', { hostname: TARGET, usePost: true, postPath: '/tunnel' })]),
        listener('refused', 0, [tunnelChain('h1', { hostname: 'elsewhere:1' })]),
        listener('h2', 0, [tunnelChain('h2', connectTo)]),
        listener('h2-refused', 0, [tunnelChain('h2', { hostname: 'elsewhere:1' })]),
        listener('tls', 0, [tunnelChain('tls', connectTo)]),
      ],
    );
  });

  after(async () => {
    await fixture?.stop();
    await Promise.all(servers.map((s) => new Promise<void>((r) => s.close(() => r()))));
  });

  const port = (name: string): number => boundPort(fixture.proxy, name);
  const connectFails = async (prefix: string): Promise<number> => {
    const text = (await get(false, fixture.proxy.adminPort, `/stats?filter=${encodeURIComponent(`^tcp\\.${prefix}\\.upstream_connect_fail$`)}`)).body;
    const m = /: (\d+)/.exec(text);
    return m ? Number(m[1]) : 0;
  };

  it('HTTP/1.1 CONNECT: the request line and Host name the hostname, headers_to_add follow; the bytes go through both ways', async () => {
    assert.equal(await roundTrip(port('connect'), 'ping over connect'), 'ping over connect');
    const a = asked['h1']!.at(-1)!;
    assert.equal(a.method, 'CONNECT');
    assert.equal(a.target, TARGET);
    assert.equal(a.headers['host'], TARGET);
    assert.equal(a.headers['x-tunnel'], 'yes');
  });

  it('HTTP/1.1 POST: to post_path with a chunked body, the response body back', async () => {
    const payload = 'x'.repeat(70_000);
    const back = await roundTrip(port('post'), payload);
    assert.ok(back === payload, `${back.length} bytes back of ${payload.length}`);
    const a = asked['h1']!.at(-1)!;
    assert.deepEqual([a.method, a.target, a.headers['host'], a.headers['transfer-encoding']], ['POST', '/tunnel', TARGET, 'chunked']);
  });

  it('a 403 closes the downstream connection and counts as a failed connect', async () => {
    const before = await connectFails('h1');
    assert.equal(await roundTrip(port('refused'), 'nobody hears this'), '');
    await eventually(async () => assert.equal(await connectFails('h1'), before + 1));
  });

  it('HTTP/2 cluster: a CONNECT stream with :authority the hostname; a 403 stream is a failed connect', async () => {
    assert.equal(await roundTrip(port('h2'), 'ping over h2'), 'ping over h2');
    const a = asked['h2']!.at(-1)!;
    assert.deepEqual([a.method, a.target, a.headers['x-tunnel']], ['CONNECT', TARGET, 'yes']);
    assert.equal(await roundTrip(port('h2-refused'), 'nobody'), '');
    await eventually(async () => assert.equal(await connectFails('h2'), 1));
  });

  it('TLS cluster: the tunnel runs inside the cluster\'s TLS', async () => {
    assert.equal(await roundTrip(port('tls'), 'ping over tls'), 'ping over tls');
    assert.equal(asked['tls']!.at(-1)!.method, 'CONNECT');
  });
});

describe('tunneling_config that mesh-proxy cannot apply is refused, naming the field', () => {
  const refused = (init: Record<string, unknown>, field: string) => assert.throws(() => compileTunnel(create(TcpProxy_TunnelingConfigSchema, init), 'tcp_proxy.tunneling_config'), (e: unknown) => e instanceof ConfigError && e.field === `tcp_proxy.tunneling_config.${field}`);
  it('no hostname, a command operator, post_path without use_post or not absolute', () => {
    refused({}, 'hostname');
    refused({ hostname: '%DOWNSTREAM_LOCAL_ADDRESS%' }, 'hostname');
    refused({ hostname: 'a:1', postPath: '/p' }, 'post_path');
    refused({ hostname: 'a:1', usePost: true, postPath: 'p' }, 'post_path');
    refused({ hostname: 'a:1', headersToAdd: [{ header: { key: 'x', value: '%START_TIME%' } }] }, 'headers_to_add[0].header.value');
  });
});
