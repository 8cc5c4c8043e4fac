// Locality failover through the real pilot-discovery process over real gRPC: a client whose node
// says where it runs gets EDS priorities by nearness and, with a failover list, clusters that
// balance by locality weight; two clients in two zones each get their own priorities; a mesh config
// with locality balancing off leaves a rule without a setting of its own unprioritized.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AdsClient } from '../../src/envoy/ads-client.js';
import { TypeUrl } from '../../src/envoy/types.js';
import type { Cluster } from '../../src/gen/envoy/config/cluster/v3/cluster_pb.js';
import type { ClusterLoadAssignment } from '../../src/gen/envoy/config/endpoint/v3/endpoint_pb.js';
import { discoveryArgs, eventually, Running, start } from '../helpers/proc.js';

const CONFIG = `apiVersion: networking.mesh.io/v1
kind: ServiceEntry
metadata: {namespace: default, name: ratings}
spec:
  hosts: [ratings.default.svc.cluster.local]
  addresses: [10.96.7.1]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{number: 9080, name: http, protocol: HTTP}]
  workloadSelector: {labels: {app: ratings}}
---
apiVersion: networking.mesh.io/v1
kind: ServiceEntry
metadata: {namespace: default, name: reviews}
spec:
  hosts: [reviews.default.svc.cluster.local]
  addresses: [10.96.7.2]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{number: 9080, name: http, protocol: HTTP}]
  workloadSelector: {labels: {app: ratings}}
---
apiVersion: networking.mesh.io/v1
kind: WorkloadEntry
metadata: {namespace: default, name: ratings-a}
spec: {address: 10.0.7.1, labels: {app: ratings}, locality: us-east/zone-a}
---
apiVersion: networking.mesh.io/v1
kind: WorkloadEntry
metadata: {namespace: default, name: ratings-b}
spec: {address: 10.0.7.2, labels: {app: ratings}, locality: us-east/zone-b}
---
apiVersion: networking.mesh.io/v1
kind: WorkloadEntry
metadata: {namespace: default, name: ratings-eu}
spec: {address: 10.0.7.3, labels: {app: ratings}, locality: eu-west/zone-a}
---
apiVersion: networking.mesh.io/v1
kind: DestinationRule
metadata: {namespace: default, name: ratings}
spec:
  host: ratings
  trafficPolicy:
    loadBalancer: {localityLbSetting: {failover: [{from: us-east, to: eu-west}]}}
    outlierDetection: {consecutive5xxErrors: 2}
---
apiVersion: networking.mesh.io/v1
kind: DestinationRule
metadata: {namespace: default, name: reviews}
spec:
  host: reviews
  trafficPolicy:
    outlierDetection: {consecutive5xxErrors: 2}
`;

const RATINGS = 'outbound|9080||ratings.default.svc.cluster.local';
const REVIEWS = 'outbound|9080||reviews.default.svc.cluster.local';

/** `region/zone` -> priority of a load assignment the client holds. */
function priorities(ads: AdsClient, cluster: string): Record<string, number> | undefined {
  const cla = ads.resources(TypeUrl.ClusterLoadAssignment).get(cluster)?.message as ClusterLoadAssignment | undefined;
  if (!cla) return undefined;
  return Object.fromEntries(cla.endpoints.map((l) => [`${l.locality?.region}/${l.locality?.zone}`, l.priority]));
}

async function withDiscovery(meshConfig: string, run: (client: (zone: string) => AdsClient) => Promise<void>): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'mesh-locality-'));
  writeFileSync(join(dir, 'services.yaml'), CONFIG);
  const meshFile = join(mkdtempSync(join(tmpdir(), 'mesh-config-')), 'mesh.yaml');
  writeFileSync(meshFile, meshConfig);
  const d = new Running(start('pilot-discovery', discoveryArgs(dir, { meshConfig: meshFile })));
  const clients: AdsClient[] = [];
  try {
    const grpc = (await d.waitFor(/gRPC xDS server listening on (\S+)/))[1]!;
    await d.waitFor(/discovery server ready/);
    let n = 0;
    await run((zone) => {
      const ads = new AdsClient({
        address: grpc,
        node: { id: `sidecar~127.0.0.${++n}~client-${n}.default~default.svc.cluster.local`, locality: { region: 'us-east', zone }, metadata: { NAMESPACE: 'default', LABELS: { app: 'client' }, INTERCEPTION_MODE: 'NONE' } },
        onUpdate: () => undefined,
      });
      ads.start();
      clients.push(ads);
      return ads;
    });
  } finally {
    for (const c of clients) c.close();
    await d.stop();
  }
}

test("EDS priorities follow the client node's locality; a failover list makes the cluster balance by locality weight", async () => {
  await withDiscovery('', async (client) => {
    const inA = client('zone-a');
    const inB = client('zone-b');
    await eventually(() => assert.deepEqual(priorities(inA, RATINGS), { 'us-east/zone-a': 0, 'us-east/zone-b': 1, 'eu-west/zone-a': 2 }));
    await eventually(() => assert.deepEqual(priorities(inB, RATINGS), { 'us-east/zone-a': 1, 'us-east/zone-b': 0, 'eu-west/zone-a': 2 }));
    // The mesh default (enabled) applies to a rule with outlier detection and no setting of its own.
    await eventually(() => assert.deepEqual(priorities(inA, REVIEWS), { 'us-east/zone-a': 0, 'us-east/zone-b': 1, 'eu-west/zone-a': 2 }));
    const cluster = (name: string) => inA.resources(TypeUrl.Cluster).get(name)?.message as Cluster | undefined;
    assert.equal(cluster(RATINGS)?.commonLbConfig?.localityConfigSpecifier.case, 'localityWeightedLbConfig');
    assert.equal(cluster(REVIEWS)?.commonLbConfig?.localityConfigSpecifier.case, undefined, 'default failover: priorities only');
    assert.equal(cluster(REVIEWS)?.commonLbConfig?.healthyPanicThreshold?.value, 0);
  });
});

test('mesh config localityLbSetting.enabled false: a rule without its own setting gets no priorities, one with its own keeps them', async () => {
  await withDiscovery('localityLbSetting: {enabled: false}\n', async (client) => {
    const inA = client('zone-a');
    await eventually(() => assert.deepEqual(priorities(inA, REVIEWS), { 'us-east/zone-a': 0, 'us-east/zone-b': 0, 'eu-west/zone-a': 0 }));
    await eventually(() => assert.deepEqual(priorities(inA, RATINGS), { 'us-east/zone-a': 0, 'us-east/zone-b': 1, 'eu-west/zone-a': 2 }));
  });
});
