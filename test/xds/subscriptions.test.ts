// Subscriptions by content: a SotW request's resource names (a Delta request's subscribed names) are
// kept as wire bytes and decoded only when the list is new; the rest of the request decodes as usual. Streams asking for the same names
// share one set, an ACK repeating the names is recognised from the bytes, and a changed list still
// changes the subscription.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { create, toBinary, type JsonObject, type MessageInitShape } from '@bufbuild/protobuf';
import { NodeSchema } from '../../src/gen/envoy/config/core/v3/base_pb.js';
import { DeltaDiscoveryRequestSchema, DiscoveryRequestSchema, type DiscoveryRequest } from '../../src/gen/envoy/service/discovery/v3/discovery_pb.js';
import { Connection } from '../../src/xds/connection.js';
import { decodeDeltaRequest, decodeSotwRequest, encodeNames, shareNames } from '../../src/xds/subscriptions.js';
import { TypeUrl } from '../../src/envoy/types.js';

const EDS = TypeUrl.ClusterLoadAssignment;
const clusters = (n: number, from = 0): string[] => Array.from({ length: n }, (_, i) => `outbound|80||svc-${from + i}.ns.svc.cluster.local`);

type RequestInit = MessageInitShape<typeof DiscoveryRequestSchema>;

function wire(init: RequestInit): Buffer {
  return Buffer.from(toBinary(DiscoveryRequestSchema, create(DiscoveryRequestSchema, init)));
}

function connection(): Connection {
  const id = 'sidecar~10.0.0.1~a.ns~ns.svc.cluster.local';
  return new Connection({ id, metadata: {} as JsonObject, node: create(NodeSchema, { id }), connectionId: id, peer: 'test' }, 'sotw');
}

test('a request decodes with its names kept as bytes: every other field as usual, the names in order when read', () => {
  const names = clusters(3);
  const bytes = wire({
    versionInfo: 'v1',
    node: { id: 'sidecar~1', cluster: 'c' },
    resourceNames: names,
    typeUrl: EDS,
    responseNonce: 'n1',
    errorDetail: { code: 3, message: 'bad cluster' },
  });
  const req = decodeSotwRequest(bytes);
  assert.equal(req.versionInfo, 'v1');
  assert.equal(req.node?.id, 'sidecar~1');
  assert.equal(req.typeUrl, EDS);
  assert.equal(req.responseNonce, 'n1');
  assert.equal(req.errorDetail?.message, 'bad cluster');
  assert.deepEqual(Buffer.from(req.namesBytes), Buffer.from(encodeNames(names)));
  assert.deepEqual(req.resourceNames, names);
  // Re-encoded, it is the request that was sent.
  assert.deepEqual(Buffer.from(toBinary(DiscoveryRequestSchema, req)), bytes);
});

test('names interleaved with other fields are all kept, in order; a request naming nothing has none', () => {
  const first = clusters(2);
  const second = clusters(2, 10);
  const bytes = Buffer.concat([wire({ resourceNames: first }), wire({ typeUrl: EDS, responseNonce: 'n2' }), wire({ resourceNames: second })]);
  const req = decodeSotwRequest(bytes);
  assert.equal(req.typeUrl, EDS);
  assert.equal(req.responseNonce, 'n2');
  assert.deepEqual(req.resourceNames, [...first, ...second]);
  assert.deepEqual(Buffer.from(req.namesBytes), Buffer.from(encodeNames([...first, ...second])));

  const none = decodeSotwRequest(wire({ typeUrl: TypeUrl.Cluster }));
  assert.deepEqual(none.resourceNames, []);
  assert.equal(none.namesBytes.length, 0);
});

test('a Delta request decodes with its subscribed names kept as bytes; Delta streams subscribing to the same list at the start share its set', () => {
  const names = clusters(3);
  const init = {
    node: { id: 'sidecar~1' },
    typeUrl: EDS,
    resourceNamesSubscribe: names,
    resourceNamesUnsubscribe: ['gone'],
    initialResourceVersions: { [names[0]!]: 'v0' },
    responseNonce: 'n1',
    errorDetail: { code: 3, message: 'bad' },
  };
  const bytes = Buffer.from(toBinary(DeltaDiscoveryRequestSchema, create(DeltaDiscoveryRequestSchema, init)));
  const req = decodeDeltaRequest(bytes);
  assert.deepEqual([req.node?.id, req.typeUrl, req.responseNonce, req.errorDetail?.message], ['sidecar~1', EDS, 'n1', 'bad']);
  assert.deepEqual(req.resourceNamesUnsubscribe, ['gone']);
  assert.deepEqual(req.initialResourceVersions, { [names[0]!]: 'v0' });
  assert.deepEqual(Buffer.from(req.namesBytes), Buffer.from(encodeNames(names)));
  assert.deepEqual(req.resourceNamesSubscribe, names);
  assert.deepEqual(Buffer.from(toBinary(DeltaDiscoveryRequestSchema, req)), bytes, 're-encoded, it is the request that was sent');
  assert.throws(() => decodeDeltaRequest(bytes.subarray(0, 20)));

  const first = (subscribe: string[]) => {
    const c = new Connection({ id: 'p', metadata: {} as JsonObject, node: create(NodeSchema, { id: 'p' }), connectionId: 'p', peer: 'test' }, 'delta');
    const wire = Buffer.from(toBinary(DeltaDiscoveryRequestSchema, create(DeltaDiscoveryRequestSchema, { typeUrl: EDS, resourceNamesSubscribe: subscribe })));
    const decision = c.applyDelta(decodeDeltaRequest(wire));
    return { decision, w: c.watches.get(EDS)! };
  };
  const a = first([...names, '*', names[0]!]);
  const b = first([...names, '*', names[0]!]);
  assert.equal(a.w.names, b.w.names, 'one set');
  assert.deepEqual([...a.w.names], names, 'without "*" and the repeat');
  assert.deepEqual(a.decision, { respond: true, added: names });
  assert.equal(a.w.wildcard, false, 'EDS is never wildcard');
  assert.notEqual(first(names.slice(1)).w.names, a.w.names);
});

test('a truncated request is refused, as the full decoder refuses it', () => {
  const bytes = wire({ typeUrl: EDS, resourceNames: clusters(2) });
  assert.throws(() => decodeSotwRequest(bytes.subarray(0, bytes.length - 5)));
  // Cut inside a name, and inside a name's two-byte length, at the end of the message.
  const long = wire({ typeUrl: EDS, resourceNames: ['a', 'n'.repeat(200)] });
  assert.throws(() => decodeSotwRequest(long.subarray(0, long.length - 1)), /premature EOF/);
  const lengthCut = long.subarray(0, long.indexOf(Buffer.from('n')) - 1);
  assert.equal(lengthCut[lengthCut.length - 1], 200 | 0x80, 'the cut leaves the first byte of the length');
  assert.throws(() => decodeSotwRequest(lengthCut), /premature EOF/);
});

test('names of every length, empty ones and one written with a longer tag, decode as the full decoder does', () => {
  const names = ['', 'x', 'm'.repeat(127), 'l'.repeat(128), 'k'.repeat(20_000), ...clusters(3), ''];
  const bytes = wire({ typeUrl: EDS, responseNonce: 'n', resourceNames: names });
  const req = decodeSotwRequest(bytes);
  assert.deepEqual(req.resourceNames, names);
  assert.equal(req.responseNonce, 'n');
  assert.deepEqual(Buffer.from(toBinary(DiscoveryRequestSchema, req)), bytes, 're-encoded, it is the request that was sent');
  // Field 3's tag as a two-byte varint (0x9a 0x00): valid protobuf, ends the run of one-byte tags.
  const odd = Buffer.concat([wire({ resourceNames: ['a'] }), Buffer.from([0x9a, 0x00, 1, 0x62]), wire({ resourceNames: ['c'], typeUrl: EDS })]);
  assert.deepEqual(decodeSotwRequest(odd).resourceNames, ['a', 'b', 'c']);
  assert.equal(decodeSotwRequest(odd).typeUrl, EDS);
});

test('streams asking for the same names share one set; an ACK repeating them is an ACK; a changed list re-subscribes', () => {
  const names = clusters(100);
  const request = (init: RequestInit): DiscoveryRequest => decodeSotwRequest(wire({ typeUrl: EDS, resourceNames: names, ...init }));
  const a = connection();
  const b = connection();
  assert.equal(a.applySotw(request({})).kind, 'respond');
  assert.equal(b.applySotw(request({})).kind, 'respond');
  const wa = a.watches.get(EDS)!;
  const wb = b.watches.get(EDS)!;
  assert.equal(wa.names, wb.names, 'one shared set');
  assert.equal(wa.names.size, 100);
  assert.equal(wa.wildcard, false);

  wa.sent = { version: 'v1', nonce: 'n1', time: new Date(), resources: new Map() };
  assert.equal(a.applySotw(request({ versionInfo: 'v1', responseNonce: 'n1' })).kind, 'ack');
  assert.equal(wa.acked?.nonce, 'n1');
  assert.equal(wa.names, wb.names);

  // One more cluster (as after a new ServiceEntry): a new subscription, answered now.
  const more = decodeSotwRequest(wire({ typeUrl: EDS, resourceNames: [...names, 'outbound|80||new.ns.svc.cluster.local'], versionInfo: 'v1', responseNonce: 'n1' }));
  assert.equal(a.applySotw(more).kind, 'respond');
  assert.equal(wa.names.size, 101);
  assert.ok(wa.names.has('outbound|80||new.ns.svc.cluster.local'));
  assert.equal(wb.names.size, 100, 'the other stream keeps its subscription');

  // A NACK with the same names is a NACK, not an ACK.
  wa.sent = { version: 'v2', nonce: 'n2', time: new Date(), resources: new Map() };
  const nack = decodeSotwRequest(wire({ typeUrl: EDS, resourceNames: [...names, 'outbound|80||new.ns.svc.cluster.local'], versionInfo: 'v1', responseNonce: 'n2', errorDetail: { code: 3, message: 'no' } }));
  assert.equal(a.applySotw(nack).kind, 'nack');
  assert.equal(wa.rejecting, true);
});

test('a request settled on arrival holds the shared names, not its own message buffer, and means the same', () => {
  const names = clusters(100);
  const a = connection();
  const first = decodeSotwRequest(wire({ typeUrl: EDS, resourceNames: names }));
  shareNames(first, undefined);
  assert.equal(a.applySotw(first).kind, 'respond');
  const w = a.watches.get(EDS)!;
  assert.equal(w.requested, first.requested);
  w.sent = { version: 'v1', nonce: 'n1', time: new Date(), resources: new Map() };

  // An ACK: equal to the watch's list, it takes the watch's copy of the bytes; gRPC's buffer is no longer referenced.
  const message = wire({ typeUrl: EDS, resourceNames: names, versionInfo: 'v1', responseNonce: 'n1' });
  const ack = decodeSotwRequest(message);
  assert.equal(ack.namesBytes.buffer, message.buffer, 'before: a view of the message');
  shareNames(ack, w.requested);
  assert.equal(ack.requested, w.requested);
  assert.notEqual(ack.namesBytes.buffer, message.buffer);
  assert.deepEqual(ack.resourceNames, names);
  assert.equal(a.applySotw(ack).kind, 'ack');
  assert.equal(w.acked?.nonce, 'n1');

  // A changed list: interned (another stream asking for it shares it), and still a new subscription.
  const changed = [...names.slice(1), 'outbound|80||new.ns.svc.cluster.local'];
  const more = decodeSotwRequest(wire({ typeUrl: EDS, resourceNames: changed, versionInfo: 'v1', responseNonce: 'n1' }));
  const other = decodeSotwRequest(wire({ typeUrl: EDS, resourceNames: changed }));
  shareNames(more, w.requested);
  shareNames(other, undefined);
  assert.equal(more.requested, other.requested);
  assert.deepEqual(more.resourceNames, changed);
  assert.equal(a.applySotw(more).kind, 'respond');
  assert.deepEqual([...w.names], changed);

  // A request naming nothing is left as it is.
  const none = decodeSotwRequest(wire({ typeUrl: EDS, responseNonce: 'n1' }));
  shareNames(none, w.requested);
  assert.equal(none.requested, undefined);
  assert.deepEqual(none.resourceNames, []);
});

test('requests built in memory (no wire bytes) are handled the same way', () => {
  const names = clusters(5);
  const a = connection();
  const b = connection();
  const plain = (init: RequestInit): DiscoveryRequest => create(DiscoveryRequestSchema, { typeUrl: EDS, resourceNames: names, ...init });
  assert.equal(a.applySotw(plain({})).kind, 'respond');
  assert.equal(b.applySotw(decodeSotwRequest(wire({ typeUrl: EDS, resourceNames: names }))).kind, 'respond');
  assert.equal(a.watches.get(EDS)!.names, b.watches.get(EDS)!.names);
  a.watches.get(EDS)!.sent = { version: 'v1', nonce: 'n1', time: new Date(), resources: new Map() };
  assert.equal(a.applySotw(plain({ responseNonce: 'n1' })).kind, 'ack');
  assert.equal(a.applySotw(plain({ resourceNames: [], responseNonce: 'n1' })).kind, 'unsubscribe');
  assert.equal(a.watches.has(EDS), false);
});

test('Delta streams that subscribed to the same names share one set; a change on one leaves the other as it was', () => {
  const names = clusters(50);
  const delta = (): Connection => {
    const id = 'sidecar~10.0.0.2~b.ns~ns.svc.cluster.local';
    return new Connection({ id, metadata: {} as JsonObject, node: create(NodeSchema, { id }), connectionId: id, peer: 'test' }, 'delta');
  };
  const request = (subscribe: string[], unsubscribe: string[] = []) => ({ typeUrl: EDS, resourceNamesSubscribe: subscribe, resourceNamesUnsubscribe: unsubscribe, initialResourceVersions: {}, responseNonce: '' });
  const a = delta();
  const b = delta();
  assert.equal(a.applyDelta(request(names)).respond, true);
  assert.equal(b.applyDelta(request(names.slice(0, 10))).respond, true);
  assert.deepEqual(b.applyDelta(request(names.slice(10))).added, names.slice(10));
  const wa = a.watches.get(EDS)!;
  const wb = b.watches.get(EDS)!;
  assert.equal(wa.names, wb.names, 'the same names in the same order: one set');

  const extra = 'outbound|80||new.ns.svc.cluster.local';
  assert.deepEqual(a.applyDelta(request([extra])).added, [extra]);
  assert.equal(wa.names.size, 51);
  assert.equal(wb.names.size, 50);
  assert.equal(wb.names.has(extra), false);
  a.applyDelta(request([], [names[0]!]));
  assert.equal(wa.names.has(names[0]!), false);
  assert.equal(wb.names.has(names[0]!), true);
});
