import { test } from 'node:test';
import assert from 'node:assert/strict';
import { counter, type CounterName } from '../../src/common/metrics.js';
import { XdsProxy } from '../../src/agent/xds-proxy.js';
import { AdsClient, type AdsUpdate } from '../../src/envoy/ads-client.js';
import { TypeUrl } from '../../src/envoy/types.js';
import { eventually } from '../helpers/proc.js';
import { FakeAds } from './fake-ads.js';
import { edsCluster, rdsListener } from './resources.js';

const NODE = { id: 'sidecar~10.0.0.1~app-1.ns~ns.svc.cluster.local', metadata: { NAMESPACE: 'ns' } };

async function count(name: CounterName): Promise<number> {
  return (await counter(name).get()).values.reduce((a, v) => a + v.value, 0);
}

async function setup() {
  let upstream = await FakeAds.start();
  const xds = new XdsProxy({ upstreamAddress: upstream.address, listenAddress: '127.0.0.1:0', initialBackoffMs: 10, maxBackoffMs: 40 });
  const port = await xds.start();
  const updates: AdsUpdate[] = [];
  /** A stand-in for the data-plane proxy: an ADS client of the agent's local server. */
  const proxyClient = (onUpdate: (u: AdsUpdate) => void) =>
    new AdsClient({ address: `127.0.0.1:${port}`, node: NODE, onUpdate, initialBackoffMs: 10, maxBackoffMs: 40 });
  const proxy = proxyClient((u) => void updates.push(u));
  return {
    xds,
    proxy,
    proxyClient,
    updates,
    get upstream() {
      return upstream;
    },
    async restartUpstream() {
      upstream = await FakeAds.start(upstream.port);
    },
    close() {
      proxy.close();
      xds.close();
      upstream.stop();
    },
  };
}

test('relays the proxy stream to the discovery server and sees the ACKs of listeners and clusters', async (t) => {
  const h = await setup();
  t.after(() => h.close());
  h.proxy.start();
  const s = await h.upstream.streams.next();
  const first = await s.requests.next();
  assert.equal(first.typeUrl, TypeUrl.Cluster);
  assert.equal(first.node?.id, NODE.id, 'the node reaches the discovery server');
  await s.requests.next();
  assert.equal(h.xds.hasListenersAndClusters(), false);

  const n1 = s.respond({ typeUrl: TypeUrl.Cluster, versionInfo: 'c1', resources: [edsCluster('a')] });
  const ack = await s.requests.nextMatching((r) => r.typeUrl === TypeUrl.Cluster);
  assert.deepEqual([ack.versionInfo, ack.responseNonce], ['c1', n1], 'the proxy ACK is relayed as is');
  s.respond({ typeUrl: TypeUrl.Listener, versionInfo: 'l1', resources: [rdsListener('l', 'r')] });
  await s.requests.nextMatching((r) => r.typeUrl === TypeUrl.Listener);
  await eventually(() => assert.equal(h.xds.hasListenersAndClusters(), true));
  assert.deepEqual([...h.xds.acked()].sort(), [[TypeUrl.Cluster, 'c1'], [TypeUrl.Listener, 'l1']]);
  assert.equal(h.upstream.all.length, 1, 'one upstream stream');
});

test('a NACK from the proxy is relayed and does not count as applied', async (t) => {
  const h = await setup();
  t.after(() => h.close());
  const nacks: string[] = [];
  h.xds.on('nacked', (_t, v, m) => nacks.push(`${v}: ${m}`));
  const proxy = h.proxyClient(() => {
    throw new Error('cannot bind');
  });
  t.after(() => proxy.close());
  proxy.start();
  const s = await h.upstream.streams.next();
  await s.requests.next();
  await s.requests.next();
  s.respond({ typeUrl: TypeUrl.Listener, versionInfo: 'l1', resources: [rdsListener('l', 'r')] });
  const nack = await s.requests.nextMatching((r) => r.typeUrl === TypeUrl.Listener);
  assert.equal(nack.errorDetail?.message, 'cannot bind');
  assert.deepEqual(nacks, ['l1: cannot bind']);
  assert.equal(h.xds.acked().has(TypeUrl.Listener), false);
});

test('survives a discovery server restart: the proxy stream stays open, failures are counted, the new stream resumes', async (t) => {
  const h = await setup();
  t.after(() => h.close());
  const proxyDisconnects: string[] = [];
  h.proxy.on('disconnected', (why) => proxyDisconnects.push(why));
  h.proxy.start();
  let s = await h.upstream.streams.next();
  await s.requests.next();
  await s.requests.next();
  s.respond({ typeUrl: TypeUrl.Cluster, versionInfo: 'c1', resources: [edsCluster('a')] });
  await s.requests.nextMatching((r) => r.typeUrl === TypeUrl.Cluster);
  await eventually(() => assert.equal(h.updates.length, 1));

  const terminations = await count('meshd_connection_terminations');
  const failures = await count('meshd_connection_failures');
  h.upstream.stop();
  await eventually(async () => assert.equal(await count('meshd_connection_terminations'), terminations + 1));
  // While the server is down, reconnect attempts fail and are counted.
  await eventually(async () => assert.ok((await count('meshd_connection_failures')) > failures, 'failures counted'));

  await h.restartUpstream();
  s = await h.upstream.streams.next();
  const primed = await s.requests.next();
  assert.deepEqual([primed.typeUrl, primed.versionInfo, primed.responseNonce, primed.node?.id], [TypeUrl.Cluster, 'c1', '', NODE.id]);
  const more = [await s.requests.next(), await s.requests.next()].map((r) => [r.typeUrl, r.resourceNames]);
  assert.deepEqual(more, [
    [TypeUrl.ClusterLoadAssignment, ['a']],
    [TypeUrl.Listener, []],
  ]);
  s.respond({ typeUrl: TypeUrl.Cluster, versionInfo: 'c2', resources: [edsCluster('a'), edsCluster('b')] });
  await eventually(() => assert.deepEqual([...(h.updates.at(-1)?.resources.keys() ?? [])], ['a', 'b']));
  assert.deepEqual(proxyDisconnects, [], 'the proxy never lost its stream');
});

test('closing the xDS proxy ends the proxy stream with UNAVAILABLE', async (t) => {
  const h = await setup();
  t.after(() => h.close());
  const ended = new Promise<string>((resolve) => h.proxy.once('disconnected', (why) => resolve(why)));
  h.proxy.start();
  await (await h.upstream.streams.next()).requests.next();
  h.xds.close();
  assert.match(await ended, /^14 the agent is shutting down/);
});
