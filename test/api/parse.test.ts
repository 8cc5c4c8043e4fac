import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parseDocuments } from '../../src/api/parse.js';

describe('parseDocuments', () => {
  it('splits multi-document YAML, numbering documents and lines, and isolates a broken one', () => {
    const docs = parseDocuments('a: 1\n---\nb: [\n---\n\n---\nc: 3\n');
    assert.deepEqual(docs.map((d) => [d.index, d.line, d.value ?? null, d.error !== undefined]), [
      [1, 1, { a: 1 }, false],
      [2, 3, null, true],
      [4, 7, { c: 3 }, false],
    ]);
  });

  it('reports duplicate keys', () => {
    const [doc] = parseDocuments('a: 1\na: 2\n');
    assert.match(doc!.error!, /unique/);
  });

  it('parses JSON', () => {
    assert.deepEqual(parseDocuments('{"kind": "Sidecar", "n": [1]}')[0]!.value, { kind: 'Sidecar', n: [1] });
  });

  it('rejects alias bombs instead of expanding them', () => {
    const bomb = ['a: &a [x, x, x, x, x, x, x, x, x, x]', ...Array.from({ length: 8 }, (_, i) => `${String.fromCharCode(98 + i)}: &${String.fromCharCode(98 + i)} [*${String.fromCharCode(97 + i)}, *${String.fromCharCode(97 + i)}, *${String.fromCharCode(97 + i)}, *${String.fromCharCode(97 + i)}, *${String.fromCharCode(97 + i)}, *${String.fromCharCode(97 + i)}, *${String.fromCharCode(97 + i)}, *${String.fromCharCode(97 + i)}, *${String.fromCharCode(97 + i)}, *${String.fromCharCode(97 + i)}]`)].join('\n');
    const [doc] = parseDocuments(bomb);
    assert.ok(doc!.error !== undefined);
  });

  it('returns nothing for an empty file', () => {
    assert.deepEqual(parseDocuments(''), []);
  });
});
