// HTTP/1.1 upstream exchanges on real loopback sockets: a minimal proxy (a node:http server whose
// handler runs http1Exchange on an Http1Pool) in front of a real upstream; the assertions are on
// what a node:http client sees and on what the upstream received.
import assert from 'node:assert/strict';
import { createServer, request, type IncomingHttpHeaders, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { after, afterEach, before, describe, it } from 'node:test';
import { Http1Pool } from '../../src/dataplane/upstream-pools.js';
import { DEFAULT_CONNECTION_LIMITS } from '../../src/dataplane/connection-limits.js';
import { bodyFraming, type HeaderMap } from '../../src/dataplane/http-codec.js';
import { http1Exchange } from '../../src/dataplane/http1-exchange.js';
import { close, listen } from '../helpers/http.js';
import { eventually } from '../helpers/proc.js';

interface Seen {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  body: string;
  trailers: Record<string, string>;
}

const BIG = 'x'.repeat(16 * 1024 * 1024);
/**
 * How the proxy writes /big into its downstream response: bytes written, whether the response is
 * full now (a write() returned false and no 'drain' came since), and what was still written while
 * it was full.
 */
const bigWrites = { written: 0, full: false, writtenWhileFull: 0 };
let upstream: Server;
let upstreamPort: number;
let seen: Seen[] = [];
/** The upstream's socket of the last /hang request. */
let hanging: Socket | undefined;

/** The upstream connections opened from now on that are still open. */
function openConnections(): Set<Socket> {
  const open = new Set<Socket>();
  upstream.on('connection', (s: Socket) => {
    open.add(s);
    s.on('close', () => open.delete(s));
  });
  return open;
}

function answer(req: IncomingMessage, res: ServerResponse): void {
  switch (req.url) {
    case '/hang':
      hanging = req.socket;
      return; // never answers
    case '/big':
      res.writeHead(200, { 'content-length': BIG.length });
      res.end(BIG);
      return;
    case '/trailers':
      res.writeHead(201, 'Made It', { trailer: 'x-up-trailer', 'x-up': 'yes', connection: 'keep-alive' });
      res.write('part1,');
      res.addTrailers({ 'x-up-trailer': 'done' });
      res.end('part2');
      return;
    default:
      res.writeHead(200, { 'content-type': 'text/plain', 'x-up': 'yes' });
      res.end(`got ${req.method} ${req.url}`);
  }
}

/**
 * The proxies of the running test and their pools, closed after it whether it passed or not: a
 * failed assertion must not leave a listening server and pooled upstream connections behind, which
 * keep the process alive, so that the whole file hangs instead of reporting the failure.
 */
const running: { pool: Http1Pool; server: Server }[] = [];

/** A proxy of one route: every request goes to `ep` through http1Exchange on `pool`. */
async function proxyTo(pool: Http1Pool, ep: { host: string; port: number }): Promise<{ port: number; server: Server; errors: string[] }> {
  const errors: string[] = [];
  const server = createServer((req, res) => {
    const headers: Record<string, string | string[]> = {};
    for (const [k, v] of Object.entries(req.headers)) if (v !== undefined && k !== 'connection') headers[k] = v;
    const framing = bodyFraming(req);
    const ex = http1Exchange({ endpoint: ep, method: req.method ?? 'GET', path: req.url ?? '/', headers, framing }, pool, {
      error(e) {
        errors.push(e.message);
        res.writeHead(503).end('failed');
      },
      head(up, body) {
        res.writeHead(up.status, up.message, { ...up.headers, 'x-via': 'proxy' });
        body.pipeTo(res, {
          bodyDone(t, tail) {
            if (t) res.addTrailers(t);
            if (tail) res.end(tail);
            else res.end();
          },
        });
      },
    });
    if (req.url === '/big') watchWrites(res);
    if (req.url === '/hang') setTimeout(() => {
      ex.destroy();
      res.writeHead(504).end('gave up');
    }, 50);
    if (ex.body) {
      const body = ex.body;
      req.pipe(body, { end: false });
      req.on('end', () => ex.finish(req.rawTrailers.length > 0 ? (req.trailers as HeaderMap) : undefined));
    }
  });
  running.push({ pool, server });
  return { port: await listen(server), server, errors };
}

/** Keeps `bigWrites` up to date for the writes into `res`. */
function watchWrites(res: ServerResponse): void {
  const write = res.write.bind(res) as (chunk: Buffer) => boolean;
  Object.assign(bigWrites, { written: 0, full: false, writtenWhileFull: 0 });
  res.on('drain', () => (bigWrites.full = false));
  res.write = ((chunk: Buffer) => {
    if (bigWrites.full) bigWrites.writtenWhileFull += chunk.length;
    bigWrites.written += chunk.length;
    const ok = write(chunk);
    if (!ok) bigWrites.full = true;
    return ok;
  }) as typeof res.write;
}

interface Reply {
  status: number;
  message: string;
  headers: IncomingHttpHeaders;
  body: string;
  trailers: Record<string, string>;
}

/**
 * Sends a request and reads the whole reply. `stall`: the client reads the first body chunk, then
 * stops reading until the promise it is given settles.
 */
function send(port: number, o: { method?: string; path?: string; headers?: Record<string, string>; body?: string[]; trailers?: Record<string, string>; stall?: () => Promise<unknown> } = {}): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, method: o.method ?? 'GET', path: o.path ?? '/', headers: o.headers ?? {}, agent: false }, (res) => {
      let body = '';
      res.setEncoding('latin1');
      res.on('data', (d: string) => {
        body += d;
        if (o.stall && body.length === d.length) {
          res.pause();
          o.stall().then(() => res.resume(), reject);
        }
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, message: res.statusMessage ?? '', headers: res.headers, body, trailers: res.trailers as Record<string, string> }));
      res.on('error', reject);
    });
    req.on('error', reject);
    for (const c of o.body ?? []) req.write(c);
    if (o.trailers) req.addTrailers(o.trailers);
    req.end();
  });
}

before(async () => {
  upstream = createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (d: string) => (body += d));
    req.on('end', () => {
      seen.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers, body, trailers: req.trailers as Record<string, string> });
      answer(req, res);
    });
  });
  upstreamPort = await listen(upstream);
});

afterEach(async () => {
  for (const { pool, server } of running.splice(0)) {
    pool.destroy();
    await close(server);
  }
});

after(() => close(upstream));

describe('http1Exchange', () => {
  it('forwards a request without a body and streams the response back, over one kept-alive connection', async () => {
    let connections = 0;
    const pool = new Http1Pool({ settings: () => ({ connectTimeoutMs: 1000, connection: DEFAULT_CONNECTION_LIMITS }), count: { opened: () => connections++ } });
    const p = await proxyTo(pool, { host: '127.0.0.1', port: upstreamPort });
    seen = [];
    const r1 = await send(p.port, { path: '/a?q=1', headers: { 'x-custom': 'v', host: 'app.internal' } });
    const r2 = await send(p.port, { path: '/b' });
    assert.deepEqual([r1.status, r1.body, r1.headers['x-up'], r1.headers['x-via']], [200, 'got GET /a?q=1', 'yes', 'proxy']);
    assert.equal(r2.body, 'got GET /b');
    assert.equal(seen[0]!.headers['x-custom'], 'v');
    assert.equal(seen[0]!.headers.host, 'app.internal');
    assert.equal(connections, 1, 'the second request reuses the first connection');
  });

  it('sends a body of known length, and a chunked body with its trailers', async () => {
    const pool = new Http1Pool();
    const p = await proxyTo(pool, { host: '127.0.0.1', port: upstreamPort });
    seen = [];
    const posted = await send(p.port, { method: 'POST', path: '/post', headers: { 'content-length': '6' }, body: ['abc', 'def'] });
    assert.equal(posted.body, 'got POST /post');
    const chunked = await send(p.port, { method: 'PUT', path: '/put', headers: { 'transfer-encoding': 'chunked' }, body: ['a', 'b'], trailers: { 'x-checksum': '42' } });
    assert.equal(chunked.body, 'got PUT /put');
    assert.deepEqual(
      seen.map((s) => [s.method, s.body, s.headers['content-length'], s.trailers]),
      [
        ['POST', 'abcdef', '6', {}],
        ['PUT', 'ab', undefined, { 'x-checksum': '42' }],
      ],
    );
  });

  it('passes the reason phrase and response trailers, without hop-by-hop headers', async () => {
    const pool = new Http1Pool();
    const p = await proxyTo(pool, { host: '127.0.0.1', port: upstreamPort });
    const r = await send(p.port, { path: '/trailers' });
    assert.deepEqual([r.status, r.message, r.body, r.trailers], [201, 'Made It', 'part1,part2', { 'x-up-trailer': 'done' }]);
    assert.equal(r.headers['x-up'], 'yes');
    assert.equal(r.headers.trailer, 'x-up-trailer');
  });

  it('holds the upstream back for a slow client and delivers a large body intact', async () => {
    const pool = new Http1Pool();
    const p = await proxyTo(pool, { host: '127.0.0.1', port: upstreamPort });
    // The client stops reading after the first chunk. The kernel takes a few MiB for it, then the
    // proxy's response stays full: the client reads the rest once it is, after at least 1 MiB
    // (an early, passing fullness of the first writes does not count).
    const stalled = (): void => assert.ok(bigWrites.full && bigWrites.written >= 1 << 20, `the response to the stalled client is full (${bigWrites.written} bytes written)`);
    const r = await send(p.port, { path: '/big', stall: () => eventually(stalled) });
    assert.equal(r.body.length, BIG.length);
    assert.equal(r.body, BIG);
    // Backpressure: while the response is full the proxy reads nothing from the upstream, so it
    // writes nothing until the client drained it; without it the rest of the 16 MiB would pile up
    // in the proxy. Unlike comparing how far client and upstream had got, this does not depend on
    // the kernel's buffer sizes or on the box's load.
    assert.equal(bigWrites.writtenWhileFull, 0);
  });

  it('reports a refused connection as an error', async () => {
    const probe = createServer();
    const freePort = await listen(probe);
    await close(probe);
    let connections = 0;
    const pool = new Http1Pool({ settings: () => ({ connectTimeoutMs: 1000, connection: DEFAULT_CONNECTION_LIMITS }), count: { opened: () => connections++ } });
    const p = await proxyTo(pool, { host: '127.0.0.1', port: freePort });
    const r = await send(p.port);
    assert.deepEqual([r.status, r.body], [503, 'failed']);
    assert.equal(p.errors.length, 1);
    assert.match(p.errors[0]!, /ECONNREFUSED/);
    assert.equal(connections, 1);
  });

  it('destroy() drops the upstream request and reports nothing', async () => {
    const pool = new Http1Pool();
    const p = await proxyTo(pool, { host: '127.0.0.1', port: upstreamPort });
    const r = await send(p.port, { path: '/hang' });
    assert.deepEqual([r.status, r.body], [504, 'gave up']);
    assert.deepEqual(p.errors, []);
    // The hanging request's connection is closed rather than reused.
    await eventually(() => assert.equal(hanging?.destroyed, true));
  });

  it('a retired pool finishes what is in flight and keeps no connection', async () => {
    const pool = new Http1Pool();
    const p = await proxyTo(pool, { host: '127.0.0.1', port: upstreamPort });
    const open = openConnections();
    assert.equal((await send(p.port, { path: '/warm' })).status, 200);
    assert.equal(open.size, 1);
    pool.retire();
    const r = await send(p.port, { path: '/after' });
    assert.equal(r.body, 'got GET /after');
    await eventually(() => assert.equal(open.size, 0));
  });
});
