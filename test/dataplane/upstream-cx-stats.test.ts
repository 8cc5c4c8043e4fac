// Envoy's upstream connection lifecycle stats of a cluster (upstream_cx_destroy, its _local and
// _remote parts and their _with_active_rq forms, the upstream_cx_active gauge) as an operator reads
// them from the admin's /stats, through a real proxy (in-process, real sockets, a real ADS server)
// to real HTTP/1.1 and h2c upstreams. Each test has its own cluster, so its stats start at zero and
// every stat a test does not name must stay 0.
import assert from 'node:assert/strict';
import { createServer, request, type IncomingMessage, type ServerResponse } from 'node:http';
import { createServer as createH2Server } from 'node:http2';
import { connect, type AddressInfo, type Socket } from 'node:net';
import { after, before, describe, it } from 'node:test';
import type { MeshProxy } from '../../src/dataplane/proxy.js';
import { close, get, listen, rawGet } from '../helpers/http.js';
import { eventually, statValue } from '../helpers/proc.js';
import { boundPort } from './xds-fixtures.js';
import { clusterStats, CX_STATS, httpCluster, proxyPerCluster, settles as settle } from './cluster-stats-fixtures.js';

type CxStats = Partial<Record<(typeof CX_STATS)[number], number>>;

/** A GET whose response may break off: its status and whether its body arrived whole. */
function getPartial(port: number, path: string): Promise<{ status: number; complete: boolean }> {
  return new Promise((resolve) => {
    const req = request({ host: '127.0.0.1', port, path, agent: false }, (res) => {
      res.resume();
      res.on('close', () => resolve({ status: res.statusCode ?? 0, complete: res.complete }));
    });
    req.on('error', () => resolve({ status: 0, complete: false }));
    req.end();
  });
}

/** Responses of /hold requests, answered when the test says. */
const held: ServerResponse[] = [];
/** Requests of /hang, never answered. */
const hung: IncomingMessage[] = [];

/** The upstream app: keeps idle connections (only the proxy or the test closes them). */
const app = createServer((req, res) => {
  req.resume();
  if (req.url === '/hold') held.push(res);
  else if (req.url === '/hang') hung.push(req);
  else if (req.url === '/reset') {
    // Half the announced body, then the upstream goes away.
    res.writeHead(200, { 'content-length': '100' });
    res.write('partial');
    setTimeout(() => req.socket.destroy(), 20);
  } else {
    res.end('ok');
    // Closed once idle, from the upstream's side, though its Keep-Alive hint promised a minute.
    if (req.url === '/bye') setTimeout(() => req.socket.destroy(), 50);
  }
});
app.keepAliveTimeout = 60_000;

/** An upstream that closes keep-alive connections after 200 ms idle. */
const closer = createServer((req, res) => {
  req.resume();
  res.end('ok');
});
closer.keepAliveTimeout = 200;

const h2 = createH2Server();
/** The upstream's side of its h2c connections, newest last (node hands out only a guarded proxy of it per session). */
const h2Sockets: Socket[] = [];
h2.on('connection', (socket: Socket) => h2Sockets.push(socket));
h2.on('stream', (stream, headers) => {
  stream.respond({ ':status': 200 }, { endStream: true });
  // GOAWAY alone: the upstream takes no new stream but leaves the session to the client to close.
  if (headers[':path'] === '/goaway') stream.session?.goaway();
  // The upstream's connection drops just after this response, without a GOAWAY first.
  const socket = h2Sockets.at(-1);
  if (headers[':path'] === '/drop') setTimeout(() => socket?.destroy(), 50);
});

describe('upstream connection lifecycle stats', { timeout: 30_000 }, () => {
  let proxy: MeshProxy;
  let stop: () => Promise<void>;

  const portOf = (name: string): number => boundPort(proxy, name);

  /** The cluster's connection stats as /stats shows them. */
  const cxStats = (name: string): Promise<CxStats> => clusterStats(proxy, name, CX_STATS);
  /** Waits until the cluster's connection stats are `expected`, every other one 0. */
  const settles = (name: string, expected: CxStats): Promise<unknown> => settle(proxy, name, CX_STATS, expected);
  const stat = async (name: string, s: string): Promise<number> => statValue((await get(false, proxy.adminPort, '/stats')).body, `cluster.${name}.${s}`);

  before(async () => {
    const [appPort, closerPort] = [await listen(app), await listen(closer)];
    await new Promise<void>((r) => h2.listen(0, '127.0.0.1', r));
    const h2Port = (h2.address() as AddressInfo).port;
    const clusters = [
      httpCluster('closed', closerPort),
      httpCluster('reset', appPort),
      httpCluster('abort', appPort),
      httpCluster('idle', appPort, { idleMs: 200 }),
      httpCluster('pair', appPort, { idleMs: 2_000 }),
      httpCluster('h2goaway', h2Port, { h2: true }),
      httpCluster('h2close', h2Port, { h2: true }),
      httpCluster('h2idle', h2Port, { h2: true, idleMs: 200 }),
      httpCluster('lent', appPort),
    ];
    ({ proxy, stop } = await proxyPerCluster(clusters));
  });

  after(async () => {
    for (const r of held) r.end();
    await stop();
    for (const s of h2Sockets) s.destroy();
    await Promise.all([close(app), close(closer), new Promise((r) => h2.close(r))]);
  });

  it('HTTP/1.1: the upstream closes an idle keep-alive connection: destroyed remotely, no request active, no connection open', async () => {
    assert.equal((await rawGet(portOf('closed'), '/')).status, 200);
    await settles('closed', { upstream_cx_total: 1, upstream_cx_destroy: 1, upstream_cx_destroy_remote: 1 });
  });

  it('HTTP/1.1: the upstream goes away in the middle of a response: destroyed remotely with an active request, and the response breaks off', async () => {
    assert.deepEqual(await getPartial(portOf('reset'), '/reset'), { status: 200, complete: false });
    await settles('reset', {
      upstream_cx_total: 1,
      upstream_cx_destroy: 1,
      upstream_cx_destroy_remote: 1,
      upstream_cx_destroy_with_active_rq: 1,
      upstream_cx_destroy_remote_with_active_rq: 1,
    });
  });

  it('HTTP/1.1: the downstream goes away before the upstream answered: the proxy destroys the connection with an active request', async () => {
    const client = connect(portOf('abort'), '127.0.0.1');
    client.on('error', () => undefined);
    client.write('GET /hang HTTP/1.1\r\nhost: app\r\n\r\n');
    await eventually(() => assert.equal(hung.length, 1, 'the upstream has the request'));
    assert.equal((await cxStats('abort')).upstream_cx_active, 1);
    client.destroy();
    await settles('abort', {
      upstream_cx_total: 1,
      upstream_cx_destroy: 1,
      upstream_cx_destroy_local: 1,
      upstream_cx_destroy_with_active_rq: 1,
      upstream_cx_destroy_local_with_active_rq: 1,
    });
  });

  it('HTTP/1.1: the cluster\'s idle_timeout closes the connection: destroyed locally, counted with upstream_cx_idle_timeout', async () => {
    assert.equal((await rawGet(portOf('idle'), '/')).status, 200);
    await settles('idle', { upstream_cx_total: 1, upstream_cx_destroy: 1, upstream_cx_destroy_local: 1 });
    assert.equal(await stat('idle', 'upstream_cx_idle_timeout'), 1);
  });

  it('upstream_cx_active counts open connections: two with a request in flight each, still two once idle, none once closed', async () => {
    const responses = [rawGet(portOf('pair'), '/hold'), rawGet(portOf('pair'), '/hold')];
    await eventually(() => assert.equal(held.length, 2, 'the upstream has both requests'));
    assert.equal((await cxStats('pair')).upstream_cx_active, 2);
    for (const r of held.splice(0)) r.end('ok');
    assert.deepEqual((await Promise.all(responses)).map((r) => r.status), [200, 200]);
    // Idle keep-alive connections are open connections (the idle timeout is 2 s).
    assert.equal((await cxStats('pair')).upstream_cx_active, 2);
    await settles('pair', { upstream_cx_total: 2, upstream_cx_destroy: 2, upstream_cx_destroy_local: 2 });
  });

  it('HTTP/2: a session the pool closes after the upstream\'s GOAWAY counts local, as in Envoy; one whose connection the upstream drops counts remote; one the cluster\'s idle_timeout ends counts local', async () => {
    assert.equal((await rawGet(portOf('h2goaway'), '/goaway')).status, 200);
    await settles('h2goaway', { upstream_cx_total: 1, upstream_cx_destroy: 1, upstream_cx_destroy_local: 1 });
    assert.equal((await rawGet(portOf('h2goaway'), '/')).status, 200, 'the next request opens a new session');
    assert.equal((await cxStats('h2goaway')).upstream_cx_total, 2);
    assert.equal((await rawGet(portOf('h2close'), '/drop')).status, 200);
    await settles('h2close', { upstream_cx_total: 1, upstream_cx_destroy: 1, upstream_cx_destroy_remote: 1 });
    assert.equal((await rawGet(portOf('h2idle'), '/')).status, 200);
    await settles('h2idle', { upstream_cx_total: 1, upstream_cx_destroy: 1, upstream_cx_destroy_local: 1 });
    assert.equal(await stat('h2idle', 'upstream_cx_idle_timeout'), 1);
  });

  it('connections lent to node:http (a chunked request) and undici (the ext_authz pool) count their ends too: the upstream closes them idle', async () => {
    const chunked = await new Promise<number>((resolve, reject) => {
      const req = request({ host: '127.0.0.1', port: portOf('lent'), method: 'POST', path: '/bye', agent: false }, (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
      });
      req.on('error', reject);
      req.write('a chunk');
      req.end();
    });
    assert.equal(chunked, 200);
    await settles('lent', { upstream_cx_total: 1, upstream_cx_destroy: 1, upstream_cx_destroy_remote: 1 });

    const pool = proxy.clusters.get('lent')!.http1.pool({ host: '127.0.0.1', port: (app.address() as AddressInfo).port });
    const { statusCode, body } = await pool.request({ path: '/bye', method: 'GET' });
    await body.text();
    assert.equal(statusCode, 200);
    await settles('lent', { upstream_cx_total: 2, upstream_cx_destroy: 2, upstream_cx_destroy_remote: 2 });
  });
});
