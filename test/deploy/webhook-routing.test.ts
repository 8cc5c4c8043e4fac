// The chart's webhook selectors route a Pod to the revisions whose injector then injects it: for
// namespaces and Pods labelled every way that matters, the label selectors of the rendered
// configurations (evaluated as the API server does) are compared with injectionVerdict of each
// revision, with the default revision's and a canary's releases installed side by side, a tag
// `prod` pointing at the canary, and then the tag `default` pointing at it too.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { V1Pod } from '@kubernetes/client-node';
import { parse as parseYaml } from 'yaml';
import { injectionVerdict } from '../../src/webhooks/inject-policy.js';
import { tagConfiguration, tagMap, type TagConfiguration } from '../../src/webhooks/revision-tags.js';
import { REPO_ROOT } from '../helpers/proc.js';
import { mergeValues, renderObjects } from './chart-render.js';

const CHART = join(REPO_ROOT, 'deploy', 'charts', 'mesh-control-plane');
const values = parseYaml(readFileSync(join(CHART, 'values.yaml'), 'utf8')) as Record<string, unknown>;

interface Requirement {
  key: string;
  operator: 'In' | 'NotIn' | 'Exists' | 'DoesNotExist';
  values?: string[];
}
interface Selector {
  matchLabels?: Record<string, string>;
  matchExpressions?: Requirement[];
}
interface Webhook {
  name: string;
  namespaceSelector?: Selector;
  objectSelector?: Selector;
}
type Configuration = { kind: string; metadata: { name: string; labels?: Record<string, string> }; webhooks: Webhook[] };

/** A label selector as the orchestrator evaluates it (an absent selector matches everything). */
function matches(selector: Selector | undefined, labels: Record<string, string>): boolean {
  const byLabel = Object.entries(selector?.matchLabels ?? {}).every(([k, v]) => labels[k] === v);
  return byLabel && (selector?.matchExpressions ?? []).every((r) => {
    const has = r.key in labels;
    if (r.operator === 'Exists') return has;
    if (r.operator === 'DoesNotExist') return !has;
    if (r.operator === 'In') return has && r.values!.includes(labels[r.key]!);
    return !has || !r.values!.includes(labels[r.key]!);
  });
}

function configurations(revisionTags: string[]): Configuration[] {
  const releases = [values, mergeValues(values, { revision: 'canary', revisionTags })];
  return releases.flatMap((v) => renderObjects(CHART, { namespace: 'mesh-system', values: v })).filter((o) => o['kind'] === 'MutatingWebhookConfiguration') as unknown as Configuration[];
}

const cases: Array<[string, Record<string, string>, Record<string, string>]> = [
  ['unlabelled namespace and Pod', {}, {}],
  ['namespace mesh-injection=enabled', { 'mesh-injection': 'enabled' }, {}],
  ['namespace mesh-injection=enabled, Pod inject=false', { 'mesh-injection': 'enabled' }, { 'sidecar.mesh.io/inject': 'false' }],
  ['namespace mesh-injection=disabled', { 'mesh-injection': 'disabled' }, {}],
  ['Pod inject=true', {}, { 'sidecar.mesh.io/inject': 'true' }],
  ['namespace mesh.io/rev=canary', { 'mesh.io/rev': 'canary' }, {}],
  ['namespace mesh.io/rev=default', { 'mesh.io/rev': 'default' }, {}],
  ['namespace mesh.io/rev=prod (the tag)', { 'mesh.io/rev': 'prod' }, {}],
  ['namespace mesh.io/rev=prod, Pod inject=false', { 'mesh.io/rev': 'prod' }, { 'sidecar.mesh.io/inject': 'false' }],
  ['namespace mesh.io/rev=prod, Pod mesh.io/rev=default', { 'mesh.io/rev': 'prod' }, { 'mesh.io/rev': 'default' }],
  ['Pod mesh.io/rev=prod', {}, { 'mesh.io/rev': 'prod' }],
  ['Pod mesh.io/rev=canary', {}, { 'mesh.io/rev': 'canary' }],
  ['Pod mesh.io/rev=unknown', {}, { 'mesh.io/rev': 'unknown' }],
  ['namespace mesh.io/rev=unknown', { 'mesh.io/rev': 'unknown' }, {}],
];

/** Which revisions the configurations call for a Pod, and which of them inject it. */
function outcome(configs: Configuration[], nsLabels: Record<string, string>, podLabels: Record<string, string>) {
  const ns = { ...nsLabels, 'kubernetes.io/metadata.name': 'shop' };
  const routed = new Set(configs.filter((c) => c.webhooks.some((w) => matches(w.namespaceSelector, ns) && matches(w.objectSelector, podLabels))).map((c) => c.metadata.labels!['mesh.io/rev']!));
  const tags = tagMap(configs.map(tagConfiguration).filter((t): t is TagConfiguration => t !== undefined));
  const pod: V1Pod = { metadata: { name: 'app', namespace: 'shop', labels: podLabels }, spec: { containers: [{ name: 'app' }] } };
  const injected = ['default', 'canary'].filter((r) => injectionVerdict(pod, 'shop', nsLabels, r, tags).inject);
  return { routed: [...routed].sort(), injected };
}

describe('webhook routing of two revisions and their tags', () => {
  it('with the tag prod on the canary: the webhooks call exactly the revision that injects', () => {
    const configs = configurations(['prod']);
    const expected: Record<string, string[]> = {
      'namespace mesh-injection=enabled': ['default'],
      'Pod inject=true': ['default'],
      'namespace mesh.io/rev=canary': ['canary'],
      'namespace mesh.io/rev=default': ['default'],
      'namespace mesh.io/rev=prod (the tag)': ['canary'],
      'namespace mesh.io/rev=prod, Pod mesh.io/rev=default': ['canary'],
      'Pod mesh.io/rev=prod': ['canary'],
      'Pod mesh.io/rev=canary': ['canary'],
    };
    for (const [what, ns, podLabels] of cases) {
      const { routed, injected } = outcome(configs, ns, podLabels);
      assert.deepEqual(injected, expected[what] ?? [], what);
      assert.deepEqual(routed, injected, `${what}: called ${routed.join(',') || 'by none'}`);
    }
  });

  it('with the default tag on the canary too: every injected Pod is the canary\'s, and the default revision, still called for mesh-injection namespaces, declines', () => {
    const configs = configurations(['prod', 'default']);
    for (const [what, ns, podLabels] of cases) {
      const { routed, injected } = outcome(configs, ns, podLabels);
      assert.ok(injected.every((r) => routed.includes(r)), `${what}: injected by ${injected} but called ${routed}`);
      assert.ok(injected.length <= 1, `${what}: injected twice`);
      assert.deepEqual(injected.length === 1, routed.length > 0, `${what}: called ${routed} but nobody injects`);
    }
    assert.deepEqual(outcome(configs, { 'mesh-injection': 'enabled' }, {}), { routed: ['canary', 'default'], injected: ['canary'] });
    assert.deepEqual(outcome(configs, { 'mesh.io/rev': 'default' }, {}), { routed: ['canary', 'default'], injected: ['canary'] }, 'mesh.io/rev=default names the tag');
  });
});
