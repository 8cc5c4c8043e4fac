// How a response's encoded pieces reach the wire. grpc-js serializes every message into a new
// buffer of its own (the 5-byte gRPC prefix, then a copy of the message) before handing it to the
// HTTP/2 stream: with 2000 proxies each sent 0.3-0.6 MB per type, that copy and the garbage it
// leaves were the largest single cost of a full push, and the copies queued behind slow readers
// were most of the resident memory. So a response is written as gRPC frames it: a small buffer with
// the prefix and the per-stream fields, then the body shared by every stream sent the same resources,
// written as it is (HTTP/2 keeps a reference to written buffers; nothing is copied). The stream's
// order, headers, trailers and write callbacks are those grpc-js itself would give.
import { ServerInterceptingCall, type ServerDuplexStream, type ServerInterceptingCallInterface } from '@grpc/grpc-js';

/**
 * A response as encoded pieces (see encodeSotw, encodeDelta): the per-stream fields, then the
 * resource entries shared by every stream sent them. Protobuf parses them concatenated as one message.
 */
export type ResponseBytes = readonly [head: Uint8Array, body: Uint8Array];

/** Writes one response; `done` runs once HTTP/2 has taken its bytes, with the error if it failed. */
export type ResponseWriter = (parts: ResponseBytes, done: (err?: Error | null) => void) => void;

/** The encoded size of a response. */
export function responseSize(parts: ResponseBytes): number {
  return parts[0].length + parts[1].length;
}

/** What a stream's write hands gRPC when the direct path is not available: the response's bytes, and whether gRPC has serialized them. */
export class OutgoingResponse {
  taken = false;
  constructor(public bytes: Uint8Array) {}
}

/**
 * The parts of grpc-js's server call (BaseServerInterceptingCall, 1.10 to 1.14 at least) the
 * direct path uses: the HTTP/2 stream, the response headers sent before the first message, the
 * cancellation check, the channelz message count. Checked at each stream's start: a grpc-js
 * without them gets the ordinary write.
 */
interface GrpcServerCall {
  readonly stream: { write(chunk: Uint8Array, cb?: (err?: Error | null) => void): boolean };
  maybeSendMetadata(): void;
  checkCancelled(): boolean;
  readonly callEventTracker?: { addMessageSent(): void } | null;
}

/** An interceptor's call as grpc-js builds it: the next call and the interceptor's responder. */
interface InterceptorInternals {
  readonly nextCall?: unknown;
  readonly responder?: { readonly sendMetadata?: unknown; readonly sendMessage?: unknown };
}

/** grpc-js's pass-through responder, as given to an interceptor that leaves responses alone. */
const passThrough = (new ServerInterceptingCall({} as ServerInterceptingCallInterface) as unknown as InterceptorInternals).responder;

/**
 * The innermost grpc-js call behind a handler's stream. Interceptors that leave outgoing metadata
 * and messages alone (ours only stamp incoming metadata: security/ca/transport.ts) are looked
 * through; one that changes responses keeps the ordinary write, so it sees every message.
 */
function grpcServerCall(call: object): GrpcServerCall | undefined {
  let inner: unknown = (call as { call?: unknown }).call;
  while (inner instanceof ServerInterceptingCall) {
    const { nextCall, responder } = inner as unknown as InterceptorInternals;
    if (passThrough === undefined || responder?.sendMessage !== passThrough.sendMessage || responder?.sendMetadata !== passThrough.sendMetadata) return undefined;
    inner = nextCall;
  }
  if (typeof inner !== 'object' || inner === null) return undefined;
  const c = inner as Partial<Record<keyof GrpcServerCall, unknown>>;
  const stream = c.stream as { write?: unknown } | undefined;
  const ok = typeof stream?.write === 'function' && typeof c.maybeSendMetadata === 'function' && typeof c.checkCancelled === 'function';
  return ok ? (inner as GrpcServerCall) : undefined;
}

/** gRPC's message prefix: not compressed, then the length, big-endian. */
const PREFIX_BYTES = 5;

/**
 * Writes responses on `call` as gRPC frames them, without the copy (see the top of this file).
 * Undefined when the call does not have the shape this relies on.
 */
export function directWriter(call: object): ResponseWriter | undefined {
  const grpc = grpcServerCall(call);
  if (!grpc) return undefined;
  return ([head, body], done) => {
    // As grpc-js: a cancelled call takes no more messages and calls back no more (the stream's
    // 'cancelled' event ends the session).
    if (grpc.checkCancelled()) return;
    grpc.maybeSendMetadata();
    const front = Buffer.allocUnsafe(PREFIX_BYTES + head.length);
    front[0] = 0;
    front.writeUInt32BE(head.length + body.length, 1);
    front.set(head, PREFIX_BYTES);
    grpc.stream.write(front);
    grpc.stream.write(body, (err) => {
      if (!err) grpc.callEventTracker?.addMessageSent();
      done(err);
    });
  };
}

/**
 * Joins each response's pieces in one buffer reused for every write, for the ordinary write
 * (grpc-js copies the message into its own frame during `write()`, so joined bytes would be
 * garbage at once). Should gRPC ever serialize later (a write queued behind metadata, say), the
 * response is given a copy of its own before the buffer is reused, so the bytes sent are always
 * the ones written. The buffer keeps the size of the largest response written.
 */
export class ResponseJoiner {
  private scratch = new Uint8Array(64 * 1024);

  write(parts: ResponseBytes, write: (r: OutgoingResponse) => void): void {
    const [head, body] = parts;
    const size = head.length + body.length;
    if (size > this.scratch.length) this.scratch = new Uint8Array(Math.max(size, 2 * this.scratch.length));
    this.scratch.set(head, 0);
    this.scratch.set(body, head.length);
    const r = new OutgoingResponse(this.scratch.subarray(0, size));
    try {
      write(r);
    } finally {
      if (!r.taken) r.bytes = r.bytes.slice();
    }
  }
}

/**
 * The writer of a stream's responses: the direct one when grpc-js's call has the expected shape,
 * else gRPC's own write through the shared joiner.
 */
export function responseWriter(call: ServerDuplexStream<unknown, OutgoingResponse>, joiner: ResponseJoiner): ResponseWriter {
  return directWriter(call) ?? ((parts, done) => joiner.write(parts, (r) => call.write(r, done)));
}
