// gRPC client calls made directly on node:http2, for mesh-proxy's own gRPC clients: its ADS and SDS
// streams, the ext_authz Check and the JwksService request. grpc-js costs every proxy process about
// 6 MiB of resident memory on top of node:http2, which the proxy loads anyway (docs/dataplane.md,
// issue 17); a proxy's calls need only what is here: plaintext HTTP/2 to an address or a Unix
// socket, length-prefixed uncompressed messages, status from the trailers, a deadline. The
// discovery server, the agent and its TLS channel to the discovery server keep grpc-js.
import { EventEmitter } from 'node:events';
import { connect as http2Connect, constants, type ClientHttp2Session, type ClientHttp2Stream, type IncomingHttpHeaders, type IncomingHttpStatusHeader } from 'node:http2';
import { connect as netConnect } from 'node:net';
import { fromBinary, toBinary, type DescMessage, type DescMethod, type MessageShape } from '@bufbuild/protobuf';

import { GrpcStatus, grpcStatusOfHttp } from './grpc-status.js';

export { GrpcStatus };

export interface CallStatus {
  readonly code: number;
  readonly details: string;
}

/** A call that ended with a status other than OK; the message is `<code> <details>`. */
export class GrpcError extends Error {
  constructor(
    readonly code: number,
    readonly details: string,
  ) {
    super(`${code} ${details}`);
    this.name = 'GrpcError';
  }
}

/** gRPC's default limit on a received message: what grpc-js applied here before, and what the agent's relay (grpc-js) applies. */
export const MAX_RECEIVE_BYTES = 4 * 1024 * 1024;

/** Flow-control window per stream and per connection: what the Go mesh's agent gives its xDS connection. */
const WINDOW_BYTES = 1 << 20;

/** A method of a generated service: its path and message types. */
export type GrpcMethod<I extends DescMessage, O extends DescMessage> = Pick<DescMethod, 'name' | 'parent'> & { readonly input: I; readonly output: O };

/** gRPC codes of the HTTP/2 reset codes grpc-js distinguishes; any other reset is INTERNAL. */
const RESET_STATUS: Readonly<Record<number, number>> = {
  [constants.NGHTTP2_REFUSED_STREAM]: GrpcStatus.UNAVAILABLE,
  [constants.NGHTTP2_CANCEL]: GrpcStatus.CANCELLED,
  [constants.NGHTTP2_ENHANCE_YOUR_CALM]: GrpcStatus.RESOURCE_EXHAUSTED,
  [constants.NGHTTP2_INADEQUATE_SECURITY]: GrpcStatus.PERMISSION_DENIED,
};

/** A stream reset by the server, as grpc-js reports it. */
function statusOfReset(code: number): CallStatus {
  return { code: RESET_STATUS[code] ?? GrpcStatus.INTERNAL, details: `Received RST_STREAM with code ${code}` };
}

/** grpc-status and grpc-message (percent-encoded) of trailers or a trailers-only response. */
function statusOfTrailers(h: IncomingHttpHeaders): CallStatus {
  const code = Number(h['grpc-status']);
  const raw = h['grpc-message'];
  let details = typeof raw === 'string' ? raw : '';
  try {
    details = decodeURIComponent(details);
  } catch {
    // A malformed encoding is shown as sent.
  }
  return Number.isInteger(code) && code >= 0 ? { code, details } : { code: GrpcStatus.UNKNOWN, details: `invalid grpc-status ${JSON.stringify(h['grpc-status'])}` };
}

/** A message in gRPC's framing: uncompressed flag, big-endian length, bytes. */
export function grpcFrame(message: Uint8Array): Buffer {
  return grpcFrameOf([message]);
}

/** One message made of `parts` in order (encodings of its fields), framed in one buffer. */
export function grpcFrameOf(parts: readonly Uint8Array[]): Buffer {
  const length = parts.reduce((n, p) => n + p.length, 0);
  const out = Buffer.allocUnsafe(5 + length);
  out[0] = 0;
  out.writeUInt32BE(length, 1);
  let at = 5;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/**
 * Splits a response body into messages as DATA arrives. Chunks are kept as they came and joined
 * once per message, so a message of many chunks is copied once.
 */
export class FrameReader {
  private readonly chunks: Buffer[] = [];
  private buffered = 0;
  /** Length of the message being read; -1 while its 5-byte prefix is incomplete. */
  private length = -1;

  constructor(private readonly maxBytes = MAX_RECEIVE_BYTES) {}

  /** The messages completed by `chunk`; throws GrpcError for a compressed or oversized message. */
  push(chunk: Buffer): Buffer[] {
    this.chunks.push(chunk);
    this.buffered += chunk.length;
    const out: Buffer[] = [];
    for (;;) {
      if (this.length < 0) {
        if (this.buffered < 5) return out;
        const prefix = this.take(5);
        if (prefix[0] !== 0) throw new GrpcError(GrpcStatus.INTERNAL, 'compressed message, but no compression was negotiated');
        const length = prefix.readUInt32BE(1);
        if (length > this.maxBytes) throw new GrpcError(GrpcStatus.RESOURCE_EXHAUSTED, `Received message larger than max (${length} vs. ${this.maxBytes})`);
        this.length = length;
      }
      if (this.buffered < this.length) return out;
      out.push(this.take(this.length));
      this.length = -1;
    }
  }

  private take(n: number): Buffer {
    if (n === 0) return Buffer.alloc(0);
    this.buffered -= n;
    const first = this.chunks[0]!;
    if (first.length >= n) {
      if (first.length === n) this.chunks.shift();
      else this.chunks[0] = first.subarray(n);
      return first.subarray(0, n);
    }
    const out = Buffer.allocUnsafe(n);
    let at = 0;
    while (at < n) {
      const c = this.chunks[0]!;
      const used = Math.min(c.length, n - at);
      c.copy(out, at, 0, used);
      at += used;
      if (used === c.length) this.chunks.shift();
      else this.chunks[0] = c.subarray(used);
    }
    return out;
  }
}

export interface GrpcCallEvents<O> {
  message: [message: O];
  /** Exactly once: the server's status, or why the call ended without one. */
  end: [status: CallStatus];
}

/** One call: messages written with `write`, received as `message` events, then one `end`. */
export class GrpcCall<I extends DescMessage, O extends DescMessage> extends EventEmitter<GrpcCallEvents<MessageShape<O>>> {
  private status?: CallStatus;
  private ended = false;
  private readonly reader = new FrameReader();

  constructor(
    private readonly stream: ClientHttp2Stream,
    private readonly method: GrpcMethod<I, O>,
  ) {
    super();
    stream.on('response', (h) => this.onHead(h));
    stream.on('data', (chunk: Buffer) => this.onData(chunk));
    stream.on('trailers', (h) => (this.status ??= statusOfTrailers(h)));
    stream.on('error', (e: Error) => (this.status ??= { code: GrpcStatus.UNAVAILABLE, details: e.message }));
    // The server's end of the response ends the call, though this side may still be open (a
    // bidi stream the server ends): the stream is closed then, as grpc-js does.
    stream.on('end', () => {
      this.finish(this.status ?? this.dropped() ?? { code: GrpcStatus.INTERNAL, details: 'the server ended the stream without a status' });
      stream.close(constants.NGHTTP2_NO_ERROR);
    });
    stream.on('close', () => this.finish(this.status ?? this.dropped() ?? (stream.rstCode ? statusOfReset(stream.rstCode) : { code: GrpcStatus.INTERNAL, details: 'the stream closed without a status' })));
  }

  write(message: MessageShape<I>): void {
    if (!this.ended) this.stream.write(grpcFrame(toBinary(this.method.input, message)));
  }

  /** No more messages from this side (a unary call's request is complete). */
  halfClose(): void {
    if (!this.ended) this.stream.end();
  }

  /** Ends the call from this side; `end` reports `status` (CANCELLED by default). */
  cancel(status: CallStatus = { code: GrpcStatus.CANCELLED, details: 'Cancelled on client' }): void {
    this.finish(status);
    this.stream.close(constants.NGHTTP2_CANCEL);
  }

  /** UNAVAILABLE when the connection is gone (the server closed it, say after its GOAWAY), as grpc-js reports it. */
  private dropped(): CallStatus | undefined {
    const session = this.stream.session;
    return session === undefined || session.destroyed ? { code: GrpcStatus.UNAVAILABLE, details: 'Connection dropped' } : undefined;
  }

  private onHead(h: IncomingHttpHeaders & IncomingHttpStatusHeader): void {
    const http = h[':status'] ?? 0;
    if (http !== 200) return this.cancel({ code: grpcStatusOfHttp(http), details: `Received HTTP status code ${http}` });
    const type = h['content-type'] ?? '';
    if (!type.startsWith('application/grpc')) return this.cancel({ code: GrpcStatus.UNKNOWN, details: `Received content-type ${JSON.stringify(type)}, not gRPC` });
    // A trailers-only response: the status is in the headers, and no message follows.
    if (h['grpc-status'] !== undefined) this.status = statusOfTrailers(h);
  }

  private onData(chunk: Buffer): void {
    if (this.ended) return;
    let messages: Buffer[];
    try {
      messages = this.reader.push(chunk);
    } catch (e) {
      return this.cancel(e instanceof GrpcError ? e : { code: GrpcStatus.INTERNAL, details: String(e) });
    }
    for (const m of messages) {
      let message: MessageShape<O>;
      try {
        message = fromBinary(this.method.output, m);
      } catch (e) {
        return this.cancel({ code: GrpcStatus.INTERNAL, details: `failed to parse ${this.method.output.typeName}: ${(e as Error).message}` });
      }
      this.emit('message', message);
      if (this.ended) return;
    }
  }

  private finish(status: CallStatus): void {
    if (this.ended) return;
    this.ended = true;
    this.emit('end', { code: status.code, details: status.details });
  }
}

/** Where a target connects: `host:port`, `[v6]:port`, `dns:///host:port`, `unix:path` or `unix:///path`. */
function parseTarget(address: string): { url: string; authority: string; socketPath?: string } {
  if (address.startsWith('unix:')) {
    const path = address.startsWith('unix://') ? address.slice('unix://'.length) : address.slice('unix:'.length);
    if (!path) throw new Error(`gRPC target ${JSON.stringify(address)}: no socket path`);
    return { url: 'http://localhost', authority: 'localhost', socketPath: path };
  }
  const hostPort = address.startsWith('dns:///') ? address.slice('dns:///'.length) : address;
  const m = /^(\[[0-9a-fA-F:.]+\]|[^:[\]/]+):(\d{1,5})$/.exec(hostPort);
  if (!m || Number(m[2]) > 65535) throw new Error(`gRPC target ${JSON.stringify(address)}: not host:port or unix:path`);
  return { url: `http://${hostPort}`, authority: hostPort };
}

/**
 * One HTTP/2 connection to a target, opened on the first call and again after it closes or the
 * server sends GOAWAY. It keeps the process alive only while a call is in progress.
 */
export class GrpcChannel {
  private session?: ClientHttp2Session;
  private readonly target: ReturnType<typeof parseTarget>;
  private active = 0;
  private closed = false;

  /** Throws for an address that is not a gRPC target. `authority` overrides the :authority header. */
  constructor(
    readonly address: string,
    private readonly authority?: string,
  ) {
    this.target = parseTarget(address);
  }

  /** Opens a call; `timeoutMs` is its deadline (sent as grpc-timeout, and enforced here). */
  call<I extends DescMessage, O extends DescMessage>(method: GrpcMethod<I, O>, timeoutMs?: number): GrpcCall<I, O> {
    if (this.closed) throw new Error(`gRPC channel to ${this.address} is closed`);
    const session = this.connection();
    const stream = session.request({
      [constants.HTTP2_HEADER_METHOD]: 'POST',
      [constants.HTTP2_HEADER_PATH]: `/${method.parent.typeName}/${method.name}`,
      [constants.HTTP2_HEADER_AUTHORITY]: this.authority || this.target.authority,
      [constants.HTTP2_HEADER_CONTENT_TYPE]: 'application/grpc',
      [constants.HTTP2_HEADER_TE]: 'trailers',
      ...(timeoutMs !== undefined ? { 'grpc-timeout': `${Math.max(1, Math.ceil(timeoutMs))}m` } : {}),
    });
    const call = new GrpcCall(stream, method);
    if (this.active++ === 0) session.ref();
    const deadline = timeoutMs !== undefined ? setTimeout(() => call.cancel({ code: GrpcStatus.DEADLINE_EXCEEDED, details: 'Deadline exceeded' }), timeoutMs) : undefined;
    call.once('end', () => {
      clearTimeout(deadline);
      if (--this.active === 0 && !session.destroyed) session.unref();
    });
    return call;
  }

  /** A unary call: resolves to the response, rejects with a GrpcError. */
  unary<I extends DescMessage, O extends DescMessage>(method: GrpcMethod<I, O>, request: MessageShape<I>, timeoutMs: number): Promise<MessageShape<O>> {
    return new Promise((resolve, reject) => {
      const call = this.call(method, timeoutMs);
      let response: MessageShape<O> | undefined;
      call.on('message', (m) => (response ??= m));
      call.once('end', (s) => {
        if (s.code !== GrpcStatus.OK) reject(new GrpcError(s.code, s.details));
        else if (!response) reject(new GrpcError(GrpcStatus.INTERNAL, 'the server sent no response message'));
        else resolve(response);
      });
      call.write(request);
      call.halfClose();
    });
  }

  /** Closes the connection; calls in progress end with UNAVAILABLE. */
  close(): void {
    this.closed = true;
    this.session?.destroy();
    this.session = undefined;
  }

  private connection(): ClientHttp2Session {
    if (this.session && !this.session.closed && !this.session.destroyed) return this.session;
    const { url, socketPath } = this.target;
    const session = http2Connect(url, {
      settings: { initialWindowSize: WINDOW_BYTES },
      ...(socketPath !== undefined ? { createConnection: () => netConnect(socketPath) } : {}),
    });
    session.once('connect', () => session.setLocalWindowSize(WINDOW_BYTES));
    // Each call reports the error as its status; the session needs a listener so it is not thrown.
    session.on('error', () => undefined);
    const forget = (): void => {
      if (this.session === session) this.session = undefined;
    };
    session.once('goaway', forget);
    session.once('close', forget);
    session.unref();
    this.session = session;
    return session;
  }
}
