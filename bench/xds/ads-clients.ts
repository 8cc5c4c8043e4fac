// Simulated SotW proxies for the xDS benchmarks (bench/xds/discovery.ts, bench/xds/ads-server.ts),
// run as a child process so that they do not share the server's CPU time accounting. Each stream
// behaves like Envoy at startup: CDS and LDS (wildcard) first, EDS for the named clusters once CDS
// arrives, RDS for the named routes once LDS arrives, and an ACK for every response. Only
// version_info, type_url and nonce are decoded, so the simulated proxies cost little next to the
// server being measured.
//
// argv: <address> <streams> [sotw|delta]. With `delta` the streams speak Delta xDS: a wildcard
// subscription to CDS and LDS, EDS and RDS subscribed by name, and an ACK (the response's nonce)
// for every response. Messages from the parent:
//   {connect: {nodes, eds?, rds?}}  open the streams (node i of `nodes` for stream i); answers
//                                   {ready: true} once every stream has one response of each type it asked for
//   {expect: {<type URL>: n, ...}}  answers {received: {<type URL>: n, ...}} once at least n responses of
//                                   each listed type arrived (on all streams together) after this message
import { create, toBinary, type JsonObject, type MessageInitShape } from '@bufbuild/protobuf';
import { Client, credentials, type ClientDuplexStream } from '@grpc/grpc-js';
import { DeltaDiscoveryRequestSchema, DiscoveryRequestSchema } from '../../src/gen/envoy/service/discovery/v3/discovery_pb.js';
import { TypeUrl } from '../../src/envoy/types.js';

interface Head {
  version: string;
  typeUrl: string;
  nonce: string;
}

interface SimulatedNode {
  id: string;
  metadata: JsonObject;
}

export interface ConnectMessage {
  connect: { nodes: SimulatedNode[]; eds?: string[]; rds?: string[] };
}
export interface ExpectMessage {
  expect: Record<string, number>;
}
export type ParentMessage = ConnectMessage | ExpectMessage;
/** `ended`: a stream the server ended (send timeout, say): the step can no longer complete. */
export type ChildMessage = { ready: true } | { received: Record<string, number> } | { ended: string };

/**
 * Walks the top-level protobuf fields, keeping 1 (version_info), 4 (type_url) and 5 (nonce): the
 * same field numbers in a DiscoveryResponse and a DeltaDiscoveryResponse (system_version_info).
 */
function head(buf: Buffer): Head {
  const h: Head = { version: '', typeUrl: '', nonce: '' };
  let i = 0;
  const varint = (): number => {
    let value = 0;
    let shift = 0;
    let b: number;
    do {
      b = buf[i++]!;
      value += (b & 0x7f) * 2 ** shift;
      shift += 7;
    } while (b & 0x80);
    return value;
  };
  while (i < buf.length) {
    const tag = varint();
    const wire = tag & 7;
    if (wire === 2) {
      const len = varint();
      const text = (): string => buf.toString('utf8', i, i + len);
      if (tag >>> 3 === 1) h.version = text();
      else if (tag >>> 3 === 4) h.typeUrl = text();
      else if (tag >>> 3 === 5) h.nonce = text();
      i += len;
    } else if (wire === 0) varint();
    else if (wire === 5) i += 4;
    else if (wire === 1) i += 8;
    else throw new Error(`unexpected wire type ${wire}`);
  }
  return h;
}

const SERVICE = '/envoy.service.discovery.v3.AggregatedDiscoveryService';
const CHANNELS = 50;
const identity = (b: Buffer): Buffer => b;
const encode = (init: MessageInitShape<typeof DiscoveryRequestSchema>): Buffer =>
  Buffer.from(toBinary(DiscoveryRequestSchema, create(DiscoveryRequestSchema, init)));
const encodeDelta = (init: MessageInitShape<typeof DeltaDiscoveryRequestSchema>): Buffer =>
  Buffer.from(toBinary(DeltaDiscoveryRequestSchema, create(DeltaDiscoveryRequestSchema, init)));

/** The requests of one protocol: the first of a type (with its names), and the ACK of a response. */
interface Protocol {
  path: string;
  subscribe(typeUrl: string, names: string[], node?: SimulatedNode): Buffer;
  ack(r: Head, names: string[]): Buffer;
}

const SOTW: Protocol = {
  path: `${SERVICE}/StreamAggregatedResources`,
  subscribe: (typeUrl, names, node) => encode({ ...(node ? { node } : {}), typeUrl, resourceNames: names }),
  ack: (r, names) => encode({ typeUrl: r.typeUrl, versionInfo: r.version, responseNonce: r.nonce, resourceNames: names }),
};

const DELTA: Protocol = {
  path: `${SERVICE}/DeltaAggregatedResources`,
  subscribe: (typeUrl, names, node) => encodeDelta({ ...(node ? { node } : {}), typeUrl, resourceNamesSubscribe: names }),
  ack: (r) => encodeDelta({ typeUrl: r.typeUrl, responseNonce: r.nonce }),
};

const [address, count, mode = 'sotw'] = process.argv.slice(2);
const protocol = mode === 'delta' ? DELTA : SOTW;
const streams = Number(count);
const send = (m: ChildMessage): void => void process.send!(m);

let expected: Record<string, number> | undefined;
let counts: Record<string, number> = {};

function onResponse(typeUrl: string): void {
  if (!expected) return;
  counts[typeUrl] = (counts[typeUrl] ?? 0) + 1;
  if (Object.entries(expected).every(([t, n]) => (counts[t] ?? 0) >= n)) {
    expected = undefined;
    send({ received: counts });
  }
}

function connect({ nodes, eds = [], rds = [] }: ConnectMessage['connect']): void {
  const channels = Array.from({ length: CHANNELS }, () => new Client(address!, credentials.createInsecure(), { 'grpc.max_receive_message_length': -1 }));
  const wanted = [TypeUrl.Cluster, TypeUrl.Listener, ...(eds.length ? [TypeUrl.ClusterLoadAssignment] : []), ...(rds.length ? [TypeUrl.RouteConfiguration] : [])];
  const follow: Record<string, { typeUrl: string; names: string[] } | undefined> = {
    [TypeUrl.Cluster]: eds.length ? { typeUrl: TypeUrl.ClusterLoadAssignment, names: eds } : undefined,
    [TypeUrl.Listener]: rds.length ? { typeUrl: TypeUrl.RouteConfiguration, names: rds } : undefined,
  };
  const namesOf: Record<string, string[]> = { [TypeUrl.ClusterLoadAssignment]: eds, [TypeUrl.RouteConfiguration]: rds };
  let ready = 0;
  for (let i = 0; i < streams; i++) {
    const call: ClientDuplexStream<Buffer, Head> = channels[i % CHANNELS]!.makeBidiStreamRequest(protocol.path, identity, head);
    const seen = new Set<string>();
    call.on('data', (r: Head) => {
      call.write(protocol.ack(r, namesOf[r.typeUrl] ?? []));
      if (!seen.has(r.typeUrl)) {
        seen.add(r.typeUrl);
        const next = follow[r.typeUrl];
        if (next) call.write(protocol.subscribe(next.typeUrl, next.names));
        if (seen.size === wanted.length && ++ready === streams) send({ ready: true });
        return;
      }
      onResponse(r.typeUrl);
    });
    call.on('error', (e: Error) => send({ ended: `stream ${i}: ${e.message}` }));
    call.write(protocol.subscribe(TypeUrl.Cluster, [], nodes[i % nodes.length]!));
    call.write(protocol.subscribe(TypeUrl.Listener, []));
  }
}

process.on('message', (m: ParentMessage) => {
  if ('connect' in m) connect(m.connect);
  else {
    counts = {};
    expected = m.expect;
  }
});
