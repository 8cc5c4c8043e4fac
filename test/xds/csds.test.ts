import { test } from 'node:test';
import assert from 'node:assert/strict';
import { create, type MessageInitShape } from '@bufbuild/protobuf';
import { credentials, status, type Client, type ServiceError } from '@grpc/grpc-js';
import { ClusterSchema } from '../../src/gen/envoy/config/cluster/v3/cluster_pb.js';
import { ListenerSchema } from '../../src/gen/envoy/config/listener/v3/listener_pb.js';
import { ClientResourceStatus } from '../../src/gen/envoy/admin/v3/config_dump_shared_pb.js';
import {
  ClientStatusDiscoveryService,
  ClientStatusRequestSchema,
  ConfigStatus,
  type ClientStatusRequest,
  type ClientStatusResponse,
} from '../../src/gen/envoy/service/status/v3/csds_pb.js';
import { grpcClient } from '../../src/envoy/grpc-service.js';
import { TypeUrl, unpack } from '../../src/envoy/types.js';
import { node, sotw, startServer, type Harness } from './harness.js';

const A = 'sidecar~10.0.0.1~a-1.foo~foo.svc.cluster.local';
const B = 'sidecar~10.0.0.2~b-1.bar~bar.svc.cluster.local';

interface CsdsClient extends Client {
  fetchClientStatus(req: ClientStatusRequest, cb: (err: ServiceError | null, res?: ClientStatusResponse) => void): void;
}

function fetchStatus(h: Harness, init: MessageInitShape<typeof ClientStatusRequestSchema> = {}): Promise<ClientStatusResponse> {
  const client = grpcClient(ClientStatusDiscoveryService, h.address, credentials.createInsecure()) as CsdsClient;
  return new Promise((resolve, reject) =>
    client.fetchClientStatus(create(ClientStatusRequestSchema, init), (err, res) => {
      client.close();
      if (err) reject(err);
      else resolve(res!);
    }),
  );
}

/** A acks LDS and CDS; B acks CDS, then NACKs a cluster change. */
async function scenario(t: { after(fn: () => void): void }): Promise<Harness> {
  const h = await startServer();
  t.after(() => h.close());
  h.fixtures.set(TypeUrl.Listener, ListenerSchema, { name: 'l1' });
  h.fixtures.set(TypeUrl.Cluster, ClusterSchema, { name: 'c1' });

  const a = sotw(h.client());
  a.send({ node: node(A), typeUrl: TypeUrl.Listener });
  const l = await a.next();
  a.send({ typeUrl: l.typeUrl, versionInfo: l.versionInfo, responseNonce: l.nonce });
  a.send({ typeUrl: TypeUrl.Cluster });
  const c = await a.next();
  a.send({ typeUrl: c.typeUrl, versionInfo: c.versionInfo, responseNonce: c.nonce });

  const b = sotw(h.client());
  b.send({ node: node(B), typeUrl: TypeUrl.Cluster });
  const c1 = await b.next();
  b.send({ typeUrl: c1.typeUrl, versionInfo: c1.versionInfo, responseNonce: c1.nonce });
  // Fresh requests are always answered: once they are, every earlier reply has been handled.
  b.send({ typeUrl: TypeUrl.Listener });
  await b.next();
  h.fixtures.set(TypeUrl.Cluster, ClusterSchema, { name: 'c1', altStatName: 'bad' });
  await h.server.push(B, { reason: 'config', types: new Set([TypeUrl.Cluster]) });
  const c2 = await b.next();
  b.send({ typeUrl: c2.typeUrl, versionInfo: c1.versionInfo, responseNonce: c2.nonce, errorDetail: { code: 3, message: 'bad cluster' } });
  for (const s of [a, b]) {
    s.send({ typeUrl: TypeUrl.RouteConfiguration, resourceNames: ['sync'] });
    await s.next();
  }
  return h;
}

test('CSDS lists each proxy with its acked resources and their status', async (t) => {
  const h = await scenario(t);
  const res = await fetchStatus(h);
  const byNode = new Map(res.config.map((c) => [c.node?.id, c]));
  assert.deepEqual([...byNode.keys()].sort(), [A, B]);

  const a = byNode.get(A)!;
  assert.deepEqual(a.node?.metadata, { NAMESPACE: 'default' });
  const aConfigs = a.genericXdsConfigs.map((g) => [g.typeUrl, g.name, g.clientStatus, g.configStatus]);
  assert.deepEqual(aConfigs.sort(), [
    [TypeUrl.Cluster, 'c1', ClientResourceStatus.ACKED, ConfigStatus.SYNCED],
    [TypeUrl.Listener, 'l1', ClientResourceStatus.ACKED, ConfigStatus.SYNCED],
  ]);
  const listener = a.genericXdsConfigs.find((g) => g.name === 'l1')!;
  assert.equal(unpack(listener.xdsConfig!, ListenerSchema).name, 'l1');
  assert.notEqual(listener.versionInfo, '');
  assert.ok(listener.lastUpdated);

  const b = byNode.get(B)!;
  const cluster = b.genericXdsConfigs.find((g) => g.typeUrl === TypeUrl.Cluster)!;
  assert.equal(cluster.configStatus, ConfigStatus.ERROR);
  assert.equal(cluster.clientStatus, ClientResourceStatus.ACKED);
  assert.equal(unpack(cluster.xdsConfig!, ClusterSchema).altStatName, '', 'the acked (last good) cluster is listed');
  assert.equal(cluster.errorState?.details, 'bad cluster');
  assert.notEqual(cluster.errorState?.versionInfo, cluster.versionInfo);
});

test('CSDS filters by node id and can leave out resource contents', async (t) => {
  const h = await scenario(t);
  const exact = await fetchStatus(h, { nodeMatchers: [{ nodeId: { matchPattern: { case: 'exact', value: B } } }] });
  assert.deepEqual(exact.config.map((c) => c.node?.id), [B]);
  const prefix = await fetchStatus(h, {
    nodeMatchers: [{ nodeId: { matchPattern: { case: 'prefix', value: 'SIDECAR~10.0.0.1' }, ignoreCase: true } }],
    excludeResourceContents: true,
  });
  assert.deepEqual(prefix.config.map((c) => c.node?.id), [A]);
  assert.ok(prefix.config[0]!.genericXdsConfigs.length > 0);
  for (const g of prefix.config[0]!.genericXdsConfigs) assert.equal(g.xdsConfig, undefined);
  const regex = await fetchStatus(h, { nodeMatchers: [{ nodeId: { matchPattern: { case: 'safeRegex', value: { regex: '.*\\.bar~.*' } } } }] });
  assert.deepEqual(regex.config.map((c) => c.node?.id), [B]);

  await assert.rejects(
    fetchStatus(h, { nodeMatchers: [{ nodeMetadatas: [{ path: [{ segment: { case: 'key', value: 'NAMESPACE' } }] }] }] }),
    (err: ServiceError) => err.code === status.INVALID_ARGUMENT && /node_metadatas is not supported/.test(err.details),
  );
});
