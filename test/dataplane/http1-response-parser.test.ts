// The upstream client's response parser on its own: responses arriving in any split (every byte
// boundary, byte by byte) give the same head, body and trailers; what it refuses, it refuses
// wherever the bytes are cut.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { MAX_HEADERS_COUNT, ResponseParseError, ResponseParser } from '../../src/dataplane/http1/response-parser.js';

interface Parsed {
  status?: number;
  message?: string;
  headers?: string[];
  keepAlive?: boolean;
  body: string;
  /** Each data report's `last` flag. */
  lasts: boolean[];
  trailers?: string[];
  ended: boolean;
}

/** Feeds `pieces` to a parser expecting one response; returns what it reported. */
function parse(pieces: Buffer[], head = false): Parsed {
  const out: Parsed = { body: '', lasts: [], ended: false };
  const parser = new ResponseParser({
    onHead(status, message, pairs, keepAlive) {
      Object.assign(out, { status, message, headers: pairs, keepAlive });
    },
    onData(chunk, last) {
      out.body += chunk.toString('latin1');
      out.lasts.push(last);
    },
    onEnd(trailers) {
      out.ended = true;
      out.trailers = trailers;
    },
  });
  parser.expect(head);
  for (const p of pieces) parser.execute(p);
  return out;
}

/** The bytes cut in two at every position, and one byte at a time. */
function splits(text: string): Buffer[][] {
  const b = Buffer.from(text, 'latin1');
  const out: Buffer[][] = [];
  for (let i = 1; i < b.length; i++) out.push([b.subarray(0, i), b.subarray(i)]);
  out.push([...b].map((byte) => Buffer.from([byte])));
  return out;
}

const CHUNKED = 'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-A: \t1 \xa0 \r\n\r\n5;name=v\r\nhello\r\n1\r\n \r\na\r\nwonderful!\r\n0\r\nX-Sum: 16\r\nX-B: 2\r\n\r\n';
const LENGTH = 'HTTP/1.1 201 Created\r\ncontent-length: 11\r\n\r\nhello world';

describe('HTTP/1.1 response parser', () => {
  it('a chunked response with trailers, cut anywhere', () => {
    for (const pieces of splits(CHUNKED)) {
      const r = parse(pieces);
      assert.equal(r.status, 200);
      assert.deepEqual(r.headers, ['transfer-encoding', 'chunked', 'x-a', '1 \xa0']);
      assert.equal(r.body, 'hello wonderful!');
      assert.deepEqual(r.trailers, ['x-sum', '16', 'x-b', '2']);
      assert.ok(!r.lasts.includes(true), 'a chunked body has no last chunk before its trailers');
      assert.equal(r.ended, true);
      assert.equal(r.keepAlive, true);
    }
  });

  it('a content-length response, cut anywhere; a 1xx before it is skipped', () => {
    for (const pieces of splits(`HTTP/1.1 100 Continue\r\n\r\n${LENGTH}`)) {
      const r = parse(pieces);
      assert.equal(r.status, 201);
      assert.equal(r.message, 'Created');
      assert.equal(r.body, 'hello world');
      // Only the chunk that completes the length is the last.
      assert.deepEqual(r.lasts, [...r.lasts.slice(0, -1).map(() => false), true]);
      assert.equal(r.ended, true);
    }
  });

  it('HTTP/1.0 closes unless it says keep-alive; connection: close is honoured', () => {
    assert.equal(parse([Buffer.from('HTTP/1.0 200 OK\r\ncontent-length: 0\r\n\r\n')]).keepAlive, false);
    assert.equal(parse([Buffer.from('HTTP/1.0 200 OK\r\nconnection: keep-alive\r\ncontent-length: 0\r\n\r\n')]).keepAlive, true);
    assert.equal(parse([Buffer.from('HTTP/1.1 200 OK\r\nconnection: Keep-Alive, Close\r\ncontent-length: 0\r\n\r\n')]).keepAlive, false);
  });

  it('no body for HEAD, 204 and 304, whatever content-length says', () => {
    assert.deepEqual(parse([Buffer.from('HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n')], true).ended, true);
    assert.deepEqual(parse([Buffer.from('HTTP/1.1 304 Not Modified\r\ncontent-length: 5\r\n\r\n')]).ended, true);
    assert.deepEqual(parse([Buffer.from('HTTP/1.1 204 No Content\r\n\r\n')]).ended, true);
  });

  const refused: Record<string, string> = {
    'a status code that is not three digits': 'HTTP/1.1 20 OK\r\n\r\n',
    'an unknown protocol': 'HTTP/2.0 200 OK\r\n\r\n',
    'whitespace before the colon': 'HTTP/1.1 200 OK\r\nx-a : 1\r\n\r\n',
    'obs-fold': 'HTTP/1.1 200 OK\r\nx-a: 1\r\n 2\r\n\r\n',
    'a bare LF inside a line': 'HTTP/1.1 200 OK\r\nx-a: 1\nx-b: 2\r\n\r\n',
    'a bare CR at the end of a value': 'HTTP/1.1 200 OK\r\nx-a: 1\r\r\ncontent-length: 0\r\n\r\n',
    'a bare LF at the end of a value': 'HTTP/1.1 200 OK\r\nx-a: 1\n\r\ncontent-length: 0\r\n\r\n',
    'a control character in a value': 'HTTP/1.1 200 OK\r\nx-a: 1\x01\r\n\r\n',
    'conflicting content-lengths in one field': 'HTTP/1.1 200 OK\r\ncontent-length: 1, 2\r\n\r\nx',
    'a signed content-length': 'HTTP/1.1 200 OK\r\ncontent-length: +1\r\n\r\nx',
    'gzip as the transfer coding': 'HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\n\r\n',
    'chunked applied twice': 'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked, chunked\r\n\r\n0\r\n\r\n',
    'a negative chunk size': 'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n-1\r\nx\r\n0\r\n\r\n',
    'a chunk not ended by CRLF': 'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n1\r\nxy\r\n0\r\n\r\n',
    'a chunk size line ended by a bare LF': 'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n1\nx\r\n0\r\n\r\n',
    'bytes after the response': `${LENGTH}HTTP/1.1 200 OK\r\n\r\n`,
  };
  for (const [what, text] of Object.entries(refused)) {
    it(`refuses ${what}, cut anywhere`, () => {
      for (const pieces of splits(text)) assert.throws(() => parse(pieces), ResponseParseError);
    });
  }

  it(`refuses more than ${MAX_HEADERS_COUNT} header fields, and a head over 60 KiB`, () => {
    const many = Array.from({ length: MAX_HEADERS_COUNT + 1 }, (_, i) => `x-${i}: v\r\n`).join('');
    assert.throws(() => parse([Buffer.from(`HTTP/1.1 200 OK\r\n${many}\r\n`)]), /more than 100 header/);
    const allowed = Array.from({ length: MAX_HEADERS_COUNT }, (_, i) => `x-${i}: v\r\n`).join('');
    assert.equal(parse([Buffer.from(`HTTP/1.1 200 OK\r\n${allowed}content-length: 0\r\n\r\n`.replace('x-0: v\r\n', ''))]).ended, true);
    const big = Buffer.from(`HTTP/1.1 200 OK\r\nx-big: ${'a'.repeat(61 * 1024)}`);
    assert.throws(() => parse([big.subarray(0, 30_000), big.subarray(30_000)]), /too large/);
  });
});
