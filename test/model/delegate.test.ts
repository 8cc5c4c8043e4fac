// VirtualService delegation as the Go mesh merges it: warnings name what was dropped and why, and
// PILOT_ENABLE_VIRTUAL_SERVICE_DELEGATE=false drops delegating routes instead of merging them.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { VirtualService } from '../../src/api/types.js';
import { mergeDelegates } from '../../src/model/delegate.js';

const vs = (namespace: string, name: string, spec: VirtualService['spec']): VirtualService => ({ apiVersion: 'networking.mesh.io/v1', kind: 'VirtualService', metadata: { namespace, name }, spec });

const root = vs('foo', 'root', {
  hosts: ['front'],
  http: [
    { name: 'r', match: [{ uri: { prefix: '/a' } }, { uri: { prefix: '/b' } }], delegate: { name: 'd', namespace: 'bar' } },
    { name: 'regex', match: [{ uri: { regex: '/x.*' } }], delegate: { name: 'd', namespace: 'bar' } },
    { name: 'gone', delegate: { name: 'nope' } },
  ],
});
const delegate = vs('bar', 'd', { http: [{ name: 'd1', match: [{ uri: { prefix: '/a/1' } }], route: [{ destination: { host: 'svc' } }] }] });

test('merges matches as the Go mesh does and reports conflicts and missing delegates', () => {
  const warnings: string[] = [];
  const out = mergeDelegates([root, delegate], { enabled: true, domain: 'cluster.local', warn: (m) => warnings.push(m) });
  assert.deepEqual(out.map((v) => v.metadata.name), ['root'], 'the delegate is not used on its own');
  assert.deepEqual(out[0]!.spec.http, [{ name: 'r-d1', match: [{ uri: { prefix: '/a/1' } }], route: [{ destination: { host: 'svc.bar.svc.cluster.local' } }] }], '/a/1 fits /a only; /b is dropped for it');
  assert.deepEqual(warnings, [
    'VirtualService foo/root: route regex and delegate bar/d route d1 have conflicting matches; the delegate route is dropped',
    'VirtualService foo/root: delegate VirtualService foo/nope not found; its route is dropped',
  ]);
});

test('PILOT_ENABLE_VIRTUAL_SERVICE_DELEGATE=false drops delegating routes, with a warning naming the setting', () => {
  const warnings: string[] = [];
  const out = mergeDelegates([root, delegate], { enabled: false, domain: 'cluster.local', warn: (m) => warnings.push(m) });
  assert.deepEqual(out[0]!.spec.http, []);
  assert.equal(warnings.length, 3);
  assert.match(warnings[0]!, /PILOT_ENABLE_VIRTUAL_SERVICE_DELEGATE is false/);
});

test("a merged match keeps the delegate's statPrefix, else the root's, an empty one too (as the Go mesh's mergeHTTPMatchRequest)", () => {
  const statRoot = vs('foo', 'stat', { hosts: ['front'], http: [{ name: 'r', match: [{ uri: { prefix: '/a' }, statPrefix: 'root', port: 8080 }], delegate: { name: 'd', namespace: 'bar' } }] });
  const statDelegate = vs('bar', 'd', {
    http: [{ name: 'd1', match: [{ uri: { prefix: '/a/own' }, statPrefix: 'own' }, { uri: { prefix: '/a/empty' }, statPrefix: '', port: 0 }, { uri: { prefix: '/a/none' } }], route: [{ destination: { host: 'svc' } }] }],
  });
  const [merged] = mergeDelegates([statRoot, statDelegate], { enabled: true, domain: 'cluster.local', warn: () => {} });
  assert.deepEqual(
    merged!.spec.http![0]!.match!.map((m) => [m.uri, m.statPrefix, m.port]),
    [
      [{ prefix: '/a/own' }, 'own', 8080],
      [{ prefix: '/a/empty' }, 'root', 8080],
      [{ prefix: '/a/none' }, 'root', 8080],
    ],
  );
});
