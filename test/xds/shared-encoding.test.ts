// Work done once per distinct resource, not once per proxy: proxies given the same resources share
// one generated set and the very same encoded bytes; a proxy with a different resource gets its own
// entry for that one and shares the rest. The responses put together from those bytes decode to
// each proxy's own resources.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { create, fromBinary, type JsonObject } from '@bufbuild/protobuf';
import { NodeSchema } from '../../src/gen/envoy/config/core/v3/base_pb.js';
import { ClusterSchema } from '../../src/gen/envoy/config/cluster/v3/cluster_pb.js';
import { DeltaDiscoveryResponseSchema, DiscoveryResponseSchema } from '../../src/gen/envoy/service/discovery/v3/discovery_pb.js';
import { setScopeLevel } from '../../src/common/log.js';
import { PushContext } from '../../src/model/push-context.js';
import { ServiceEntryRegistry } from '../../src/registry/serviceentry.js';
import { concatBytes, encodedDelta, encodedSotw, ResponseCache, XdsCache } from '../../src/xds/cache.js';
import { ResponseJoiner, type OutgoingResponse, type ResponseBytes } from '../../src/xds/response-writer.js';
import { Watch, type Delivery, type VersionedResource } from '../../src/xds/connection.js';
import type { ProxyInfo } from '../../src/xds/generator.js';
import { createMeshGenerators } from '../../src/xds/generators/index.js';
import { applyDelta, deltaDiff, encodeDelta, encodeSotw } from '../../src/xds/responses.js';
import { TypeUrl, unpack } from '../../src/envoy/types.js';
import { MESH, storeOf } from '../networking/fixtures.js';

setScopeLevel('model', 'error');

function proxyAt(ip: string, pod: string, labels: Record<string, string>): ProxyInfo {
  const id = `sidecar~${ip}~${pod}.foo~foo.svc.cluster.local`;
  return { id, metadata: { NAMESPACE: 'foo', LABELS: labels } as JsonObject, node: create(NodeSchema, { id }), connectionId: id, peer: '127.0.0.1:1' };
}

test('proxies with identical clusters share one set and the same encoded bytes; a proxy with a different cluster gets its own entry for it', async () => {
  const store = storeOf(MESH);
  const registry = new ServiceEntryRegistry(store, 'c1');
  const push = PushContext.build({ config: store, registry, clusterId: 'c1' });
  const cds = createMeshGenerators({ pushContext: () => push, cache: new XdsCache({ enabled: true, size: 1000 }) }).get(TypeUrl.Cluster)!;
  const responses = new ResponseCache();
  const wildcard = { wildcard: true, names: new Set<string>() };
  const setOf = async (proxy: ProxyInfo) => responses.sets.intern(await cds.generate({ proxy, typeUrl: TypeUrl.Cluster, subscription: wildcard }));

  // Two clients of no service: the same outbound clusters, no inbound ones.
  const a = await setOf(proxyAt('10.0.0.50', 'client-1', { app: 'client' }));
  const b = await setOf(proxyAt('10.0.0.51', 'client-2', { app: 'client' }));
  // echo-2 serves echo: it also has inbound clusters (its gRPC port is 17070).
  const echo = await setOf(proxyAt('10.0.0.2', 'echo-2', { app: 'echo', version: 'v2' }));

  assert.equal(b, a, 'one set (map and version) for both');
  for (const [name, r] of a.resources) assert.equal(encodedSotw(b.resources.get(name)!), encodedSotw(r), `${name}: the same bytes, not an equal copy`);
  assert.notEqual(echo, a);
  assert.notEqual(echo.version, a.version);
  const own = [...echo.resources.keys()].filter((n) => !a.resources.has(n));
  assert.ok(own.length > 0 && own.every((n) => n.startsWith('inbound|')), `echo-2's own clusters are its inbound ones: ${own.join(', ')}`);
  for (const [name, r] of a.resources) assert.equal(encodedSotw(echo.resources.get(name)!), encodedSotw(r), `${name} is shared with echo-2`);
  for (const name of own) {
    const bytes = encodedSotw(echo.resources.get(name)!);
    assert.ok([...a.resources.values()].every((r) => encodedSotw(r) !== bytes), `${name} has bytes of its own`);
  }

  // SotW: both clients' responses carry the one encoded list; each decodes to its proxy's clusters.
  const delivery = (set: typeof a, nonce: string): Delivery => ({ version: set.version, nonce, time: new Date(), resources: set.resources });
  const decode = (parts: ResponseBytes) => fromBinary(DiscoveryResponseSchema, concatBytes(parts));
  const ra = decode(encodeSotw(responses, TypeUrl.Cluster, delivery(a, 'n1'), undefined, undefined));
  const rb = decode(encodeSotw(responses, TypeUrl.Cluster, delivery(b, 'n2'), undefined, undefined));
  const re = decode(encodeSotw(responses, TypeUrl.Cluster, delivery(echo, 'n3'), undefined, { identifier: 'meshd-1' }));
  assert.equal(responses.encoded.size, 2, 'one encoded list per distinct set');
  const names = (r: typeof ra) => r.resources.map((any) => unpack(any, ClusterSchema).name);
  assert.deepEqual([ra.nonce, ra.versionInfo, ra.typeUrl], ['n1', a.version, TypeUrl.Cluster]);
  assert.deepEqual([rb.nonce, rb.versionInfo], ['n2', a.version]);
  assert.deepEqual(names(ra), [...a.resources.keys()]);
  assert.deepEqual(names(rb), names(ra));
  assert.deepEqual(names(re), [...echo.resources.keys()]);
  assert.equal(re.controlPlane?.identifier, 'meshd-1');

  // Delta: the entries (name, version, Any) are encoded once per resource too.
  const [first] = a.resources.values();
  assert.equal(encodedDelta(b.resources.get(first!.name)!), encodedDelta(first!));
  const deltaOf = (updated: VersionedResource[], nonce: string) =>
    fromBinary(DeltaDiscoveryResponseSchema, concatBytes(encodeDelta(responses, { systemVersionInfo: echo.version, typeUrl: TypeUrl.Cluster, nonce, removedResources: ['gone'] }, echo, updated)));
  const delta = deltaOf([...echo.resources.values()], 'd1');
  assert.deepEqual(
    delta.resources.map((r) => [r.name, r.version, unpack(r.resource!, ClusterSchema).name]),
    [...echo.resources.values()].map((r) => [r.name, r.version, r.name]),
  );
  assert.deepEqual([delta.nonce, delta.systemVersionInfo, delta.removedResources], ['d1', echo.version, ['gone']]);
  const own1 = echo.resources.get(own[0]!)!;
  assert.deepEqual(deltaOf([own1], 'd2').resources.map((r) => r.name), [own1.name], 'a partial update carries only its resources');

  // Delta streams moving from one set to the next share one diff; each records what it now holds.
  const watches = [new Watch(TypeUrl.Cluster, true, []), new Watch(TypeUrl.Cluster, true, [])];
  const respond = (w: Watch, set: typeof a) => {
    const diff = deltaDiff(w, set, [], false);
    return diff && { diff, held: applyDelta(w, set, diff) };
  };
  for (const w of watches) assert.equal(respond(w, a)?.diff.updated.length, a.resources.size, 'first response: everything');
  const [c1, c2] = watches.map((w) => respond(w, echo)!);
  assert.equal(c2!.diff.updated, c1!.diff.updated, 'the same diff');
  const bodyOf = (updated: readonly VersionedResource[], nonce: string) => encodeDelta(responses, { systemVersionInfo: echo.version, typeUrl: TypeUrl.Cluster, nonce }, echo, updated)[1];
  assert.equal(bodyOf(c2!.diff.updated, 'd4'), bodyOf(c1!.diff.updated, 'd3'), 'the same bytes for both streams, not an equal copy each');
  assert.deepEqual(c1!.diff.updated.map((r) => r.name), own);
  assert.equal(c1!.held, echo.resources, 'the proxy holds the shared set');
  assert.deepEqual(Object.fromEntries(watches[1]!.clientVersions), Object.fromEntries([...echo.resources.values()].map((r) => [r.name, r.version])));
  assert.equal(deltaDiff(watches[0]!, echo, [], false), undefined, 'nothing new: nothing sent');
  registry.close();
});

test('responses are joined in one reused buffer; one that gRPC did not take during the write keeps its own bytes', () => {
  const joiner = new ResponseJoiner();
  const bytes = (...b: number[]) => new Uint8Array(b);
  const taken: Uint8Array[] = [];
  // Taken during the write, as grpc-js serializes: the bytes are copied out at once.
  const take = (r: OutgoingResponse) => {
    r.taken = true;
    taken.push(Uint8Array.from(r.bytes));
  };
  joiner.write([bytes(1, 2), bytes(3)], take);
  joiner.write([bytes(9), bytes(8, 7, 6)], take);
  assert.deepEqual(taken, [bytes(1, 2, 3), bytes(9, 8, 7, 6)]);

  // Not taken during the write (gRPC queued it): later writes must not change what it will send.
  let queued: OutgoingResponse | undefined;
  joiner.write([bytes(4, 4), bytes(5, 5)], (r) => (queued = r));
  joiner.write([bytes(0, 0), bytes(0, 0)], take);
  assert.deepEqual(queued!.bytes, bytes(4, 4, 5, 5));

  // Larger than the buffer: it grows, the content is whole.
  const big = new Uint8Array(200_000).fill(7);
  joiner.write([bytes(1), big], take);
  assert.equal(taken.at(-1)!.length, 200_001);
  assert.equal(taken.at(-1)![0], 1);
  assert.ok(taken.at(-1)!.subarray(1).every((b) => b === 7));
});
