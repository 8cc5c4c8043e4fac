// What the injector tells the proxy about its workload, for the standard metrics' workload labels:
// MESH_META_WORKLOAD_NAME and MESH_META_OWNER guessed from the AdmissionReview's Pod (its controlling
// ownerReference, generateName and controller labels, as the Go mesh does), and the canonical-service
// labels added when the Pod lacks them, through a patch that applies cleanly and keeps its labels.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import fastJsonPatch from 'fast-json-patch';
import type { V1ObjectMeta, V1OwnerReference, V1Pod } from '@kubernetes/client-node';
import { setScopeLevel } from '../../src/common/log.js';
import { injectionReview } from '../../src/webhooks/inject.js';
import { DEFAULT_TEMPLATE } from '../../src/webhooks/inject-template.js';
import { canonicalService } from '../../src/common/canonical-service.js';

const { applyPatch, validate } = fastJsonPatch;
setScopeLevel('validationServer', 'error');

const NAME = 'service.mesh.io/canonical-name';
const REVISION = 'service.mesh.io/canonical-revision';

function owner(apiVersion: string, kind: string, name: string, controller = true): V1OwnerReference {
  return { apiVersion, kind, name, uid: `uid-${name}`, controller, blockOwnerDeletion: true };
}

function pod(metadata: V1ObjectMeta): V1Pod {
  return { apiVersion: 'v1', kind: 'Pod', metadata, spec: { containers: [{ name: 'app', image: 'app:1' }] } };
}

interface Injected {
  readonly pod: V1Pod;
  readonly paths: string[];
  readonly env: Map<string, string | undefined>;
  readonly labels: Record<string, string>;
}

/** Admits `p` in `namespace` (the Pod's own, as an API server sends it, may be absent) and applies the patch. */
function inject(p: V1Pod, namespace: string): Injected {
  const review = injectionReview(
    { apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', request: { uid: 'u', operation: 'CREATE', namespace, resource: { group: '', version: 'v1', resource: 'pods' }, object: p } },
    { template: { current: () => DEFAULT_TEMPLATE }, namespaceLabels: () => ({ 'mesh-injection': 'enabled' }), clusterId: 'c1', domain: 'cluster.local', legacyFsGroup: false },
  );
  assert.equal(review.response.allowed, true);
  const ops = JSON.parse(Buffer.from(review.response.patch!, 'base64').toString('utf8')) as Array<{ op: 'add'; path: string; value: unknown }>;
  assert.equal(validate(ops, p), undefined, 'the patch is valid for the Pod');
  const out = applyPatch(structuredClone(p), ops, true, false).newDocument;
  const proxy = out.spec!.containers.find((c) => c.name === 'mesh-proxy');
  assert.ok(proxy);
  return { pod: out, paths: ops.map((o) => o.path), env: new Map(proxy.env!.map((e) => [e.name, e.value])), labels: out.metadata!.labels! };
}

const workload = (i: Injected) => [i.env.get('MESH_META_WORKLOAD_NAME'), i.env.get('MESH_META_OWNER')];
const canonical = (i: Injected) => [i.labels[NAME], i.labels[REVISION]];

describe('injection: the workload of the Pod', () => {
  it('a Deployment\'s Pod: the ReplicaSet\'s name without the template hash, the Deployment as owner, app and version labels', () => {
    const i = inject(
      pod({
        generateName: 'reviews-v1-5b4f8c6d9-',
        labels: { app: 'reviews', version: 'v1', 'pod-template-hash': '5b4f8c6d9' },
        // Only the controlling reference counts.
        ownerReferences: [owner('v1', 'ConfigMap', 'unrelated', false), owner('apps/v1', 'ReplicaSet', 'reviews-v1-5b4f8c6d9')],
      }),
      'bookinfo',
    );
    assert.deepEqual(workload(i), ['reviews-v1', 'kubernetes://apis/apps/v1/namespaces/bookinfo/deployments/reviews-v1']);
    assert.deepEqual(canonical(i), ['reviews', 'v1']);
    // `/` in a label key is `~1` in a JSON Pointer.
    assert.ok(i.paths.includes('/metadata/labels/service.mesh.io~1canonical-name'));
    assert.ok(i.paths.includes('/metadata/labels/service.mesh.io~1canonical-revision'));
    assert.deepEqual([i.labels['app'], i.labels['version'], i.labels['pod-template-hash']], ['reviews', 'v1', '5b4f8c6d9'], 'its labels are kept');
  });

  it('a bare Pod: its own name, the Pod as owner, app.kubernetes.io labels', () => {
    const i = inject(pod({ name: 'debug', namespace: 'ops', labels: { 'app.kubernetes.io/name': 'toolbox', 'app.kubernetes.io/version': '2.1' } }), 'ops');
    assert.deepEqual(workload(i), ['debug', 'kubernetes://apis/v1/namespaces/ops/pods/debug']);
    assert.deepEqual(canonical(i), ['toolbox', '2.1']);
  });

  it('a StatefulSet\'s Pod: the StatefulSet', () => {
    const i = inject(
      pod({ name: 'db-0', generateName: 'db-', labels: { app: 'db', 'controller-revision-hash': 'db-7d9f6c', 'statefulset.kubernetes.io/pod-name': 'db-0' }, ownerReferences: [owner('apps/v1', 'StatefulSet', 'db')] }),
      'data',
    );
    assert.deepEqual(workload(i), ['db', 'kubernetes://apis/apps/v1/namespaces/data/statefulsets/db']);
    assert.deepEqual(canonical(i), ['db', 'latest']);
  });

  it('a Job\'s Pod: the Job, its name as canonical name; a CronJob\'s Job: the CronJob', () => {
    const job = inject(pod({ generateName: 'migrate-', labels: { 'job-name': 'migrate', 'batch.kubernetes.io/job-name': 'migrate' }, ownerReferences: [owner('batch/v1', 'Job', 'migrate')] }), 'jobs');
    assert.deepEqual(workload(job), ['migrate', 'kubernetes://apis/batch/v1/namespaces/jobs/jobs/migrate']);
    assert.deepEqual(canonical(job), ['migrate', 'latest']);
    const cron = inject(pod({ generateName: 'backup-28391040-', labels: { 'job-name': 'backup-28391040' }, ownerReferences: [owner('batch/v1', 'Job', 'backup-28391040')] }), 'jobs');
    assert.deepEqual(workload(cron), ['backup', 'kubernetes://apis/batch/v1/namespaces/jobs/cronjobs/backup']);
    assert.deepEqual(canonical(cron), ['backup', 'latest']);
  });

  it('keeps canonical labels the Pod has; fills only the missing one; the workload-name label overrides the name only', () => {
    const both = { [NAME]: 'ratings-svc', [REVISION]: 'blue', app: 'ratings', version: 'v2', 'pod-template-hash': '77f9' };
    const i = inject(pod({ generateName: 'ratings-v2-77f9-', labels: both, ownerReferences: [owner('apps/v1', 'ReplicaSet', 'ratings-v2-77f9')] }), 'bookinfo');
    assert.deepEqual(canonical(i), ['ratings-svc', 'blue']);
    assert.ok(!i.paths.some((p) => p.includes('canonical')), 'no operation touches them');
    const onlyName = inject(pod({ name: 'n', labels: { [NAME]: 'named', version: 'v3' } }), 'default');
    assert.deepEqual(canonical(onlyName), ['named', 'v3']);
    assert.ok(!onlyName.paths.includes('/metadata/labels/service.mesh.io~1canonical-name'));
    const renamed = inject(pod({ name: 'w', labels: { 'service.mesh.io/workload-name': 'custom' } }), 'default');
    assert.deepEqual(workload(renamed), ['custom', 'kubernetes://apis/v1/namespaces/default/pods/w']);
    assert.deepEqual(canonical(renamed), ['w', 'latest'], 'the canonical name falls back to the guessed workload, not the override');
  });

  it('a Pod without labels: the labels map is created with the canonical labels', () => {
    const i = inject(pod({ name: 'lonely' }), 'default');
    assert.deepEqual(canonical(i), ['lonely', 'latest']);
    assert.deepEqual(Object.keys(i.labels).sort(), ['mesh.io/rev', NAME, REVISION, 'security.mesh.io/tlsMode'].sort());
    assert.deepEqual(workload(i), ['lonely', 'kubernetes://apis/v1/namespaces/default/pods/lonely']);
  });

  it('no controller and no name: no workload env, as in the Go mesh; malformed ownerReferences are ignored', () => {
    const unnamed = inject(pod({ generateName: 'x-', labels: { app: 'x' } }), 'default');
    assert.deepEqual(workload(unnamed), [undefined, undefined]);
    assert.deepEqual(canonical(unnamed), ['x', 'latest']);
    const junk = { name: 'odd', generateName: 'odd-', ownerReferences: [null, 'x', { kind: 'ReplicaSet', controller: 'yes' }] } as unknown as V1ObjectMeta;
    assert.deepEqual(workload(inject(pod(junk), 'default')), ['odd', 'kubernetes://apis/v1/namespaces/default/pods/odd']);
  });

  it('canonical names are cut to a label value and stripped of separators; empty labels count as unset', () => {
    const long = `${'a'.repeat(62)}-tail`;
    assert.deepEqual(canonicalService({}, long), { name: 'a'.repeat(62), revision: 'latest' });
    assert.deepEqual(canonicalService({ app: '', 'app.kubernetes.io/name': '', version: '' }, '_w.'), { name: 'w', revision: 'latest' });
  });
});
