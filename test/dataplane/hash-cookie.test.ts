// Consistent hash on a cookie, as Envoy does it: a cookie policy with a ttl makes the router
// generate the cookie for a request that lacks it (Set-Cookie with Max-Age, Path, the attributes,
// HttpOnly) and hash on it, so a client that returns the cookie keeps reaching one endpoint; without
// a ttl nothing is generated. Units for the pieces, then a DestinationRule and VirtualService
// translated by the discovery server, served over ADS to mesh-proxy in front of four real upstreams.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it, test } from 'node:test';
import { create } from '@bufbuild/protobuf';
import type { AnyResource } from '../../src/api/types.js';
import { ClusterSchema } from '../../src/gen/envoy/config/cluster/v3/cluster_pb.js';
import { ListenerSchema } from '../../src/gen/envoy/config/listener/v3/listener_pb.js';
import { RouteAction_HashPolicySchema } from '../../src/gen/envoy/config/route/v3/route_components_pb.js';
import { RouteConfigurationSchema } from '../../src/gen/envoy/config/route/v3/route_pb.js';
import { loadBootstrap } from '../../src/dataplane/bootstrap.js';
import { connectionCookieValue, setCookieHeader, type CookieRequest } from '../../src/dataplane/hash-cookie.js';
import { compileHashPolicies, cookieValue } from '../../src/dataplane/load-balancers.js';
import { MeshProxy } from '../../src/dataplane/proxy.js';
import { requestView } from '../../src/envoy/request.js';
import { pack, TypeUrl } from '../../src/envoy/types.js';
import { sidecarClusters, sidecarListeners, sidecarRoutes } from '../../src/xds/generators/sidecar.js';
import { freePort } from '../../samples/local-mesh.js';
import { eventually } from '../helpers/proc.js';
import { get, listen } from '../helpers/http.js';
import { pushOf, sidecarProxy } from '../networking/fixtures.js';
import { endpoints, FixtureAds, writeBootstrap } from './xds-fixtures.js';

const view = (headers: Record<string, string>, source = '10.1.1.1', sourcePort = 40000) =>
  requestView({ headers, path: '/', source: { address: source, port: sourcePort }, destination: { address: '10.96.0.60', port: 8000 } });

test('Set-Cookie as Envoy writes it: quoted value, Max-Age unless 0, Path when set, attributes, HttpOnly', () => {
  const c: CookieRequest = { name: 'session', path: '/cart', ttlSeconds: 90, attributes: [{ name: 'SameSite', value: 'Strict' }, { name: 'Secure', value: '' }] };
  assert.equal(setCookieHeader(c, '00ab'), 'session="00ab"; Max-Age=90; Path=/cart; SameSite=Strict; Secure; HttpOnly');
  assert.equal(setCookieHeader({ name: 's', path: '', ttlSeconds: 0, attributes: [] }, 'v'), 's="v"; HttpOnly');
});

test('the generated value is 16 hex digits of the connection: same connection same value, another port another', () => {
  const a = connectionCookieValue(view({}));
  assert.match(a, /^[0-9a-f]{16}$/);
  assert.equal(connectionCookieValue(view({ cookie: 'x=1' })), a, 'request headers do not matter');
  assert.notEqual(connectionCookieValue(view({}, '10.1.1.1', 40001)), a);
  assert.match(connectionCookieValue(view({}, '::1')), /^[0-9a-f]{16}$/);
});

test('cookie values are read without their quotes; an empty one is no value', () => {
  assert.equal(cookieValue('a=1; sid="s1"', 'sid'), 's1');
  assert.equal(cookieValue('sid=s1;b=2', 'sid'), 's1');
  assert.equal(cookieValue('sid="', 'sid'), '"');
  const noTtl = compileHashPolicies([create(RouteAction_HashPolicySchema, { policySpecifier: { case: 'cookie', value: { name: 'sid' } } })], 'hash_policy')!;
  assert.equal(noTtl(view({ cookie: 'sid=' })), undefined);
});

test('a cookie policy with a ttl: a missing cookie is generated and hashed on, as a request returning it is', () => {
  const h = compileHashPolicies([create(RouteAction_HashPolicySchema, { policySpecifier: { case: 'cookie', value: { name: 'sid', path: '/', ttl: { seconds: 60n } } } })], 'hash_policy')!;
  const asked: CookieRequest[] = [];
  const first = h(view({}), (c) => (asked.push(c), 'generated'));
  assert.deepEqual(asked, [{ name: 'sid', path: '/', ttlSeconds: 60, attributes: [] }]);
  assert.equal(first, h(view({ cookie: 'sid="generated"' }), () => assert.fail('the request has the cookie')));
  assert.equal(h(view({})), undefined, 'without a router to set it, no hash');
});

describe('cookie hash with a ttl through mesh-proxy (translated DestinationRule)', () => {
  const servers: Server[] = [];
  let dir: string;
  let ads: FixtureAds;
  let proxy: MeshProxy;
  let port: number;
  const host = 'cart.foo.svc.cluster.local';

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'hash-cookie-'));
    port = await freePort();
    const ups: number[] = [];
    for (let i = 0; i < 4; i++) {
      const s = createServer((_req, res) => res.end(`up${i}`));
      servers.push(s);
      ups.push(await listen(s));
    }
    const resources: AnyResource[] = [
      { apiVersion: 'networking.mesh.io/v1', kind: 'ServiceEntry', metadata: { namespace: 'foo', name: 'cart' }, spec: { hosts: [host], location: 'MESH_INTERNAL', resolution: 'STATIC', ports: [{ number: port, name: 'http', protocol: 'HTTP' }] } },
      {
        apiVersion: 'networking.mesh.io/v1',
        kind: 'DestinationRule',
        metadata: { namespace: 'foo', name: 'cart' },
        spec: {
          host: 'cart',
          trafficPolicy: { loadBalancer: { consistentHash: { httpCookie: { name: 'session', path: '/', ttl: '90s', attributes: [{ name: 'SameSite', value: 'Strict' }] } } } },
          subsets: [{ name: 'pinned', trafficPolicy: { loadBalancer: { consistentHash: { httpCookie: { name: 'pinned' } } } } }],
        },
      },
      {
        apiVersion: 'networking.mesh.io/v1',
        kind: 'VirtualService',
        metadata: { namespace: 'foo', name: 'cart' },
        spec: { hosts: ['cart'], http: [{ match: [{ uri: { prefix: '/pinned' } }], route: [{ destination: { host: 'cart', subset: 'pinned' } }] }, { route: [{ destination: { host: 'cart' } }] }] },
      },
    ] as AnyResource[];
    const push = pushOf(resources);
    const client = sidecarProxy('127.0.0.1', 'client', 'foo', { INTERCEPTION_MODE: 'NONE' });
    const listeners = sidecarListeners(client, push).filter((l) => l.name.endsWith(`_${port}`));
    const clusters = sidecarClusters(client, push, false).filter((c) => c.name.endsWith(`|${host}`));
    assert.deepEqual(clusters.map((c) => c.name).sort(), [`outbound|${port}||${host}`, `outbound|${port}|pinned|${host}`].sort());
    ads = new FixtureAds();
    await ads.listen();
    ads.set(TypeUrl.Listener, listeners.map((l) => ({ name: l.name, any: pack(ListenerSchema, l) })));
    ads.set(TypeUrl.RouteConfiguration, sidecarRoutes(client, push, new Set([String(port)])).map((r) => ({ name: r.name, any: pack(RouteConfigurationSchema, r) })));
    ads.set(TypeUrl.Cluster, clusters.map((c) => ({ name: c.name, any: pack(ClusterSchema, c) })));
    ads.set(TypeUrl.ClusterLoadAssignment, clusters.map((c) => endpoints(c.name, ups)));
    proxy = new MeshProxy({ bootstrap: loadBootstrap({ path: writeBootstrap(dir, ads.port, 0) }), drainTimeMs: 1_000, initialBackoffMs: 50 });
    await proxy.start();
    await eventually(async () => assert.equal((await get(false, port, '/', { host })).status, 200), 10_000);
  });

  after(async () => {
    for (const s of servers) s.close();
    await proxy?.stop(0);
    ads?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('sets the cookie on a first response, and every request returning it reaches the same upstream', async () => {
    const reached = new Set<string>();
    for (let n = 0; n < 16; n++) {
      // A fresh connection each time: another client port, another cookie.
      const first = await get(false, port, '/', { host });
      const setCookie = first.headers['set-cookie'];
      assert.equal(setCookie?.length, 1, 'one Set-Cookie');
      const m = /^session="([0-9a-f]{16})"; Max-Age=90; Path=\/; SameSite=Strict; HttpOnly$/.exec(setCookie![0]!);
      assert.ok(m, setCookie![0]);
      const bodies = new Set([first.body]);
      for (let i = 0; i < 5; i++) {
        const again = await get(false, port, '/', { host, cookie: `session="${m[1]}"` });
        assert.equal(again.headers['set-cookie'], undefined, 'no new cookie when the request has one');
        bodies.add(again.body);
      }
      assert.equal(bodies.size, 1, `cookie ${m[1]} reached ${[...bodies].join(', ')}`);
      reached.add(first.body);
    }
    assert.ok(reached.size >= 2, `16 cookies over ${reached.size} upstreams`);
  });

  it('generates nothing for a cookie policy without ttl, and still sticks to a cookie the client sends', async () => {
    const spread = new Set<string>();
    for (let i = 0; i < 40; i++) {
      const r = await get(false, port, '/pinned', { host });
      assert.equal(r.headers['set-cookie'], undefined);
      spread.add(r.body);
    }
    assert.ok(spread.size >= 2, `without the cookie the pick is random: ${spread.size} upstreams`);
    const pinned = new Set<string>();
    for (let i = 0; i < 10; i++) pinned.add((await get(false, port, '/pinned', { host, cookie: 'pinned=alice' })).body);
    assert.equal(pinned.size, 1);
  });
});
