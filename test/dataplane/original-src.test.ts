// original_src (issue 14): a listener with the filter makes its connections' upstream connections
// from the downstream client's address, over tcp_proxy and over the HTTP router (HTTP/1.1 and
// h2c), through a real mesh-proxy on loopback. The client binds 127.0.0.2, a local address, so no
// policy routing is needed here; the TPROXY case with a pod's client is in test/e2e/capture.test.ts.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, request } from 'node:http';
import { createServer as createH2Server } from 'node:http2';
import { connect, createServer as createNetServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { OriginalSrcSchema } from '../../src/gen/envoy/extensions/filters/listener/original_src/v3/original_src_pb.js';
import { loadBootstrap } from '../../src/dataplane/bootstrap.js';
import { MeshProxy } from '../../src/dataplane/proxy.js';
import { bindsOriginalSrc, originalSrcSocket } from '../../src/dataplane/original-src.js';
import { pack, TypeUrl } from '../../src/envoy/types.js';
import { Cluster_DiscoveryType, Cluster_LbPolicy, ClusterSchema } from '../../src/gen/envoy/config/cluster/v3/cluster_pb.js';
import { eventually } from '../helpers/proc.js';
import { FixtureAds, hcmChain, listener, staticCluster, tcpChain, writeBootstrap } from './xds-fixtures.js';

const CLIENT = '127.0.0.2';
const unprivileged = process.getuid?.() === 0 ? undefined : 'IP_TRANSPARENT needs CAP_NET_ADMIN (run as root)';
const originalSrc = { listenerFilters: [{ name: 'envoy.filters.listener.original_src', configType: { case: 'typedConfig' as const, value: pack(OriginalSrcSchema, { mark: 1337 }) } }] };

/** What the upstream saw as its peer, asked over a raw TCP connection from CLIENT. */
function tcpPeer(port: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = connect({ host: '127.0.0.1', port, localAddress: CLIENT });
    let out = '';
    s.on('data', (d: Buffer) => (out += d.toString()));
    s.on('end', () => resolve(out));
    s.on('error', reject);
  });
}

/** The body of GET / through `port`, from CLIENT. */
function httpPeer(port: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, localAddress: CLIENT, path: '/', agent: false }, (res) => {
      let out = '';
      res.on('data', (d: Buffer) => (out += d.toString()));
      res.on('end', () => resolve(out));
    });
    req.on('error', reject);
    req.end();
  });
}

describe('original_src listener filter', { skip: unprivileged }, () => {
  let dir: string;
  let ads: FixtureAds;
  let proxy: MeshProxy;
  const ports: Record<string, number> = {};
  const closers: Array<() => void> = [];

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'mesh-osrc-'));
    const tcp = createNetServer((s) => s.end(s.remoteAddress ?? ''));
    const http = createServer((req, res) => res.end(req.socket.remoteAddress ?? ''));
    const h2 = createH2Server((req, res) => res.end(req.socket.remoteAddress ?? ''));
    for (const [name, server] of [['tcp', tcp], ['http', http], ['h2', h2]] as const) {
      await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
      ports[name] = (server.address() as AddressInfo).port;
      closers.push(() => server.close());
    }
    closers.push(() => http.closeAllConnections());
    const h2Cluster = {
      name: 'h2-app',
      any: pack(ClusterSchema, {
        name: 'h2-app',
        clusterDiscoveryType: { case: 'type', value: Cluster_DiscoveryType.STATIC },
        lbPolicy: Cluster_LbPolicy.ROUND_ROBIN,
        connectTimeout: { seconds: 1n },
        http2ProtocolOptions: {},
        loadAssignment: { clusterName: 'h2-app', endpoints: [{ lbEndpoints: [{ hostIdentifier: { case: 'endpoint', value: { address: { address: { case: 'socketAddress', value: { address: '127.0.0.1', portSpecifier: { case: 'portValue', value: ports.h2! } } } } } } }] }] },
      }),
    };
    ads = new FixtureAds();
    await ads.listen();
    ads.set(TypeUrl.Cluster, [staticCluster('tcp-app', [ports.tcp!]), staticCluster('http-app', [ports.http!]), h2Cluster]);
    ads.set(TypeUrl.Listener, [
      listener('tcp-src', 0, [tcpChain('tcp-app')], originalSrc),
      listener('tcp-plain', 0, [tcpChain('tcp-app')]),
      listener('http-src', 0, [hcmChain({ cluster: 'http-app' })], originalSrc),
      listener('h2-src', 0, [hcmChain({ cluster: 'h2-app' })], originalSrc),
      listener('http-plain', 0, [hcmChain({ cluster: 'http-app' })]),
    ]);
    proxy = new MeshProxy({ bootstrap: loadBootstrap({ path: writeBootstrap(dir, ads.port, 0) }), drainTimeMs: 1_000, initialBackoffMs: 50 });
    await proxy.start();
    await eventually(async () => {
      const bound = proxy.listeners.info().filter((l) => l.bound);
      assert.equal(bound.length, 5, 'all five listeners are bound');
      for (const l of bound) ports[l.name] = l.bound!.port;
    }, 10_000);
  });

  after(async () => {
    await proxy.stop(0);
    ads.close();
    for (const c of closers) c();
    rmSync(dir, { recursive: true, force: true });
  });

  it('tcp_proxy: the upstream sees the client address; without the filter, the proxy address', async () => {
    assert.equal(await tcpPeer(ports['tcp-src']!), CLIENT);
    assert.equal(await tcpPeer(ports['tcp-plain']!), '127.0.0.1');
  });

  it('HTTP/1.1 and h2c upstreams see the client address; a listener without the filter still pools from the proxy address', async () => {
    assert.equal(await httpPeer(ports['http-src']!), CLIENT);
    assert.equal(await httpPeer(ports['h2-src']!), CLIENT);
    assert.equal(await httpPeer(ports['http-plain']!), '127.0.0.1');
    // The same upstream pool again, after a connection from the client's address was made in it.
    assert.equal(await httpPeer(ports['http-src']!), CLIENT);
  });
});

describe('originalSrcSocket', () => {
  it('a client elsewhere cannot reach a loopback upstream from its own address: that connection keeps the proxy address', () => {
    assert.equal(bindsOriginalSrc({ address: '10.1.2.3', mark: 1337 }, '127.0.0.1'), false);
    assert.equal(bindsOriginalSrc({ address: '10.1.2.3', mark: 1337 }, '10.1.2.4'), true);
    assert.equal(bindsOriginalSrc({ address: '127.0.0.2', mark: 1337 }, '127.0.0.1'), true);
  });

  it('gives no socket (the caller connects from its own address) when the source cannot be bound', () => {
    assert.equal(originalSrcSocket({ address: 'not-an-ip', mark: 0 }), undefined);
  });
});
