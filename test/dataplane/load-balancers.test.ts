// RING_HASH and MAGLEV with Envoy's properties: the same key always maps to the same endpoint,
// removing one of N endpoints moves only about 1/N of the keys, weights shift the share; and end to
// end through mesh-proxy: a route hash_policy on a header sends every request with one header
// value to one upstream of a RING_HASH cluster.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it, test } from 'node:test';
import { Cluster_DiscoveryType, Cluster_LbPolicy, ClusterSchema } from '../../src/gen/envoy/config/cluster/v3/cluster_pb.js';
import { RouteConfigurationSchema } from '../../src/gen/envoy/config/route/v3/route_pb.js';
import { loadBootstrap } from '../../src/dataplane/bootstrap.js';
import { compileHashPolicies, maglev, ringHash, type HashTable, type WeightedHost } from '../../src/dataplane/load-balancers.js';
import { MeshProxy } from '../../src/dataplane/proxy.js';
import { requestView } from '../../src/envoy/request.js';
import { pack, TypeUrl } from '../../src/envoy/types.js';
import { eventually } from '../helpers/proc.js';
import { get } from '../helpers/http.js';
import { FixtureAds, hcmChain, listener, writeBootstrap } from './xds-fixtures.js';
import { create } from '@bufbuild/protobuf';
import { RouteAction_HashPolicySchema } from '../../src/gen/envoy/config/route/v3/route_components_pb.js';

const hosts = (n: number): WeightedHost[] => Array.from({ length: n }, (_, i) => ({ host: `10.0.0.${i + 1}`, port: 8080, weight: 1 }));
const keys = Array.from({ length: 5000 }, (_, i) => BigInt.asUintN(64, BigInt(i) * 0x9e3779b97f4a7c15n));

function moved(build: (h: readonly WeightedHost[]) => HashTable): { moved: number; fromRemoved: number } {
  const all = hosts(10);
  const before = build(all);
  const removed = all[3]!;
  const rest = all.filter((h) => h !== removed);
  const after = build(rest);
  let movedKeys = 0;
  let fromRemoved = 0;
  for (const k of keys) {
    const a = all[before(k)]!;
    const b = rest[after(k)]!;
    if (a === removed) fromRemoved++;
    else if (a !== b) movedKeys++;
  }
  return { moved: movedKeys, fromRemoved };
}

for (const [name, build] of [
  ['ring hash', (h: readonly WeightedHost[]) => ringHash(h)],
  ['maglev', (h: readonly WeightedHost[]) => maglev(h)],
] as const) {
  test(`${name}: a key always maps to the same endpoint; removing 1 of 10 moves about 1/10 of the keys`, () => {
    const t = build(hosts(10));
    for (const k of keys.slice(0, 100)) assert.equal(t(k), build(hosts(10))(k), 'rebuilt from the same endpoints: same mapping');
    const counts = new Array<number>(10).fill(0);
    for (const k of keys) counts[t(k)]!++;
    assert.ok(Math.min(...counts) > 250 && Math.max(...counts) < 800, `spread over all endpoints: ${counts.join(',')}`);
    const m = moved(build);
    // The removed endpoint's keys (about 1/10) must move; of the others only a few do (the ring's
    // other endpoints get a few more points each, as in Envoy; Maglev's table refills a few slots).
    assert.ok(m.fromRemoved > 300 && m.fromRemoved < 700, `keys that were on the removed endpoint: ${m.fromRemoved}`);
    assert.ok(m.moved <= keys.length * 0.1, `other keys moved: ${m.moved}`);
  });
}

test('a weight of 3 gets about three times the keys', () => {
  const hs = [{ host: 'a', port: 1, weight: 3 }, { host: 'b', port: 1, weight: 1 }];
  for (const t of [ringHash(hs), maglev(hs)]) {
    const n = keys.filter((k) => t(k) === 0).length / keys.length;
    assert.ok(n > 0.65 && n < 0.85, `share of the weight-3 endpoint: ${n}`);
  }
});

test('hash policies: header, cookie, source IP, query parameter; terminal stops; none present = no hash', () => {
  const view = (headers: Record<string, string>, path = '/', source = '10.1.1.1') => requestView({ headers, path, source: { address: source, port: 1 } });
  const policy = (init: Parameters<typeof create<typeof RouteAction_HashPolicySchema>>[1]) => create(RouteAction_HashPolicySchema, init);
  const h = compileHashPolicies([policy({ policySpecifier: { case: 'header', value: { headerName: 'x-user' } } })], 'hash_policy')!;
  assert.equal(h(view({ 'x-user': 'jason' })), h(view({ 'x-user': 'jason' })));
  assert.notEqual(h(view({ 'x-user': 'jason' })), h(view({ 'x-user': 'anna' })));
  assert.equal(h(view({})), undefined);
  const cookie = compileHashPolicies([policy({ policySpecifier: { case: 'cookie', value: { name: 'sid' } } })], 'hash_policy')!;
  assert.equal(cookie(view({ cookie: 'a=1; sid=s1' })), cookie(view({ cookie: 'sid=s1' })));
  const ip = compileHashPolicies([policy({ policySpecifier: { case: 'connectionProperties', value: { sourceIp: true } } })], 'hash_policy')!;
  assert.notEqual(ip(view({}, '/', '10.0.0.1')), ip(view({}, '/', '10.0.0.2')));
  const query = compileHashPolicies([policy({ policySpecifier: { case: 'queryParameter', value: { name: 'u' } } })], 'hash_policy')!;
  assert.equal(query(view({}, '/p?u=1&x=2')), query(view({}, '/q?u=1')));
  const terminal = compileHashPolicies(
    [policy({ policySpecifier: { case: 'header', value: { headerName: 'a' } }, terminal: true }), policy({ policySpecifier: { case: 'header', value: { headerName: 'b' } } })],
    'hash_policy',
  )!;
  assert.equal(terminal(view({ a: '1', b: '2' })), terminal(view({ a: '1', b: '3' })), 'b is not read after a terminal hash');
  assert.notEqual(terminal(view({ b: '2' })), terminal(view({ b: '3' })), 'without a, b gives the hash');
});

describe('RING_HASH through mesh-proxy', () => {
  const servers: Server[] = [];
  let dir: string;
  let ads: FixtureAds;
  let proxy: MeshProxy;
  const ports: number[] = [];

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'ring-hash-'));
    for (let i = 0; i < 4; i++) {
      const s = createServer((_req, res) => res.end(`up${i}`));
      servers.push(s);
      await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
      ports.push((s.address() as { port: number }).port);
    }
    ads = new FixtureAds();
    await ads.listen();
    const endpoints = ports.map((p) => ({ hostIdentifier: { case: 'endpoint' as const, value: { address: { address: { case: 'socketAddress' as const, value: { address: '127.0.0.1', portSpecifier: { case: 'portValue' as const, value: p } } } } } } }));
    ads.set(TypeUrl.Cluster, [
      { name: 'ring', any: pack(ClusterSchema, { name: 'ring', clusterDiscoveryType: { case: 'type', value: Cluster_DiscoveryType.STATIC }, lbPolicy: Cluster_LbPolicy.RING_HASH, loadAssignment: { clusterName: 'ring', endpoints: [{ lbEndpoints: endpoints }] } }) },
    ]);
    ads.set(TypeUrl.RouteConfiguration, [
      {
        name: 'r',
        any: pack(RouteConfigurationSchema, {
          name: 'r',
          virtualHosts: [
            {
              name: 'all',
              domains: ['*'],
              routes: [{ match: { pathSpecifier: { case: 'prefix', value: '/' } }, action: { case: 'route', value: { clusterSpecifier: { case: 'cluster', value: 'ring' }, hashPolicy: [{ policySpecifier: { case: 'header', value: { headerName: 'x-user' } } }] } } }],
            },
          ],
        }),
      },
    ]);
    ads.set(TypeUrl.Listener, [listener('in', 0, [hcmChain({ rds: 'r' })])]);
    proxy = new MeshProxy({ bootstrap: loadBootstrap({ path: writeBootstrap(dir, ads.port, 0) }), drainTimeMs: 1_000, initialBackoffMs: 50 });
    await proxy.start();
    await eventually(async () => assert.equal((await get(false, port(), '/')).status, 200), 10_000);
  });

  const port = () => proxy.listeners.info().find((l) => l.name === 'in')!.bound!.port;

  after(async () => {
    await proxy.stop(0);
    ads.close();
    for (const s of servers) s.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('sends every request of one x-user to one upstream, and different users over several', async () => {
    const seen = new Set<string>();
    for (let u = 0; u < 20; u++) {
      const bodies = new Set<string>();
      for (let i = 0; i < 5; i++) bodies.add((await get(false, port(), '/', { 'x-user': `user-${u}` })).body);
      assert.equal(bodies.size, 1, `user-${u} reached ${[...bodies].join(', ')}`);
      seen.add([...bodies][0]!);
    }
    assert.ok(seen.size >= 2, `20 users over ${seen.size} upstreams`);
  });
});
