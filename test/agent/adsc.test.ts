import { test } from 'node:test';
import assert from 'node:assert/strict';
import { AdsClient, type AdsUpdate } from '../../src/envoy/ads-client.js';
import { TypeUrl } from '../../src/envoy/types.js';
import { FakeAds } from './fake-ads.js';
import { edsCluster, endpoints, rdsListener, route } from './resources.js';
import { eventually } from '../helpers/proc.js';

const NODE = { id: 'sidecar~10.0.0.1~app-1.ns~ns.svc.cluster.local', metadata: { NAMESPACE: 'ns' } };

function client(address: string, onUpdate: (u: AdsUpdate) => void = () => undefined): AdsClient {
  return new AdsClient({ address, node: NODE, onUpdate, initialBackoffMs: 10, maxBackoffMs: 50 });
}

test('subscribes to clusters and listeners, ACKs, then follows the routes and endpoints they name', async (t) => {
  const ads = await FakeAds.start();
  const updates: AdsUpdate[] = [];
  const c = client(ads.address, (u) => void updates.push(u));
  t.after(() => (c.close(), ads.stop()));
  c.start();
  const s = await ads.streams.next();

  const cds = await s.requests.next();
  assert.equal(cds.typeUrl, TypeUrl.Cluster);
  assert.equal(cds.node?.id, NODE.id, 'the first request carries the node');
  assert.deepEqual(cds.resourceNames, []);
  const lds = await s.requests.next();
  assert.equal(lds.typeUrl, TypeUrl.Listener);
  assert.equal(lds.node, undefined, 'the node is sent once per stream');

  const n1 = s.respond({ typeUrl: TypeUrl.Cluster, versionInfo: 'c1', resources: [edsCluster('outbound|80||a')] });
  const ack = await s.requests.next();
  assert.deepEqual([ack.typeUrl, ack.versionInfo, ack.responseNonce, ack.errorDetail], [TypeUrl.Cluster, 'c1', n1, undefined]);
  const eds = await s.requests.next();
  assert.equal(eds.typeUrl, TypeUrl.ClusterLoadAssignment);
  assert.deepEqual(eds.resourceNames, ['outbound|80||a']);

  const n2 = s.respond({ typeUrl: TypeUrl.Listener, versionInfo: 'l1', resources: [rdsListener('l', 'r80')] });
  const lack = await s.requests.next();
  assert.deepEqual([lack.typeUrl, lack.versionInfo, lack.responseNonce], [TypeUrl.Listener, 'l1', n2]);
  const rds = await s.requests.next();
  assert.deepEqual([rds.typeUrl, rds.resourceNames], [TypeUrl.RouteConfiguration, ['r80']]);

  // Named types: responses merge, and resources not asked for are dropped.
  s.respond({ typeUrl: TypeUrl.RouteConfiguration, versionInfo: 'r1', resources: [route('r80'), route('other')] });
  const rack = await s.requests.next();
  assert.equal(rack.versionInfo, 'r1');
  assert.deepEqual([...c.resources(TypeUrl.RouteConfiguration).keys()], ['r80']);
  s.respond({ typeUrl: TypeUrl.ClusterLoadAssignment, versionInfo: 'e1', resources: [endpoints('outbound|80||a')] });
  await s.requests.next();
  assert.deepEqual(
    updates.map((u) => [u.typeUrl, u.version, [...u.resources.keys()]]),
    [
      [TypeUrl.Cluster, 'c1', ['outbound|80||a']],
      [TypeUrl.Listener, 'l1', ['l']],
      [TypeUrl.RouteConfiguration, 'r1', ['r80']],
      [TypeUrl.ClusterLoadAssignment, 'e1', ['outbound|80||a']],
    ],
  );
});

test('a handler error NACKs with the reason and keeps the last accepted version and resources', async (t) => {
  const ads = await FakeAds.start();
  const c = client(ads.address, (u) => {
    if (u.version === 'bad') throw new Error('listener "l2": port 0 is not allowed');
  });
  t.after(() => (c.close(), ads.stop()));
  const nacks: string[] = [];
  c.on('nack', (_t, v, why) => nacks.push(`${v}: ${why}`));
  c.start();
  const s = await ads.streams.next();
  await s.requests.next();
  await s.requests.next();
  s.respond({ typeUrl: TypeUrl.Listener, versionInfo: 'good', resources: [rdsListener('l1', 'r')] });
  await s.requests.nextMatching((r) => r.typeUrl === TypeUrl.Listener);
  const n = s.respond({ typeUrl: TypeUrl.Listener, versionInfo: 'bad', resources: [rdsListener('l2', 'r')] });
  const nack = await s.requests.nextMatching((r) => r.typeUrl === TypeUrl.Listener);
  assert.equal(nack.responseNonce, n);
  assert.equal(nack.versionInfo, 'good', 'a NACK carries the last accepted version');
  assert.equal(nack.errorDetail?.code, 3);
  assert.match(nack.errorDetail?.message ?? '', /port 0 is not allowed/);
  assert.equal(c.version(TypeUrl.Listener), 'good');
  assert.deepEqual([...c.resources(TypeUrl.Listener).keys()], ['l1']);
  assert.deepEqual(nacks, ['bad: listener "l2": port 0 is not allowed']);
});

test('an undecodable resource is NACKed without reaching the handler', async (t) => {
  const ads = await FakeAds.start();
  let calls = 0;
  const c = client(ads.address, () => void calls++);
  t.after(() => (c.close(), ads.stop()));
  c.start();
  const s = await ads.streams.next();
  await s.requests.next();
  await s.requests.next();
  s.respond({ typeUrl: TypeUrl.Cluster, versionInfo: 'x', resources: [{ $typeName: 'google.protobuf.Any', typeUrl: TypeUrl.Cluster, value: new Uint8Array([0xff, 0xff]) }] });
  const nack = await s.requests.next();
  assert.ok(nack.errorDetail, 'NACK expected');
  assert.equal(nack.versionInfo, '');
  assert.equal(calls, 0);
});

test('reconnects after the server goes away, resuming from the versions and names it holds', async (t) => {
  let ads = await FakeAds.start();
  const port = ads.port;
  const c = client(ads.address);
  t.after(() => (c.close(), ads.stop()));
  const disconnects: boolean[] = [];
  c.on('disconnected', (_why, established) => disconnects.push(established));
  c.start();
  let s = await ads.streams.next();
  await s.requests.next();
  await s.requests.next();
  s.respond({ typeUrl: TypeUrl.Cluster, versionInfo: 'c1', resources: [edsCluster('a')] });
  await s.requests.nextMatching((r) => r.typeUrl === TypeUrl.ClusterLoadAssignment);

  // A stream the server ends: the client opens another on the same server.
  s.fail();
  s = await ads.streams.next();
  const again = await s.requests.next();
  assert.deepEqual([again.typeUrl, again.versionInfo, again.responseNonce, again.node?.id], [TypeUrl.Cluster, 'c1', '', NODE.id]);
  const eds = await s.requests.next();
  assert.deepEqual([eds.typeUrl, eds.resourceNames], [TypeUrl.ClusterLoadAssignment, ['a']]);

  // The whole server restarts on the same port.
  ads.stop();
  ads = await FakeAds.start(port);
  s = await ads.streams.next();
  const third = await s.requests.next();
  assert.equal(third.versionInfo, 'c1');
  assert.deepEqual([...c.resources(TypeUrl.Cluster).keys()], ['a'], 'resources survive reconnects');
  await eventually(() => assert.ok(disconnects.length >= 2 && disconnects[0] === true, `disconnects: ${disconnects}`));
});
