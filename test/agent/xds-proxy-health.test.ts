// The workload's health on the relay: a real XdsProxy between a stub discovery server (FakeAds) and
// a raw ADS stream playing the proxy. The HealthInformation request goes upstream only after the
// proxy's LDS request, carries error_detail when unhealthy, is re-sent on a new upstream stream,
// and is the agent's own: the proxy never sees it and ACK tracking is unaffected. The agent as a
// whole (PROXY_CONFIG.readinessProbe starting the checker) is in agent.test.ts.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { create } from '@bufbuild/protobuf';
import { credentials, status, type Client, type ClientDuplexStream } from '@grpc/grpc-js';
import { AggregatedDiscoveryService } from '../../src/gen/envoy/service/discovery/v3/ads_pb.js';
import { DiscoveryRequestSchema, type DiscoveryRequest, type DiscoveryResponse } from '../../src/gen/envoy/service/discovery/v3/discovery_pb.js';
import { XdsProxy } from '../../src/agent/xds-proxy.js';
import { grpcClient } from '../../src/envoy/grpc-service.js';
import { HEALTH_INFO_TYPE_URL, TypeUrl } from '../../src/envoy/types.js';
import { eventually } from '../helpers/proc.js';
import { FakeAds, Inbox } from './fake-ads.js';
import { edsCluster } from './resources.js';

const NODE = { id: 'sidecar~10.0.0.5~vm-1.ns~ns.svc.cluster.local', metadata: { NAMESPACE: 'ns' } };

interface AdsGrpcClient extends Client {
  streamAggregatedResources(): ClientDuplexStream<DiscoveryRequest, DiscoveryResponse>;
}

/** The proxy's side: requests written by the test, responses collected. */
function proxyStream(port: number) {
  const client = grpcClient(AggregatedDiscoveryService, `127.0.0.1:${port}`, credentials.createInsecure()) as AdsGrpcClient;
  const call = client.streamAggregatedResources();
  const responses = new Inbox<DiscoveryResponse>();
  const all: DiscoveryResponse[] = [];
  call.on('data', (r: DiscoveryResponse) => (all.push(r), responses.push(r)));
  call.on('error', () => responses.end('error'));
  return {
    responses,
    all,
    send: (typeUrl: string, more: Partial<Pick<DiscoveryRequest, 'resourceNames' | 'versionInfo' | 'responseNonce'>> = {}, withNode = false) =>
      call.write(create(DiscoveryRequestSchema, { typeUrl, ...more, ...(withNode ? { node: NODE } : {}) })),
    close: () => (call.cancel(), client.close()),
  };
}

/** A relay between a stub discovery server and the proxy's stream, all closed after the test. */
async function relay(t: { after(fn: () => void): void }) {
  const upstream = await FakeAds.start();
  const xds = new XdsProxy({ upstreamAddress: upstream.address, listenAddress: '127.0.0.1:0', initialBackoffMs: 10, maxBackoffMs: 40 });
  const proxy = proxyStream(await xds.start());
  t.after(() => {
    proxy.close();
    xds.close();
    upstream.stop();
  });
  return { upstream, xds, proxy };
}

const brief = (r: DiscoveryRequest) => [r.typeUrl, r.errorDetail ? { code: r.errorDetail.code, message: r.errorDetail.message } : undefined];

test('health goes upstream after the LDS request, unhealthy with error_detail INTERNAL, again on every new upstream stream, never to the proxy', async (t) => {
  const { upstream, xds, proxy } = await relay(t);

  // Reported before the proxy even connected: kept until a stream has carried LDS.
  const unhealthy = 'GET http://10.0.0.5:8080/healthz: 503';
  xds.reportHealth({ healthy: false, message: unhealthy });
  proxy.send(TypeUrl.Cluster, {}, true);
  const s = await upstream.streams.next();
  assert.deepEqual(brief(await s.requests.next()), [TypeUrl.Cluster, undefined]);
  proxy.send(TypeUrl.ClusterLoadAssignment, { resourceNames: ['a'] });
  // One stream keeps its order: had health been sent before LDS, it would come here.
  assert.deepEqual(brief(await s.requests.next()), [TypeUrl.ClusterLoadAssignment, undefined]);
  proxy.send(TypeUrl.Listener);
  assert.deepEqual(brief(await s.requests.next()), [TypeUrl.Listener, undefined]);
  assert.deepEqual(brief(await s.requests.next()), [HEALTH_INFO_TYPE_URL, { code: status.INTERNAL, message: unhealthy }]);

  // A transition on a stream that has carried LDS goes at once; healthy has no error_detail.
  xds.reportHealth({ healthy: true });
  const healthy = await s.requests.next();
  assert.deepEqual(brief(healthy), [HEALTH_INFO_TYPE_URL, undefined]);
  assert.deepEqual([healthy.versionInfo, healthy.responseNonce, healthy.resourceNames], ['', '', []]);

  // ACK tracking sees the proxy's ACKs only.
  const nonce = s.respond({ typeUrl: TypeUrl.Cluster, versionInfo: 'c1', resources: [edsCluster('a')] });
  assert.equal((await proxy.responses.next()).typeUrl, TypeUrl.Cluster);
  proxy.send(TypeUrl.Cluster, { versionInfo: 'c1', responseNonce: nonce });
  assert.deepEqual([(await s.requests.next()).responseNonce], [nonce]);
  await eventually(() => assert.deepEqual([...xds.acked()], [[TypeUrl.Cluster, 'c1']]));

  // A new upstream stream: primed with the proxy's requests, then the latest health again.
  s.fail();
  const s2 = await upstream.streams.next();
  const primed = [await s2.requests.next(), await s2.requests.next(), await s2.requests.next()];
  assert.deepEqual(primed.map((r) => r.typeUrl), [TypeUrl.Cluster, TypeUrl.ClusterLoadAssignment, TypeUrl.Listener]);
  assert.equal(primed[0]!.node?.id, NODE.id);
  assert.deepEqual(brief(await s2.requests.next()), [HEALTH_INFO_TYPE_URL, undefined], 'the latest report (healthy), not the first');
  xds.reportHealth({ healthy: false, message: 'connect 10.0.0.5:9000: ECONNREFUSED' });
  assert.deepEqual(brief(await s2.requests.next()), [HEALTH_INFO_TYPE_URL, { code: status.INTERNAL, message: 'connect 10.0.0.5:9000: ECONNREFUSED' }]);

  // The proxy saw the one response meant for it and nothing of the agent's health.
  s2.respond({ typeUrl: TypeUrl.Listener, versionInfo: 'l1', resources: [] });
  assert.equal((await proxy.responses.next()).typeUrl, TypeUrl.Listener);
  assert.deepEqual(proxy.all.map((r) => r.typeUrl), [TypeUrl.Cluster, TypeUrl.Listener]);
  assert.equal(upstream.all.length, 2);
});

test('a proxy that has not asked for listeners yet: health waits, also on a new upstream stream', async (t) => {
  const { upstream, xds, proxy } = await relay(t);
  proxy.send(TypeUrl.Cluster, {}, true);
  const s = await upstream.streams.next();
  await s.requests.next();
  xds.reportHealth({ healthy: true });
  s.fail();
  const s2 = await upstream.streams.next();
  assert.equal((await s2.requests.next()).typeUrl, TypeUrl.Cluster);
  // Reconnected without LDS in the priming: still nothing; the proxy's LDS request lets it go.
  proxy.send(TypeUrl.ClusterLoadAssignment, { resourceNames: ['a'] });
  assert.equal((await s2.requests.next()).typeUrl, TypeUrl.ClusterLoadAssignment);
  proxy.send(TypeUrl.Listener);
  assert.deepEqual([(await s2.requests.next()).typeUrl, (await s2.requests.next()).typeUrl], [TypeUrl.Listener, HEALTH_INFO_TYPE_URL]);
});
