import { test } from 'node:test';
import assert from 'node:assert/strict';
import { create } from '@bufbuild/protobuf';
import { anyPack } from '@bufbuild/protobuf/wkt';
import { ListenerSchema } from '../../src/gen/envoy/config/listener/v3/listener_pb.js';
import { TcpProxySchema } from '../../src/gen/envoy/extensions/filters/network/tcp_proxy/v3/tcp_proxy_pb.js';
import { compileListener, type ActiveListener } from '../../src/dataplane/listener/compiler.js';
import { OriginalDstHandoff } from '../../src/dataplane/listener/original-dst-handoff.js';
import { classify, type Inspection } from '../../src/dataplane/listener/sniffers.js';
import { StatsStore } from '../../src/dataplane/stats.js';
import { StaticClusterManager } from './static-cluster-manager.js';
import { createServer as createNetServer } from 'node:net';
import { connect as tlsConnect } from 'node:tls';

/** The ClientHello node's TLS client sends for `servername` and `alpn`, as the first bytes on the wire. */
async function realClientHello(servername: string, alpn: string[]): Promise<Buffer> {
  const server = createNetServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const got = new Promise<Buffer>((resolve) => server.once('connection', (s) => s.once('data', (d: Buffer) => (s.destroy(), resolve(d)))));
  const client = tlsConnect({ host: '127.0.0.1', port: (server.address() as { port: number }).port, servername, ALPNProtocols: alpn });
  client.on('error', () => undefined);
  const hello = await got;
  client.destroy();
  server.close();
  return hello;
}

test('tls_inspector reads SNI and ALPN from a real ClientHello, also when it spans two TLS records', async () => {
  const hello = await realClientHello('Api.Example.com', ['h2', 'http/1.1']);
  assert.deepEqual(classify(hello, both), { transport: 'tls', protocols: ['h2', 'http/1.1'], serverName: 'api.example.com' });
  assert.equal(classify(hello.subarray(0, hello.length - 1), both), undefined, 'one byte short: read on');
  // The same handshake split over two records, as a client may fragment it.
  const body = hello.subarray(5);
  const record = (b: Buffer) => Buffer.concat([Buffer.from([0x16, hello[1]!, hello[2]!, b.length >> 8, b.length & 0xff]), b]);
  const split = Buffer.concat([record(body.subarray(0, 40)), record(body.subarray(40))]);
  assert.deepEqual(classify(split, both), { transport: 'tls', protocols: ['h2', 'http/1.1'], serverName: 'api.example.com' });
});

const both: Inspection = { http: true, tls: true, timeoutMs: 1000, continueOnTimeout: false };
const bytes = (s: string) => Buffer.from(s, 'latin1');

test('http_inspector and tls_inspector read the first bytes as Envoy does', () => {
  assert.equal(classify(Buffer.from([0x16, 0x03, 0x01]), both), undefined, 'the start of a ClientHello: read on');
  assert.deepEqual(classify(Buffer.from([0x16, 0x03, 0x01, 0x00, 0x04, 0x02, 0, 0, 0]), both), { transport: 'tls', protocols: [] }, 'a handshake that is not a ClientHello: tls, no SNI');
  assert.deepEqual(classify(bytes('GET / HTTP/1.1\r\nhost: a\r\n'), both), { transport: 'raw_buffer', protocols: ['http/1.1'] });
  assert.deepEqual(classify(bytes('GET / HTTP/1.0\r\n'), both), { transport: 'raw_buffer', protocols: ['http/1.0'] });
  assert.equal(classify(bytes('PRI * HTTP/2'), both), undefined, 'a prefix of the HTTP/2 preface: read on');
  assert.deepEqual(classify(bytes('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'), both), { transport: 'raw_buffer', protocols: ['h2c'] });
  assert.equal(classify(bytes('GET /long'), both), undefined, 'an unfinished request line: read on');
  assert.deepEqual(classify(bytes('\x00\x01binary'), both), { transport: 'raw_buffer', protocols: [] });
  assert.deepEqual(classify(Buffer.from([0x16]), { ...both, tls: false }), { transport: 'raw_buffer', protocols: [] }, 'no tls_inspector: no tls');
});

function tcpListener(name: string, host: string, port: number): ActiveListener {
  const msg = create(ListenerSchema, {
    name,
    bindToPort: false,
    address: { address: { case: 'socketAddress', value: { address: host, portSpecifier: { case: 'portValue', value: port } } } },
    filterChains: [{ filters: [{ name: 'tcp', configType: { case: 'typedConfig', value: anyPack(TcpProxySchema, create(TcpProxySchema, { statPrefix: name, clusterSpecifier: { case: 'cluster', value: 'c' } })) } }] }],
  });
  return compileListener(msg, { clusters: new StaticClusterManager(), routes: () => undefined, stats: new StatsStore() });
}

test('the original-destination hand-off picks the exact address, else the wildcard on that port', () => {
  const exact = tcpListener('10.0.0.5_8080', '10.0.0.5', 8080);
  const wildcard = tcpListener('0.0.0.0_8080', '0.0.0.0', 8080);
  const v6 = tcpListener('[::]_9090', '::', 9090);
  const handoff = new OriginalDstHandoff([wildcard, exact, v6]);
  assert.equal(handoff.listenerAt({ address: '10.0.0.5', port: 8080 }), exact);
  assert.equal(handoff.listenerAt({ address: '10.0.0.6', port: 8080 }), wildcard);
  assert.equal(handoff.listenerAt({ address: 'fd00::1', port: 9090 }), v6);
  assert.equal(handoff.listenerAt({ address: '10.0.0.5', port: 7070 }), undefined, 'no listener on that port: the connection stays');
});
