// A response that starts before its request has all arrived ends the stream with it, as in Envoy
// (conn_manager_impl: downstream_rq_response_before_rq_complete): an HTTP/1.1 response says
// `connection: close` and the proxy closes the connection after it without reading the rest of the
// upload; an HTTP/2 stream is reset with NO_ERROR after the response's END_STREAM. Real proxy
// (in-process, real ADS server) in front of real HTTP/1.1 and h2c upstreams that answer an upload
// before reading it.
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { connect as h2connect, createServer as createH2Server, type ClientHttp2Session } from 'node:http2';
import { connect } from 'node:net';
import { after, before, describe, it } from 'node:test';
import type { MeshProxy } from '../../src/dataplane/proxy.js';
import { startTwoApps, type TwoApps } from './two-apps-fixture.js';
import { boundPort, hcmChain, listener } from './xds-fixtures.js';

/** How long a client waits for the proxy to end what it should end. */
const WAIT_MS = 3_000;
const STAT = 'http.inbound_test.downstream_rq_response_before_rq_complete';

/** /early answers 413 without reading the upload; anything else reads it all, then answers 200. */
const app = createServer((req, res) => {
  if (req.url === '/early') {
    res.writeHead(413, { 'content-type': 'text/plain' });
    res.end('too large');
    return;
  }
  let n = 0;
  req.on('data', (d: Buffer) => (n += d.length));
  req.on('end', () => res.end(`read ${n}`));
});

/** The same /early over h2c, for a cluster whose upstream protocol is HTTP/2. */
const h2app = createH2Server();
h2app.on('stream', (stream) => {
  stream.respond({ ':status': 413, 'content-type': 'text/plain' });
  stream.end('too large');
});

/** An HTTP/1.1 upload of `announced` bytes of which only the first 64 KiB are sent (0: a GET); the raw answer and whether the proxy closed the connection. */
function h1PartialUpload(port: number, path: string, announced: number): Promise<{ answer: string; closed: boolean }> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    let answer = '';
    const timer = setTimeout(() => {
      socket.destroy();
      resolve({ answer, closed: false });
    }, WAIT_MS);
    socket.on('data', (d: Buffer) => (answer += d.toString()));
    socket.on('close', () => {
      clearTimeout(timer);
      resolve({ answer, closed: true });
    });
    socket.on('error', reject);
    socket.write(announced > 0 ? `POST ${path} HTTP/1.1\r\nhost: app\r\ncontent-length: ${announced}\r\n\r\n` : `GET ${path} HTTP/1.1\r\nhost: app\r\n\r\n`);
    if (announced > 0) socket.write(Buffer.alloc(Math.min(announced, 64 * 1024)));
  });
}

/** An h2c POST that sends 64 KiB and keeps its side open: status, body, and the stream's reset code (or 'still open'). */
function h2PartialUpload(session: ClientHttp2Session, path: string): Promise<{ status: unknown; body: string; rstCode: number | 'still open' }> {
  return new Promise((resolve) => {
    const s = session.request({ ':method': 'POST', ':path': path, 'content-type': 'application/octet-stream' });
    let status: unknown;
    let body = '';
    s.setEncoding('utf8');
    s.on('response', (h) => (status = h[':status']));
    s.on('data', (d: string) => (body += d));
    s.on('error', () => {});
    const timer = setTimeout(() => resolve({ status, body, rstCode: 'still open' }), WAIT_MS);
    s.on('close', () => {
      clearTimeout(timer);
      resolve({ status, body, rstCode: s.rstCode });
    });
    s.write(Buffer.alloc(64 * 1024));
  });
}

describe('a response before its request is complete', { timeout: 30_000 }, () => {
  let apps: TwoApps;
  let proxy: MeshProxy;
  const stat = (): number => proxy.stats.samples().find((s) => s.name === STAT)?.value ?? 0;

  before(async () => {
    // 'no-cluster' routes to a cluster that does not exist: every request gets a local 503 at once.
    apps = await startTwoApps(app, h2app, [listener('no-cluster', 0, [hcmChain({ cluster: 'missing' })])]);
    proxy = apps.proxy;
  });

  after(() => apps.stop());

  it('HTTP/1.1: the early answer says connection: close, and the proxy closes the connection without reading the rest', async () => {
    const before = stat();
    const r = await h1PartialUpload(boundPort(proxy, 'in'), '/early', 1024 * 1024);
    assert.match(r.answer, /^HTTP\/1\.1 413 /);
    assert.match(r.answer, /\r\nconnection: close\r\n/i);
    assert.match(r.answer, /\r\ntoo large\r\n/);
    assert.equal(r.closed, true, 'the proxy closed the connection');
    assert.equal(stat() - before, 1);
  });

  it('HTTP/1.1: a response after the whole upload keeps the connection and is not counted', async () => {
    const before = stat();
    const r = await h1PartialUpload(boundPort(proxy, 'in'), '/read', 1000);
    assert.match(r.answer, /^HTTP\/1\.1 200 /);
    assert.match(r.answer, /read 1000/);
    assert.doesNotMatch(r.answer, /connection: close/i);
    assert.equal(r.closed, false, 'the connection stays open');
    assert.equal(stat() - before, 0);
  });

  it('HTTP/1.1: a local reply to a request without a body keeps the connection and is not counted', async () => {
    const before = stat();
    const r = await h1PartialUpload(boundPort(proxy, 'no-cluster'), '/x', 0);
    assert.match(r.answer, /^HTTP\/1\.1 503 /);
    assert.doesNotMatch(r.answer, /connection: close/i);
    assert.equal(r.closed, false, 'the connection stays open');
    assert.equal(stat() - before, 0);
  });

  for (const [name, upstream] of [['an HTTP/1.1', 'in'], ['an HTTP/2', 'in-h2app']] as const) {
    it(`HTTP/2 client, ${name} upstream: the stream is reset (NO_ERROR) after the early answer`, async () => {
      const before = stat();
      const session = h2connect(`http://127.0.0.1:${boundPort(proxy, upstream)}`);
      try {
        assert.deepEqual(await h2PartialUpload(session, '/early'), { status: 413, body: 'too large', rstCode: 0 });
      } finally {
        session.destroy();
      }
      assert.equal(stat() - before, 1);
    });
  }
});
