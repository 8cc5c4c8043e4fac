// A response larger than a gRPC client's 4 MiB receive limit, over a real stream with the client
// our agent uses (grpc-js defaults): before, the client cut the stream on it, reconnected, got it
// again, and never received anything else. Now the server holds that response back, reports it
// (log, pilot_xds_pushes{type="lds_senderr"}, the guard's list behind /debug/oversized), and
// keeps the stream and every other type flowing; a later push that fits is delivered.
import assert from 'node:assert/strict';
import { after, test } from 'node:test';
import { ClusterSchema } from '../../src/gen/envoy/config/cluster/v3/cluster_pb.js';
import { ListenerSchema } from '../../src/gen/envoy/config/listener/v3/listener_pb.js';
import { AdsClient } from '../../src/envoy/ads-client.js';
import { MAX_RESPONSE_BYTES } from '../../src/xds/size-guard.js';
import { TypeUrl } from '../../src/envoy/types.js';
import { eventually } from '../helpers/proc.js';
import { counterValue, node, startServer } from './harness.js';

const PROXY = 'sidecar~10.0.0.1~app-1.foo~foo.svc.cluster.local';

test('an oversized response is held back and reported; the stream and the other types keep flowing', async () => {
  const h = await startServer();
  after(() => h.close());
  h.fixtures.set(TypeUrl.Cluster, ClusterSchema, { name: 'c1' });
  h.fixtures.set(TypeUrl.Listener, ListenerSchema, { name: 'inbound' });
  const ads = new AdsClient({ address: h.address, node: node(PROXY), onUpdate: () => undefined, followDependencies: false });
  const ended: string[] = [];
  ads.on('disconnected', (error) => ended.push(error));
  after(() => ads.close());
  ads.start();
  const names = (typeUrl: string) => [...ads.resources(typeUrl).keys()].sort();
  await eventually(() => assert.deepEqual(names(TypeUrl.Listener), ['inbound']));

  // A listener that alone is over the limit (a 10,000-rule policy did this), beside a new DENY one.
  const before = await counterValue('pilot_xds_pushes', { type: 'lds_senderr' });
  h.fixtures.set(TypeUrl.Listener, ListenerSchema, { name: 'huge', statPrefix: 'x'.repeat(MAX_RESPONSE_BYTES + 1) });
  h.fixtures.set(TypeUrl.Listener, ListenerSchema, { name: 'deny' });
  await h.server.pushAll({ reason: 'test' });
  const [held] = h.server.sizes.list();
  assert.ok(held, 'the oversized response is listed');
  assert.deepEqual([held.proxyId, held.type, held.limit, held.largest[0]?.name], [PROXY, 'lds', MAX_RESPONSE_BYTES, 'huge']);
  assert.ok(held.bytes > MAX_RESPONSE_BYTES);
  assert.equal(await counterValue('pilot_xds_pushes', { type: 'lds_senderr' }), before + 1);

  // Other types still arrive on the same stream; the proxy keeps its last listeners.
  h.fixtures.set(TypeUrl.Cluster, ClusterSchema, { name: 'c2' });
  await h.server.pushAll({ reason: 'test' });
  await eventually(() => assert.deepEqual(names(TypeUrl.Cluster), ['c1', 'c2']));
  assert.deepEqual(names(TypeUrl.Listener), ['inbound']);
  assert.equal(await counterValue('pilot_xds_pushes', { type: 'lds_senderr' }), before + 2, 'every held push counts');
  assert.equal(h.server.sizes.list().length, 1, 'reported once per stream and type');

  // Once the listeners fit again, they are delivered, the DENY one included, and nothing is held.
  h.fixtures.delete(TypeUrl.Listener, 'huge');
  await h.server.pushAll({ reason: 'test' });
  await eventually(() => assert.deepEqual(names(TypeUrl.Listener), ['deny', 'inbound']));
  assert.deepEqual(h.server.sizes.list(), []);
  assert.deepEqual(ended, [], 'the stream was never cut');
});
