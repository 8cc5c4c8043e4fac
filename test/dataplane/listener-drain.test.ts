// The listener manager over ADS: in-place updates and removals let in-flight requests finish,
// http_inspector picks the HTTP or the TCP chain of one listener, and /drain_listeners stops the
// inbound listeners only.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { Agent, createServer, request, type Server } from 'node:http';
import { connect, createServer as createNetServer, type AddressInfo, type Server as NetServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { TrafficDirection } from '../../src/gen/envoy/config/core/v3/base_pb.js';
import { HttpInspectorSchema } from '../../src/gen/envoy/extensions/filters/listener/http_inspector/v3/http_inspector_pb.js';
import { loadBootstrap } from '../../src/dataplane/bootstrap.js';
import { MeshProxy } from '../../src/dataplane/proxy.js';
import { pack, TypeUrl } from '../../src/envoy/types.js';
import { eventually } from '../helpers/proc.js';
import { boundPort, FixtureAds, hcmChain, listener, staticCluster, tcpChain, writeBootstrap } from './xds-fixtures.js';

function send(port: number, path: string, method = 'GET', agent: Agent | false = false): Promise<{ status: number; body: string; server: string; connection: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path, method, agent }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body, server: String(res.headers.server), connection: String(res.headers.connection) }));
    });
    req.on('error', reject);
    req.end();
  });
}

function refused(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect(port, '127.0.0.1');
    s.once('connect', () => (s.destroy(), resolve(false)));
    s.once('error', () => resolve(true));
  });
}

const sniffing = { listenerFilters: [{ name: 'envoy.filters.listener.http_inspector', configType: { case: 'typedConfig' as const, value: pack(HttpInspectorSchema, {}) } }] };

describe('listener updates, removal, inspection and drain', () => {
  let dir: string;
  let ads: FixtureAds;
  let app: Server;
  let tcpEcho: NetServer;
  let proxy: MeshProxy;
  /** Requests to /hold wait here until released. */
  const held: Array<() => void> = [];

  const portOf = (name: string): number => boundPort(proxy, name);
  const listeners = (version: string, extra: ReturnType<typeof listener>[] = []) => [
    listener('in', 0, [hcmChain({ cluster: 'app', serverName: version })]),
    listener('sniff', 0, [hcmChain({ cluster: 'app', serverName: 'sniffed-http' }, { filterChainMatch: { applicationProtocols: ['http/1.0', 'http/1.1', 'h2c'] } }), tcpChain('tcp-echo')], sniffing),
    listener('out', 0, [hcmChain({ cluster: 'app', serverName: 'outbound' })], { trafficDirection: TrafficDirection.OUTBOUND }),
    ...extra,
  ];
  const update = async (ls: ReturnType<typeof listener>[]) => {
    const before = proxy.xds.version(TypeUrl.Listener);
    ads.set(TypeUrl.Listener, ls);
    await ads.push(TypeUrl.Listener);
    await eventually(() => assert.notEqual(proxy.xds.version(TypeUrl.Listener), before, 'the update is applied'));
  };

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'mesh-drain-'));
    app = createServer((req, res) => {
      if (req.url === '/hold') held.push(() => res.end('released'));
      else res.end(`app ${req.url}`);
    });
    await new Promise<void>((r) => app.listen(0, '127.0.0.1', r));
    tcpEcho = createNetServer((s) => s.on('data', (d) => s.write(`tcp:${d.toString()}`)));
    await new Promise<void>((r) => tcpEcho.listen(0, '127.0.0.1', r));
    ads = await new FixtureAds().listen();
    ads.set(TypeUrl.Cluster, [staticCluster('app', [(app.address() as AddressInfo).port]), staticCluster('tcp-echo', [(tcpEcho.address() as AddressInfo).port])]);
    ads.set(TypeUrl.Listener, listeners('v1'));
    proxy = new MeshProxy({ bootstrap: loadBootstrap({ path: writeBootstrap(dir, ads.port, 0) }), drainTimeMs: 10_000, initialBackoffMs: 50 });
    await proxy.start();
    await eventually(() => assert.ok(proxy.state().state === 'LIVE', 'the proxy is ready'), 10_000);
  });

  after(async () => {
    for (const release of held.splice(0)) release();
    await proxy.stop(0);
    ads.close();
    app.closeAllConnections();
    app.close();
    tcpEcho.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('updates a listener in place: new connections get the new chain, an in-flight request finishes', async () => {
    const port = portOf('in');
    assert.equal((await send(port, '/')).server, 'v1');
    const inflight = send(port, '/hold');
    await eventually(() => assert.equal(held.length, 1, 'the request reached the app'));
    await update(listeners('v2'));
    assert.equal(portOf('in'), port);
    assert.equal((await send(port, '/')).server, 'v2');
    held.shift()!();
    const r = await inflight;
    assert.equal(r.status, 200);
    assert.equal(r.body, 'released');
    assert.equal(r.server, 'v1');
  });

  it('removes a listener: its port closes at once, its in-flight request still finishes', async () => {
    await update(listeners('v2', [listener('extra', 0, [hcmChain({ cluster: 'app' })])]));
    const port = portOf('extra');
    const inflight = send(port, '/hold');
    await eventually(() => assert.equal(held.length, 1, 'the request reached the app'));
    await update(listeners('v2'));
    assert.ok(await refused(port), 'the removed listener accepts nothing new');
    held.shift()!();
    assert.equal((await inflight).body, 'released');
  });

  it('sends HTTP and raw TCP on one listener to different chains with http_inspector', async () => {
    const port = portOf('sniff');
    const http = await send(port, '/sniffed');
    assert.equal(http.body, 'app /sniffed');
    assert.equal(http.server, 'sniffed-http');
    const echoed = await new Promise<string>((resolve, reject) => {
      const s = connect(port, '127.0.0.1', () => s.write('hello\n'));
      s.once('data', (d) => (s.destroy(), resolve(d.toString())));
      s.once('error', reject);
    });
    assert.equal(echoed, 'tcp:hello\n');
  });

  it('drains inbound listeners only on POST /drain_listeners?inboundonly', async () => {
    const inbound = portOf('in');
    const outbound = portOf('out');
    const r = await send(proxy.adminPort, '/drain_listeners?inboundonly', 'POST');
    assert.equal(r.status, 200);
    assert.ok(await refused(inbound), 'the inbound listener stopped accepting');
    assert.equal((await send(outbound, '/out')).body, 'app /out');
    const ready = await send(proxy.adminPort, '/ready');
    assert.equal(ready.status, 503);
    assert.match(ready.body, /^DRAINING/);
  });

  it('keeps accepting during a graceful drain, asking clients to close', async () => {
    const outbound = portOf('out');
    const keepAlive = new Agent({ keepAlive: true });
    assert.equal((await send(outbound, '/before', 'GET', keepAlive)).connection, 'keep-alive');
    assert.equal((await send(proxy.adminPort, '/drain_listeners?graceful', 'POST')).status, 200);
    const r = await send(outbound, '/during', 'GET', keepAlive);
    assert.equal(r.body, 'app /during');
    assert.equal(r.connection, 'close');
    keepAlive.destroy();
    assert.equal(proxy.listeners.info().find((l) => l.name === 'out')?.draining, true);
  });
});
