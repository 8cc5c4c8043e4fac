// upstream_connection_options.tcp_keepalive on real loopback connections: the compiled cluster
// carries it, and the connections its pools open (the HTTP/1.1 client's and the TCP proxy's) have
// SO_KEEPALIVE with the idle time, interval and probe count the cluster sets, read back from the
// kernel, and a keepalive timer that `ss` shows; a cluster without it leaves keepalive off, as Envoy.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createServer, type Server } from 'node:http';
import type { Socket } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { Writable } from 'node:stream';
import { create } from '@bufbuild/protobuf';
import { Cluster_DiscoveryType, ClusterSchema } from '../../src/gen/envoy/config/cluster/v3/cluster_pb.js';
import { compileCluster } from '../../src/dataplane/cluster-spec.js';
import { DEFAULT_CONNECTION_LIMITS } from '../../src/dataplane/connection-limits.js';
import type { DownstreamResponse } from '../../src/dataplane/http-codec.js';
import { http1Exchange } from '../../src/dataplane/http1-exchange.js';
import { nativeAddon } from '../../src/dataplane/original-dst.js';
import type { TcpKeepaliveSpec } from '../../src/dataplane/tcp-keepalive.js';
import { TcpPool } from '../../src/dataplane/tcp-pool.js';
import { Http1Pool, type PoolOptions } from '../../src/dataplane/upstream-pools.js';
import { close, listen } from '../helpers/http.js';

let server: Server;
let port: number;

before(async () => {
  server = createServer((req, res) => {
    req.resume();
    res.end('ok');
  });
  port = await listen(server);
});
after(() => close(server));

/** Pool options whose settings carry `keepalive`, recording each socket the pool opens. */
function options(keepalive: TcpKeepaliveSpec | undefined, sockets: Socket[]): PoolOptions {
  return {
    settings: () => ({ connectTimeoutMs: 0, connection: DEFAULT_CONNECTION_LIMITS, ...(keepalive ? { tcpKeepalive: keepalive } : {}) }),
    count: { opened: (s) => sockets.push(s) },
  };
}

function request(pool: Http1Pool): Promise<void> {
  return new Promise((resolve, reject) => {
    const sink = new Writable({ write: (_c, _e, cb) => cb() }) as unknown as DownstreamResponse;
    http1Exchange({ endpoint: { host: '127.0.0.1', port }, method: 'GET', path: '/', headers: { host: 'app' }, framing: 'none' }, pool, {
      head: (_h, body) => body.pipeTo(sink, { bodyDone: () => resolve() }),
      error: reject,
    });
  });
}

/** The keepalive settings the kernel has for the socket (the addon sets nothing when given zeros). */
function kernelKeepalive(socket: Socket): { time: number; interval: number; probes: number } {
  const addon = nativeAddon();
  assert.equal(typeof addon, 'object', `the native addon is not loaded: ${String(addon)}`);
  const fd = (socket as unknown as { _handle: { fd: number } })._handle.fd;
  return (addon as Exclude<typeof addon, string>).tcpKeepalive(fd, 0, 0, 0);
}

/** `ss`'s timer column for the established connection from `localPort`. */
function ssTimer(localPort: number): string {
  return execFileSync('ss', ['-tnoH', 'state', 'established', `( sport = :${localPort} )`], { encoding: 'utf8' });
}

describe('upstream TCP keepalive', () => {
  const keepalive = { time: 600, interval: 7, probes: 4 };

  it('compiles from upstream_connection_options, unset fields as 0 (the system\'s)', () => {
    const cluster = (tcpKeepalive: object | undefined) =>
      create(ClusterSchema, { name: 'c', clusterDiscoveryType: { case: 'type', value: Cluster_DiscoveryType.STATIC }, ...(tcpKeepalive ? { upstreamConnectionOptions: { tcpKeepalive } } : {}) });
    assert.deepEqual(compileCluster(cluster({ keepaliveTime: 600, keepaliveInterval: 7, keepaliveProbes: 4 }), new Map(), 'clusters[0]').tcpKeepalive, keepalive);
    assert.deepEqual(compileCluster(cluster({ keepaliveTime: 30 }), new Map(), 'clusters[0]').tcpKeepalive, { time: 30, interval: 0, probes: 0 });
    assert.equal(compileCluster(cluster(undefined), new Map(), 'clusters[0]').tcpKeepalive, undefined);
  });

  it("the HTTP/1.1 pool's and the TCP pool's connections carry the cluster's keepalive", async () => {
    const sockets: Socket[] = [];
    const http = new Http1Pool(options(keepalive, sockets));
    const tcp = new TcpPool(options(keepalive, sockets));
    try {
      await request(http);
      const raw = tcp.connect({ host: '127.0.0.1', port }).socket;
      await new Promise((r) => raw.once('connect', r));
      assert.equal(sockets.length, 2);
      for (const s of sockets) {
        assert.deepEqual(kernelKeepalive(s), keepalive);
        assert.match(ssTimer(s.localPort!), /timer:\(keepalive,(9min|10min)/, 'the kernel runs a keepalive timer of about 600 s');
      }
    } finally {
      http.destroy();
      for (const s of sockets) s.destroy();
    }
  });

  it('without it, no keepalive timer (Envoy sets none unless configured)', async () => {
    const sockets: Socket[] = [];
    const http = new Http1Pool(options(undefined, sockets));
    try {
      await request(http);
      assert.equal(sockets.length, 1);
      assert.doesNotMatch(ssTimer(sockets[0]!.localPort!), /keepalive/);
    } finally {
      http.destroy();
    }
  });
});
