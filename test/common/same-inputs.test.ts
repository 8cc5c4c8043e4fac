// sameInputs / perObject: results shared by calls with the same input objects, rebuilt for new ones.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { perObject, sameInputs } from '../../src/common/same-inputs.js';

test('sameInputs returns the earlier result for the same objects (arrays by their elements) and builds anew for any other', () => {
  let builds = 0;
  const build = sameInputs((policies: readonly { name: string }[], ns: string) => ({ built: ++builds, names: policies.map((p) => `${ns}/${p.name}`) }));
  const a = Object.freeze({ name: 'a' });
  const b = Object.freeze({ name: 'b' });
  const first = build([a, b], 'foo');
  assert.equal(build([a, b], 'foo'), first, 'another array of the same objects: the same result');
  assert.equal(builds, 1);
  assert.notEqual(build([b, a], 'foo'), first, 'order counts');
  assert.notEqual(build([a, b], 'bar'), first, 'a primitive argument counts by value');
  const edited = Object.freeze({ name: 'a' });
  const rebuilt = build([edited, b], 'foo');
  assert.notEqual(rebuilt, first, 'an equal but new object (an edited resource) is built anew');
  assert.deepEqual(rebuilt.names, first.names);
  assert.deepEqual(build([], 'foo').names, []);
  assert.notEqual(build([], 'foo'), build([[]] as never, 'foo'), 'nesting is part of the key');
});

test('sameInputs keeps at most `size` results', () => {
  let builds = 0;
  const build = sameInputs((o: object) => ({ n: ++builds, o }), 2);
  const [x, y, z] = [{}, {}, {}];
  build(x);
  build(y);
  build(z);
  build(x);
  assert.equal(builds, 4, 'x was evicted by z and built again');
});

test('perObject makes one value per object', () => {
  let made = 0;
  const of = perObject((o: { v: number }) => ({ doubled: o.v * 2, made: ++made }));
  const o = { v: 2 };
  assert.equal(of(o), of(o));
  assert.equal(of(o).doubled, 4);
  assert.notEqual(of({ v: 2 }), of(o));
  assert.equal(made, 2);
});
