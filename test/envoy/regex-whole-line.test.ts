// `.+` and `.*` (what the Go mesh writes for "present" and "anything") are decided without running
// the regex engine; the answers must be RE2's own for every input, newlines and surrogates included.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { RE2JS } from 're2js';
import { compileRegex } from '../../src/envoy/matchers.js';

const INPUTS = ['', 'a', 'admins', ' ', '\n', 'a\n', '\na', 'a\nb', '\r', 'a\r\n', '\t', '\u2028', '\u0085', '\0', '😀', '\ud800', 'x\udc00y', 'http://127.0.0.1:8899/bench'];

for (const pattern of ['.+', '.*']) {
  test(`${pattern}: the same answer as RE2 (whole-input match) for every input`, () => {
    const ours = compileRegex(pattern, 'regex');
    const re2 = RE2JS.compile(pattern);
    for (const input of INPUTS) assert.equal(ours.test(input), re2.matches(input), `${pattern} on ${JSON.stringify(input)}`);
  });
}

test('.+ is "present": the empty value and a value with a newline do not match, anything else does', () => {
  const present = compileRegex('.+', 'regex');
  assert.deepEqual(['', 'a\nb', 'sub', '\r'].map((s) => present.test(s)), [false, false, true, true]);
});

test('other patterns still run the engine, and replacement is unchanged', () => {
  const re = compileRegex('.+x', 'regex');
  assert.equal(re.test('ax'), true);
  assert.equal(re.test('a\nx'), false);
  assert.equal(compileRegex('.+', 'regex').replaceAll('abc', 'z'), 'z');
});
