// The ADS client against the team's discovery server (src/xds/server.ts), not only the fake.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ClusterSchema, Cluster_DiscoveryType } from '../../src/gen/envoy/config/cluster/v3/cluster_pb.js';
import { ClusterLoadAssignmentSchema } from '../../src/gen/envoy/config/endpoint/v3/endpoint_pb.js';
import { ListenerSchema } from '../../src/gen/envoy/config/listener/v3/listener_pb.js';
import { RouteConfigurationSchema } from '../../src/gen/envoy/config/route/v3/route_pb.js';
import { AdsClient } from '../../src/envoy/ads-client.js';
import { TypeUrl, unpack } from '../../src/envoy/types.js';
import { eventually } from '../helpers/proc.js';
import { startServer } from '../xds/harness.js';
import { rdsListener } from './resources.js';

test('against the discovery server: listeners, clusters, then the routes and endpoints they name; a NACK keeps the last good', async (t) => {
  const h = await startServer();
  t.after(() => h.close());
  h.fixtures.set(TypeUrl.Cluster, ClusterSchema, { name: 'outbound|80||a', clusterDiscoveryType: { case: 'type', value: Cluster_DiscoveryType.EDS } });
  h.fixtures.setNamed(TypeUrl.ClusterLoadAssignment, 'outbound|80||a', ClusterLoadAssignmentSchema, { clusterName: 'outbound|80||a' });
  h.fixtures.set(TypeUrl.Listener, ListenerSchema, unpack(rdsListener('l80', '80'), ListenerSchema));
  h.fixtures.set(TypeUrl.RouteConfiguration, RouteConfigurationSchema, { name: '80' });
  h.fixtures.set(TypeUrl.RouteConfiguration, RouteConfigurationSchema, { name: 'not-asked' });

  let rejectListeners = false;
  const c = new AdsClient({
    address: h.address,
    node: { id: 'sidecar~10.0.0.1~a-1.ns~ns.svc.cluster.local', metadata: { NAMESPACE: 'ns' } },
    onUpdate: (u) => {
      if (rejectListeners && u.typeUrl === TypeUrl.Listener) throw new Error('port 9090 in use');
    },
  });
  t.after(() => c.close());
  c.start();
  const names = (type: string) => [...c.resources(type).keys()];
  await eventually(() => {
    assert.deepEqual(names(TypeUrl.Cluster), ['outbound|80||a']);
    assert.deepEqual(names(TypeUrl.ClusterLoadAssignment), ['outbound|80||a']);
    assert.deepEqual(names(TypeUrl.Listener), ['l80']);
    assert.deepEqual(names(TypeUrl.RouteConfiguration), ['80']);
  });

  const before = c.version(TypeUrl.Listener);
  const nacked = new Promise<string>((resolve) => c.once('nack', (_t, _v, why) => resolve(why)));
  rejectListeners = true;
  h.fixtures.set(TypeUrl.Listener, ListenerSchema, unpack(rdsListener('l9090', '9090', 9090), ListenerSchema));
  await h.server.pushAll({ reason: 'test', types: new Set([TypeUrl.Listener]) });
  assert.equal(await nacked, 'port 9090 in use');
  assert.equal(c.version(TypeUrl.Listener), before);
  assert.deepEqual(names(TypeUrl.Listener), ['l80']);
});
