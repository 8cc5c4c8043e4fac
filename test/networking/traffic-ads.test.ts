// The translation seen over a real ADS stream of the in-process discovery server reading a config
// directory: DestinationRule subsets are served as clusters with their own endpoints, and editing
// the VirtualService file changes the pushed RouteConfiguration; a broken save keeps the last good one.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DiscoveryServer } from '../../src/cli/discovery-server.js';
import { AdsClient } from '../../src/envoy/ads-client.js';
import { TypeUrl } from '../../src/envoy/types.js';
import type { ClusterLoadAssignment } from '../../src/gen/envoy/config/endpoint/v3/endpoint_pb.js';
import type { RouteConfiguration } from '../../src/gen/envoy/config/route/v3/route_pb.js';
import { setScopeLevel } from '../../src/common/log.js';
import { counter } from '../../src/common/metrics.js';
import { metricValue } from '../helpers/metrics.js';
import { eventually } from '../helpers/proc.js';
import { localDiscoveryOptions } from '../security/fixtures.js';

for (const s of ['default', 'ads', 'model', 'source', 'validationServer']) setScopeLevel(s, 'error');

const HOST = 'reviews.foo.svc.cluster.local';
const MESH = `apiVersion: networking.mesh.io/v1
kind: ServiceEntry
metadata: {namespace: foo, name: reviews}
spec:
  hosts: [${HOST}]
  addresses: [10.96.0.30]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{number: 9080, name: http, protocol: HTTP}]
  workloadSelector: {labels: {app: reviews}}
---
apiVersion: networking.mesh.io/v1
kind: WorkloadEntry
metadata: {namespace: foo, name: reviews-v1}
spec: {address: 10.0.1.1, labels: {app: reviews, version: v1}}
---
apiVersion: networking.mesh.io/v1
kind: WorkloadEntry
metadata: {namespace: foo, name: reviews-v2}
spec: {address: 10.0.1.2, labels: {app: reviews, version: v2}}
---
apiVersion: networking.mesh.io/v1
kind: DestinationRule
metadata: {namespace: foo, name: reviews}
spec:
  host: reviews
  subsets:
  - {name: v1, labels: {version: v1}}
  - {name: v2, labels: {version: v2}}
`;

function virtualService(subset: string): string {
  return `apiVersion: networking.mesh.io/v1
kind: VirtualService
metadata: {namespace: foo, name: reviews}
spec:
  hosts: [reviews]
  http:
  - route:
    - destination: {host: reviews, subset: ${subset}}
`;
}

function routedCluster(ads: AdsClient): string | undefined {
  const rc = ads.resources(TypeUrl.RouteConfiguration).get('9080')?.message as RouteConfiguration | undefined;
  const vh = rc?.virtualHosts.find((v) => v.domains.includes(HOST));
  const action = vh?.routes[0]?.action;
  return action?.case === 'route' && action.value.clusterSpecifier.case === 'cluster' ? action.value.clusterSpecifier.value : undefined;
}

function endpointsOf(ads: AdsClient, cluster: string): string[] {
  const cla = ads.resources(TypeUrl.ClusterLoadAssignment).get(cluster)?.message as ClusterLoadAssignment | undefined;
  return (cla?.endpoints ?? []).flatMap((l) => l.lbEndpoints.map((e) => (e.hostIdentifier.case === 'endpoint' && e.hostIdentifier.value.address?.address.case === 'socketAddress' ? e.hostIdentifier.value.address.address.value.address : '')));
}

test('subset clusters and endpoints are served; a VirtualService edit changes the pushed route', { timeout: 30_000 }, async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'traffic-ads-'));
  writeFileSync(join(dir, 'mesh.yaml'), MESH);
  const vsFile = join(dir, 'vs.yaml');
  writeFileSync(vsFile, virtualService('v1'));
  const d = new DiscoveryServer(localDiscoveryOptions(dir));
  t.after(() => d.stop());
  await d.start();
  const ads = new AdsClient({
    address: d.addresses.grpc!,
    node: { id: 'sidecar~10.0.0.50~client-1.foo~foo.svc.cluster.local', metadata: { NAMESPACE: 'foo', LABELS: { app: 'client' }, INTERCEPTION_MODE: 'NONE' } },
    onUpdate: () => undefined,
  });
  t.after(() => ads.close());
  ads.start();

  const v1 = `outbound|9080|v1|${HOST}`;
  const v2 = `outbound|9080|v2|${HOST}`;
  await eventually(() => {
    const clusters = [...ads.resources(TypeUrl.Cluster).keys()];
    assert.ok(clusters.includes(v1) && clusters.includes(v2) && clusters.includes(`outbound|9080||${HOST}`), `subset clusters served: ${clusters.join(' ')}`);
    assert.deepEqual(endpointsOf(ads, v1), ['10.0.1.1'], 'v1 has the v1 workload only');
    assert.deepEqual(endpointsOf(ads, v2), ['10.0.1.2'], 'v2 has the v2 workload only');
    assert.deepEqual(endpointsOf(ads, `outbound|9080||${HOST}`).sort(), ['10.0.1.1', '10.0.1.2']);
    assert.equal(routedCluster(ads), v1, 'the VirtualService routes to v1');
  }, 10_000);

  writeFileSync(vsFile, virtualService('v2'));
  await eventually(() => assert.equal(routedCluster(ads), v2, 'the edited VirtualService routes to v2'), 10_000);
  const version = ads.version(TypeUrl.RouteConfiguration);

  // A save the API rejects (a timeout that is not a string) keeps the last good route.
  const rejected = await metricValue(counter('pilot_total_rejected_configs'), { kind: 'VirtualService' });
  writeFileSync(vsFile, `${virtualService('v1')}    timeout: 5\n`);
  await eventually(async () => assert.ok((await metricValue(counter('pilot_total_rejected_configs'), { kind: 'VirtualService' })) > rejected, 'the broken save was read and rejected'), 10_000);
  assert.equal(routedCluster(ads), v2, 'still v2');
  assert.equal(ads.version(TypeUrl.RouteConfiguration), version);
});
