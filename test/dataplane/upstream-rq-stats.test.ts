// A cluster's request gauges and byte counters as an operator reads them from the admin's /stats,
// through a real proxy (in-process, real sockets, a real ADS server) to real HTTP/1.1, h2c and TLS
// upstreams: upstream_rq_active while requests are in flight, upstream_rq_pending_active /
// upstream_rq_pending_total while a request waits for its connection, and
// upstream_cx_rx_bytes_total / upstream_cx_tx_bytes_total.
import assert from 'node:assert/strict';
import { createServer, type ServerResponse } from 'node:http';
import { createServer as createH2Server, type ServerHttp2Stream } from 'node:http2';
import { createServer as createTcpServer, type AddressInfo, type Socket } from 'node:net';
import { after, before, describe, it } from 'node:test';
import type { MeshProxy } from '../../src/dataplane/proxy.js';
import { chunkedPost, close, listen, rawGet } from '../helpers/http.js';
import { eventually } from '../helpers/proc.js';
import { boundPort } from './xds-fixtures.js';
import { clusterStats, httpCluster, proxyPerCluster, settles } from './cluster-stats-fixtures.js';
import { upstreamTls } from './tls-fixtures.js';

const RQ_STATS = ['upstream_rq_total', 'upstream_rq_active', 'upstream_rq_pending_active', 'upstream_rq_pending_total'] as const;
const BYTES = ['upstream_cx_rx_bytes_total', 'upstream_cx_tx_bytes_total'] as const;

/** Responses of /hold requests, answered when the test says. */
const held: ServerResponse[] = [];
/** The upstream's side of the connection of the last request. */
let lastSocket: Socket | undefined;

const app = createServer((req, res) => {
  req.resume();
  lastSocket = req.socket;
  if (req.url === '/hold') held.push(res);
  else if (req.url === '/reset') {
    // Part of the announced body, then the upstream goes away.
    res.writeHead(200, { 'content-length': '100' });
    res.write('partial');
    setTimeout(() => req.socket.destroy(), 20);
  } else res.end('hello from the app');
});
app.keepAliveTimeout = 60_000;

const h2 = createH2Server();
/** h2 streams of /hold, answered when the test says. */
const heldStreams: ServerHttp2Stream[] = [];
h2.on('stream', (stream, headers) => {
  if (headers[':path'] === '/hold') heldStreams.push(stream);
  else stream.respond({ ':status': 200 }, { endStream: true });
});

/** Accepts connections and never says a word: a TLS handshake with it never ends. */
const silent = createTcpServer();
const silentSockets: Socket[] = [];
silent.on('connection', (s) => silentSockets.push(s));

describe('upstream request gauges and byte counters', { timeout: 30_000 }, () => {
  let proxy: MeshProxy;
  let stop: () => Promise<void>;
  const portOf = (name: string): number => boundPort(proxy, name);

  before(async () => {
    const appPort = await listen(app);
    await new Promise<void>((r) => h2.listen(0, '127.0.0.1', r));
    await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
    const clusters = [
      httpCluster('own', appPort),
      httpCluster('streams', (h2.address() as AddressInfo).port, { h2: true }),
      httpCluster('lent', appPort),
      httpCluster('lentreset', appPort),
      httpCluster('undici', appPort),
      httpCluster('handshake', (silent.address() as AddressInfo).port, {}, { transportSocket: upstreamTls({}, 'silent.test') }),
      httpCluster('bytes', appPort),
    ];
    ({ proxy, stop } = await proxyPerCluster(clusters));
  });

  after(async () => {
    for (const r of held) r.end();
    for (const s of heldStreams) s.close();
    await stop();
    for (const s of silentSockets) s.destroy();
    await Promise.all([close(app), new Promise((r) => h2.close(r)), new Promise((r) => silent.close(r))]);
  });

  it("the proxy's own HTTP/1.1 client: two requests in flight are active, each waited for its new connection, none is active once answered; a request on a kept connection does not wait", async () => {
    const responses = [rawGet(portOf('own'), '/hold'), rawGet(portOf('own'), '/hold')];
    await eventually(() => assert.equal(held.length, 2, 'the upstream has both requests'));
    assert.deepEqual(await clusterStats(proxy, 'own', RQ_STATS), { upstream_rq_total: 2, upstream_rq_active: 2, upstream_rq_pending_active: 0, upstream_rq_pending_total: 2 });
    for (const r of held.splice(0)) r.end('ok');
    assert.deepEqual((await Promise.all(responses)).map((r) => r.status), [200, 200]);
    await settles(proxy, 'own', RQ_STATS, { upstream_rq_total: 2, upstream_rq_pending_total: 2 });
    assert.equal((await rawGet(portOf('own'), '/')).status, 200);
    await settles(proxy, 'own', RQ_STATS, { upstream_rq_total: 3, upstream_rq_pending_total: 2 });
  });

  it('HTTP/2: each open stream is an active request; the first waited for the session to connect, the second did not', async () => {
    const first = rawGet(portOf('streams'), '/hold');
    await eventually(() => assert.equal(heldStreams.length, 1));
    const second = rawGet(portOf('streams'), '/hold');
    await eventually(() => assert.equal(heldStreams.length, 2));
    assert.deepEqual(await clusterStats(proxy, 'streams', RQ_STATS), { upstream_rq_total: 2, upstream_rq_active: 2, upstream_rq_pending_active: 0, upstream_rq_pending_total: 1 });
    for (const s of heldStreams.splice(0)) s.respond({ ':status': 200 }, { endStream: true });
    assert.deepEqual([(await first).status, (await second).status], [200, 200]);
    await settles(proxy, 'streams', RQ_STATS, { upstream_rq_total: 2, upstream_rq_pending_total: 1 });
  });

  it("node:http's requests (chunked bodies) are active while in flight, and a connection the upstream drops under one ends with an active request", async () => {
    const response = chunkedPost(portOf('lent'), '/hold');
    await eventually(() => assert.equal(held.length, 1));
    assert.deepEqual(await clusterStats(proxy, 'lent', RQ_STATS), { upstream_rq_total: 1, upstream_rq_active: 1, upstream_rq_pending_active: 0, upstream_rq_pending_total: 1 });
    held.splice(0)[0]!.end('ok');
    assert.equal((await response).status, 200);
    await settles(proxy, 'lent', RQ_STATS, { upstream_rq_total: 1, upstream_rq_pending_total: 1 });

    assert.deepEqual(await chunkedPost(portOf('lentreset'), '/reset'), { status: 200, complete: false });
    const dropped = ['upstream_cx_destroy_remote', 'upstream_cx_destroy_remote_with_active_rq', 'upstream_cx_destroy_local_with_active_rq', 'upstream_rq_active'] as const;
    await settles(proxy, 'lentreset', dropped, { upstream_cx_destroy_remote: 1, upstream_cx_destroy_remote_with_active_rq: 1 });
  });

  it("undici's requests (the ext_authz HTTP check's pool) are active while in flight, and a connection the upstream drops under one ends with an active request", async () => {
    const pool = proxy.clusters.get('undici')!.http1.pool({ host: '127.0.0.1', port: (app.address() as AddressInfo).port });
    const response = pool.request({ path: '/hold', method: 'GET' });
    await eventually(() => assert.equal(held.length, 1));
    assert.equal((await clusterStats(proxy, 'undici', RQ_STATS)).upstream_rq_active, 1);
    held.splice(0)[0]!.end('ok');
    assert.equal(await (await response).body.text(), 'ok');
    await settles(proxy, 'undici', RQ_STATS, { upstream_rq_total: 1 });

    const reset = await pool.request({ path: '/reset', method: 'GET' });
    await assert.rejects(reset.body.text());
    const dropped = ['upstream_cx_destroy_remote', 'upstream_cx_destroy_remote_with_active_rq', 'upstream_rq_active'] as const;
    await settles(proxy, 'undici', dropped, { upstream_cx_destroy_remote: 1, upstream_cx_destroy_remote_with_active_rq: 1 });
  });

  it('a request waiting for a TLS handshake the upstream never answers is pending, not active; when the upstream drops the connection it leaves the gauge, the connection counts as a connect failure, and the request never counts in upstream_rq_total (Envoy counts a request as it is attached to a connection)', async () => {
    const response = rawGet(portOf('handshake'), '/');
    await eventually(() => assert.equal(silentSockets.length, 1, 'the proxy connected'));
    const stats = [...RQ_STATS, 'upstream_cx_active', 'upstream_cx_connect_fail', 'upstream_cx_destroy_remote', 'upstream_cx_destroy_with_active_rq'] as const;
    await settles(proxy, 'handshake', stats, { upstream_rq_pending_active: 1, upstream_rq_pending_total: 1, upstream_cx_active: 1 });
    silentSockets[0]!.destroy();
    assert.equal((await response).status, 503);
    await settles(proxy, 'handshake', stats, { upstream_rq_pending_total: 1, upstream_cx_connect_fail: 1, upstream_cx_destroy_remote: 1 });
  });

  it("upstream_cx_rx_bytes_total / upstream_cx_tx_bytes_total are the bytes the upstream wrote and read, already while the connection is kept open, and stay so once it closed", async () => {
    const r = await rawGet(portOf('bytes'), '/');
    assert.equal(r.body, 'hello from the app');
    const upstreamSide = lastSocket!;
    const expected = (): Record<(typeof BYTES)[number], number> => ({ upstream_cx_rx_bytes_total: upstreamSide.bytesWritten, upstream_cx_tx_bytes_total: upstreamSide.bytesRead });
    await eventually(async () => assert.deepEqual(await clusterStats(proxy, 'bytes', BYTES), expected()));
    assert.ok(expected().upstream_cx_rx_bytes_total > 'hello from the app'.length);
    assert.equal((await clusterStats(proxy, 'bytes', ['upstream_cx_active'])).upstream_cx_active, 1, 'the connection is still open');
    const final = expected();
    upstreamSide.destroy();
    await settles(proxy, 'bytes', [...BYTES, 'upstream_cx_active'], final);
  });
});
