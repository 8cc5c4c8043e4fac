// Simulated SotW proxies for the xDS benchmarks (bench/xds/discovery.ts, bench/xds/ads-server.ts),
// run as a child process so that they do not share the server's CPU time accounting. Each stream
// behaves like Envoy at startup: CDS and LDS (wildcard) first, EDS for the named clusters once CDS
// arrives, RDS for the named routes once LDS arrives, and an ACK for every response.
//
// The streams are gRPC calls made by hand on node:http2 (50 sessions, the streams spread over
// them), so that every byte of every response still crosses a real HTTP/2 connection under flow
// control, but the simulator pays only nghttp2's framing and a streaming walk over each response's
// top-level fields (response-reader.ts): no whole-message buffer, no per-message gRPC objects.
// A response counts, and is ACKed, once its last byte has arrived.
//
// argv: <address> <streams> [sotw|delta]. With `delta` the streams speak Delta xDS: a wildcard
// subscription to CDS and LDS, EDS and RDS subscribed by name, and an ACK (the response's nonce)
// for every response. Messages from the parent:
//   {connect: {nodes, eds?, rds?}}  open the streams (node i of `nodes` for stream i); answers
//                                   {ready: true} once every stream has one response of each type it asked for
//   {expect: {<type URL>: n, ...}}  answers {received: {<type URL>: n, ...}} once at least n responses of
//                                   each listed type arrived (on all streams together) after this message
// Both answers carry `cpuMs`, this process's user+system CPU since the message they answer, and
// `bytes`, the response bytes (gRPC frames, all streams) that arrived since.
import { connect as http2Connect, constants, type ClientHttp2Session, type ClientHttp2Stream } from 'node:http2';
import { TypeUrl } from '../../src/envoy/types.js';
import { DELTA, NameList, NO_NAMES, SOTW, type SimulatedNode } from './requests.js';
import { ResponseReader, type ResponseHead } from './response-reader.js';

export interface ConnectMessage {
  connect: { nodes: SimulatedNode[]; eds?: string[]; rds?: string[] };
}
export interface ExpectMessage {
  expect: Record<string, number>;
}
export type ParentMessage = ConnectMessage | ExpectMessage;
/** `ended`: a stream the server ended (send timeout, say): the step can no longer complete. */
export type ChildMessage = { ready: true; cpuMs: number; bytes: number } | { received: Record<string, number>; cpuMs: number; bytes: number } | { ended: string };

const SESSIONS = 50;
/**
 * Flow-control windows as the discovery server sees a proxy's connection. In the Go mesh that peer
 * is the agent's gRPC client (pilot/pkg/grpc ClientOptions: 1 MiB per stream, 1 MiB per
 * connection, fixed); current Envoy defaults Http2ProtocolOptions to the same 1 MiB (older ones,
 * and the API docs, to 256 MiB), and the xds-grpc cluster of the bootstrap keeps the defaults. One
 * proxy has one stream on its own connection; here a session carries STREAMS_PER_SESSION of them,
 * so its window is that many connections' worth: no tighter, no looser than separate proxies.
 */
const STREAM_WINDOW = 1 << 20;

const [address, count, mode = 'sotw'] = process.argv.slice(2);
const protocol = mode === 'delta' ? DELTA : SOTW;
const streams = Number(count);
// Once the parent is gone (bench finished or failed) there is no one to tell, and no reason to stay.
const send = (m: ChildMessage): void => void (process.connected && process.send!(m));
process.once('disconnect', () => process.exit(0));

let expected: Record<string, number> | undefined;
let counts: Record<string, number> = {};
/** CPU at the parent's last message: each answer reports what was spent since. */
let cpuAtRequest = process.cpuUsage();
const cpuSinceRequest = (): number => {
  const u = process.cpuUsage(cpuAtRequest);
  return (u.user + u.system) / 1000;
};
let bytesSinceRequest = 0;

function onResponse(typeUrl: string): void {
  if (!expected) return;
  counts[typeUrl] = (counts[typeUrl] ?? 0) + 1;
  if (Object.entries(expected).every(([t, n]) => (counts[t] ?? 0) >= n)) {
    expected = undefined;
    send({ received: counts, cpuMs: cpuSinceRequest(), bytes: bytesSinceRequest });
  }
}

function openSession(streamsOnIt: number): ClientHttp2Session {
  const session = http2Connect(`http://${address}`, {
    settings: { initialWindowSize: STREAM_WINDOW },
    // Node refuses new streams past this much buffered session memory (MB): room for every
    // stream's window, as a proxy's own connection would have.
    maxSessionMemory: Math.ceil(streamsOnIt * (STREAM_WINDOW / 2 ** 20)) + 16,
  });
  session.once('connect', () => session.setLocalWindowSize(streamsOnIt * STREAM_WINDOW));
  session.on('error', (e: Error) => send({ ended: `session to ${address}: ${e.message}` }));
  return session;
}

/** One proxy's ADS call: a gRPC bidi stream as a POST whose request and response bodies stay open. */
function openStream(session: ClientHttp2Session, i: number, onHead: (stream: ClientHttp2Stream, r: ResponseHead) => void): ClientHttp2Stream {
  const stream = session.request({
    [constants.HTTP2_HEADER_METHOD]: 'POST',
    [constants.HTTP2_HEADER_PATH]: protocol.path,
    [constants.HTTP2_HEADER_CONTENT_TYPE]: 'application/grpc',
    [constants.HTTP2_HEADER_TE]: 'trailers',
  });
  let ended = false;
  const end = (why: string): void => {
    if (ended) return;
    ended = true;
    send({ ended: `stream ${i}: ${why}` });
    stream.close(constants.NGHTTP2_CANCEL);
  };
  const reader = new ResponseReader((r) => onHead(stream, r));
  stream.on('response', (headers) => {
    const status = headers[':status'];
    // A trailers-only response (an immediate error) carries grpc-status in the headers.
    if (status !== 200 || headers['grpc-status'] !== undefined) end(`HTTP ${status}, grpc-status ${headers['grpc-status']}: ${headers['grpc-message'] ?? ''}`);
  });
  stream.on('data', (chunk: Buffer) => {
    bytesSinceRequest += chunk.length;
    try {
      reader.push(chunk);
    } catch (e) {
      end((e as Error).message);
    }
  });
  // An ADS stream never ends while the proxy lives: any end is the server giving up on it.
  stream.on('trailers', (trailers) => end(`grpc-status ${trailers['grpc-status']}: ${trailers['grpc-message'] ?? ''}`));
  stream.on('error', (e: Error) => end(e.message));
  stream.on('close', () => end(`closed (RST_STREAM code ${stream.rstCode})`));
  return stream;
}

function connect({ nodes, eds = [], rds = [] }: ConnectMessage['connect']): void {
  const sessions = Array.from({ length: Math.min(SESSIONS, streams) }, (_, s) => openSession(Math.ceil((streams - s) / SESSIONS)));
  const wanted = [TypeUrl.Cluster, TypeUrl.Listener, ...(eds.length ? [TypeUrl.ClusterLoadAssignment] : []), ...(rds.length ? [TypeUrl.RouteConfiguration] : [])];
  // Every stream asks for the same lists: each is encoded once (requests.ts).
  const namesOf: Record<string, NameList> = { [TypeUrl.ClusterLoadAssignment]: new NameList(eds), [TypeUrl.RouteConfiguration]: new NameList(rds) };
  const follow: Record<string, { typeUrl: string; names: NameList } | undefined> = {
    [TypeUrl.Cluster]: eds.length ? { typeUrl: TypeUrl.ClusterLoadAssignment, names: namesOf[TypeUrl.ClusterLoadAssignment]! } : undefined,
    [TypeUrl.Listener]: rds.length ? { typeUrl: TypeUrl.RouteConfiguration, names: namesOf[TypeUrl.RouteConfiguration]! } : undefined,
  };
  let ready = 0;
  for (let i = 0; i < streams; i++) {
    const seen = new Set<string>();
    const stream = openStream(sessions[i % sessions.length]!, i, (call, r) => {
      call.write(protocol.ack(r, namesOf[r.typeUrl] ?? NO_NAMES));
      if (!seen.has(r.typeUrl)) {
        seen.add(r.typeUrl);
        const next = follow[r.typeUrl];
        if (next) call.write(protocol.subscribe(next.typeUrl, next.names));
        if (seen.size === wanted.length && ++ready === streams) send({ ready: true, cpuMs: cpuSinceRequest(), bytes: bytesSinceRequest });
        return;
      }
      onResponse(r.typeUrl);
    });
    stream.write(protocol.subscribe(TypeUrl.Cluster, NO_NAMES, nodes[i % nodes.length]!));
    stream.write(protocol.subscribe(TypeUrl.Listener, NO_NAMES));
  }
}

process.on('message', (m: ParentMessage) => {
  cpuAtRequest = process.cpuUsage();
  bytesSinceRequest = 0;
  if ('connect' in m) connect(m.connect);
  else {
    counts = {};
    expected = m.expect;
  }
});
