// The proxy's own HTTP/1.1 keep-alive client for the common upstream request (no body, or one of
// known length, no `Expect`): the head (and a body already at hand) goes out in one write, the
// response is parsed by response-parser.ts and its body written straight into the downstream
// response. A connection goes back to its endpoint's idle list only when both the request and the
// response were complete and the response allowed it; anything else closes it.
import type { Socket } from 'node:net';
import { Writable } from 'node:stream';
import type { OutgoingHttpHeaders } from 'node:http';
import type { BodyDone, DownstreamResponse, HeaderMap, UpstreamBody, UpstreamEvents, UpstreamExchange } from '../http-codec.js';
import { flushHead, isEndToEnd } from '../http-codec.js';
import { ResponseParseError, ResponseParser, type ResponseSink } from './response-parser.js';
import { requestHead } from './request-head.js';
import { IdleTimer } from '../connection-limits.js';
import { onPeerEnd } from '../upstream-cx-stats.js';
import type { OpenedUpstream } from '../upstream-pools.js';
import type { ConnectionList } from './connection-list.js';
import type { StatCounter } from '../stats.js';

/** Methods a client may send again after a reused connection closed before answering (RFC 9110 9.2.2). */
const IDEMPOTENT = new Set(['GET', 'HEAD', 'OPTIONS', 'PUT', 'DELETE', 'TRACE']);

/** Where a connection's exchange is counted in the cluster's request gauges (upstream-rq-stats.ts). */
const NOT_COUNTED = 0;
const PENDING = 1;
const ACTIVE = 2;

/** One upstream connection: requests one after another, each answered before the next is sent. */
export class Http1Connection implements ResponseSink {
  readonly socket: Socket;
  private ready = false;
  /** Written before the connection was ready (TLS: before the server was verified). */
  private queued: (string | Buffer)[] = [];
  /** Request body writers waiting for the socket to drain. */
  private waiting: (() => void)[] = [];
  private readonly parser = new ResponseParser(this);
  private exchange: ClientExchange | undefined;
  /** Requests this connection carried before the current one. */
  reuses = 0;
  /** It reached max_connection_duration: it carries no further request. */
  outlived = false;
  private closed = false;
  /** The current exchange's response was all read. */
  private responded = false;
  /** The upstream ended the connection (FIN, reset) before the proxy closed it. */
  private peerEnded = false;
  /** A request was in flight as the connection began to close (Envoy's _with_active_rq). */
  private cutShort = false;
  /** The current exchange in the request gauges: pending while the connection is not ready, then active. */
  private counted = NOT_COUNTED;
  private readonly idleTimer = new IdleTimer(() => this.home.expired(this));

  constructor(
    opened: OpenedUpstream,
    private readonly home: ConnectionList,
  ) {
    const socket = (this.socket = opened.socket);
    // The head is a byte string (requestHead).
    socket.setDefaultEncoding('latin1');
    socket.once(opened.ready, () => {
      this.ready = true;
      if (this.counted === PENDING) {
        this.counted = ACTIVE;
        home.requests.attach(this.exchange?.routeTotal);
      }
      socket.cork();
      for (const q of this.queued.splice(0)) socket.write(q);
      socket.uncork();
      if (!socket.writableNeedDrain) this.wake();
    });
    socket.on('drain', () => this.wake());
    socket.on('data', (d: Buffer) => this.onBytes(d));
    socket.on('end', () => this.onEof());
    socket.on('error', (e) => this.onClosed(e));
    onPeerEnd(socket, () => (this.peerEnded = true));
    socket.on('close', () => {
      this.onClosed(new Error('upstream connection closed'));
      this.home.destroyed(this.peerEnded ? 'remote' : 'local', this.cutShort);
    });
  }

  get usable(): boolean {
    return !this.closed && !this.socket.destroyed && this.socket.readable;
  }

  /** Up (TLS: verified): what is written goes out rather than waiting in `queued`. */
  get isReady(): boolean {
    return this.ready;
  }

  take(): this {
    this.reuses++;
    this.idleTimer.busy();
    this.socket.ref();
    return this;
  }

  /** Idle: an idle pooled connection must not keep the process alive; it closes after `idleTimeoutMs` (0: never). */
  park(idleTimeoutMs: number): this {
    this.socket.unref();
    this.idleTimer.start(idleTimeoutMs);
    return this;
  }

  begin(ex: ClientExchange, headRequest: boolean): void {
    this.exchange = ex;
    this.responded = false;
    if (this.ready) {
      this.counted = ACTIVE;
      this.home.requests.start(ex.routeTotal);
    } else {
      this.counted = PENDING;
      this.home.requests.wait();
    }
    this.parser.expect(headRequest);
  }

  /** Writes (one write for all of `data`); false: wait with `whenDrained` before writing more. */
  write(...data: (string | Buffer)[]): boolean {
    if (!this.ready) {
      this.queued.push(...data);
      return false;
    }
    if (data.length === 1) return this.socket.write(data[0]!);
    this.socket.cork();
    for (const d of data) this.socket.write(d);
    this.socket.uncork();
    return !this.socket.writableNeedDrain;
  }

  /** Calls `cb` once the connection takes more (or is gone). */
  whenDrained(cb: () => void): void {
    if (this.closed) cb();
    else this.waiting.push(cb);
  }

  private wake(): void {
    for (const cb of this.waiting.splice(0)) cb();
  }

  /** The exchange is over (request and response complete): back to the list or closed. */
  done(): void {
    this.uncount();
    this.exchange = undefined;
    if (this.parser.reusable && this.usable) this.home.release(this);
    else this.close();
  }

  close(): void {
    this.ending();
    this.closed = true;
    this.idleTimer.stop();
    this.uncount();
    this.exchange = undefined;
    this.socket.destroy();
    this.wake();
  }

  /** The exchange ends: out of the request gauges. */
  private uncount(): void {
    if (this.counted === ACTIVE) this.home.requests.active--;
    else if (this.counted === PENDING) this.home.requests.pending--;
    this.counted = NOT_COUNTED;
  }

  onHead(status: number, message: string, pairs: string[]): void {
    this.exchange?.onHead(status, message, pairs);
  }

  onData(chunk: Buffer, last: boolean): void {
    this.exchange?.onData(chunk, last);
  }

  onEnd(trailers: string[] | undefined): void {
    this.responded = true;
    this.exchange?.onEnd(trailers);
  }

  /**
   * The first step of closing: whether a request is in flight, as Envoy counts it: sent on a
   * connected connection (one still connecting holds it as pending) and its response not all read.
   */
  private ending(): void {
    if (!this.closed) this.cutShort = this.ready && this.exchange !== undefined && !this.responded;
  }

  private onBytes(d: Buffer): void {
    try {
      this.parser.execute(d);
      this.exchange?.headReadAlone();
    } catch (e) {
      const ex = this.exchange;
      this.close();
      ex?.fail(e as Error);
    }
  }

  private onEof(): void {
    try {
      this.parser.finishAtEof();
      if (!this.exchange) this.close();
    } catch (e) {
      this.onClosed(e as Error);
    }
  }

  private onClosed(e: Error): void {
    const ex = this.exchange;
    this.ending();
    this.closed = true;
    this.idleTimer.stop();
    this.uncount();
    this.exchange = undefined;
    this.home.forget(this);
    this.socket.destroy();
    this.wake();
    ex?.fail(e);
  }
}

/** The end-to-end fields of a header block as a header map: repeated fields as arrays; undefined if none. */
function endToEndMap(pairs: string[]): HeaderMap | undefined {
  let h: HeaderMap | undefined;
  for (let i = 0; i < pairs.length; i += 2) {
    const k = pairs[i]!;
    const v = pairs[i + 1]!;
    if (!isEndToEnd(k, v)) continue;
    h ??= {};
    const cur = h[k];
    h[k] = cur === undefined ? v : typeof cur === 'string' ? [cur, v] : [...cur, v];
  }
  return h;
}

export interface ClientRequest {
  readonly method: string;
  readonly path: string;
  readonly headers: OutgoingHttpHeaders;
  /** Whether a body of `content-length` bytes follows (written through `body`). */
  readonly hasBody: boolean;
  /** Its route's upstream_rq_total, counted as the request becomes active (upstream-rq-stats.ts). */
  readonly routeTotal?: StatCounter;
}

/**
 * One request on a pooled connection. It is also the response's body: the chunks go to the
 * downstream response given to `pipeTo`. After `destroy()` nothing more is reported (the caller
 * already answered) and the connection is closed, never reused.
 */
export class ClientExchange implements UpstreamExchange, UpstreamBody {
  readonly body?: Writable;
  private conn: Http1Connection;
  /** With a body, the head waits for its first bytes so that both go out in one write. */
  private head: string | undefined;
  private requestDone: boolean;
  private responseDone = false;
  private answered = false;
  private finished = false;
  private out?: DownstreamResponse;
  private doneCb?: BodyDone;
  /** The body's last chunk, held for the response's end. */
  private tail?: Buffer;
  /** The response head arrived and no body byte since (in the same read, they leave in one write). */
  private headAlone = false;

  constructor(
    private readonly r: ClientRequest,
    private readonly list: ConnectionList,
    private readonly ev: UpstreamEvents,
  ) {
    const head = requestHead(r.method, r.path, r.headers);
    this.requestDone = !r.hasBody;
    this.conn = list.acquire();
    this.conn.begin(this, r.method === 'HEAD');
    if (!r.hasBody) {
      this.conn.write(head);
      return;
    }
    this.head = head;
    this.body = new Writable({
      write: (chunk: Buffer, _enc, cb: () => void) => {
        if (this.finished) return cb();
        const head = this.head;
        this.head = undefined;
        if (head === undefined ? this.conn.write(chunk) : this.conn.write(head, chunk)) cb();
        else this.conn.whenDrained(cb);
      },
    });
  }

  /** Sends the request again on another connection (only ever a body-less one). */
  private restart(): void {
    this.conn = this.list.acquire();
    this.conn.begin(this, this.r.method === 'HEAD');
    this.conn.write(requestHead(this.r.method, this.r.path, this.r.headers));
  }

  get sent(): boolean {
    return this.conn.isReady;
  }

  get routeTotal(): StatCounter | undefined {
    return this.r.routeTotal;
  }

  finish(): void {
    // An empty body: the head alone.
    if (this.head !== undefined && !this.finished) this.conn.write(this.head);
    this.head = undefined;
    this.requestDone = true;
    if (this.responseDone) this.settle();
  }

  destroy(): void {
    if (this.finished) return;
    this.finished = true;
    this.conn.close();
  }

  pipeTo(out: DownstreamResponse, done: BodyDone): void {
    this.out = out;
    this.doneCb = done;
  }

  /** The response is not wanted: the connection closes rather than reading a body nobody needs. */
  discard(): void {
    this.out = undefined;
    this.doneCb = undefined;
    this.destroy();
  }

  onHead(status: number, message: string, pairs: string[]): void {
    if (this.finished) return;
    this.answered = true;
    this.headAlone = true;
    this.ev.head({ status, message, headers: endToEndMap(pairs) ?? {}, endStream: false, connection: this.conn.socket }, this);
  }

  /**
   * A read that ended after the response head without a body byte: the head goes downstream now,
   * as Envoy forwards it, rather than waiting for the body's first bytes (a stream of events, a
   * long poll: the client sees the response begin).
   */
  headReadAlone(): void {
    if (!this.headAlone) return;
    this.headAlone = false;
    if (this.out) flushHead(this.out);
  }

  onData(chunk: Buffer, last: boolean): void {
    this.headAlone = false;
    // The body's last bytes go with the response's end (one write, none left corked for a later tick).
    if (last && this.doneCb) {
      this.tail = chunk;
      return;
    }
    const out = this.out as NodeJS.WritableStream | undefined;
    if (out && !out.write(chunk)) {
      const socket = this.conn.socket;
      socket.pause();
      out.once('drain', () => socket.resume());
    }
  }

  onEnd(trailers: string[] | undefined): void {
    this.headAlone = false;
    this.responseDone = true;
    const done = this.doneCb;
    // The request's body is still coming: the connection cannot be reused.
    if (!this.requestDone) this.destroy();
    else this.settle();
    done?.bodyDone(trailers ? endToEndMap(trailers) : undefined, this.tail);
  }

  fail(e: Error): void {
    if (this.finished) return;
    // A reused connection the upstream had closed while idle: the request never reached it, so it
    // is sent once more on a new connection when that is safe (nothing to resend, idempotent).
    if (!this.answered && this.conn.reuses > 0 && !this.r.hasBody && IDEMPOTENT.has(this.r.method) && !(e instanceof ResponseParseError)) {
      this.restart();
      return;
    }
    this.finished = true;
    this.ev.error(e);
  }

  private settle(): void {
    if (this.finished) return;
    this.finished = true;
    this.conn.done();
  }
}
