// VirtualService `tcp` and `tls` routes end to end: the discovery server's translation of real
// resources (a sidecar without capture, so its outbound listeners bind 127.0.0.1:<port>) served over
// a real ADS stream to mesh-proxy, with real TCP upstreams and real TLS servers behind it. The TCP
// port is split 70/30 by weight; the TLS port routes by SNI without terminating TLS (the client
// completes its handshake with the upstream's own certificate). A port of unknown protocol with
// outbound sniffing sends HTTP by the `http` route and everything else by the `tcp` routes.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { connect, createServer, type Server } from 'node:net';
import { createServer as createHttpServer, get as httpGet } from 'node:http';
import { connect as tlsConnect, createServer as createTlsServer } from 'node:tls';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { AnyResource } from '../../src/api/types.js';
import { ListenerSchema } from '../../src/gen/envoy/config/listener/v3/listener_pb.js';
import { RouteConfigurationSchema } from '../../src/gen/envoy/config/route/v3/route_pb.js';
import { loadBootstrap } from '../../src/dataplane/bootstrap.js';
import { MeshProxy } from '../../src/dataplane/proxy.js';
import { pack, TypeUrl } from '../../src/envoy/types.js';
import { sidecarListeners, sidecarRoutes } from '../../src/xds/generators/sidecar.js';
import { selfSignedCertificate } from '../../src/webhooks/selfsigned.js';
import { freePort } from '../../samples/local-mesh.js';
import { eventually } from '../helpers/proc.js';
import { pushOf, serviceEntry, sidecarProxy } from '../networking/fixtures.js';
import { FixtureAds, staticCluster, writeBootstrap } from './xds-fixtures.js';

/** A TCP server that writes its name and closes. */
async function namedTcp(name: string, servers: Server[]): Promise<number> {
  const server = createServer((s) => s.end(name));
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return (server.address() as { port: number }).port;
}

/** A TLS server for `host` that writes its name over TLS and closes. */
async function namedTls(name: string, host: string, servers: Server[]): Promise<{ port: number; ca: string }> {
  const cert = await selfSignedCertificate([host]);
  const server = createTlsServer({ cert: cert.certPem, key: cert.keyPem }, (s) => s.end(name));
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { port: (server.address() as { port: number }).port, ca: cert.certPem };
}

/** What the server behind `port` says; `first` is written first (a client-first protocol). */
function readAll(port: number, first?: Buffer): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = connect({ host: '127.0.0.1', port });
    if (first) s.write(first);
    let out = '';
    s.setEncoding('utf8');
    s.on('data', (d: string) => (out += d));
    s.on('end', () => resolve(out));
    s.on('error', reject);
  });
}

/** A TLS client naming `servername`, trusting only `ca`: what the upstream behind the proxy says. */
function readTls(port: number, servername: string, ca: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = tlsConnect({ host: '127.0.0.1', port, servername, ca });
    let out = '';
    let secure = false;
    s.once('secureConnect', () => (secure = true));
    s.setEncoding('utf8');
    s.on('data', (d: string) => (out += d));
    s.on('end', () => (secure ? resolve(out) : reject(new Error('closed before the TLS handshake completed'))));
    s.on('error', reject);
  });
}

describe('tcp and tls routes through mesh-proxy', () => {
  const servers: Server[] = [];
  let dir: string;
  let ads: FixtureAds;
  let proxy: MeshProxy;
  let dbPort: number;
  let edgePort: number;
  const cas: Record<string, string> = {};

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'l4-routes-'));
    dbPort = await freePort();
    edgePort = await freePort();
    const v1 = await namedTcp('v1', servers);
    const v2 = await namedTcp('v2', servers);
    const a = await namedTls('tls-a', 'a.example.com', servers);
    const b = await namedTls('tls-b', 'b.example.com', servers);
    cas['a'] = a.ca;
    cas['b'] = b.ca;
    const resources: AnyResource[] = [
      serviceEntry('foo', 'db', { hosts: ['db.foo.svc.cluster.local'], location: 'MESH_INTERNAL', resolution: 'STATIC', ports: [{ number: dbPort, name: 'tcp', protocol: 'TCP' }] }),
      serviceEntry('foo', 'edge', { hosts: ['edge.foo.svc.cluster.local'], location: 'MESH_INTERNAL', resolution: 'STATIC', ports: [{ number: edgePort, name: 'tls', protocol: 'TLS' }] }),
      {
        apiVersion: 'networking.mesh.io/v1',
        kind: 'VirtualService',
        metadata: { namespace: 'foo', name: 'l4' },
        spec: {
          hosts: ['db', 'edge'],
          tcp: [{ route: [{ destination: { host: 'db', subset: 'v1' }, weight: 70 }, { destination: { host: 'db', subset: 'v2' }, weight: 30 }] }],
          tls: [
            { match: [{ sniHosts: ['a.example.com'] }], route: [{ destination: { host: 'edge', subset: 'a' } }] },
            { match: [{ sniHosts: ['b.example.com'] }], route: [{ destination: { host: 'edge', subset: 'b' } }] },
          ],
        },
      } as AnyResource,
    ];
    const push = pushOf(resources);
    const client = sidecarProxy('127.0.0.1', 'client', 'foo', { INTERCEPTION_MODE: 'NONE' });
    const listeners = sidecarListeners(client, push).filter((l) => l.name.endsWith(`_${dbPort}`) || l.name.endsWith(`_${edgePort}`));
    assert.equal(listeners.length, 2, 'the db and edge outbound listeners');
    ads = new FixtureAds();
    await ads.listen();
    ads.set(TypeUrl.Listener, listeners.map((l) => ({ name: l.name, any: pack(ListenerSchema, l) })));
    ads.set(TypeUrl.Cluster, [
      staticCluster(`outbound|${dbPort}|v1|db.foo.svc.cluster.local`, [v1]),
      staticCluster(`outbound|${dbPort}|v2|db.foo.svc.cluster.local`, [v2]),
      staticCluster(`outbound|${edgePort}|a|edge.foo.svc.cluster.local`, [a.port]),
      staticCluster(`outbound|${edgePort}|b|edge.foo.svc.cluster.local`, [b.port]),
      // The service's own chain (other names) goes nowhere useful: no endpoint.
      staticCluster(`outbound|${edgePort}||edge.foo.svc.cluster.local`, []),
    ]);
    proxy = new MeshProxy({ bootstrap: loadBootstrap({ path: writeBootstrap(dir, ads.port, 0) }), drainTimeMs: 1_000, initialBackoffMs: 50 });
    await proxy.start();
    await eventually(() => assert.ok(proxy.listeners.info().filter((l) => l.bound).length === 2, 'both listeners bound'), 10_000);
  });

  after(async () => {
    await proxy.stop(0);
    ads.close();
    for (const s of servers) s.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('splits TCP connections 70/30 between the subsets (1000 connections, within ±5 %)', async () => {
    const counts: Record<string, number> = {};
    for (let i = 0; i < 1000; i += 50) {
      const got = await Promise.all(Array.from({ length: 50 }, () => readAll(dbPort)));
      for (const g of got) counts[g] = (counts[g] ?? 0) + 1;
    }
    assert.deepEqual(Object.keys(counts).sort(), ['v1', 'v2']);
    assert.ok(Math.abs(counts['v1']! - 700) <= 50, `v1 got ${counts['v1']} of 1000`);
  });

  it('routes TLS by SNI to the matching upstream, which terminates the handshake itself', async () => {
    assert.equal(await readTls(edgePort, 'a.example.com', cas['a']!), 'tls-a');
    assert.equal(await readTls(edgePort, 'b.example.com', cas['b']!), 'tls-b');
    // b's certificate is not trusted for a: the proxy did not terminate, the handshake reached b.
    await assert.rejects(readTls(edgePort, 'b.example.com', cas['a']!));
  });

  it('closes a TLS connection whose SNI neither a route nor the service names (no chain matches)', async () => {
    await assert.rejects(readTls(edgePort, 'c.example.com', cas['a']!), /closed before the TLS handshake|ECONNRESET|socket disconnected/);
  });
});

/** Connections 100 at a time; how many each upstream answered. */
async function spread(n: number, connectOnce: () => Promise<string>): Promise<Record<string, number>> {
  const counts: Record<string, number> = {};
  for (let i = 0; i < n; i += 100) {
    for (const g of await Promise.all(Array.from({ length: 100 }, connectOnce))) counts[g] = (counts[g] ?? 0) + 1;
  }
  return counts;
}

describe('tcp routes on the TCP fallback of a sniffed port', () => {
  const servers: Server[] = [];
  let dir: string;
  let ads: FixtureAds;
  let proxy: MeshProxy;
  let appPort: number;

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'l4-sniffed-'));
    appPort = await freePort();
    const v1 = await namedTcp('v1', servers);
    const v2 = await namedTcp('v2', servers);
    const web = createHttpServer((_req, res) => res.end('web'));
    servers.push(web);
    await new Promise<void>((r) => web.listen(0, '127.0.0.1', r));
    const resources: AnyResource[] = [
      // No protocol and a name without a known prefix: sniffed.
      serviceEntry('foo', 'app', { hosts: ['app.foo.svc.cluster.local'], location: 'MESH_INTERNAL', resolution: 'STATIC', ports: [{ number: appPort, name: 'app' }] }),
      {
        apiVersion: 'networking.mesh.io/v1',
        kind: 'VirtualService',
        metadata: { namespace: 'foo', name: 'app' },
        spec: {
          hosts: ['app'],
          http: [{ route: [{ destination: { host: 'app', subset: 'web' } }] }],
          tcp: [{ route: [{ destination: { host: 'app', subset: 'v1' }, weight: 60 }, { destination: { host: 'app', subset: 'v2' }, weight: 40 }] }],
        },
      } as AnyResource,
    ];
    const push = pushOf(resources);
    const client = sidecarProxy('127.0.0.1', 'client', 'foo', { INTERCEPTION_MODE: 'NONE' });
    const listeners = sidecarListeners(client, push, { outboundSniffing: true }).filter((l) => l.name.endsWith(`_${appPort}`));
    assert.equal(listeners.length, 1, 'the app outbound listener');
    const routes = sidecarRoutes(client, push, new Set([String(appPort)]), true);
    ads = new FixtureAds();
    await ads.listen();
    ads.set(TypeUrl.Listener, listeners.map((l) => ({ name: l.name, any: pack(ListenerSchema, l) })));
    ads.set(TypeUrl.RouteConfiguration, routes.map((r) => ({ name: r.name, any: pack(RouteConfigurationSchema, r) })));
    ads.set(TypeUrl.Cluster, [
      staticCluster(`outbound|${appPort}|v1|app.foo.svc.cluster.local`, [v1]),
      staticCluster(`outbound|${appPort}|v2|app.foo.svc.cluster.local`, [v2]),
      staticCluster(`outbound|${appPort}|web|app.foo.svc.cluster.local`, [(web.address() as { port: number }).port]),
      // The service's own cluster, where the TCP fallback went before: no endpoint.
      staticCluster(`outbound|${appPort}||app.foo.svc.cluster.local`, []),
    ]);
    proxy = new MeshProxy({ bootstrap: loadBootstrap({ path: writeBootstrap(dir, ads.port, 0) }), drainTimeMs: 1_000, initialBackoffMs: 50 });
    await proxy.start();
    await eventually(() => assert.ok(proxy.listeners.info().some((l) => l.bound), 'listener bound'), 10_000);
  });

  after(async () => {
    await proxy.stop(0);
    ads.close();
    for (const s of servers) s.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('splits non-HTTP connections 60/40 by the tcp route (1000 connections, within ±5 %)', async () => {
    const counts = await spread(1000, () => readAll(appPort, Buffer.from([0, 1, 2, 3, 0x0a])));
    assert.deepEqual(Object.keys(counts).sort(), ['v1', 'v2']);
    assert.ok(Math.abs(counts['v1']! - 600) <= 50, `v1 got ${counts['v1']} of 1000`);
  });

  it('sends HTTP on the same port by the http route', async () => {
    const body = await new Promise<string>((resolve, reject) => {
      httpGet({ host: '127.0.0.1', port: appPort, path: '/', headers: { host: 'app.foo.svc.cluster.local' }, agent: false }, (res) => {
        let out = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => (out += d));
        res.on('end', () => resolve(`${res.statusCode} ${out}`));
      }).on('error', reject);
    });
    assert.equal(body, '200 web');
  });
});
