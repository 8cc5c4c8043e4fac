// Simulated SotW proxies for bench/xds/ads-server.ts, run as its child process: each stream asks for
// CDS then LDS and ACKs every response. Only version_info, type_url and nonce are decoded, so the
// simulated proxies cost little next to the server being measured.
//
// argv: <address> <streams>. Messages: sends {ready} once every stream has its initial config and
// {received: ms} once `expect` more responses (set by the parent's {expect}) have arrived.
import { create, toBinary, type MessageInitShape } from '@bufbuild/protobuf';
import { Client, credentials, type ClientDuplexStream } from '@grpc/grpc-js';
import { DiscoveryRequestSchema } from '../../src/gen/envoy/service/discovery/v3/discovery_pb.js';
import { TypeUrl } from '../../src/xds/types.js';

interface Head {
  version: string;
  typeUrl: string;
  nonce: string;
}

/** Walks the top-level protobuf fields, keeping 1 (version_info), 4 (type_url) and 5 (nonce). */
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

const PATH = '/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources';
const identity = (b: Buffer): Buffer => b;
const encode = (init: MessageInitShape<typeof DiscoveryRequestSchema>): Buffer =>
  Buffer.from(toBinary(DiscoveryRequestSchema, create(DiscoveryRequestSchema, init)));

const [address, count] = process.argv.slice(2);
const streams = Number(count);
const channels = Array.from({ length: 50 }, () => new Client(address!, credentials.createInsecure(), { 'grpc.max_receive_message_length': -1 }));
let ready = 0;
let received = 0;
let expect = Infinity;
let since = 0;

for (let i = 0; i < streams; i++) {
  const call: ClientDuplexStream<Buffer, Head> = channels[i % channels.length]!.makeBidiStreamRequest(PATH, identity, head);
  let initial = 2;
  call.on('data', (r: Head) => {
    call.write(encode({ typeUrl: r.typeUrl, versionInfo: r.version, responseNonce: r.nonce }));
    if (initial > 0) {
      if (initial-- === 2) call.write(encode({ typeUrl: TypeUrl.Listener }));
      if (initial === 0 && ++ready === streams) process.send!({ ready: true });
    } else if (++received === expect) {
      process.send!({ received: performance.now() - since });
    }
  });
  call.on('error', (e: Error) => console.error(`stream ${i}: ${e.message}`));
  call.write(encode({ node: { id: `sidecar~10.1.${i >> 8}.${i & 255}~p-${i}.ns~ns.svc.cluster.local`, metadata: { NAMESPACE: 'ns' } }, typeUrl: TypeUrl.Cluster }));
}

process.on('message', (m: { expect: number }) => {
  received = 0;
  expect = m.expect;
  since = performance.now();
});
