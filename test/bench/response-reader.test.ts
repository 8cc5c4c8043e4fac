// The simulated proxies' streaming reader (bench/xds/response-reader.ts): whatever the DATA chunking,
// it reports the same heads as decoding each whole response with the generated schemas. And their
// requests (bench/xds/requests.ts): a name list encoded once gives the bytes of the whole request.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { create, fromBinary, toBinary, type DescMessage, type MessageInitShape, type MessageShape } from '@bufbuild/protobuf';
import { BinaryWriter, WireType } from '@bufbuild/protobuf/wire';
import { ClusterSchema } from '../../src/gen/envoy/config/cluster/v3/cluster_pb.js';
import { ClusterLoadAssignmentSchema } from '../../src/gen/envoy/config/endpoint/v3/endpoint_pb.js';
import { DeltaDiscoveryResponseSchema, DiscoveryRequestSchema, DiscoveryResponseSchema } from '../../src/gen/envoy/service/discovery/v3/discovery_pb.js';
import { pack, TypeUrl } from '../../src/envoy/types.js';
import { NameList, NO_NAMES, SOTW } from '../../bench/xds/requests.js';
import { grpcFrame } from '../../src/envoy/grpc-call.js';
import { ResponseReader, ResponseStreamError, type ResponseHead } from '../../bench/xds/response-reader.js';

/** Unknown fields of every wire type, encoded by the protobuf runtime's own writer. */
function unknownFields(): Array<{ no: number; wireType: WireType; data: Uint8Array }> {
  return [
    { no: 900, wireType: WireType.Varint, data: new BinaryWriter().uint64(2n ** 63n + 5n).finish() },
    { no: 901, wireType: WireType.Bit64, data: new BinaryWriter().fixed64(123456789n).finish() },
    { no: 902, wireType: WireType.LengthDelimited, data: new BinaryWriter().bytes(new Uint8Array(300).fill(7)).finish() },
    { no: 903, wireType: WireType.Bit32, data: new BinaryWriter().fixed32(42).finish() },
    {
      no: 904,
      wireType: WireType.StartGroup,
      // A group holding a varint, a delimited field (named like a kept one: not at top level) and a nested group.
      data: new BinaryWriter()
        .tag(1, WireType.Varint).int32(300)
        .tag(4, WireType.LengthDelimited).string('not the type URL')
        .tag(7, WireType.StartGroup).tag(2, WireType.Bit32).fixed32(1).tag(7, WireType.EndGroup)
        .tag(904, WireType.EndGroup)
        .finish(),
    },
  ];
}

const cluster = (i: number): ReturnType<typeof pack> => pack(ClusterSchema, { name: `outbound|80||svc-${i}.ns.svc.cluster.local`, altStatName: 'x'.repeat(i * 40) });

function sotw(): Uint8Array {
  const response = create(DiscoveryResponseSchema, {
    versionInfo: '2026-11-24T13:00:00Z/17',
    resources: Array.from({ length: 12 }, (_, i) => cluster(i)),
    canary: true,
    typeUrl: TypeUrl.Cluster,
    nonce: 'nonce-\u00e9-1',
    controlPlane: { identifier: '{"Component":"meshd","ID":"meshd-1"}' },
  });
  response.$unknown = unknownFields();
  return toBinary(DiscoveryResponseSchema, response);
}

function delta(): Uint8Array {
  const response = create(DeltaDiscoveryResponseSchema, {
    systemVersionInfo: 'v9',
    resources: Array.from({ length: 5 }, (_, i) => ({
      name: `outbound|80||svc-${i}.ns.svc.cluster.local`,
      version: `r${i}`,
      resource: pack(ClusterLoadAssignmentSchema, { clusterName: `outbound|80||svc-${i}.ns.svc.cluster.local` }),
    })),
    typeUrl: TypeUrl.ClusterLoadAssignment,
    nonce: '42',
    removedResources: ['gone-1', 'gone-2'],
    controlPlane: { identifier: 'meshd-2' },
  });
  response.$unknown = unknownFields();
  return toBinary(DeltaDiscoveryResponseSchema, response);
}

/** What a proxy must see, from the generated schema's decoding of the whole message. */
function expected<Desc extends DescMessage>(schema: Desc, bytes: Uint8Array, head: (m: MessageShape<Desc>) => ResponseHead): ResponseHead {
  return head(fromBinary(schema, bytes));
}

const sotwBytes = sotw();
const deltaBytes = delta();
const emptyBytes = toBinary(DiscoveryResponseSchema, create(DiscoveryResponseSchema, {}));
const stream = Buffer.concat([sotwBytes, deltaBytes, emptyBytes, sotwBytes].map(grpcFrame));
const sotwHead = expected(DiscoveryResponseSchema, sotwBytes, (m) => ({ version: m.versionInfo, typeUrl: m.typeUrl, nonce: m.nonce, resources: m.resources.length }));
const want: ResponseHead[] = [
  sotwHead,
  expected(DeltaDiscoveryResponseSchema, deltaBytes, (m) => ({ version: m.systemVersionInfo, typeUrl: m.typeUrl, nonce: m.nonce, resources: m.resources.length })),
  { version: '', typeUrl: '', nonce: '', resources: 0 },
  sotwHead,
];

function read(chunks: Buffer[]): ResponseHead[] {
  const heads: ResponseHead[] = [];
  const reader = new ResponseReader((h) => heads.push({ ...h }));
  for (const c of chunks) reader.push(c);
  reader.end();
  return heads;
}

/** A deterministic generator, so that a failing chunking can be replayed. */
function random(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

describe('bench xds ResponseReader', () => {
  it('reads the inputs as the schemas decode them (the inputs hold what the test claims)', () => {
    assert.equal(want[0]!.resources, 12);
    assert.equal(want[1]!.resources, 5);
    assert.equal(want[0]!.nonce, 'nonce-\u00e9-1');
    assert.deepEqual(read([stream]), want);
  });

  it('gives the same heads for the stream cut in two at every byte boundary', () => {
    for (let cut = 0; cut <= stream.length; cut++) {
      assert.deepEqual(read([stream.subarray(0, cut), stream.subarray(cut)]), want, `cut at ${cut}`);
    }
  });

  it('gives the same heads byte by byte and for random chunkings', () => {
    assert.deepEqual(read([...stream].map((b) => Buffer.of(b))), want);
    for (let seed = 1; seed <= 200; seed++) {
      const next = random(seed);
      const chunks: Buffer[] = [];
      for (let i = 0; i < stream.length; ) {
        const n = 1 + Math.floor(next() * (next() < 0.5 ? 16 : 2000));
        chunks.push(stream.subarray(i, i + n));
        i += n;
      }
      assert.deepEqual(read(chunks), want, `seed ${seed}`);
    }
  });

  it('reports a response only once its last byte has arrived', () => {
    const heads: ResponseHead[] = [];
    const reader = new ResponseReader((h) => heads.push(h));
    const one = grpcFrame(sotwBytes);
    reader.push(one.subarray(0, one.length - 1));
    assert.equal(heads.length, 0);
    reader.push(one.subarray(one.length - 1));
    assert.deepEqual(heads, [sotwHead]);
  });

  it('rejects a compressed frame', () => {
    const compressed = grpcFrame(sotwBytes);
    compressed[0] = 1;
    assert.throws(() => read([compressed]), (e: Error) => e instanceof ResponseStreamError && /compressed gRPC frame/.test(e.message));
  });

  it('rejects a response that ends in the middle of a varint', () => {
    // The last field is the unknown group's end tag (a multi-byte varint for field 904): drop its last byte.
    const truncated = sotwBytes.subarray(0, sotwBytes.length - 1);
    assert.ok((truncated[truncated.length - 1]! & 0x80) !== 0, 'the cut falls inside a varint');
    assert.throws(() => read([grpcFrame(truncated)]), (e: Error) => e instanceof ResponseStreamError && /truncated varint/.test(e.message));
  });

  it('rejects a field longer than its response, and a stream that ends inside a response', () => {
    const resources = toBinary(DiscoveryResponseSchema, create(DiscoveryResponseSchema, { resources: [cluster(3)] }));
    assert.throws(() => read([grpcFrame(resources.subarray(0, resources.length - 2))]), /runs past the end/);
    assert.throws(() => read([grpcFrame(sotwBytes).subarray(0, 100)]), /ended in the middle of a response/);
    assert.throws(() => read([grpcFrame(sotwBytes).subarray(0, 3)]), /ended in the middle of a response/);
  });
});

describe('bench xds requests', () => {
  const node = { id: 'sidecar~10.0.0.1~svc-1-1.ns-1~ns-1.svc.cluster.local', metadata: { NAMESPACE: 'ns-1', LABELS: { app: 'svc-1' } } };
  const names = new NameList(Array.from({ length: 1000 }, (_, i) => `outbound|80||svc-${i}.ns-${i % 10}.svc.cluster.local`));
  const whole = (init: MessageInitShape<typeof DiscoveryRequestSchema>): Buffer => grpcFrame(toBinary(DiscoveryRequestSchema, create(DiscoveryRequestSchema, init)));
  const head: ResponseHead = { version: 'a1b2c3', typeUrl: TypeUrl.ClusterLoadAssignment, nonce: 'n-\u00e9-7', resources: 3 };

  it('encodes a SotW ACK from the name list encoded once, as the bytes toBinary gives for the whole request', () => {
    const fast = SOTW.ack(head, names);
    assert.deepEqual(fast, whole({ versionInfo: head.version, typeUrl: head.typeUrl, responseNonce: head.nonce, resourceNames: [...names.names] }));
    const decoded = fromBinary(DiscoveryRequestSchema, fast.subarray(5));
    assert.equal(decoded.resourceNames.length, 1000);
    assert.equal(decoded.resourceNames[999], 'outbound|80||svc-999.ns-9.svc.cluster.local');
    assert.deepEqual([decoded.versionInfo, decoded.typeUrl, decoded.responseNonce], [head.version, head.typeUrl, head.nonce]);
    assert.equal(fast.readUInt32BE(1), fast.length - 5);
  });

  it('encodes a first request (node, names) and the ACKs of wildcard types the same way', () => {
    assert.deepEqual(SOTW.subscribe(TypeUrl.ClusterLoadAssignment, names, node), whole({ node, typeUrl: TypeUrl.ClusterLoadAssignment, resourceNames: [...names.names] }));
    assert.deepEqual(SOTW.subscribe(TypeUrl.Listener, NO_NAMES), whole({ typeUrl: TypeUrl.Listener }));
    const listenerAck = { ...head, typeUrl: TypeUrl.Listener };
    assert.deepEqual(SOTW.ack(listenerAck, NO_NAMES), whole({ versionInfo: head.version, typeUrl: TypeUrl.Listener, responseNonce: head.nonce }));
    // An ACK of a first response (empty version) has no version field at all, as toBinary leaves it out.
    assert.deepEqual(SOTW.ack({ ...head, version: '' }, names), whole({ typeUrl: head.typeUrl, responseNonce: head.nonce, resourceNames: [...names.names] }));
  });
});
