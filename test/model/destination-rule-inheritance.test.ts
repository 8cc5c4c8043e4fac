// PILOT_ENABLE_DESTINATION_RULE_INHERITANCE: validation accepts a DestinationRule without host only
// with the setting on (and then without host-specific fields); the snapshot merges the mesh's,
// the namespace's and the host rule's trafficPolicy field by field; a second host-less rule of a
// namespace is ignored with a warning; with the setting off nothing is inherited.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { DestinationRule, DestinationRuleSpec } from '../../src/api/types.js';
import { validateResource } from '../../src/api/validate.js';
import { loadSettings } from '../../src/common/env.js';
import { TrafficIndex } from '../../src/model/traffic.js';
import { sidecarProxy } from '../networking/fixtures.js';

const NET = 'networking.mesh.io/v1';
const doc = (namespace: string, name: string, spec: Record<string, unknown>) => ({ apiVersion: NET, kind: 'DestinationRule', metadata: { namespace, name }, spec });
const dr = (namespace: string, name: string, spec: DestinationRuleSpec): DestinationRule => ({ apiVersion: NET, kind: 'DestinationRule', metadata: { namespace, name }, spec });
const HOST = 'reviews.foo.svc.cluster.local';

function issues(d: unknown): string[] {
  const r = validateResource(d);
  return r.ok ? [] : r.issues.map((i) => `${i.path}: ${i.message}`);
}

test('without the setting a host-less DestinationRule is refused, naming the setting', () => {
  loadSettings('discovery', {});
  const found = issues(doc('foo', 'defaults', { trafficPolicy: { loadBalancer: { simple: 'RANDOM' } } }));
  assert.equal(found.length, 1, found.join('; '));
  assert.match(found[0]!, /spec\.host/);
  assert.match(found[0]!, /PILOT_ENABLE_DESTINATION_RULE_INHERITANCE=true/);
  assert.equal(issues(doc('foo', 'defaults', { host: '', trafficPolicy: {} })).length, 1, 'an empty host too');
});

test('with the setting a host-less rule is accepted, but not with subsets, exportTo, workloadSelector or port-level settings', () => {
  loadSettings('discovery', { PILOT_ENABLE_DESTINATION_RULE_INHERITANCE: 'true' });
  try {
    assert.deepEqual(issues(doc('foo', 'defaults', { trafficPolicy: { loadBalancer: { simple: 'RANDOM' } } })), []);
    const found = issues(doc('foo', 'defaults', { subsets: [{ name: 'v1' }], exportTo: ['.'], workloadSelector: { labels: { a: 'b' } }, trafficPolicy: { portLevelSettings: [{ port: { number: 80 } }] } }));
    for (const field of ['spec.subsets', 'spec.exportTo', 'spec.workloadSelector', 'spec.trafficPolicy.portLevelSettings']) {
      assert.ok(found.some((m) => m.includes(field)), `${field} refused: ${found.join('; ')}`);
    }
    assert.match(issues(doc('foo', 'bad', { host: 'not a host' }))[0] ?? '', /invalid host/, 'a set host is still checked');
  } finally {
    loadSettings('discovery', {});
  }
});

test('a host rule inherits its namespace defaults merged over the mesh defaults; a rule-less host gets the defaults', () => {
  const warnings: string[] = [];
  const rules = [
    dr('mesh-system', 'mesh', { host: '', trafficPolicy: { loadBalancer: { simple: 'RANDOM' }, connectionPool: { tcp: { maxConnections: 500, connectTimeout: '2s' } }, tls: { mode: 'MUTUAL', privateKey: '/k.pem' } } }),
    dr('foo', 'a-ns', { host: '', trafficPolicy: { connectionPool: { http: { maxRetries: 4 } } } }),
    dr('foo', 'b-ns', { host: '', trafficPolicy: { loadBalancer: { simple: 'ROUND_ROBIN' } } }),
    dr('foo', 'reviews', { host: 'reviews', trafficPolicy: { connectionPool: { tcp: { maxConnections: 100 } }, tls: { mode: 'SIMPLE' } }, subsets: [{ name: 'v1', labels: { version: 'v1' } }] }),
  ];
  const index = new TrafficIndex(rules, [], 'cluster.local', 'mesh-system', { destinationRuleInheritance: true, warn: (m) => warnings.push(m) });
  const proxy = sidecarProxy('10.0.0.9', 'p', 'foo');
  const reviews = index.destinationRule(proxy, HOST, 'foo')!;
  assert.equal(reviews.rule.metadata.name, 'reviews');
  assert.deepEqual(reviews.rule.spec.trafficPolicy, {
    loadBalancer: { simple: 'RANDOM' },
    connectionPool: { tcp: { maxConnections: 100, connectTimeout: '2s' }, http: { maxRetries: 4 } },
    tls: { mode: 'SIMPLE' },
  });
  assert.deepEqual(reviews.subsets.map((s) => s.name), ['v1']);
  assert.equal(warnings.length, 1);
  assert.match(warnings[0]!, /foo\/b-ns has no host.*ignored/);
  const ratings = index.destinationRule(proxy, 'ratings.foo.svc.cluster.local', 'foo')!;
  assert.equal(ratings.rule.metadata.name, 'a-ns');
  assert.deepEqual(ratings.rule.spec.trafficPolicy?.['connectionPool'], { tcp: { maxConnections: 500, connectTimeout: '2s' }, http: { maxRetries: 4 } });
  const elsewhere = index.destinationRule(sidecarProxy('10.0.0.8', 'q', 'bar'), 'ratings.foo.svc.cluster.local', 'foo')!;
  assert.equal(elsewhere.rule.metadata.name, 'mesh', 'a namespace without defaults gets the mesh defaults');
  const off = new TrafficIndex(rules, [], 'cluster.local', 'mesh-system');
  assert.equal(off.destinationRule(proxy, HOST, 'foo')!.rule.spec.trafficPolicy?.['loadBalancer'], undefined, 'setting off: nothing inherited');
  assert.equal(off.destinationRule(proxy, 'ratings.foo.svc.cluster.local', 'foo'), undefined);
});
