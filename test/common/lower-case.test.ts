import { test } from 'node:test';
import assert from 'node:assert/strict';
import { lowerCase } from '../../src/common/lower-case.js';

test('lowerCase equals toLowerCase, upper-case ASCII and characters beyond ASCII included', () => {
  for (const s of ['', 'x-request-id', 'Content-Type', 'HOST', 'a-Z', 'x-@[`{', 'ÀÉ', 'straße', 'x-İ', 'ĲSSEL']) assert.equal(lowerCase(s), s.toLowerCase(), s);
});
