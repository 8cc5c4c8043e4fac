// A TCP proxy's upstream connections in their cluster's stats, as Envoy's TCP connection pool
// counts them, read from the admin's /stats of a real proxy (in-process, real sockets, a real ADS
// server) in front of real TCP upstreams: connections opened, open, failed, how they closed, the
// downstream connection as the pool's request, and the bytes.
import assert from 'node:assert/strict';
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { after, before, describe, it } from 'node:test';
import type { MeshProxy } from '../../src/dataplane/proxy.js';
import { eventually } from '../helpers/proc.js';
import { boundPort, staticCluster, tcpChain } from './xds-fixtures.js';
import { CX_STATS, proxyPerCluster, settles } from './cluster-stats-fixtures.js';

const STATS = [
  ...CX_STATS,
  'upstream_cx_connect_fail',
  'upstream_cx_rx_bytes_total',
  'upstream_cx_tx_bytes_total',
  'upstream_rq_active',
  'upstream_rq_pending_active',
  'upstream_rq_pending_total',
] as const;

/** Echoes what it reads, and ends its side once the client ended its own. */
const echo = createServer({ allowHalfOpen: true }, (s) => {
  s.pipe(s);
});
/** Says hello and ends its side first; the client's end closes the connection. */
const talker = createServer((s) => {
  s.end('hello');
  s.resume();
});

const listenOn = (server: Server): Promise<number> => new Promise((r) => server.listen(0, '127.0.0.1', () => r((server.address() as AddressInfo).port)));

/** A client connection to `port`; `data` collects what it reads, `closed` settles once it closed. */
function client(port: number): { socket: Socket; data: () => string; closed: Promise<void> } {
  const socket = connect(port, '127.0.0.1');
  let data = '';
  socket.setEncoding('utf8').on('data', (d: string) => (data += d));
  socket.on('error', () => undefined);
  return { socket, data: () => data, closed: new Promise((r) => socket.once('close', () => r())) };
}

describe('TCP proxy connections in their cluster stats', { timeout: 30_000 }, () => {
  let proxy: MeshProxy;
  let stop: () => Promise<void>;
  const portOf = (name: string): number => boundPort(proxy, name);

  before(async () => {
    const refused = createServer();
    const refusedPort = await listenOn(refused);
    await new Promise((r) => refused.close(r));
    const clusters = [staticCluster('echo', [await listenOn(echo)]), staticCluster('talker', [await listenOn(talker)]), staticCluster('refused', [refusedPort])];
    ({ proxy, stop } = await proxyPerCluster(clusters, tcpChain));
  });

  after(async () => {
    await stop();
    await Promise.all([echo, talker].map((s) => new Promise((r) => s.close(r))));
  });

  it('a connection is counted open with its request active while it lasts; the client ends first, the upstream closes it: destroyed remotely, with its request active, its bytes counted', async () => {
    const c = client(portOf('echo'));
    c.socket.write('ping');
    await eventually(() => assert.equal(c.data(), 'ping'));
    await settles(proxy, 'echo', STATS, { upstream_cx_total: 1, upstream_cx_active: 1, upstream_rq_active: 1, upstream_rq_pending_total: 1, upstream_cx_rx_bytes_total: 4, upstream_cx_tx_bytes_total: 4 });
    c.socket.end();
    await c.closed;
    await settles(proxy, 'echo', STATS, {
      upstream_cx_total: 1,
      upstream_cx_destroy: 1,
      upstream_cx_destroy_remote: 1,
      upstream_cx_destroy_with_active_rq: 1,
      upstream_cx_destroy_remote_with_active_rq: 1,
      upstream_rq_pending_total: 1,
      upstream_cx_rx_bytes_total: 4,
      upstream_cx_tx_bytes_total: 4,
    });
  });

  it("the upstream ends first and the client's end completes the close: destroyed locally, with its request active", async () => {
    const c = client(portOf('talker'));
    await c.closed;
    assert.equal(c.data(), 'hello');
    await settles(proxy, 'talker', STATS, {
      upstream_cx_total: 1,
      upstream_cx_destroy: 1,
      upstream_cx_destroy_local: 1,
      upstream_cx_destroy_with_active_rq: 1,
      upstream_cx_destroy_local_with_active_rq: 1,
      upstream_rq_pending_total: 1,
      upstream_cx_rx_bytes_total: 5,
    });
  });

  it('a refused connect is a connect failure destroyed remotely, without an active request; the client is closed', async () => {
    const c = client(portOf('refused'));
    await c.closed;
    await settles(proxy, 'refused', STATS, { upstream_cx_total: 1, upstream_cx_connect_fail: 1, upstream_cx_destroy: 1, upstream_cx_destroy_remote: 1, upstream_rq_pending_total: 1 });
  });
});
