// mesh-proxy in-process against a real ADS server (src/xds/server.ts) and real upstreams: the
// bootstrap file, LDS/RDS/CDS/EDS applied atomically (ACK) or refused (NACK, last good config kept),
// the listener manager, the cluster manager, the admin API, and the control plane going away.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, request, type Server } from 'node:http';
import { connect, createServer as createNetServer, type AddressInfo, type Server as NetServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { MessageInitShape } from '@bufbuild/protobuf';
import type { PrincipalSchema } from '../../src/gen/envoy/config/rbac/v3/rbac_pb.js';
import { RouteConfigurationSchema } from '../../src/gen/envoy/config/route/v3/route_pb.js';
import { TcpProxySchema } from '../../src/gen/envoy/extensions/filters/network/tcp_proxy/v3/tcp_proxy_pb.js';
import { loadBootstrap } from '../../src/dataplane/bootstrap.js';
import { MeshProxy } from '../../src/dataplane/proxy.js';
import { serveJwksService } from '../../src/envoy/jwks-grpc.js';
import type { RequestRefreshRequest } from '../../src/envoy/jwks-service.js';
import { pack, TypeUrl } from '../../src/envoy/types.js';
import { freePort } from '../../samples/local-mesh.js';
import { eventually, statValue } from '../helpers/proc.js';
import { ISSUER, jwks, meshJwtAuthn, meshProvider, mint, testKey, type TestKey } from './fixtures.js';
import { boundPort, edsCluster, endpoints, FixtureAds, hcmChain, listener, routeResource, staticCluster, tcpChain, writeBootstrap, type HcmOptions } from './xds-fixtures.js';

type PrincipalInit = MessageInitShape<typeof PrincipalSchema>;

interface Reply {
  status: number;
  body: string;
  headers: Record<string, string | string[] | undefined>;
}

function send(port: number, path = '/', headers: Record<string, string> = {}, method = 'GET'): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path, method, headers, agent: false }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body, headers: res.headers }));
    });
    req.on('error', reject);
    req.end();
  });
}

async function echoServer(who: string): Promise<{ server: Server; port: number }> {
  const server = createServer((req, res) => {
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify({ who, path: req.url, headers: req.headers }));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { server, port: (server.address() as AddressInfo).port };
}

const keyPath = (...keys: string[]) => keys.map((key) => ({ segment: { case: 'key' as const, value: key } }));
function principal(sub: string): PrincipalInit {
  return {
    identifier: {
      case: 'metadata',
      value: { filter: 'envoy.filters.http.jwt_authn', path: keyPath(ISSUER, 'sub'), value: { matchPattern: { case: 'stringMatch', value: { matchPattern: { case: 'exact', value: sub } } } } },
    },
  };
}
const ANY = { rule: { case: 'any' as const, value: true } };
const onlyAlice = { alice: { permissions: [ANY], principals: [principal('alice')] } };
const anyone = { anyone: { permissions: [ANY], principals: [{ identifier: { case: 'any' as const, value: true } }] } };

describe('mesh-proxy over ADS', () => {
  let dir: string;
  let ads: FixtureAds;
  let up1: { server: Server; port: number };
  let up2: { server: Server; port: number };
  let proxy: MeshProxy;
  let key: TestKey;
  let token: string;
  let jwt: HcmOptions['jwt'];
  /** JwksService requests that reached the ADS server. */
  const refreshes: RequestRefreshRequest[] = [];

  const admin = (path: string, method = 'GET') => send(proxy.adminPort, path, {}, method);
  const portOf = (name: string): number => boundPort(proxy, name);
  const stat = async (name: string): Promise<number> => statValue((await admin('/stats')).body, name);
  /** The listeners every test starts from: HCM over RDS with jwt_authn + rbac, and a TCP proxy. */
  const baseListeners = (policies: HcmOptions['policies'] = onlyAlice) => [
    listener('inbound', 0, [hcmChain({ rds: 'r1', jwt, policies })]),
    listener('tcp', 0, [tcpChain('tcp-app')]),
  ];

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'mesh-proxy-'));
    [up1, up2] = await Promise.all([echoServer('up1'), echoServer('up2')]);
    key = await testKey('RS256', 'k1');
    token = await mint(key, { sub: 'alice' });
    jwt = meshJwtAuthn({ origins: meshProvider(ISSUER, jwks(key)) });
    ads = new FixtureAds();
    serveJwksService(ads.server.grpc, (req) => {
      refreshes.push(req);
      return { accepted: true, reason: 'refetch started' };
    });
    await ads.listen();
    ads.set(TypeUrl.Cluster, [edsCluster('app'), staticCluster('tcp-app', [up1.port])]);
    ads.set(TypeUrl.ClusterLoadAssignment, [endpoints('app', [up1.port])]);
    ads.set(TypeUrl.Listener, baseListeners());
    ads.set(TypeUrl.RouteConfiguration, [routeResource('r1', 'app')]);
    const bootstrap = loadBootstrap({ path: writeBootstrap(dir, ads.port, 0) });
    proxy = new MeshProxy({ bootstrap, drainTimeMs: 2_000, initialBackoffMs: 50 });
    await proxy.start();
  });

  after(async () => {
    await proxy.stop(0);
    ads.close();
    up1.server.closeAllConnections();
    up2.server.closeAllConnections();
    up1.server.close();
    up2.server.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('turns ready once listeners, clusters and routes are applied', async () => {
    await eventually(async () => {
      const r = await admin('/ready');
      assert.equal(r.status, 200, `ready: ${r.body}`);
      assert.equal(r.body, 'LIVE\n');
    }, 10_000);
  });

  it('enforces jwt_authn and rbac: valid token 200, bad token 401, no token 403', async () => {
    const port = portOf('inbound');
    const ok = await send(port, '/hello', { authorization: `Bearer ${token}` });
    assert.equal(ok.status, 200, ok.body);
    assert.equal(JSON.parse(ok.body).who, 'up1');
    assert.equal(JSON.parse(ok.body).path, '/hello');
    const bad = await send(port, '/', { authorization: 'Bearer not-a-jwt' });
    assert.equal(bad.status, 401);
    assert.match(String(bad.headers['www-authenticate']), /invalid_token/);
    const none = await send(port, '/');
    assert.equal(none.status, 403);
    assert.equal(none.body, 'RBAC: access denied');
  });

  it('reports a token whose kid the JWKS lacks to the ADS server over JwksService, once, and still answers 401', async () => {
    const port = portOf('inbound');
    const rotated = await mint(await testKey('RS256', 'k-rotated'), { sub: 'alice' });
    for (let i = 0; i < 3; i++) {
      const r = await send(port, '/', { authorization: `Bearer ${rotated}` });
      assert.equal(r.status, 401, 'no key for the kid: rejected whatever happens next');
      assert.equal(r.body, "Jwks doesn't have key to match kid or alg from Jwt");
    }
    await eventually(async () => assert.equal(await stat('jwks_refresh.accepted'), 1), 10_000);
    assert.deepEqual(
      refreshes.map((r) => [r.issuer, r.kid]),
      [[ISSUER, 'k-rotated']],
    );
    assert.equal(await stat('jwks_refresh.requested'), 1, 'one report per kid per compiled config');
    assert.equal(await stat('jwks_refresh.failed'), 0);
  });

  it('proxies TCP through tcp_proxy to a STATIC cluster', async () => {
    const port = portOf('tcp');
    const r = await send(port, '/over-tcp');
    assert.equal(r.status, 200);
    assert.equal(JSON.parse(r.body).path, '/over-tcp');
  });

  it('serves config_dump as Envoy JSON with versions, listeners, clusters, routes and (include_eds) endpoints', async () => {
    const r = await admin('/config_dump?include_eds');
    assert.equal(r.status, 200);
    const dump = JSON.parse(r.body) as { configs: Array<Record<string, unknown> & { '@type': string }> };
    const byType = new Map(dump.configs.map((c) => [c['@type'].split('.').pop(), c]));
    const lds = byType.get('ListenersConfigDump') as unknown as { version_info: string; dynamic_listeners: Array<{ name: string; active_state: { version_info: string; listener: { name: string } } }> };
    assert.ok(lds.version_info, 'LDS version');
    assert.deepEqual(lds.dynamic_listeners.map((l) => l.name).sort(), ['inbound', 'tcp']);
    assert.equal(lds.dynamic_listeners[0]!.active_state.listener.name, lds.dynamic_listeners[0]!.name);
    const cds = byType.get('ClustersConfigDump') as unknown as { static_clusters: Array<{ cluster: { name: string } }>; dynamic_active_clusters: Array<{ cluster: { name: string } }> };
    assert.deepEqual(cds.static_clusters.map((c) => c.cluster.name), ['xds-grpc']);
    assert.deepEqual(cds.dynamic_active_clusters.map((c) => c.cluster.name).sort(), ['app', 'tcp-app']);
    const rds = byType.get('RoutesConfigDump') as unknown as { dynamic_route_configs: Array<{ route_config: { name: string } }> };
    assert.deepEqual(rds.dynamic_route_configs.map((c) => c.route_config.name), ['r1']);
    const eds = byType.get('EndpointsConfigDump') as unknown as { dynamic_endpoint_configs: Array<{ endpoint_config: { cluster_name: string } }> };
    assert.deepEqual(eds.dynamic_endpoint_configs.map((c) => c.endpoint_config.cluster_name), ['app']);
    assert.ok(byType.has('BootstrapConfigDump'));
  });

  it('counts requests, filter decisions and xDS updates in /stats and /stats/prometheus', async () => {
    const port = portOf('inbound');
    const denied = await stat('http.inbound_test.rbac.denied');
    const upstream = await stat('cluster.app.upstream_rq_total');
    await send(port, '/');
    await send(port, '/', { authorization: `Bearer ${token}` });
    assert.equal(await stat('http.inbound_test.rbac.denied'), denied + 1);
    assert.equal(await stat('cluster.app.upstream_rq_total'), upstream + 1);
    assert.ok((await stat('listener_manager.lds.update_success')) >= 1);
    const prom = (await admin('/stats/prometheus')).body;
    assert.match(prom, /^envoy_http_rbac_denied\{envoy_http_conn_manager_prefix="inbound_test"\} [1-9]\d*$/m);
    assert.match(prom, /^envoy_http_jwt_authn_allowed\{envoy_http_conn_manager_prefix="inbound_test"\} [1-9]\d*$/m);
    assert.match(prom, /^envoy_cluster_upstream_rq_total\{envoy_cluster_name="app"\} [1-9]\d*$/m);
    assert.match(prom, /^envoy_listener_downstream_rq_total\{envoy_listener_address="127\.0\.0\.1_0"\} [1-9]\d*$/m);
    assert.match(prom, /^envoy_cluster_manager_cds_update_success [1-9]\d*$/m);
    assert.match(prom, /^# TYPE envoy_listener_manager_lds_update_rejected counter$/m);
  });

  it('lists clusters and listeners', async () => {
    const clusters = (await admin('/clusters')).body;
    assert.match(clusters, new RegExp(`^app::127\\.0\\.0\\.1:${up1.port}::health_flags::healthy$`, 'm'));
    const listeners = (await admin('/listeners')).body;
    assert.match(listeners, new RegExp(`^inbound::127\\.0\\.0\\.1:${portOf('inbound')}$`, 'm'));
    const json = JSON.parse((await admin('/listeners?format=json')).body) as { listener_statuses: Array<{ name: string }> };
    assert.deepEqual(json.listener_statuses.map((l) => l.name).sort(), ['inbound', 'tcp']);
  });

  it('applies a new RBAC policy without a restart, on the same port', async () => {
    const port = portOf('inbound');
    ads.set(TypeUrl.Listener, baseListeners(anyone));
    await ads.push(TypeUrl.Listener);
    await eventually(async () => assert.equal((await send(port, '/')).status, 200, 'no token is allowed by the new policy'));
    assert.equal(portOf('inbound'), port);
    ads.set(TypeUrl.Listener, baseListeners());
    await ads.push(TypeUrl.Listener);
    await eventually(async () => assert.equal((await send(port, '/')).status, 403, 'back to alice only'));
  });

  it('NACKs an unknown HTTP filter and keeps serving the last good listeners', async () => {
    const port = portOf('inbound');
    const rejected = await stat('listener_manager.lds.update_rejected');
    const bogus = { name: 'envoy.filters.http.bogus', any: pack(TcpProxySchema, { statPrefix: 'x' }) };
    ads.set(TypeUrl.Listener, [listener('inbound', 0, [hcmChain({ rds: 'r1', jwt, policies: anyone, extraFilters: [bogus] })]), listener('tcp', 0, [tcpChain('tcp-app')])]);
    await ads.push(TypeUrl.Listener);
    await eventually(async () => assert.equal(await stat('listener_manager.lds.update_rejected'), rejected + 1, 'the update is rejected'));
    const why = proxy.xds.rejection(TypeUrl.Listener)?.details ?? '';
    assert.match(why, /listener inbound\.filter_chains\[0\]\.filters\[0\]\.typed_config\.http_filters\[2\]\.typed_config: filter type envoy\.extensions\.filters\.network\.tcp_proxy\.v3\.TcpProxy is not supported/);
    // The old policy (alice only) still holds.
    assert.equal((await send(port, '/')).status, 403);
    assert.equal((await send(port, '/', { authorization: `Bearer ${token}` })).status, 200);
    const dump = JSON.parse((await admin('/config_dump')).body) as { configs: Array<{ dynamic_listeners?: Array<{ name: string; error_state?: { details: string } }> }> };
    const inbound = dump.configs.flatMap((c) => c.dynamic_listeners ?? []).find((l) => l.name === 'inbound');
    assert.match(inbound?.error_state?.details ?? '', /is not supported/);
    ads.set(TypeUrl.Listener, baseListeners());
  });

  it('NACKs a route configuration with a bad regex and keeps the old routes', async () => {
    const port = portOf('inbound');
    const rejected = await stat('http.rds.update_rejected');
    const bad = {
      name: 'r1',
      virtualHosts: [
        {
          name: 'all',
          domains: ['*'],
          routes: [{ match: { pathSpecifier: { case: 'safeRegex' as const, value: { regex: '(' } } }, action: { case: 'route' as const, value: { clusterSpecifier: { case: 'cluster' as const, value: 'app' } } } }],
        },
      ],
    };
    ads.set(TypeUrl.RouteConfiguration, [{ name: 'r1', any: pack(RouteConfigurationSchema, bad) }]);
    await ads.push(TypeUrl.RouteConfiguration);
    await eventually(async () => assert.equal(await stat('http.rds.update_rejected'), rejected + 1, 'the route update is rejected'));
    assert.match(proxy.xds.rejection(TypeUrl.RouteConfiguration)?.details ?? '', /^route_configuration r1\.virtual_hosts\[0\]/);
    assert.equal((await send(port, '/still', { authorization: `Bearer ${token}` })).status, 200);
    ads.set(TypeUrl.RouteConfiguration, [routeResource('r1', 'app')]);
    await ads.push(TypeUrl.RouteConfiguration);
  });

  it('follows EDS: new endpoints take the traffic; none is 503 no healthy upstream', async () => {
    const port = portOf('inbound');
    const auth = { authorization: `Bearer ${token}` };
    ads.set(TypeUrl.ClusterLoadAssignment, [endpoints('app', [up2.port])]);
    await ads.push(TypeUrl.ClusterLoadAssignment);
    await eventually(async () => assert.equal(JSON.parse((await send(port, '/', auth)).body).who, 'up2', 'traffic moved to up2'));
    ads.set(TypeUrl.ClusterLoadAssignment, [endpoints('app', [])]);
    await ads.push(TypeUrl.ClusterLoadAssignment);
    await eventually(async () => {
      const r = await send(port, '/', auth);
      assert.equal(r.status, 503, 'no endpoint left');
      assert.equal(r.body, 'no healthy upstream');
    });
    ads.set(TypeUrl.ClusterLoadAssignment, [endpoints('app', [up1.port])]);
    await ads.push(TypeUrl.ClusterLoadAssignment);
    await eventually(async () => assert.equal((await send(port, '/', auth)).status, 200, 'back to up1'));
  });

  it('NACKs a listener on a port that cannot be bound, naming the address', async () => {
    const blocker: NetServer = createNetServer();
    await new Promise<void>((r) => blocker.listen(0, '127.0.0.1', r));
    const taken = (blocker.address() as AddressInfo).port;
    try {
      const rejected = await stat('listener_manager.lds.update_rejected');
      ads.set(TypeUrl.Listener, [...baseListeners(), listener('clash', taken, [tcpChain('tcp-app')])]);
      await ads.push(TypeUrl.Listener);
      await eventually(async () => assert.equal(await stat('listener_manager.lds.update_rejected'), rejected + 1, 'the update is rejected'));
      assert.match(proxy.xds.rejection(TypeUrl.Listener)?.details ?? '', new RegExp(`^listener clash\\.address: cannot bind 127\\.0\\.0\\.1:${taken}: EADDRINUSE`));
      assert.equal((await send(portOf('tcp'), '/')).status, 200);
    } finally {
      blocker.close();
      ads.set(TypeUrl.Listener, baseListeners());
    }
  });

  it('warms listeners until the route configuration they name arrives: the listener it replaces serves, a new address waits', async () => {
    const inboundPort = portOf('inbound');
    const warmPort = await freePort();
    const who = (r: { body: string }) => (JSON.parse(r.body) as { who: string }).who;
    ads.set(TypeUrl.Cluster, [edsCluster('app'), staticCluster('tcp-app', [up1.port]), staticCluster('app2', [up2.port])]);
    await ads.push(TypeUrl.Cluster);
    await eventually(() => assert.ok(proxy.clusters.get('app2'), 'cluster app2 is applied'));
    const accepted = await stat('listener_manager.lds.update_success');
    ads.set(TypeUrl.Listener, [
      listener('inbound', 0, [hcmChain({ rds: 'r2', jwt, policies: onlyAlice })]),
      listener('tcp', 0, [tcpChain('tcp-app')]),
      listener('warm', warmPort, [hcmChain({ rds: 'r2' })]),
    ]);
    await ads.push(TypeUrl.Listener);
    try {
      await eventually(async () => assert.equal(await stat('listener_manager.lds.update_success'), accepted + 1, 'the listeners are accepted'));
      let answered = false;
      const early = send(warmPort, '/early').finally(() => (answered = true));
      // Route r2 is not there: the replaced listener still routes by r1, the proxy stays ready.
      const old = await send(inboundPort, '/', { authorization: `Bearer ${token}` });
      assert.equal(old.status, 200);
      assert.equal(who(old), 'up1');
      assert.equal((await admin('/ready')).status, 200);
      assert.equal(answered, false, 'a connection to the warming listener waits for its routes');

      ads.set(TypeUrl.RouteConfiguration, [routeResource('r1', 'app'), routeResource('r2', 'app2')]);
      await ads.push(TypeUrl.RouteConfiguration);
      const first = await early;
      assert.equal(first.status, 200);
      assert.equal(who(first), 'up2', 'the waiting request was served by the warmed listener');
      const now = await send(inboundPort, '/', { authorization: `Bearer ${token}` });
      assert.equal(who(now), 'up2', 'the replaced listener gave way');
    } finally {
      ads.set(TypeUrl.Listener, baseListeners());
      await ads.push(TypeUrl.Listener);
      ads.set(TypeUrl.RouteConfiguration, [routeResource('r1', 'app')]);
      await ads.push(TypeUrl.RouteConfiguration);
      await eventually(async () => assert.equal(who(await send(portOf('inbound'), '/', { authorization: `Bearer ${token}` })), 'up1', 'back to r1'));
    }
  });

  it('closes the port of a removed listener', async () => {
    const port = portOf('tcp');
    ads.set(TypeUrl.Listener, [listener('inbound', 0, [hcmChain({ rds: 'r1', jwt, policies: onlyAlice })])]);
    await ads.push(TypeUrl.Listener);
    await eventually(async () => {
      const refused = await new Promise<boolean>((resolve) => {
        const s = connect(port, '127.0.0.1');
        s.once('connect', () => (s.destroy(), resolve(false)));
        s.once('error', () => resolve(true));
      });
      assert.ok(refused, 'the tcp listener port is closed');
    });
    assert.equal((await send(portOf('inbound'), '/', { authorization: `Bearer ${token}` })).status, 200);
  });

  it('changes log levels through /logging and health through /healthcheck', async () => {
    assert.equal((await admin('/logging?rbac=debug')).status, 405);
    const set = await admin('/logging?rbac=debug', 'POST');
    assert.equal(set.status, 200);
    assert.match(set.body, /^ {2}rbac: debug$/m);
    assert.match((await admin('/logging')).body, /^ {2}rbac: debug$/m);
    const all = await admin('/logging?level=warning', 'POST');
    assert.match(all.body, /^ {2}rbac: warning$/m);
    assert.match(all.body, /^ {2}http: warning$/m);
    assert.equal((await admin('/logging?nope=debug', 'POST')).status, 400);
    await admin('/logging?level=info', 'POST');
    assert.equal((await admin('/healthcheck/fail')).status, 405);
    assert.equal((await admin('/healthcheck/fail', 'POST')).status, 200);
    assert.equal((await admin('/ready')).status, 503);
    assert.equal((await admin('/healthcheck/ok', 'POST')).status, 200);
    assert.equal((await admin('/ready')).status, 200);
  });

  it('keeps serving when the control plane goes away, and reconnects when it is back', async () => {
    const port = portOf('inbound');
    const xdsPort = ads.port;
    ads.close();
    await eventually(async () => assert.equal(await stat('control_plane.connected_state'), 0, 'disconnected'));
    assert.equal((await send(port, '/', { authorization: `Bearer ${token}` })).status, 200);
    assert.equal((await admin('/ready')).status, 200);
    const again = await new FixtureAds().listen(xdsPort);
    again.set(TypeUrl.Cluster, [edsCluster('app'), staticCluster('tcp-app', [up1.port])]);
    again.set(TypeUrl.ClusterLoadAssignment, [endpoints('app', [up1.port])]);
    again.set(TypeUrl.Listener, baseListeners(anyone));
    again.set(TypeUrl.RouteConfiguration, [routeResource('r1', 'app')]);
    ads = again;
    await eventually(async () => assert.equal((await send(port, '/')).status, 200, 'the restarted control plane config applies'), 10_000);
    assert.equal(await stat('control_plane.connected_state'), 1);
  });
});
