// A TCP tunnel over HTTP/1.1 on one upstream connection, as Envoy's HTTP/1 codec carries one: the
// request head once the connection is up (TLS included), then the response head, strictly parsed.
// Any 2xx establishes it (RFC 7231: a CONNECT response's framing headers are ignored). CONNECT:
// the connection itself carries the bytes, the response's excess first. POST: the request body is
// chunked, the end of the downstream's data its last chunk, after which the connection is closed
// for writing (Envoy closes it, HTTP/1.1 having no half-closed stream); the response body, framed
// as its head says, is what goes back.
import { Duplex } from 'node:stream';
import type { Socket } from 'node:net';
import { MAX_HEAD_BYTES, ResponseParser, type ResponseSink } from './response-parser.js';
import type { OpenedUpstream } from '../upstream-pools.js';

const CRLF = '\r\n';
const LAST_CHUNK = '0\r\n\r\n';

const isSuccess = (status: number): boolean => status >= 200 && status < 300;

/** The connection ended before the response head: a failed connect. */
function endedEarly(socket: Socket): () => void {
  return () => socket.destroy(new Error('the tunnel\'s proxy closed the connection before its response'));
}

/** CONNECT: the connection, handed over (it emits `ready`) once a 2xx head has been read off it. */
function connectTunnel(socket: Socket, ready: string): Socket {
  let status = 0;
  const parser = new ResponseParser({ onHead: (s) => void (status = s), onData: () => undefined, onEnd: () => undefined });
  let pending: Buffer = Buffer.alloc(0);
  const early = endedEarly(socket);
  const onData = (d: Buffer): void => {
    pending = pending.length === 0 ? d : Buffer.concat([pending, d]);
    // Head by head: 1xx heads are skipped until the final one.
    for (let end = pending.indexOf('\r\n\r\n'); end >= 0 && status === 0; end = pending.indexOf('\r\n\r\n')) {
      parser.expect(true);
      try {
        parser.execute(pending.subarray(0, end + 4));
      } catch (e) {
        return void socket.destroy(e as Error);
      }
      pending = pending.subarray(end + 4);
    }
    if (status === 0) {
      if (pending.length > MAX_HEAD_BYTES) socket.destroy(new Error('the tunnel\'s response head is too large'));
      return;
    }
    socket.off('data', onData);
    socket.off('end', early);
    if (!isSuccess(status)) return void socket.destroy(new Error(`the tunnel's proxy answered ${status}`));
    socket.pause();
    if (pending.length > 0) socket.unshift(pending);
    socket.emit(ready);
  };
  socket.on('data', onData);
  socket.once('end', early);
  return socket;
}

/** POST: the request body chunked, the response's body decoded; a Duplex over the connection. */
class PostTunnel extends Duplex implements ResponseSink {
  private readonly parser = new ResponseParser(this);
  private established = false;
  private responseEnded = false;
  private readonly early: () => void;

  constructor(
    private readonly socket: Socket,
    private readonly ready: string,
  ) {
    super({ allowHalfOpen: true });
    this.parser.expect(false);
    this.early = endedEarly(socket);
    socket.on('data', (d: Buffer) => {
      try {
        this.parser.execute(d);
      } catch (e) {
        socket.destroy(e as Error);
      }
    });
    socket.once('end', this.early);
    socket.on('error', (e) => this.destroy(e));
    // A response that ended has its body still to be read: the Duplex ends itself once read.
    socket.on('close', () => this.responseEnded || this.destroy(new Error('the tunnel\'s connection closed before its response ended')));
  }

  onHead(status: number): void {
    if (!isSuccess(status)) return void this.socket.destroy(new Error(`the tunnel's proxy answered ${status}`));
    this.established = true;
    this.socket.off('end', this.early);
    // A body running to the connection's end ends there.
    this.socket.once('end', () => this.parser.closeDelimited && this.parser.finishAtEof());
    this.emit(this.ready);
  }

  onData(chunk: Buffer): void {
    if (!this.push(chunk)) this.socket.pause();
  }

  onEnd(): void {
    if (!this.established) return;
    this.responseEnded = true;
    this.push(null);
  }

  override _read(): void {
    this.socket.resume();
  }

  override _write(chunk: Buffer, _enc: BufferEncoding, done: (e?: Error | null) => void): void {
    this.socket.cork();
    this.socket.write(`${chunk.length.toString(16)}${CRLF}`);
    this.socket.write(chunk);
    this.socket.write(CRLF, done);
    this.socket.uncork();
  }

  override _final(done: (e?: Error | null) => void): void {
    this.socket.end(LAST_CHUNK, done);
  }

  override _destroy(e: Error | null, done: (e?: Error | null) => void): void {
    this.socket.destroy();
    done(e);
  }
}

/**
 * The tunnel over `opened`: `head` (the request head, written once the connection is ready) and
 * what follows it; it emits `ready` once established.
 */
export function http1Tunnel(head: string, post: boolean, opened: OpenedUpstream, ready: string): Duplex {
  const socket: Socket = opened.socket;
  socket.once(opened.ready, () => socket.write(head, 'latin1'));
  return post ? new PostTunnel(socket, ready) : connectTunnel(socket, ready);
}
