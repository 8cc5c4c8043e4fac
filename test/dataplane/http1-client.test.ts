// The proxy's own HTTP/1.1 upstream client (src/dataplane/http1/) through a real connection manager:
// a node:http client in front, a raw TCP upstream behind that answers each path with bytes the
// test chooses (valid, malformed, cut short), so that what the client sees and how many upstream
// connections were opened can be asserted.
import assert from 'node:assert/strict';
import { createServer as createHttpServer, request, type IncomingHttpHeaders, type Server } from 'node:http';
import { createServer as createTcpServer, type Server as TcpServer, type Socket } from 'node:net';
import { after, before, beforeEach, describe, it } from 'node:test';
import { create } from '@bufbuild/protobuf';
import { anyPack } from '@bufbuild/protobuf/wkt';
import { FilterChainSchema } from '../../src/gen/envoy/config/listener/v3/listener_components_pb.js';
import { RouterSchema } from '../../src/gen/envoy/extensions/filters/http/router/v3/router_pb.js';
import { HttpConnectionManagerSchema } from '../../src/gen/envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager_pb.js';
import { buildHcmForFilterChain } from '../../src/dataplane/http-connection-manager.js';
import { HCM_FILTER_NAME } from '../../src/envoy/names.js';
import { StaticClusterManager } from './static-cluster-manager.js';
import { close, listen } from '../helpers/http.js';

/** What the upstream writes for a request path (after reading the request head and its body). */
const RESPONSES: Record<string, string | ((socket: Socket, nth: number) => void)> = {
  '/ok': 'HTTP/1.1 200 OK\r\ncontent-length: 5\r\nset-cookie: a=1\r\nset-cookie: b=2\r\n\r\nhello',
  '/close': 'HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok',
  '/chunked': 'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ntrailer: x-sum\r\n\r\n5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nx-sum: 11\r\n\r\n',
  '/eof-body': 'HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\nuntil the end',
  '/bad-status': 'HTTP/1.1 2OO OK\r\ncontent-length: 0\r\n\r\n',
  '/conflicting-length': 'HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-length: 6\r\n\r\nhello!',
  '/length-and-chunked': 'HTTP/1.1 200 OK\r\ncontent-length: 5\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n',
  '/obs-fold': 'HTTP/1.1 200 OK\r\nx-a: one\r\n two\r\ncontent-length: 0\r\n\r\n',
  '/bad-chunk': 'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n',
  '/continue-first': 'HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\ncontent-length: 4\r\n\r\ndone',
  // A HEAD response announces the length of the body a GET would get, and sends none.
  '/head': 'HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n',
  '/cut-short': (socket) => socket.end('HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nhello'),
  // Answers the first request of a connection and drops the connection on the second, unanswered:
  // what a keep-alive connection the upstream closed while it was idle looks like to a client.
  '/drop-second': (socket, nth) => (nth === 1 ? socket.write('HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nfirst') : socket.destroy()),
};

let upstream: TcpServer;
let connections = 0;
/** What the upstream received, request by request: the head (one character per byte), its first line and the body. */
let received: { head: string; line: string; body: string }[] = [];

function serveUpstream(socket: Socket): void {
  connections++;
  let buf = '';
  let nth = 0;
  socket.on('error', () => {});
  socket.on('data', (d: Buffer) => {
    buf += d.toString('latin1');
    for (;;) {
      const end = buf.indexOf('\r\n\r\n');
      if (end < 0) return;
      const head = buf.slice(0, end);
      const length = Number(/\r\ncontent-length: *(\d+)/i.exec(head)?.[1] ?? 0);
      if (buf.length < end + 4 + length) return;
      const body = buf.slice(end + 4, end + 4 + length);
      buf = buf.slice(end + 4 + length);
      const line = head.split('\r\n')[0]!;
      received.push({ head, line, body });
      const path = line.split(' ')[1]!;
      const answer = RESPONSES[path] ?? 'HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n';
      nth++;
      if (typeof answer === 'function') answer(socket, nth);
      else if (answer.includes('connection: close') || path === '/eof-body') socket.end(answer);
      else socket.write(answer);
    }
  });
}

const clusters = new StaticClusterManager();
let proxy: Server;
let port: number;

interface Reply {
  status: number;
  headers: IncomingHttpHeaders;
  body: string;
  trailers: Record<string, string>;
}

/** A request on its own client connection; rejects when the response does not end normally. */
function send(path: string, method = 'GET', body?: string, headers: Record<string, string> = {}): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path, method, agent: false, headers: body === undefined ? headers : { ...headers, 'content-length': Buffer.byteLength(body) } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (text += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: text, trailers: res.trailers as Record<string, string> }));
      res.on('error', reject);
      res.on('aborted', () => reject(new Error('response aborted')));
    });
    req.on('error', reject);
    req.end(body);
  });
}

before(async () => {
  upstream = createTcpServer(serveUpstream);
  await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r));
  const upstreamPort = (upstream.address() as { port: number }).port;
  clusters.set('raw', [{ host: '127.0.0.1', port: upstreamPort }]);
  const hcm = create(HttpConnectionManagerSchema, {
    statPrefix: 'raw',
    routeSpecifier: {
      case: 'routeConfig',
      // A configured value beyond ASCII, which Envoy sends as UTF-8.
      value: { requestHeadersToAdd: [{ header: { key: 'x-configured', value: 'snow \u2603' } }], virtualHosts: [{ name: 'raw', domains: ['*'], routes: [{ match: { pathSpecifier: { case: 'prefix', value: '/' } }, action: { case: 'route', value: { clusterSpecifier: { case: 'cluster', value: 'raw' } } } }] }] },
    },
    httpFilters: [{ name: 'envoy.filters.http.router', configType: { case: 'typedConfig', value: anyPack(RouterSchema, create(RouterSchema, {})) } }],
  });
  const chain = create(FilterChainSchema, { filters: [{ name: HCM_FILTER_NAME, configType: { case: 'typedConfig', value: anyPack(HttpConnectionManagerSchema, hcm) } }] });
  const handler = buildHcmForFilterChain(chain, { clusters });
  proxy = createHttpServer((req, res) => handler.handle(req, res));
  port = await listen(proxy);
});

after(async () => {
  clusters.close();
  await close(proxy);
  await new Promise((r) => upstream.close(r));
});

beforeEach(() => {
  // Each test starts without pooled connections, so that the counts are its own.
  clusters.get('raw')!.http1.destroy();
  connections = 0;
  received = [];
});

describe('HTTP/1.1 upstream client: keep-alive', () => {
  it('reuses one connection for sequential requests, repeated response headers kept apart', async () => {
    for (let i = 0; i < 3; i++) {
      const r = await send('/ok');
      assert.equal(r.status, 200);
      assert.equal(r.body, 'hello');
      assert.deepEqual(r.headers['set-cookie'], ['a=1', 'b=2']);
    }
    assert.equal(connections, 1);
  });

  it('sends a body of known length with its head and reuses the connection after it', async () => {
    assert.equal((await send('/ok', 'POST', 'payload')).body, 'hello');
    assert.equal((await send('/ok', 'POST', '')).body, 'hello');
    assert.deepEqual(received.map((r) => r.body), ['payload', '']);
    assert.equal(connections, 1);
  });

  it('passes header bytes beyond ASCII unchanged and sends a configured value as UTF-8', async () => {
    // node:http's client writes a header value one character per byte: this is the UTF-8 of "é".
    const utf8Bytes = Buffer.from('caf\u00e9', 'utf8').toString('latin1');
    assert.equal((await send('/ok', 'GET', undefined, { 'x-name': utf8Bytes })).status, 200);
    const head = received[0]!.head;
    assert.match(head, new RegExp(`\r\nx-name: ${utf8Bytes}\r\n`));
    assert.match(head, new RegExp(`\r\nx-configured: ${Buffer.from('snow \u2603', 'utf8').toString('latin1')}\r\n`));
  });

  it('does not reuse a connection after `connection: close`, a close-delimited body, or a response cut short', async () => {
    assert.equal((await send('/close')).body, 'ok');
    assert.equal((await send('/ok')).body, 'hello');
    assert.equal(connections, 2);
    // Each of these is sent on the connection the /ok before it left idle.
    assert.equal((await send('/eof-body')).body, 'until the end');
    assert.equal((await send('/ok')).body, 'hello');
    assert.equal(connections, 3);
    await assert.rejects(send('/cut-short'));
    assert.equal((await send('/ok')).body, 'hello');
    assert.equal(connections, 4);
  });

  it('reads no body after the head of a HEAD response, then reuses the connection', async () => {
    const r = await send('/head', 'HEAD');
    assert.equal(r.status, 200);
    assert.equal(r.headers['content-length'], '5');
    assert.equal(r.body, '');
    assert.equal((await send('/ok')).body, 'hello');
    assert.equal(connections, 1);
  });

  it('passes a chunked response with its trailers, skips a 1xx before the final response', async () => {
    const r = await send('/chunked');
    assert.equal(r.body, 'hello world');
    assert.deepEqual(r.trailers, { 'x-sum': '11' });
    const c = await send('/continue-first');
    assert.equal(c.status, 201);
    assert.equal(c.body, 'done');
    assert.equal(connections, 1);
  });

  it('sends an idempotent request again when a reused connection closes unanswered, not a POST', async () => {
    assert.equal((await send('/drop-second')).body, 'first');
    assert.equal((await send('/drop-second')).body, 'first', 'the GET went again on a new connection');
    assert.equal(connections, 2);
    // The POST is the second request on the GET's new connection: dropped, and not sent again.
    const lost = await send('/drop-second', 'POST', 'x');
    assert.equal(lost.status, 503);
    assert.equal(lost.body, 'upstream connect error or disconnect/reset before headers. reset reason: connection termination');
    assert.equal(connections, 2);
  });
});

describe('HTTP/1.1 upstream client: malformed responses', () => {
  for (const path of ['/bad-status', '/conflicting-length', '/length-and-chunked', '/obs-fold']) {
    it(`${path}: 502 protocol error, and the connection is not reused`, async () => {
      const r = await send(path);
      assert.equal(r.status, 502);
      assert.equal(r.body, 'upstream connect error or disconnect/reset before headers. reset reason: protocol error');
      assert.equal((await send('/ok')).status, 200);
      assert.equal(connections, 2);
    });
  }

  it('a bad chunk size after the head went downstream: the client response is aborted', async () => {
    await assert.rejects(send('/bad-chunk'));
    assert.equal((await send('/ok')).status, 200);
    assert.equal(connections, 2);
  });
});
