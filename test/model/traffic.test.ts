// What the snapshot reads of DestinationRules and VirtualServices: which rule a proxy gets
// (its namespace with selector first, then the service's, then the root namespace; merged subsets
// counted when duplicated), duplicate VirtualService domains counted, and the notices about what is
// not effective logged once per change of the resource.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { AnyResource, DestinationRuleSpec, VirtualServiceSpec } from '../../src/api/types.js';
import { configureLogging, registerScopes } from '../../src/common/log.js';
import { gauge } from '../../src/common/metrics.js';
import { metricValue } from '../helpers/metrics.js';
import { pushOf, sidecarProxy } from '../networking/fixtures.js';

const logFile = join(mkdtempSync(join(tmpdir(), 'traffic-model-')), 'out.log');
registerScopes(['model']);
configureLogging({ asJson: false, caller: [], outputLevel: 'default:info', stacktraceLevel: 'default:none', targets: [logFile] });

const NET = 'networking.mesh.io/v1';
const dr = (namespace: string, name: string, spec: DestinationRuleSpec): AnyResource => ({ apiVersion: NET, kind: 'DestinationRule', metadata: { namespace, name }, spec });
const vs = (namespace: string, name: string, spec: VirtualServiceSpec): AnyResource => ({ apiVersion: NET, kind: 'VirtualService', metadata: { namespace, name }, spec });
const HOST = 'reviews.foo.svc.cluster.local';

test('a proxy gets the rule of its namespace (selecting it first), else the service namespace, else the root namespace', async () => {
  const push = pushOf([
    dr('mesh-system', 'root', { host: HOST, subsets: [{ name: 'root' }] }),
    dr('foo', 'a', { host: 'reviews', subsets: [{ name: 'v1' }, { name: 'v2' }] }),
    dr('foo', 'b', { host: HOST, subsets: [{ name: 'v2' }, { name: 'v3' }] }),
    dr('bar', 'selecting', { host: HOST, workloadSelector: { labels: { app: 'special' } }, subsets: [{ name: 'special' }] }),
    dr('bar', 'private', { host: HOST, exportTo: ['baz'], subsets: [{ name: 'private' }] }),
  ]);
  const names = (ns: string, labels: Record<string, string>) =>
    push.traffic.destinationRule(sidecarProxy('10.0.0.9', 'p', ns, { LABELS: labels }), HOST, 'foo')?.subsets.map((s) => s.name);
  assert.deepEqual(names('foo', {}), ['v1', 'v2', 'v3'], 'the two rules of foo merged, the first v2 kept');
  assert.deepEqual(names('bar', { app: 'special' }), ['special'], 'the selecting rule of the proxy namespace');
  assert.deepEqual(names('bar', { app: 'other' }), ['v1', 'v2', 'v3'], 'not selected, and the rule exported elsewhere is not seen: the service namespace');
  assert.equal(await metricValue(gauge('pilot_destrule_subsets')), 1, 'v2 defined twice for one host');
  const other = pushOf([dr('mesh-system', 'root', { host: HOST, subsets: [{ name: 'root' }] })]);
  assert.deepEqual(other.traffic.destinationRule(sidecarProxy('10.0.0.9', 'p', 'qux'), HOST, 'foo')?.subsets.map((s) => s.name), ['root']);
});

test('duplicate domains are counted; notices are logged once per change of the resource', async () => {
  const base = [vs('foo', 'a', { hosts: ['reviews'], http: [{ route: [{ destination: { host: 'reviews' } }] }] }), vs('foo', 'b', { hosts: [HOST], tcp: [{ match: [{ sourceSubnet: '10.0.0.0/8' }] }] })];
  pushOf(base);
  assert.equal(await metricValue(gauge('pilot_vservice_dup_domain')), 1);
  assert.equal(await metricValue(gauge('pilot_virt_services')), 2);
  pushOf(base);
  const lines = () => readFileSync(logFile, 'utf8').split('\n').filter((l) => l.includes('VirtualService foo/b'));
  assert.deepEqual(lines().map((l) => l.split('\t').slice(1).join('\t')), ['warn\tmodel\tVirtualService foo/b: tcp[0].match[0].sourceSubnet is not effective yet'], 'once for two snapshots');
  pushOf([base[0]!, vs('foo', 'b', { hosts: ['other'], tcp: [{ match: [{ sourceSubnet: '10.0.0.0/8', sourceNamespace: 'x' }, { sourceSubnet: '10.1.0.0/16' }] }] })]);
  assert.equal(lines().length, 3, 'the changed resource is reported again, both fields');
  assert.match(lines()[2]!, /VirtualService foo\/b: tcp\[0\]\.match\[1\]\.sourceSubnet is not effective yet/);
  assert.equal(await metricValue(gauge('pilot_vservice_dup_domain')), 0);
});
