// The XDS cache's tiers other than the dependency tier (tested in cache.test.ts): the LRU they share,
// the snapshot memo, and the per-object packing and versions.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { create } from '@bufbuild/protobuf';
import { anyPack, type Any } from '@bufbuild/protobuf/wkt';
import { ClusterSchema } from '../../src/gen/envoy/config/cluster/v3/cluster_pb.js';
import { contentVersion, Lru, memo, packOnce, versioned } from '../../src/xds/cache.js';

test('Lru: a read refreshes an entry, the least recently used goes beyond the limit, <= 0 is unbounded', () => {
  const lru = new Lru<number>(2);
  assert.equal(lru.set('a', 1), 0);
  lru.set('b', 2);
  assert.equal(lru.get('a'), 1, 'a is now the most recent');
  assert.equal(lru.set('c', 3), 1, 'one evicted');
  assert.equal(lru.get('b'), undefined, 'b was the least recently used');
  assert.deepEqual([lru.get('a'), lru.get('c'), lru.size], [1, 3, 2]);
  let made = 0;
  assert.equal(lru.remember('a', () => ++made), 1);
  assert.equal(lru.remember('d', () => ++made), 1);
  assert.equal(made, 1, 'made on the miss only');
  const unbounded = new Lru<number>(0);
  for (let i = 0; i < 100; i++) unbounded.set(String(i), i);
  assert.equal(unbounded.size, 100);
});

test('memo: one build per owner and key; another owner (a new snapshot) builds again', () => {
  let builds = 0;
  const snapshot1 = {};
  const snapshot2 = {};
  assert.equal(memo(snapshot1, 'k', () => ++builds), 1);
  assert.equal(memo(snapshot1, 'k', () => ++builds), 1);
  assert.equal(memo(snapshot1, 'other', () => ++builds), 2);
  assert.equal(memo(snapshot2, 'k', () => ++builds), 3);
});

test('packOnce and versioned: one resource and one version per object; equal content, equal version', () => {
  const cluster = create(ClusterSchema, { name: 'c' });
  let packs = 0;
  const pack = () => {
    packs++;
    return { name: 'c', resource: anyPack(ClusterSchema, cluster) as Any };
  };
  const r = packOnce(cluster, pack);
  assert.equal(packOnce(cluster, pack), r);
  assert.equal(packs, 1);
  const v = versioned(r);
  assert.equal(versioned(r), v, 'same object');
  assert.deepEqual(v, { name: 'c', version: contentVersion(r.resource), resource: r.resource });
  const twin = { name: 'c', resource: anyPack(ClusterSchema, create(ClusterSchema, { name: 'c' })) as Any };
  assert.equal(versioned(twin).version, v.version, 'the version is a content hash');
  assert.notEqual(versioned({ name: 'c', resource: anyPack(ClusterSchema, create(ClusterSchema, { name: 'd' })) as Any }).version, v.version);
  assert.equal(versioned({ ...twin, version: 'given' }).version, 'given', 'a generator-given version wins');
});
