// The downstream connection's common_http_protocol_options with Envoy's semantics, through a real
// proxy (in-process, real sockets, a real ADS server): idle_timeout (default one hour, 0 disables)
// closes an HTTP/1.1 connection and drains an HTTP/2 session with no request in progress;
// max_requests_per_connection ends a connection after that many requests. What is not applied is
// named in the connection manager's warning.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { connect as h2connect, type ClientHttp2Session } from 'node:http2';
import { connect, type AddressInfo, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { create } from '@bufbuild/protobuf';
import { FilterChainSchema } from '../../src/gen/envoy/config/listener/v3/listener_components_pb.js';
import { HttpConnectionManagerSchema } from '../../src/gen/envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager_pb.js';
import { scope } from '../../src/common/log.js';
import { buildHcmForFilterChain } from '../../src/dataplane/http-connection-manager.js';
import { requestLimits } from '../../src/dataplane/request-guards.js';
import type { MeshProxy } from '../../src/dataplane/proxy.js';
import { TypeUrl } from '../../src/envoy/types.js';
import { close, rawGet } from '../helpers/http.js';
import { eventually } from '../helpers/proc.js';
import { StaticClusterManager } from './static-cluster-manager.js';
import { boundPort, FixtureAds, hcmChain, listener, staticCluster, startBoundProxy, type HcmOptions } from './xds-fixtures.js';

/** The upstream answers /slow after this long: longer than the idle timeout under test. */
const SLOW_MS = 600;
const IDLE = { idleTimeout: { seconds: 0n, nanos: 300_000_000 } };

/**
 * One HTTP/1.1 connection driven by hand, so that what closes it is the proxy (node's client
 * would close a `connection: close` connection itself): `send` writes a GET and resolves with the
 * whole response; `closed` resolves, with the time, when the proxy closes the connection.
 */
function h1Connection(port: number): { send(path: string): Promise<string>; closed(): Promise<number>; closedAt(): number | undefined; socket: Socket } {
  const socket = connect(port, '127.0.0.1');
  let got = '';
  let closedAt: number | undefined;
  socket.setEncoding('latin1');
  socket.on('data', (d: string) => (got += d));
  socket.once('end', () => (closedAt = Date.now()));
  socket.on('error', () => undefined);
  const send = async (path: string): Promise<string> => {
    const from = got.length;
    socket.write(`GET ${path} HTTP/1.1\r\nhost: test\r\n\r\n`);
    // The app's bodies end with a newline and carry a content-length.
    return eventually(() => {
      const answer = got.slice(from);
      assert.match(answer, /\r\n\r\napp \S+\n$/);
      return answer;
    });
  };
  return { send, closed: () => settled(() => closedAt, 'the proxy closed the connection'), closedAt: () => closedAt, socket };
}

/** When `at` has a time: waits (boundedly) for it, so that a test of a close that never comes fails rather than hangs. */
function settled(at: () => number | undefined, what: string): Promise<number> {
  return eventually(() => {
    const t = at();
    assert.ok(t !== undefined, what);
    return t;
  });
}

/** Over an HTTP/2 session: the status and the whole body of a GET. */
function h2Get(session: ClientHttp2Session, path: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const stream = session.request({ ':path': path });
    let status = 0;
    let body = '';
    stream.setEncoding('utf8');
    stream.on('response', (h) => (status = Number(h[':status'])));
    stream.on('data', (d: string) => (body += d));
    stream.on('end', () => resolve({ status, body }));
    stream.on('error', reject);
  });
}

/** An h2c (prior knowledge) session with the times it got GOAWAY and closed. */
function h2Session(port: number): { session: ClientHttp2Session; goawayAt: () => number | undefined; closed(): Promise<number> } {
  const session = h2connect(`http://127.0.0.1:${port}`);
  let goawayAt: number | undefined;
  let closedAt: number | undefined;
  session.on('goaway', () => (goawayAt ??= Date.now()));
  session.on('error', () => undefined);
  session.once('close', () => (closedAt = Date.now()));
  return { session, goawayAt: () => goawayAt, closed: () => settled(() => closedAt, 'the session closed') };
}

function assertAbout(ms: number, expected: number, what: string): void {
  assert.ok(ms >= expected - 50 && ms < expected + 700, `${what}: ${ms} ms, expected about ${expected} ms`);
}

describe('common_http_protocol_options of the connection manager (downstream connections)', { timeout: 30_000 }, () => {
  let dir: string;
  let ads: FixtureAds;
  let app: Server;
  let proxy: MeshProxy;

  const portOf = (name: string): number => boundPort(proxy, name);
  const hcm = (name: string, o: Omit<HcmOptions, 'cluster'>) => listener(name, 0, [hcmChain({ cluster: 'app', statPrefix: name, ...o })]);

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'mesh-downstream-cx-'));
    app = createServer((req, res) => {
      if (req.url === '/slow') setTimeout(() => res.end('app /slow\n'), SLOW_MS);
      else res.end(`app ${req.url}\n`);
    });
    await new Promise<void>((r) => app.listen(0, '127.0.0.1', r));
    ads = await new FixtureAds().listen();
    ads.set(TypeUrl.Cluster, [staticCluster('app', [(app.address() as AddressInfo).port])]);
    ads.set(TypeUrl.Listener, [
      hcm('idle', { common: IDLE }),
      hcm('max2', { common: { maxRequestsPerConnection: 2 } }),
      hcm('default', {}),
      hcm('off', { common: { idleTimeout: { seconds: 0n } } }),
    ]);
    proxy = await startBoundProxy(dir, ads.port, 4);
  });

  after(async () => {
    await proxy.stop(0);
    ads.close();
    await close(app);
    rmSync(dir, { recursive: true, force: true });
  });

  it('HTTP/1.1, idle_timeout 0.3s: an idle keep-alive connection is closed after about 300 ms, not while a request is in progress', async () => {
    const c = h1Connection(portOf('idle'));
    const answer = await c.send('/slow');
    const idleFrom = Date.now();
    assert.match(answer, /^HTTP\/1\.1 200 /);
    assert.match(answer, /\r\nconnection: keep-alive\r\n/i);
    assert.doesNotMatch(answer, /\r\nkeep-alive:/i, 'no Keep-Alive header, as from Envoy');
    assertAbout((await c.closed()) - idleFrom, 300, 'closed after');
  });

  it('HTTP/1.1, no idle_timeout (Envoy: one hour) and idle_timeout 0s (none): idle connections stay open past node\'s 5 s', async () => {
    const conns = [h1Connection(portOf('default')), h1Connection(portOf('off'))];
    await Promise.all(conns.map((c) => c.send('/first')));
    await new Promise((r) => setTimeout(r, 7_000));
    assert.deepEqual(conns.map((c) => c.closedAt()), [undefined, undefined], 'no connection was closed');
    for (const c of conns) assert.match(await c.send('/again'), /^HTTP\/1\.1 200 /, 'the same connection serves again');
    for (const c of conns) c.socket.destroy();
  });

  it('HTTP/1.1, max_requests_per_connection 2: the second response says connection: close and the proxy closes', async () => {
    const c = h1Connection(portOf('max2'));
    assert.match(await c.send('/1'), /\r\nconnection: keep-alive\r\n/i);
    const second = await c.send('/2');
    assert.match(second, /^HTTP\/1\.1 200 /);
    assert.match(second, /\r\nconnection: close\r\n/i);
    await c.closed();
    // A third request takes a new connection, which gets its own two.
    assert.equal((await rawGet(portOf('max2'), '/3')).body, 'app /3\n');
  });

  it('HTTP/2, idle_timeout 0.3s: GOAWAY and close about 300 ms after the last stream, not while a stream is open', async () => {
    const h2 = h2Session(portOf('idle'));
    const slow = await h2Get(h2.session, '/slow');
    const idleFrom = Date.now();
    assert.deepEqual(slow, { status: 200, body: 'app /slow\n' });
    assert.equal(h2.goawayAt(), undefined, `no GOAWAY while the ${SLOW_MS} ms stream was open`);
    const closedAt = await h2.closed();
    assert.ok(h2.goawayAt() !== undefined, 'the session was drained with GOAWAY');
    assertAbout(h2.goawayAt()! - idleFrom, 300, 'GOAWAY after');
    assert.ok(closedAt >= h2.goawayAt()!);
  });

  it('HTTP/2, max_requests_per_connection 2: GOAWAY after the second stream opens, which still finishes', async () => {
    const h2 = h2Session(portOf('max2'));
    assert.deepEqual(await h2Get(h2.session, '/1'), { status: 200, body: 'app /1\n' });
    assert.equal(h2.goawayAt(), undefined);
    const second = h2Get(h2.session, '/slow');
    await eventually(() => assert.ok(h2.goawayAt() !== undefined, 'GOAWAY once the second stream opened'));
    assert.deepEqual(await second, { status: 200, body: 'app /slow\n' }, 'the open stream finished');
    await h2.closed();
  });

  it('reads the limits as Envoy: idle_timeout 1 h by default, 0s none, beyond a timer\'s range the longest timer; no request limit by default', () => {
    const limits = (common?: HcmOptions['common']) => requestLimits(create(HttpConnectionManagerSchema, common ? { commonHttpProtocolOptions: common } : {}));
    assert.deepEqual([limits().idleTimeoutMs, limits().maxRequestsPerConnection], [3_600_000, 0]);
    assert.equal(limits({ idleTimeout: { seconds: 0n } }).idleTimeoutMs, 0);
    assert.equal(limits({ idleTimeout: { seconds: 30n * 86_400n } }).idleTimeoutMs, 2_147_483_647);
    assert.equal(limits({ maxRequestsPerConnection: 1 }).maxRequestsPerConnection, 1);
  });

  it('reports the fields of common_http_protocol_options it does not apply, and only those', (t) => {
    const warn = t.mock.method(scope('http'), 'warn', () => undefined);
    const build = (common: HcmOptions['common']) => buildHcmForFilterChain(create(FilterChainSchema, hcmChain({ statPrefix: 'warned', common })), { clusters: new StaticClusterManager() });
    build({ ...IDLE, maxRequestsPerConnection: 5, maxHeadersCount: 50 });
    assert.equal(warn.mock.callCount(), 0, 'idle_timeout, max_requests_per_connection and max_headers_count are applied');
    build({ ...IDLE, maxConnectionDuration: { seconds: 60n }, maxStreamDuration: { seconds: 5n } });
    assert.equal(warn.mock.callCount(), 1);
    const msg = String(warn.mock.calls[0]!.arguments[0]);
    assert.match(msg, /accepted but not applied yet: .*common_http_protocol_options\.max_connection_duration/);
    assert.doesNotMatch(msg, /max_stream_duration/, 'applied per stream (listener/stream-timeouts.ts)');
    assert.doesNotMatch(msg, /idle_timeout/);
  });
});
