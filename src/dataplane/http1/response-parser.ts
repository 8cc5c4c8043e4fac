// A strict, incremental HTTP/1.1 response parser for the proxy's own upstream client: status
// line, header block, then a body framed by content-length, chunked transfer coding (trailers
// included) or the connection's end. What Envoy's codec refuses is refused here (502 for the
// router): a malformed status line or header line, obs-fold, conflicting content-lengths,
// content-length together with transfer-encoding, a transfer coding other than chunked, a bad
// chunk size or chunk terminator, a head over the size or count limit.
import { lowerCase } from '../../common/lower-case.js';

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
  /** `last`: the chunk completes a body of known length (onEnd follows at once). */
  onData(chunk: Buffer, last: boolean): void;
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

/**
 * Header names most responses carry, lower case, by length: found in the head's text without a
 * string sliced and lower-cased for each (node:http, for one, sends `Date`, `Connection` and
 * `Keep-Alive` capitalized).
 */
const COMMON_NAMES = new Map<number, string[]>();
for (const name of ['content-type', 'content-length', 'date', 'connection', 'keep-alive', 'transfer-encoding', 'server', 'cache-control', 'etag', 'last-modified', 'expires', 'vary', 'location', 'set-cookie', 'content-encoding', 'grpc-status', 'grpc-message']) {
  COMMON_NAMES.set(name.length, [...(COMMON_NAMES.get(name.length) ?? []), name]);
}

/** The common name (COMMON_NAMES) `text` holds at `at`, in any case, if it is one. */
function commonName(text: string, at: number, length: number): string | undefined {
  const names = COMMON_NAMES.get(length);
  if (names === undefined) return undefined;
  next: for (const name of names) {
    for (let i = 0; i < length; i++) {
      const c = text.charCodeAt(at + i);
      if ((c >= 65 && c <= 90 ? c + 32 : c) !== name.charCodeAt(i)) continue next;
    }
    return name;
  }
  return undefined;
}

/**
 * The field lines of a head (or trailer block) `text` from offset `start` (none when `start` is
 * past its end), CRLF-separated, into lower-cased name / value pairs, the value without the
 * optional whitespace (SP, HTAB) around it; throws on a malformed one. Read in place: no array of
 * lines, one string per name and per value.
 */
function parseFields(text: string, start: number, what: string): string[] {
  const pairs: string[] = [];
  if (start > text.length) return pairs;
  // Counted before any line is read, so that a block over the limit is refused as such.
  let count = 1;
  for (let i = text.indexOf('\r\n', start); i >= 0; i = text.indexOf('\r\n', i + 2)) count++;
  if (count > MAX_HEADERS_COUNT) throw new ResponseParseError(`more than ${MAX_HEADERS_COUNT} ${what}`);
  for (let at = start; at <= text.length; ) {
    let end = text.indexOf('\r\n', at);
    if (end < 0) end = text.length;
    const colon = text.indexOf(':', at);
    // No name, whitespace before the colon, or a continuation line (obs-fold): all refused.
    if (colon <= at || colon >= end) throw new ResponseParseError(`malformed ${what} line`);
    const common = commonName(text, at, colon - at);
    const name = common ?? text.slice(at, colon);
    if (common === undefined && !TOKEN.test(name)) throw new ResponseParseError(`malformed ${what} name ${JSON.stringify(name)}`);
    let from = colon + 1;
    let to = end;
    while (from < to && (text.charCodeAt(from) === 32 || text.charCodeAt(from) === 9)) from++;
    while (to > from && (text.charCodeAt(to - 1) === 32 || text.charCodeAt(to - 1) === 9)) to--;
    const value = text.slice(from, to);
    // SP and HTAB are no bad characters, so the value without them holds every bad one the line had.
    if (BAD_VALUE.test(value)) throw new ResponseParseError(`invalid character in ${what} ${text.slice(at, colon)}`);
    pairs.push(common ?? lowerCase(name), value);
    at = end + 2;
  }
  return pairs;
}

/** A content-length value (the same as `length`, the one already seen, if any); throws when invalid or conflicting. */
function sameLength(value: string, length: string | undefined): string {
  const one = value.trim();
  if (!DIGITS.test(one) || (length !== undefined && length !== one)) throw new ResponseParseError('invalid or conflicting content-length');
  return one;
}

/** A comma-separated list's items, lower-cased and trimmed; one item without splitting. */
function listItems(value: string): string[] {
  const v = lowerCase(value);
  return v.includes(',') ? v.split(',').map((s) => s.trim()) : [v.trim()];
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
          this.sink.onData(chunk, this.remaining === 0);
          if (this.remaining === 0) this.end(undefined);
          break;
        }
        case State.UntilClose:
          this.sink.onData(at === 0 ? buf : buf.subarray(at), false);
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
          this.sink.onData(buf.subarray(at, at + n), false);
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
          const text = buf.toString('latin1', at, end);
          at = end + 4;
          this.end(parseFields(text, 0, 'trailer'));
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
    const eol = text.indexOf('\r\n');
    const line = eol < 0 ? text : text.slice(0, eol);
    if (!STATUS_LINE.test(line)) throw new ResponseParseError(`malformed status line ${JSON.stringify(line.slice(0, 64))}`);
    // The pattern fixed the positions: `HTTP/1.x NNN[ reason]`.
    const http10 = line.charCodeAt(7) === 48;
    const status = (line.charCodeAt(9) - 48) * 100 + (line.charCodeAt(10) - 48) * 10 + (line.charCodeAt(11) - 48);
    const pairs = parseFields(text, eol < 0 ? text.length + 1 : eol + 2, 'header');
    // 1xx (e.g. an unsolicited 100 Continue): skipped, the final response follows.
    if (status < 200) return;
    let length: string | undefined;
    let chunked = false;
    let close = http10;
    for (let i = 0; i < pairs.length; i += 2) {
      const name = pairs[i]!;
      const value = pairs[i + 1]!;
      if (name === 'content-length') {
        // Repeated (or listed) values must all be the same number.
        if (value.includes(',')) for (const v of value.split(',')) length = sameLength(v, length);
        else length = sameLength(value, length);
      } else if (name === 'transfer-encoding') {
        const codings = listItems(value);
        if (chunked || codings.some((c) => c !== 'chunked') || codings.length !== 1) throw new ResponseParseError(`unsupported transfer-encoding ${JSON.stringify(value)}`);
        chunked = true;
      } else if (name === 'connection') {
        const tokens = listItems(value);
        if (tokens.includes('close')) close = true;
        else if (http10 && tokens.includes('keep-alive')) close = false;
      }
    }
    if (chunked && length !== undefined) throw new ResponseParseError('both content-length and transfer-encoding');
    this.keepAlive = !close;
    this.sink.onHead(status, line.length > 13 ? line.slice(13) : '', pairs, this.keepAlive);
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
