// Responses written as gRPC frames them (response-writer.ts), on a real grpc-js server and client:
// the grpc-js in use has the call shape the direct path needs (a grpc-js upgrade that changes it
// fails here rather than silently falling back to the copying write), also behind the discovery
// server's own interceptor, and what the client decodes is exactly the messages written, large ones
// spread over many HTTP/2 frames, with one body buffer shared by several streams, in order,
// followed by the call's status. An interceptor that sees responses keeps gRPC's own write and
// gets every message.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { create, toBinary } from '@bufbuild/protobuf';
import { Server, ServerCredentials, ServerInterceptingCall, status, type ServerDuplexStream, type ServerInterceptor, type ServerOptions } from '@grpc/grpc-js';
import { PlaintextCredentials } from '../../src/security/ca/transport.js';
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

interface Served {
  readonly port: number;
  /** Per stream: whether the direct path applied. */
  readonly direct: boolean[];
  close(): void;
}

/** A gRPC server of the real ADS definition whose SotW handler writes three responses with `responseWriter`, then ends the call. */
async function serve(credentials: ServerCredentials, small: Uint8Array, large: Uint8Array, options: ServerOptions = {}): Promise<Served> {
  const server = new Server(options);
  const direct: boolean[] = [];
  const joiner = new ResponseJoiner();
  server.addService(adsDefinition(), {
    streamAggregatedResources: (call: ServerDuplexStream<DiscoveryRequest, OutgoingResponse>) => {
      direct.push(directWriter(call) !== undefined);
      const writer = responseWriter(call, joiner);
      call.once('data', (req: DiscoveryRequest) => {
        const write = (parts: ResponseBytes) => new Promise<void>((resolve, reject) => writer(parts, (err) => (err ? reject(err) : resolve())));
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
  const port = await new Promise<number>((resolve, reject) => server.bindAsync('127.0.0.1:0', credentials, (e, p) => (e ? reject(e) : resolve(p))));
  return { port, direct, close: () => server.forceShutdown() };
}

/** Two streams at once, each expecting the three responses whole and in order, then status OK. */
async function receiveFrom(port: number): Promise<void> {
  const client = adsClient(`127.0.0.1:${port}`);
  try {
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
  } finally {
    client.close();
  }
}

const small = body(3, 'small');
// About 1.4 MB: many HTTP/2 DATA frames, beyond the stream's initial flow-control window.
const large = body(5000, 'large');

for (const [name, credentials] of [
  ['plain gRPC', () => ServerCredentials.createInsecure()],
  ['the discovery server\'s port credentials (an interceptor stamping incoming metadata)', () => new PlaintextCredentials()],
] as const) {
  test(`responses written as gRPC frames them reach real clients whole, in order, then the status: ${name}`, async (t) => {
    const largeBefore = Uint8Array.from(large);
    const served = await serve(credentials(), small, large);
    t.after(() => served.close());
    await receiveFrom(served.port);
    assert.deepEqual(served.direct, [true, true], 'the grpc-js in use has the call shape the direct path relies on');
    assert.deepEqual(large, largeBefore, 'the shared body is written as it is, never changed');
  });
}

test('an interceptor that sees outgoing messages gets every response through gRPC\'s own write', async (t) => {
  let seen = 0;
  const counting: ServerInterceptor = (_method, call) =>
    new ServerInterceptingCall(call, {
      sendMessage: (message, next) => {
        seen++;
        next(message);
      },
    });
  const served = await serve(ServerCredentials.createInsecure(), small, large, { interceptors: [counting] });
  t.after(() => served.close());
  await receiveFrom(served.port);
  assert.deepEqual(served.direct, [false, false]);
  assert.equal(seen, 6, 'three responses on each of two streams');
});
