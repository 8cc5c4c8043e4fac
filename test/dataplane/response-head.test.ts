// A response head reaches the client when it reaches the proxy, as Envoy forwards it, not with the
// body's first bytes: a stream of events or a long poll shows its status and headers at once. Real
// proxy (in-process, real ADS server) in front of a real HTTP/1.1 upstream, for HTTP/1.1 and h2c
// clients.
import assert from 'node:assert/strict';
import { createServer, request } from 'node:http';
import { connect as h2connect, createServer as createH2Server } from 'node:http2';
import { after, before, describe, it } from 'node:test';
import type { MeshProxy } from '../../src/dataplane/proxy.js';
import { startTwoApps, type TwoApps } from './two-apps-fixture.js';
import { boundPort } from './xds-fixtures.js';

const BODY_DELAY_MS = 600;

/** Sends its head at once and its body BODY_DELAY_MS later (chunked, or with a content-length for /sized). */
const app = createServer((req, res) => {
  req.resume();
  res.writeHead(200, { 'content-type': 'text/event-stream', ...(req.url === '/sized' ? { 'content-length': '5' } : {}) });
  res.flushHeaders();
  setTimeout(() => res.end('event'), BODY_DELAY_MS);
});

/** The same over h2c, for a cluster whose upstream protocol is HTTP/2. */
const h2app = createH2Server();
h2app.on('stream', (stream) => {
  stream.respond({ ':status': 200, 'content-type': 'text/event-stream' });
  setTimeout(() => stream.end('event'), BODY_DELAY_MS);
});

/** When the status and headers arrived, and when the body ended, in ms from the request. */
interface Timing {
  status: number;
  contentType: string | undefined;
  headAt: number;
  endAt: number;
  body: string;
}

function http1Get(port: number, path: string): Promise<Timing> {
  const t0 = Date.now();
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path, agent: false }, (res) => {
      const headAt = Date.now() - t0;
      let body = '';
      res.on('data', (d: Buffer) => (body += d.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, contentType: res.headers['content-type'], headAt, endAt: Date.now() - t0, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

function h2Get(port: number, path: string): Promise<Timing> {
  const t0 = Date.now();
  const session = h2connect(`http://127.0.0.1:${port}`);
  return new Promise((resolve, reject) => {
    const stream = session.request({ ':path': path });
    let head = { status: 0, contentType: undefined as string | undefined, headAt: 0 };
    let body = '';
    stream.on('response', (h) => (head = { status: Number(h[':status']), contentType: h['content-type'] as string | undefined, headAt: Date.now() - t0 }));
    stream.on('data', (d: Buffer) => (body += d.toString()));
    stream.on('end', () => {
      session.close();
      resolve({ ...head, endAt: Date.now() - t0, body });
    });
    stream.on('error', reject);
  });
}

describe('response head forwarding', { timeout: 20_000 }, () => {
  let apps: TwoApps;
  let proxy: MeshProxy;

  before(async () => {
    apps = await startTwoApps(app, h2app);
    proxy = apps.proxy;
  });

  after(() => apps.stop());

  for (const path of ['/chunked', '/sized']) {
    it(`HTTP/1.1 client, ${path} body: the head arrives long before the body`, async () => {
      const t = await http1Get(boundPort(proxy, 'in'), path);
      assert.deepEqual([t.status, t.contentType, t.body], [200, 'text/event-stream', 'event']);
      assert.ok(t.headAt < BODY_DELAY_MS / 2, `head after ${t.headAt} ms, body ended after ${t.endAt} ms`);
      assert.ok(t.endAt >= BODY_DELAY_MS - 50, `the body ended after ${t.endAt} ms`);
    });
  }

  it('HTTP/1.1 client of an HTTP/2 upstream: the head arrives long before the body', async () => {
    const t = await http1Get(boundPort(proxy, 'in-h2app'), '/');
    assert.deepEqual([t.status, t.contentType, t.body], [200, 'text/event-stream', 'event']);
    assert.ok(t.headAt < BODY_DELAY_MS / 2, `head after ${t.headAt} ms, body ended after ${t.endAt} ms`);
  });

  it('HTTP/2 client: the head arrives long before the body', async () => {
    const t = await h2Get(boundPort(proxy, 'in'), '/chunked');
    assert.deepEqual([t.status, t.contentType, t.body], [200, 'text/event-stream', 'event']);
    assert.ok(t.headAt < BODY_DELAY_MS / 2, `head after ${t.headAt} ms, body ended after ${t.endAt} ms`);
  });
});
