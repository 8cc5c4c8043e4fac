// The agent's own xDS type on the relay: the name table is subscribed by the agent on the upstream
// stream, applied and ACKed (or NACKed) by it, never relayed to the proxy, and resumed from its
// last accepted version when the upstream stream is re-opened.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { NameTableSchema, type NameTable } from '../../src/gen/mesh/v1/dns_pb.js';
import type { DiscoveryResponse } from '../../src/gen/envoy/service/discovery/v3/discovery_pb.js';
import { XdsProxy } from '../../src/agent/xds-proxy.js';
import { AdsClient, type AdsUpdate } from '../../src/envoy/ads-client.js';
import { pack, TypeUrl, unpack } from '../../src/envoy/types.js';
import { FakeAds } from './fake-ads.js';
import { edsCluster } from './resources.js';

const NODE = { id: 'sidecar~10.0.0.1~app-1.ns~ns.svc.cluster.local', metadata: { NAMESPACE: 'ns', DNS_CAPTURE: 'true' } };

test('the name table is the agent\'s: subscribed upstream, applied, ACKed or NACKed by the agent, not relayed, resumed after a reconnect', async (t) => {
  const upstream = await FakeAds.start();
  const tables: NameTable[] = [];
  const agentTypes = new Map([[TypeUrl.NameTable, (res: DiscoveryResponse) => void tables.push(unpack(res.resources[0]!, NameTableSchema))]]);
  const xds = new XdsProxy({ upstreamAddress: upstream.address, listenAddress: '127.0.0.1:0', initialBackoffMs: 10, maxBackoffMs: 40, agentTypes });
  const port = await xds.start();
  const updates: AdsUpdate[] = [];
  const proxy = new AdsClient({ address: `127.0.0.1:${port}`, node: NODE, onUpdate: (u) => void updates.push(u), initialBackoffMs: 10, maxBackoffMs: 40 });
  let restarted: FakeAds | undefined;
  t.after(() => {
    proxy.close();
    xds.close();
    upstream.stop();
    restarted?.stop();
  });
  proxy.start();

  const s = await upstream.streams.next();
  const nds = await s.requests.nextMatching((r) => r.typeUrl === TypeUrl.NameTable);
  assert.deepEqual([nds.resourceNames, nds.versionInfo], [[], ''], 'a wildcard subscription from scratch');

  const table = { table: { 'api.example.com': { ips: ['240.240.0.9'], registry: 'ServiceEntry' } } };
  const n1 = s.respond({ typeUrl: TypeUrl.NameTable, versionInfo: 'v1', resources: [pack(NameTableSchema, table)] });
  const ack = await s.requests.nextMatching((r) => r.typeUrl === TypeUrl.NameTable);
  assert.deepEqual([ack.versionInfo, ack.responseNonce, ack.errorDetail], ['v1', n1, undefined]);
  assert.deepEqual(tables.map((tb) => tb.table['api.example.com']?.ips), [['240.240.0.9']]);

  // Not relayed: the proxy's next update (same upstream stream, so in order) is the cluster.
  s.respond({ typeUrl: TypeUrl.Cluster, versionInfo: 'c1', resources: [edsCluster('a')] });
  await s.requests.nextMatching((r) => r.typeUrl === TypeUrl.Cluster && r.versionInfo === 'c1');
  assert.deepEqual(updates.map((u) => u.typeUrl), [TypeUrl.Cluster]);

  // A resource that is not a NameTable: NACKed with the reason, the last good version kept.
  const n2 = s.respond({ typeUrl: TypeUrl.NameTable, versionInfo: 'v2', resources: [edsCluster('b')] });
  const nack = await s.requests.nextMatching((r) => r.typeUrl === TypeUrl.NameTable);
  assert.deepEqual([nack.versionInfo, nack.responseNonce], ['v1', n2]);
  assert.match(nack.errorDetail?.message ?? '', /expected type\.googleapis\.com\/mesh\.v1\.dns\.NameTable/);
  assert.equal(tables.length, 1);

  // A new upstream stream resumes the agent's subscription at its accepted version.
  const upstreamPort = upstream.port;
  s.fail();
  upstream.stop();
  restarted = await FakeAds.start(upstreamPort);
  const s2 = await restarted.streams.next();
  const again = await s2.requests.nextMatching((r) => r.typeUrl === TypeUrl.NameTable);
  assert.equal(again.versionInfo, 'v1');
});
