// Responses written as gRPC frames them (response-writer.ts), on a real grpc-js server and client:
// the grpc-js in use has the call shape the direct path needs (a grpc-js upgrade that changes it
// fails here rather than silently falling back to the copying write), and what the client decodes
// is exactly the messages written, large ones spread over many HTTP/2 frames, with one body buffer
// shared by several streams, in order, followed by the call's status.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { create, toBinary } from '@bufbuild/protobuf';
import { Server, ServerCredentials, status, type ServerDuplexStream } from '@grpc/grpc-js';
import { ClusterSchema } from '../../src/gen/envoy/config/cluster/v3/cluster_pb.js';
import { DiscoveryResponseSchema, type DiscoveryRequest } from '../../src/gen/envoy/service/discovery/v3/discovery_pb.js';
import { adsDefinition } from '../../src/xds/ads-transport.js';
import { directWriter, ResponseJoiner, responseWriter, type OutgoingResponse, type ResponseBytes } from '../../src/xds/response-writer.js';
import { concatBytes, encodedSotw } from '../../src/xds/cache.js';
import { pack, TypeUrl, unpack } from '../../src/envoy/types.js';
import { adsClient, sotw } from './harness.js';

/** A SotW response as the server puts it together: the per-stream head, then the shared entries. */
function head(version: string, nonce: string): Uint8Array {
  return toBinary(DiscoveryResponseSchema, create(DiscoveryResponseSchema, { versionInfo: version, typeUrl: TypeUrl.Cluster, nonce }));
}

function body(clusters: number, prefix: string): Uint8Array {
  const entries: Uint8Array[] = [];
  for (let i = 0; i < clusters; i++) {
    const name = `${prefix}-${i}`;
    entries.push(encodedSotw({ name, version: 'v', resource: pack(ClusterSchema, { name, altStatName: 'x'.repeat(200) }) }));
  }
  return concatBytes(entries);
}

test('responses written as gRPC frames them reach real clients whole, in order, then the status', async (t) => {
  const small = body(3, 'small');
  // About 1.4 MB: many HTTP/2 DATA frames, beyond the stream's initial flow-control window.
  const large = body(5000, 'large');
  const largeBefore = Uint8Array.from(large);
  const server = new Server();
  const direct: boolean[] = [];
  server.addService(adsDefinition(), {
    streamAggregatedResources: (call: ServerDuplexStream<DiscoveryRequest, OutgoingResponse>) => {
      const writer = directWriter(call);
      direct.push(writer !== undefined);
      call.once('data', (req: DiscoveryRequest) => {
        const write = (parts: ResponseBytes) => new Promise<void>((resolve, reject) => writer!(parts, (err) => (err ? reject(err) : resolve())));
        void (async () => {
          await write([head('1', `${req.node?.id}-a`), small]);
          await write([head('2', `${req.node?.id}-b`), large]);
          await write([head('3', `${req.node?.id}-c`), new Uint8Array(0)]);
          call.end();
        })();
      });
    },
    deltaAggregatedResources: () => undefined,
  });
  const port = await new Promise<number>((resolve, reject) => server.bindAsync('127.0.0.1:0', ServerCredentials.createInsecure(), (e, p) => (e ? reject(e) : resolve(p))));
  const client = adsClient(`127.0.0.1:${port}`);
  t.after(() => {
    client.close();
    server.forceShutdown();
  });

  // Two streams sent the same body buffers at the same time.
  const streams = ['p1', 'p2'].map((id) => {
    const s = sotw(client);
    s.send({ node: { id }, typeUrl: TypeUrl.Cluster });
    return { id, s };
  });
  for (const { id, s } of streams) {
    const a = await s.next();
    assert.deepEqual([a.versionInfo, a.nonce, a.typeUrl], ['1', `${id}-a`, TypeUrl.Cluster]);
    assert.deepEqual(a.resources.map((r) => unpack(r, ClusterSchema).name), ['small-0', 'small-1', 'small-2']);
    const b = await s.next();
    assert.deepEqual([b.versionInfo, b.nonce], ['2', `${id}-b`]);
    assert.equal(b.resources.length, 5000);
    assert.equal(unpack(b.resources[4999]!, ClusterSchema).name, 'large-4999');
    assert.equal(unpack(b.resources[0]!, ClusterSchema).altStatName, 'x'.repeat(200));
    const c = await s.next();
    assert.deepEqual([c.versionInfo, c.nonce, c.resources.length], ['3', `${id}-c`, 0]);
    assert.equal((await s.status()).code, status.OK);
  }
  assert.deepEqual(direct, [true, true], 'the grpc-js in use has the call shape the direct path relies on');
  assert.deepEqual(large, largeBefore, 'the shared body is written as it is, never changed');
});

test('a call without grpc-js\'s internal shape (wrapped by an interceptor, another grpc-js) gets gRPC\'s own write', () => {
  assert.equal(directWriter({}), undefined);
  assert.equal(directWriter({ call: { stream: {} } }), undefined);
  const written: Uint8Array[] = [];
  const call = { write: (r: OutgoingResponse, cb: () => void) => (written.push(Uint8Array.from(r.bytes)), (r.taken = true), cb(), true) };
  let done = false;
  responseWriter(call as unknown as ServerDuplexStream<unknown, OutgoingResponse>, new ResponseJoiner())([new Uint8Array([1, 2]), new Uint8Array([3])], () => (done = true));
  assert.deepEqual(written, [new Uint8Array([1, 2, 3])]);
  assert.ok(done);
});
