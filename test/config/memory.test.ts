import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { AnyResource, AuthorizationPolicy } from '../../src/api/types.js';
import { MemoryStore } from '../../src/config/memory.js';
import type { ConfigEvent } from '../../src/config/store.js';

function policy(name: string, namespace = 'ns', spec: AuthorizationPolicy['spec'] = {}, labels?: Record<string, string>): AuthorizationPolicy {
  return { apiVersion: 'security.mesh.io/v1beta1', kind: 'AuthorizationPolicy', metadata: { name, namespace, ...(labels ? { labels } : {}) }, spec };
}

function recorder(store: MemoryStore): ConfigEvent[] {
  const events: ConfigEvent[] = [];
  store.onEvent((e) => events.push(e));
  return events;
}

describe('MemoryStore', () => {
  it('sends add, update (with old and new) and delete events', () => {
    const store = new MemoryStore();
    const events = recorder(store);
    store.apply(policy('a'));
    store.apply(policy('a', 'ns', { action: 'DENY' }));
    store.delete({ kind: 'AuthorizationPolicy', namespace: 'ns', name: 'a' });
    assert.deepEqual(events.map((e) => e.type), ['add', 'update', 'delete']);
    const update = events[1]!;
    assert.equal(update.old?.spec && 'action' in update.old.spec, false);
    assert.equal((update.new as AuthorizationPolicy).spec.action, 'DENY');
    assert.equal(events[2]!.old?.metadata.name, 'a');
  });

  it('updates in place with a new resourceVersion and generation', () => {
    const store = new MemoryStore();
    store.apply(policy('a'));
    const first = store.get({ kind: 'AuthorizationPolicy', namespace: 'ns', name: 'a' })!;
    store.apply(policy('a', 'ns', { action: 'DENY' }));
    const second = store.get({ kind: 'AuthorizationPolicy', namespace: 'ns', name: 'a' })!;
    assert.equal(first.metadata.generation, 1);
    assert.equal(second.metadata.generation, 2);
    assert.notEqual(second.metadata.resourceVersion, first.metadata.resourceVersion);
    assert.equal(store.list('AuthorizationPolicy').length, 1);
  });

  it('keeps the generation on a metadata-only change and is silent on no change', () => {
    const store = new MemoryStore();
    const events = recorder(store);
    store.apply(policy('a'));
    store.apply(policy('a', 'ns', {}, { team: 'x' }));
    store.apply(policy('a', 'ns', {}, { team: 'x' }));
    assert.deepEqual(events.map((e) => e.type), ['add', 'update']);
    assert.equal(store.get({ kind: 'AuthorizationPolicy', namespace: 'ns', name: 'a' })!.metadata.generation, 1);
  });

  it('lists by kind and namespace, sorted; gets by key', () => {
    const store = new MemoryStore();
    store.apply(policy('b', 'ns2'));
    store.apply(policy('z', 'ns1'));
    store.apply(policy('a', 'ns1'));
    store.apply({ apiVersion: 'networking.mesh.io/v1', kind: 'WorkloadEntry', metadata: { name: 'a', namespace: 'ns1' }, spec: { address: '1.1.1.1' } } as AnyResource);
    assert.deepEqual(store.list('AuthorizationPolicy').map((r) => `${r.metadata.namespace}/${r.metadata.name}`), ['ns1/a', 'ns1/z', 'ns2/b']);
    assert.deepEqual(store.list('AuthorizationPolicy', 'ns2').map((r) => r.metadata.name), ['b']);
    assert.equal(store.get({ kind: 'WorkloadEntry', namespace: 'ns1', name: 'a' })?.spec.address, '1.1.1.1');
    assert.equal(store.get({ kind: 'WorkloadEntry', namespace: 'ns2', name: 'a' }), undefined);
  });

  it('signals synced once', async () => {
    const store = new MemoryStore();
    assert.equal(store.hasSynced(), false);
    store.markSynced();
    await store.synced();
    assert.equal(store.hasSynced(), true);
  });

  it('delivers to every handler even if one throws, and unsubscribes', () => {
    const store = new MemoryStore();
    const seen: string[] = [];
    store.onEvent(() => {
      throw new Error('boom');
    });
    const off = store.onEvent((e) => seen.push(e.type));
    store.apply(policy('a'));
    off();
    store.apply(policy('b'));
    assert.deepEqual(seen, ['add']);
  });

  it('freezes stored resources and keeps source versions when asked', () => {
    const store = new MemoryStore({ versioning: 'source' });
    const input = policy('a');
    input.metadata.resourceVersion = '42';
    store.apply(input);
    const stored = store.get({ kind: 'AuthorizationPolicy', namespace: 'ns', name: 'a' })!;
    assert.equal(stored.metadata.resourceVersion, '42');
    assert.throws(() => {
      (stored.metadata as { name: string }).name = 'changed';
    }, TypeError);
  });
});
