// The connection manager's stream timeouts with Envoy's semantics, through a real proxy
// (in-process, real sockets, a real ADS server): stream_idle_timeout (default 5 min, 0s none)
// answers an idle stream 504 (request complete) or 408 (request still coming) with `stream
// timeout`, or resets it once its response started, and leaves an active one alone;
// request_timeout answers a request still arriving 408 `request timeout`; request_headers_timeout
// answers a head still arriving 408 `request header timeout` and closes; each is counted under
// http.<stat_prefix>. node's own 60 s / 300 s request timeouts no longer stand in.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { connect as h2connect, type ClientHttp2Session, type ClientHttp2Stream } from 'node:http2';
import { connect, type AddressInfo, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { create } from '@bufbuild/protobuf';
import { FilterChainSchema } from '../../src/gen/envoy/config/listener/v3/listener_components_pb.js';
import { HttpConnectionManagerSchema } from '../../src/gen/envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager_pb.js';
import { scope } from '../../src/common/log.js';
import { buildHcmForFilterChain } from '../../src/dataplane/http-connection-manager.js';
import { http1ServerTimeouts } from '../../src/dataplane/listener/stream-timeouts.js';
import { requestLimits } from '../../src/dataplane/request-guards.js';
import type { MeshProxy } from '../../src/dataplane/proxy.js';
import { TypeUrl } from '../../src/envoy/types.js';
import { close } from '../helpers/http.js';
import { eventually } from '../helpers/proc.js';
import { StaticClusterManager } from './static-cluster-manager.js';
import { boundPort, FixtureAds, hcmChain, listener, staticCluster, startBoundProxy, type HcmOptions } from './xds-fixtures.js';

const ms = (n: number) => ({ seconds: 0n, nanos: n * 1_000_000 });
const IDLE_MS = 300;
const REQUEST_MS = 300;
const HEADERS_MS = 200;
const sleep = (n: number) => new Promise((r) => setTimeout(r, n));

/**
 * A connection driven byte by byte: what the proxy sends back, and when it ended the connection
 * (`end` or reset) or when the response ended with `\r\n0\r\n\r\n` / a full content-length body.
 */
class RawClient {
  readonly socket: Socket;
  text = '';
  endedAt: number | undefined;

  constructor(port: number) {
    this.socket = connect(port, '127.0.0.1');
    this.socket.setEncoding('latin1');
    this.socket.on('data', (d: string) => (this.text += d));
    this.socket.on('error', () => undefined);
    this.socket.once('close', () => (this.endedAt ??= Date.now()));
    this.socket.once('end', () => (this.endedAt ??= Date.now()));
  }

  /** Writes `chunk` every `everyMs` for `forMs`, then `last` (if any). */
  async trickle(chunk: string, everyMs: number, forMs: number, last?: string): Promise<void> {
    for (const until = Date.now() + forMs; Date.now() < until && this.endedAt === undefined; ) {
      this.socket.write(chunk);
      await sleep(everyMs);
    }
    if (last !== undefined && this.endedAt === undefined) this.socket.write(last);
  }

  /** Resolves with the time the proxy ended the connection (bounded, so that a test fails rather than hangs). */
  ended(): Promise<number> {
    return eventually(() => {
      assert.ok(this.endedAt !== undefined, `the proxy ended the connection; got ${JSON.stringify(this.text)}`);
      return this.endedAt;
    });
  }

  /** Resolves once the text holds a whole response with this body. */
  answered(body: string): Promise<void> {
    return eventually(() => assert.ok(this.text.endsWith(`\r\n\r\n${body}`), `a response with body ${JSON.stringify(body)}; got ${JSON.stringify(this.text)}`));
  }
}

function assertAbout(elapsed: number, expected: number, what: string): void {
  assert.ok(elapsed >= expected - 50 && elapsed < expected + 400, `${what}: ${elapsed} ms, expected about ${expected} ms`);
}


/**
 * One h2c stream (a GET, or a POST whose body `upload` writes): the status, the body, how it
 * ended (`end`, or the error's code) and when.
 */
function h2Request(session: ClientHttp2Session, path: string, upload?: (stream: ClientHttp2Stream) => void): Promise<{ status: number; body: string; end: string; at: number }> {
  return new Promise((resolve) => {
    const stream = session.request({ ':path': path, ':method': upload ? 'POST' : 'GET' }, { endStream: !upload });
    upload?.(stream);
    let status = 0;
    let body = '';
    stream.setEncoding('utf8');
    stream.on('response', (h) => (status = Number(h[':status'])));
    stream.on('data', (d: string) => (body += d));
    stream.on('end', () => resolve({ status, body, end: 'end', at: Date.now() }));
    stream.on('error', (e: NodeJS.ErrnoException) => resolve({ status, body, end: e.code ?? e.message, at: Date.now() }));
    stream.on('close', () => resolve({ status, body, end: `closed ${stream.rstCode}`, at: Date.now() }));
  });
}

describe('stream timeouts of the connection manager (stream_idle_timeout, request_timeout, request_headers_timeout)', { timeout: 60_000 }, () => {
  let dir: string;
  let ads: FixtureAds;
  let app: Server;
  let proxy: MeshProxy;
  /** Responses the app never finishes, ended after the tests; and which requests it saw aborted. */
  const held: ServerResponse[] = [];
  const aborted: string[] = [];

  const portOf = (name: string): number => boundPort(proxy, name);
  const stat = (prefix: string, name: string): number => proxy.stats.samples().find((s) => s.name === `http.${prefix}.${name}`)?.value ?? 0;
  /**
   * What `send` writes on a new connection to listener `name` gets, about `expectedMs` after it
   * began, a 408 with `body`, then the proxy closes the connection; counted once as `counter`.
   */
  const expectTimeout = async (name: string, counter: string, body: string, expectedMs: number, send: (c: RawClient) => Promise<void>): Promise<void> => {
    const counted = stat(name, counter);
    const c = new RawClient(portOf(name));
    const sent = Date.now();
    await send(c);
    await c.answered(body);
    assert.match(c.text, /^HTTP\/1\.1 408 Request Timeout\r\n/);
    assert.match(c.text, /\r\nconnection: close\r\n/i);
    assertAbout((await c.ended()) - sent, expectedMs, 'answered and closed after');
    assert.equal(stat(name, counter), counted + 1);
  };
  /** Runs `use` over an h2c (prior knowledge) session to listener `name`, closed after. */
  const overH2 = async (name: string, use: (session: ClientHttp2Session) => Promise<void>): Promise<void> => {
    const session = h2connect(`http://127.0.0.1:${portOf(name)}`);
    session.on('error', () => undefined);
    try {
      await use(session);
    } finally {
      session.destroy();
    }
  };
  const hcm = (name: string, timeouts: HcmOptions['timeouts']) => listener(name, 0, [hcmChain({ cluster: 'app', statPrefix: name, timeouts })]);

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'mesh-stream-timeouts-'));
    app = createServer((req: IncomingMessage, res: ServerResponse) => {
      req.once('close', () => !res.writableEnded && aborted.push(req.url ?? ''));
      if (req.url === '/hang') {
        held.push(res);
        req.resume();
      } else if (req.url === '/stall') {
        // The response starts, then nothing more comes.
        held.push(res);
        res.writeHead(200, { 'content-type': 'text/plain' });
        res.write('first\n');
      } else {
        let n = 0;
        req.on('data', (d: Buffer) => (n += d.length));
        req.on('end', () => res.end(`app ${req.url} ${n}\n`));
      }
    });
    await new Promise<void>((r) => app.listen(0, '127.0.0.1', r));
    ads = await new FixtureAds().listen();
    ads.set(TypeUrl.Cluster, [staticCluster('app', [(app.address() as AddressInfo).port])]);
    ads.set(TypeUrl.Listener, [
      hcm('idle', { streamIdleTimeout: ms(IDLE_MS) }),
      hcm('request', { requestTimeout: ms(REQUEST_MS) }),
      hcm('headers', { requestHeadersTimeout: ms(HEADERS_MS) }),
      hcm('off', { streamIdleTimeout: { seconds: 0n } }),
    ]);
    proxy = await startBoundProxy(dir, ads.port, 4, 500);
  });

  after(async () => {
    for (const res of held) res.destroy();
    await proxy.stop(0);
    ads.close();
    await close(app);
    rmSync(dir, { recursive: true, force: true });
  });

  it('stream_idle_timeout: a request whose upstream never answers gets 504 `stream timeout` after the timeout, not before; the upstream request is reset', async () => {
    const counted = stat('idle', 'downstream_rq_idle_timeout');
    const c = new RawClient(portOf('idle'));
    const sent = Date.now();
    c.socket.write('GET /hang HTTP/1.1\r\nhost: test\r\n\r\n');
    await c.answered('stream timeout');
    assertAbout(Date.now() - sent, IDLE_MS, 'answered after');
    // The request had all arrived: what timed out was the wait for the upstream (Envoy's 504).
    assert.match(c.text, /^HTTP\/1\.1 504 Gateway Timeout\r\n/);
    assert.match(c.text, /\r\ncontent-type: text\/plain\r\n/i);
    assert.equal(stat('idle', 'downstream_rq_idle_timeout'), counted + 1);
    await eventually(() => assert.ok(aborted.includes('/hang'), 'the upstream request was reset'));
    // The connection serves on.
    c.socket.write('GET /after HTTP/1.1\r\nhost: test\r\n\r\n');
    await c.answered('app /after 0\n');
    c.socket.destroy();
  });

  it('stream_idle_timeout: an upload that stops halfway gets 408 `stream timeout` and the connection closes', async () => {
    await expectTimeout('idle', 'downstream_rq_idle_timeout', 'stream timeout', IDLE_MS, async (c) => {
      c.socket.write('POST /upload HTTP/1.1\r\nhost: test\r\ncontent-length: 100\r\n\r\nhalf');
    });
  });

  it('stream_idle_timeout: a response that stalls after its first bytes is reset (the connection closes) after the timeout', async () => {
    const counted = stat('idle', 'downstream_rq_idle_timeout');
    const c = new RawClient(portOf('idle'));
    c.socket.write('GET /stall HTTP/1.1\r\nhost: test\r\n\r\n');
    await eventually(() => assert.match(c.text, /^HTTP\/1\.1 200 OK\r\n[\s\S]*first\n/));
    const stalled = Date.now();
    assertAbout((await c.ended()) - stalled, IDLE_MS, 'reset after');
    assert.doesNotMatch(c.text, /\r\n0\r\n\r\n$/, 'the response did not end as if complete');
    assert.equal(stat('idle', 'downstream_rq_idle_timeout'), counted + 1);
  });

  it('stream_idle_timeout: a slow but active upload (a chunk every 50 ms for twice the timeout) is not cut', async () => {
    const c = new RawClient(portOf('idle'));
    c.socket.write('POST /upload HTTP/1.1\r\nhost: test\r\ntransfer-encoding: chunked\r\n\r\n');
    await c.trickle('1\r\nx\r\n', 50, IDLE_MS * 2, '0\r\n\r\n');
    await eventually(() => assert.match(c.text, /^HTTP\/1\.1 200 OK\r\n[\s\S]*app \/upload \d+\n$/));
    assert.equal(c.endedAt, undefined);
    c.socket.destroy();
  });

  it('stream_idle_timeout 0s: a request whose upstream never answers is not ended', async () => {
    const counted = stat('off', 'downstream_rq_idle_timeout');
    const c = new RawClient(portOf('off'));
    c.socket.write('GET /hang HTTP/1.1\r\nhost: test\r\n\r\n');
    await sleep(IDLE_MS * 3);
    assert.deepEqual([c.text, c.endedAt, stat('off', 'downstream_rq_idle_timeout')], ['', undefined, counted]);
    c.socket.destroy();
  });

  it('stream_idle_timeout unset is Envoy\'s 5 minutes, 0s none; request_timeout and request_headers_timeout unset are none', () => {
    const limits = (o: HcmOptions['timeouts'] = {}) => requestLimits(create(HttpConnectionManagerSchema, o));
    assert.deepEqual([limits().streamIdleTimeoutMs, limits().requestTimeoutMs, limits().requestHeadersTimeoutMs], [300_000, 0, 0]);
    assert.equal(limits({ streamIdleTimeout: { seconds: 0n } }).streamIdleTimeoutMs, 0);
    assert.equal(limits({ streamIdleTimeout: { seconds: 30n * 86_400n } }).streamIdleTimeoutMs, 2_147_483_647);
    const timeouts = limits({ requestTimeout: { seconds: 2n }, requestHeadersTimeout: ms(500) });
    assert.deepEqual([timeouts.requestTimeoutMs, timeouts.requestHeadersTimeoutMs], [2_000, 500]);
  });

  it('node\'s own request timeouts (headersTimeout 60 s, requestTimeout 300 s) are off unless configured, then Envoy\'s values', () => {
    const server = (o: HcmOptions['timeouts'] = {}) => http1ServerTimeouts(requestLimits(create(HttpConnectionManagerSchema, o)));
    assert.deepEqual(server(), { headersTimeout: 0, requestTimeout: 0 });
    assert.deepEqual(server({ requestTimeout: ms(REQUEST_MS) }), { headersTimeout: 0, requestTimeout: REQUEST_MS, connectionsCheckingInterval: 37 });
    // node refuses a header timeout longer than the request timeout; it could not fire first anyway.
    assert.deepEqual(server({ requestTimeout: { seconds: 1n }, requestHeadersTimeout: { seconds: 60n } }), { headersTimeout: 1_000, requestTimeout: 1_000, connectionsCheckingInterval: 125 });
  });

  it('no node 408 for a slow head when request_headers_timeout and request_timeout are unset: a head trickled for 700 ms is served', async () => {
    const c = new RawClient(portOf('idle'));
    // A byte every 20 ms: the stream is never idle, and no timeout bounds the head.
    for (const ch of 'GET /slowhead HTTP/1.1\r\nhost: test\r\n\r\n') {
      c.socket.write(ch);
      await sleep(20);
    }
    await c.answered('app /slowhead 0\n');
    c.socket.destroy();
  });

  it('request_timeout: an upload still arriving after the timeout, though active, gets 408 `request timeout`; a fast one passes', async () => {
    await expectTimeout('request', 'downstream_rq_timeout', 'request timeout', REQUEST_MS, async (c) => {
      c.socket.write('POST /upload HTTP/1.1\r\nhost: test\r\ntransfer-encoding: chunked\r\n\r\n');
      await c.trickle('1\r\nx\r\n', 50, REQUEST_MS * 3);
    });
    const counted = stat('request', 'downstream_rq_timeout');
    const fast = new RawClient(portOf('request'));
    fast.socket.write('POST /upload HTTP/1.1\r\nhost: test\r\ncontent-length: 5\r\n\r\nhello');
    await fast.answered('app /upload 5\n');
    assert.equal(stat('request', 'downstream_rq_timeout'), counted);
    fast.socket.destroy();
  });

  it('request_headers_timeout: half a request head gets 408 `request header timeout` and the connection closes; a whole head in time passes', async () => {
    await expectTimeout('headers', 'downstream_rq_header_timeout', 'request header timeout', HEADERS_MS, async (c) => {
      c.socket.write('GET /half HTTP/1.1\r\nhost: te');
    });
    const counted = stat('headers', 'downstream_rq_header_timeout');

    // The timer runs from the head's first byte: a connection idle before it is not cut.
    const whole = new RawClient(portOf('headers'));
    await sleep(HEADERS_MS * 2);
    whole.socket.write('GET /whole HTTP/1.1\r\nhost: test\r\n\r\n');
    await whole.answered('app /whole 0\n');
    assert.equal(stat('headers', 'downstream_rq_header_timeout'), counted);
    whole.socket.destroy();
  });

  it('HTTP/2 (h2c): an idle stream gets 504 `stream timeout`, a stalled response is reset, and the session serves new streams', () =>
    overH2('idle', async (session) => {
      const counted = stat('idle', 'downstream_rq_idle_timeout');
      const sent = Date.now();
      const hang = await h2Request(session, '/hang');
      assert.deepEqual([hang.status, hang.body, hang.end], [504, 'stream timeout', 'end']);
      assertAbout(hang.at - sent, IDLE_MS, 'answered after');
      const stall = await h2Request(session, '/stall');
      assert.deepEqual([stall.status, stall.body], [200, 'first\n']);
      // Reset as Envoy resets a downstream stream (RST_STREAM NO_ERROR), the body cut short.
      assertAbout(stall.at - hang.at, IDLE_MS, 'reset after');
      assert.equal(stat('idle', 'downstream_rq_idle_timeout'), counted + 2);
      await eventually(() => assert.equal(aborted.filter((u) => u === '/stall').length, 2, 'the upstream response was reset'));
      assert.equal(session.closed || session.destroyed, false, 'the session stays up');
      const next = await h2Request(session, '/next');
      assert.deepEqual([next.status, next.body, next.end], [200, 'app /next 0\n', 'end']);
    }));

  it('HTTP/2 (h2c): request_timeout answers a stream whose request body is still arriving 408 `request timeout`', () =>
    overH2('request', async (session) => {
      const counted = stat('request', 'downstream_rq_timeout');
      const sent = Date.now();
      let writer: NodeJS.Timeout | undefined;
      const answer = await h2Request(session, '/upload', (stream) => (writer = setInterval(() => stream.writable && stream.write('x'), 50)));
      clearInterval(writer);
      assert.deepEqual([answer.status, answer.body], [408, 'request timeout']);
      assertAbout(answer.at - sent, REQUEST_MS, 'answered after');
      assert.equal(stat('request', 'downstream_rq_timeout'), counted + 1);
    }));

  it('the three fields are applied: they are no longer named in the "accepted but not applied" warning', (t) => {
    const warn = t.mock.method(scope('http'), 'warn', () => undefined);
    const chain = hcmChain({ statPrefix: 'warned', timeouts: { streamIdleTimeout: ms(IDLE_MS), requestTimeout: { seconds: 5n }, requestHeadersTimeout: { seconds: 2n } } });
    buildHcmForFilterChain(create(FilterChainSchema, chain), { clusters: new StaticClusterManager() });
    assert.equal(warn.mock.callCount(), 0);
  });
});
