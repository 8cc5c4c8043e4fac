// The proxy's own HTTP/1.1 request head: the text it writes, and what it refuses.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { requestHead } from '../../src/dataplane/http1/request-head.js';

test('a request head: request line, one line per value in order, the blank line; non-latin1 values as UTF-8', () => {
  assert.equal(requestHead('GET', '/a?b', {}), 'GET /a?b HTTP/1.1\r\n\r\n');
  const head = requestHead('POST', '/p', { host: 'h:1', 'x-many': ['1', '2'], 'content-length': 5, 'x-none': undefined, 'x-snow': 'snow \u2603' });
  assert.equal(head, `POST /p HTTP/1.1\r\nhost: h:1\r\nx-many: 1\r\nx-many: 2\r\ncontent-length: 5\r\nx-snow: snow ${Buffer.from('\u2603').toString('latin1')}\r\n\r\n`);
  // The same names again (their line starts are kept): the same text.
  assert.equal(requestHead('POST', '/p', { host: 'h:1', 'x-many': ['1', '2'], 'content-length': 5, 'x-snow': 'snow \u2603' }), head);
});

test('a value or path that could split the head is refused, naming the header or the path', () => {
  assert.throws(() => requestHead('GET', '/', { 'x-bad': 'a\r\nx-evil: 1' }), /invalid character in header x-bad/);
  assert.throws(() => requestHead('GET', '/', { 'x-bad': ['ok', 'a\0'] }), /invalid character in header x-bad/);
  assert.throws(() => requestHead('GET', '/a\nb', {}), /invalid character in request path/);
});
