import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomRequestId } from '../../src/dataplane/request-id.js';

test('generated request ids are version 4 UUIDs, all different, across entropy refills', () => {
  const seen = new Set<string>();
  for (let i = 0; i < 1000; i++) {
    const id = randomRequestId();
    assert.match(id, /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    seen.add(id);
  }
  assert.equal(seen.size, 1000);
});
