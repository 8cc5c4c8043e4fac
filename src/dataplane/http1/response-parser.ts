// A strict, incremental HTTP/1.1 response parser for the proxy's own upstream client: status
// line, header block, then a body framed by content-length, chunked transfer coding (trailers
// included) or the connection's end. What Envoy's codec refuses is refused here (502 for the
// router): a malformed status line or header line, obs-fold, conflicting content-lengths,
// content-length together with transfer-encoding, a transfer coding other than chunked, a bad
// chunk size or chunk terminator, a head over the size or count limit.

/** Envoy's defaults for an upstream: max_response_headers_kb 60, max_headers_count 100. */
export const MAX_HEAD_BYTES = 60 * 1024;
export const MAX_HEADERS_COUNT = 100;
/** A chunk-size line with its extensions (Envoy's codecs keep these short too). */
const MAX_CHUNK_LINE = 4096;

export class ResponseParseError extends Error {}

/** What the parser reports, in order: head, data*, end (or a ResponseParseError thrown from execute). */
export interface ResponseSink {
  /** A final (>= 200) response head; 1xx heads are skipped. `pairs` are name/value, names lower-cased. */
  onHead(status: number, message: string, pairs: string[], keepAlive: boolean): void;
  onData(chunk: Buffer): void;
  /** The whole response arrived; `trailers` are name/value pairs (chunked only). */
  onEnd(trailers: string[] | undefined): void;
}

const STATUS_LINE = /^HTTP\/1\.([01]) ([1-9]\d\d)(?: ([\t\x20-\x7e\x80-\xff]*))?$/;
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
/** Field values: visible characters, SP, HTAB, obs-text; never CR, LF or NUL (so a bare CR or LF in a line is refused here, in the name's token check or in the status line's pattern). */
const BAD_VALUE = /[\x00-\x08\x0a-\x1f\x7f]/;
const CHUNK_SIZE = /^([0-9a-fA-F]{1,12})[ \t]*(?:;.*)?$/;
const DIGITS = /^\d{1,15}$/;

const enum State {
  Head,
  Length,
  ChunkSize,
  ChunkData,
  ChunkEnd,
  Trailers,
  UntilClose,
  Done,
}

/** Without the optional whitespace (SP, HTAB) around a field value; nothing else is whitespace here. */
function trimOws(v: string): string {
  let start = 0;
  let end = v.length;
  while (start < end && (v.charCodeAt(start) === 32 || v.charCodeAt(start) === 9)) start++;
  while (end > start && (v.charCodeAt(end - 1) === 32 || v.charCodeAt(end - 1) === 9)) end--;
  return start === 0 && end === v.length ? v : v.slice(start, end);
}

/** Header lines `name: value` into lower-cased name / trimmed value pairs; throws on a malformed one. */
function parseFields(lines: string[], from: number, what: string): string[] {
  if (lines.length - from > MAX_HEADERS_COUNT) throw new ResponseParseError(`more than ${MAX_HEADERS_COUNT} ${what}`);
  const pairs: string[] = [];
  for (let i = from; i < lines.length; i++) {
    const line = lines[i]!;
    const colon = line.indexOf(':');
    // No name, whitespace before the colon, or a continuation line (obs-fold): all refused.
    if (colon <= 0) throw new ResponseParseError(`malformed ${what} line`);
    const name = line.slice(0, colon);
    if (!TOKEN.test(name)) throw new ResponseParseError(`malformed ${what} name ${JSON.stringify(name)}`);
    const raw = line.slice(colon + 1);
    if (BAD_VALUE.test(raw)) throw new ResponseParseError(`invalid character in ${what} ${name}`);
    pairs.push(name.toLowerCase(), trimOws(raw));
  }
  return pairs;
}

/** Parses one response after another on a connection; `expect(head)` before each request is written. */
export class ResponseParser {
  private state = State.Done;
  private pending: Buffer | undefined;
  private remaining = 0;
  private noBody = false;
  private keepAlive = false;

  constructor(private readonly sink: ResponseSink) {}

  /** Readies for the response of the next request; a HEAD request's response has no body. */
  expect(headRequest: boolean): void {
    this.state = State.Head;
    this.noBody = headRequest;
    this.pending = undefined;
  }

  /** Whether the connection may carry another request after the response that just ended. */
  get reusable(): boolean {
    return this.state === State.Done && this.keepAlive;
  }

  /** Whether a response is under way (expected and not ended). */
  get busy(): boolean {
    return this.state !== State.Done;
  }

  /** Whether the body runs until the connection closes (so its end is the response's end). */
  get closeDelimited(): boolean {
    return this.state === State.UntilClose;
  }

  /** The connection ended: ends a close-delimited body; a response cut short is a reset, not a protocol error. */
  finishAtEof(): void {
    if (this.state === State.UntilClose) {
      this.state = State.Done;
      this.keepAlive = false;
      this.sink.onEnd(undefined);
    } else if (this.state !== State.Done) throw new Error('upstream connection closed before the response was complete');
  }

  /** Feeds bytes read from the connection; throws ResponseParseError on a malformed response. */
  execute(data: Buffer): void {
    const buf = this.pending ? Buffer.concat([this.pending, data]) : data;
    this.pending = undefined;
    let at = 0;
    while (at < buf.length) {
      switch (this.state) {
        case State.Done:
          throw new ResponseParseError('data after the response');
        case State.Head: {
          const end = buf.indexOf('\r\n\r\n', at, 'latin1');
          if (end < 0) {
            if (buf.length - at > MAX_HEAD_BYTES) throw new ResponseParseError('response headers too large');
            this.pending = buf.subarray(at);
            return;
          }
          if (end - at > MAX_HEAD_BYTES) throw new ResponseParseError('response headers too large');
          const head = buf.toString('latin1', at, end);
          at = end + 4;
          this.head(head);
          break;
        }
        case State.Length: {
          const n = Math.min(this.remaining, buf.length - at);
          this.remaining -= n;
          const chunk = buf.subarray(at, at + n);
          at += n;
          this.sink.onData(chunk);
          if (this.remaining === 0) this.end(undefined);
          break;
        }
        case State.UntilClose:
          this.sink.onData(at === 0 ? buf : buf.subarray(at));
          return;
        case State.ChunkSize: {
          const lf = buf.indexOf(10, at);
          if (lf < 0) {
            if (buf.length - at > MAX_CHUNK_LINE) throw new ResponseParseError('chunk size line too long');
            this.pending = buf.subarray(at);
            return;
          }
          if (lf === at || buf[lf - 1] !== 13) throw new ResponseParseError('bad chunk size line');
          const m = CHUNK_SIZE.exec(buf.toString('latin1', at, lf - 1));
          if (!m) throw new ResponseParseError('bad chunk size');
          at = lf + 1;
          this.remaining = parseInt(m[1]!, 16);
          if (this.remaining === 0) {
            this.state = State.Trailers;
          } else this.state = State.ChunkData;
          break;
        }
        case State.ChunkData: {
          const n = Math.min(this.remaining, buf.length - at);
          this.remaining -= n;
          this.sink.onData(buf.subarray(at, at + n));
          at += n;
          if (this.remaining === 0) this.state = State.ChunkEnd;
          break;
        }
        case State.ChunkEnd: {
          if (buf.length - at < 2) {
            this.pending = buf.subarray(at);
            return;
          }
          if (buf[at] !== 13 || buf[at + 1] !== 10) throw new ResponseParseError('chunk data not followed by CRLF');
          at += 2;
          this.state = State.ChunkSize;
          break;
        }
        case State.Trailers: {
          // No trailers: the last chunk is followed by CRLF at once.
          if (buf.length - at >= 2 && buf[at] === 13 && buf[at + 1] === 10) {
            at += 2;
            this.end(undefined);
            break;
          }
          const end = buf.indexOf('\r\n\r\n', at, 'latin1');
          if (end < 0) {
            if (buf.length - at > MAX_HEAD_BYTES) throw new ResponseParseError('response trailers too large');
            this.pending = buf.subarray(at);
            return;
          }
          const lines = buf.toString('latin1', at, end).split('\r\n');
          at = end + 4;
          this.end(parseFields(lines, 0, 'trailer'));
          break;
        }
      }
      if ((this.state as State) === State.Done && at < buf.length) throw new ResponseParseError('data after the response');
    }
  }

  private end(trailers: string[] | undefined): void {
    this.state = State.Done;
    this.sink.onEnd(trailers);
  }

  private head(text: string): void {
    const lines = text.split('\r\n');
    const m = STATUS_LINE.exec(lines[0]!);
    if (!m) throw new ResponseParseError(`malformed status line ${JSON.stringify(lines[0]!.slice(0, 64))}`);
    const status = Number(m[2]);
    const pairs = parseFields(lines, 1, 'header');
    // 1xx (e.g. an unsolicited 100 Continue): skipped, the final response follows.
    if (status < 200) return;
    let length: string | undefined;
    let chunked = false;
    let close = m[1] === '0';
    for (let i = 0; i < pairs.length; i += 2) {
      const name = pairs[i]!;
      const value = pairs[i + 1]!;
      if (name === 'content-length') {
        // Repeated (or listed) values must all be the same number.
        for (const v of value.split(',')) {
          const one = v.trim();
          if (!DIGITS.test(one) || (length !== undefined && length !== one)) throw new ResponseParseError('invalid or conflicting content-length');
          length = one;
        }
      } else if (name === 'transfer-encoding') {
        const codings = value.toLowerCase().split(',').map((s) => s.trim());
        if (chunked || codings.some((c) => c !== 'chunked') || codings.length !== 1) throw new ResponseParseError(`unsupported transfer-encoding ${JSON.stringify(value)}`);
        chunked = true;
      } else if (name === 'connection') {
        const tokens = value.toLowerCase().split(',').map((s) => s.trim());
        if (tokens.includes('close')) close = true;
        else if (m[1] === '0' && tokens.includes('keep-alive')) close = false;
      }
    }
    if (chunked && length !== undefined) throw new ResponseParseError('both content-length and transfer-encoding');
    this.keepAlive = !close;
    this.sink.onHead(status, m[3] ?? '', pairs, this.keepAlive);
    if (this.noBody || status === 204 || status === 304) this.end(undefined);
    else if (chunked) this.state = State.ChunkSize;
    else if (length !== undefined) {
      this.remaining = Number(length);
      this.state = State.Length;
      if (this.remaining === 0) this.end(undefined);
    } else {
      this.state = State.UntilClose;
      this.keepAlive = false;
    }
  }
}
