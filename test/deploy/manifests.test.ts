// What an operator applies: the Helm chart (deploy/charts/mesh-control-plane) and the plain
// manifests rendered from it (deploy/manifests with the default values, deploy/revisions for a
// canary revision with a tag). Helm cannot run here, so the chart is rendered by ./chart-render.ts
// (the template subset the chart uses; anything else fails) and compared structurally with the
// manifests (REFRESH_GOLDEN=1 rewrites them). The manifests pass `kubectl apply --dry-run=client`
// against the stand-in API server and a schema check of the fields each kind requires; RBAC grants
// exactly what the informers and the caBundle upkeep use; two revisions' objects do not clash.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, execFileSync } from 'node:child_process';
import { readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Ajv } from 'ajv';
import { parseAllDocuments, parse as parseYaml } from 'yaml';
import { pluralOf } from '../../src/api/crds.js';
import { GROUP_OF_KIND, KINDS } from '../../src/api/types.js';
import { TYPES } from '../../src/registry/orchestrator/controller.js';
import { INGRESS_TYPES } from '../../src/registry/orchestrator/ingress.js';
import { ELECTIONS } from '../../src/cli/discovery-elections.js';
import { MUTATING_WEBHOOK_CONFIGURATIONS } from '../../src/webhooks/revision-tags.js';
import { parseTemplate } from '../../src/webhooks/inject-template.js';
import { REPO_ROOT } from '../helpers/proc.js';
import { standIn } from '../registry/orch-fixtures.js';
import { mergeValues, renderChart } from './chart-render.js';

const CHART = join(REPO_ROOT, 'deploy', 'charts', 'mesh-control-plane');
const MANIFESTS = join(REPO_ROOT, 'deploy', 'manifests');
const REVISIONS = join(REPO_ROOT, 'deploy', 'revisions');
const RELEASE_NAMESPACE = 'mesh-system';
const REFRESH = process.env['REFRESH_GOLDEN'] === '1';

type Doc = Record<string, unknown> & { kind: string; apiVersion: string; metadata: { name: string; namespace?: string; labels?: Record<string, string> } };

const readYaml = (file: string) => parseYaml(readFileSync(file, 'utf8')) as Record<string, unknown>;
const values = readYaml(join(CHART, 'values.yaml'));
const canaryValues = mergeValues(values, readYaml(join(REVISIONS, 'canary-values.yaml')));

function documents(text: string): Doc[] {
  return parseAllDocuments(text)
    .map((d) => d.toJS() as Doc | null)
    .filter((d): d is Doc => d !== null);
}

/** The order Helm installs kinds in (what is not listed goes last): the manifests read the same. */
const INSTALL_ORDER = ['PodDisruptionBudget', 'ServiceAccount', 'ConfigMap', 'ClusterRole', 'ClusterRoleBinding', 'Role', 'RoleBinding', 'Service', 'Deployment'];
const rank = (kind: string) => (INSTALL_ORDER.includes(kind) ? INSTALL_ORDER.indexOf(kind) : INSTALL_ORDER.length);

/** The chart's objects for these values, and the manifest text they render to (written with REFRESH_GOLDEN=1). */
function render(vals: Record<string, unknown>, namespace = RELEASE_NAMESPACE, manifest?: { file: string; what: string }): Doc[] {
  const files = renderChart(CHART, { namespace, values: vals });
  if (manifest && REFRESH) {
    const chunks = files.flatMap((f) => f.text.split(/^---$/m).flatMap((text) => documents(text).map((d) => ({ file: f.file, kind: d.kind, text: text.trim() }))));
    const body = chunks.sort((a, b) => rank(a.kind) - rank(b.kind)).map((c) => `---\n# Source: mesh-control-plane/templates/${c.file}\n${c.text}\n`);
    writeFileSync(manifest.file, `# Rendered from deploy/charts/mesh-control-plane with ${manifest.what} (release namespace ${namespace}).\n# test/deploy/manifests.test.ts keeps the two in step (REFRESH_GOLDEN=1 rewrites this file).\n${body.join('')}`);
  }
  return files.flatMap((f) => documents(f.text));
}

const chartDocs = render(values, RELEASE_NAMESPACE, { file: join(MANIFESTS, 'mesh-control-plane.yaml'), what: 'its default values' });
const canaryDocs = render(canaryValues, RELEASE_NAMESPACE, { file: join(REVISIONS, 'mesh-control-plane-canary.yaml'), what: 'deploy/revisions/canary-values.yaml' });
const manifestDocs = readdirSync(MANIFESTS)
  .sort()
  .filter((f) => statSync(join(MANIFESTS, f)).isFile())
  .flatMap((f) => documents(readFileSync(join(MANIFESTS, f), 'utf8')));
const canaryManifestDocs = documents(readFileSync(join(REVISIONS, 'mesh-control-plane-canary.yaml'), 'utf8'));
const crds = documents(readFileSync(join(REPO_ROOT, 'deploy', 'crds.yaml'), 'utf8'));
const id = (d: Doc) => `${d.kind}/${d.metadata.namespace ?? ''}/${d.metadata.name}`;
const find = (kind: string, docs = manifestDocs) => docs.filter((d) => d.kind === kind);

function assertSameObjects(actual: Doc[], expected: Doc[]): void {
  const byId = new Map(actual.map((d) => [id(d), d]));
  assert.deepEqual([...byId.keys()].sort(), expected.map(id).sort(), 'the same objects');
  for (const doc of expected) assert.deepEqual(byId.get(id(doc)), doc, id(doc));
}

test('the manifests are the chart rendered with its default values, plus the CRDs and the namespace', () => {
  const namespace = { apiVersion: 'v1', kind: 'Namespace', metadata: { name: RELEASE_NAMESPACE, labels: { 'app.kubernetes.io/part-of': 'mesh' } } } as Doc;
  assertSameObjects(manifestDocs, [...chartDocs, ...crds, namespace]);
  assert.deepEqual(readdirSync(join(CHART, 'crds')).map((f) => readFileSync(join(CHART, 'crds', f), 'utf8')), [readFileSync(join(REPO_ROOT, 'deploy', 'crds.yaml'), 'utf8')]);
});

test('deploy/revisions holds the chart rendered for the canary revision with a tag', () => {
  assertSameObjects(canaryManifestDocs, canaryDocs);
});

/** What a rendering's ClusterRole (or Role) grants, one `group/resource:verbs[@names]` per line. */
function grants(docs: Doc[], kind = 'ClusterRole'): string[] {
  const [role] = find(kind, docs) as Array<Doc & { rules: Array<{ apiGroups: string[]; resources: string[]; verbs: string[]; resourceNames?: string[] }> }>;
  return role!.rules.flatMap((r) => r.apiGroups.flatMap((g) => r.resources.map((res) => `${g}/${res}:${[...r.verbs].sort().join(',')}${r.resourceNames ? `@${r.resourceNames.join(',')}` : ''}`))).sort();
}

test('RBAC grants list and watch on exactly what the informers read, get/patch on the webhook configurations of the revision and its tags, get/update on the status of the mesh kinds and of Ingresses', () => {
  const read = [...Object.values(TYPES), ...Object.values(INGRESS_TYPES), MUTATING_WEBHOOK_CONFIGURATIONS].map((t) => `${t.group}/${t.plural}`).concat(KINDS.map((k) => `${GROUP_OF_KIND[k]}/${pluralOf(k)}`)).map((r) => `${r}:list,watch`);
  const status = KINDS.map((k) => `${GROUP_OF_KIND[k]}/${pluralOf(k)}/status:get,update`).concat(`${INGRESS_TYPES.Ingress.group}/${INGRESS_TYPES.Ingress.plural}/status:get,update`);
  const webhooks = (mutating: string, validating: string) => [
    `admissionregistration.k8s.io/mutatingwebhookconfigurations:get,patch@${mutating}`,
    `admissionregistration.k8s.io/validatingwebhookconfigurations:get,patch@${validating}`,
  ];
  assert.deepEqual(grants(manifestDocs), [...read, ...webhooks('mesh-sidecar-injector', 'meshd-mesh-system'), ...status].sort());
  assert.deepEqual(grants(canaryDocs), [...read, ...webhooks('mesh-sidecar-injector-canary,mesh-revision-tag-prod', 'meshd-canary-mesh-system'), ...status].sort());
});

test('RBAC grants, in the release namespace only, create and then get/update by name on the leader election locks', () => {
  const locks = (revision: string) => [
    'coordination.k8s.io/leases:create',
    `coordination.k8s.io/leases:get,update@${ELECTIONS.status.id}-${revision}`,
    '/configmaps:create',
    `/configmaps:get,update@${ELECTIONS.ingress.id}`,
  ];
  assert.equal(ELECTIONS.status.lock, 'Lease');
  assert.equal(ELECTIONS.ingress.lock, 'ConfigMap');
  assert.deepEqual(grants(manifestDocs, 'Role'), locks('default').sort());
  assert.deepEqual(grants(canaryDocs, 'Role'), locks('canary').sort());
  for (const docs of [manifestDocs, canaryDocs]) {
    const [role] = find('Role', docs);
    const [binding] = find('RoleBinding', docs) as Array<Doc & { roleRef: { name: string } }>;
    assert.equal(role!.metadata.namespace, RELEASE_NAMESPACE);
    assert.equal(binding!.roleRef.name, role!.metadata.name);
  }
});

/** The env a container is given, by name. */
const envOf = (container: { env: Array<{ name: string; value?: string }> }) => Object.fromEntries(container.env.map((e) => [e.name, e.value]));

for (const [revision, docs, meshd] of [['default', manifestDocs, 'meshd'], ['canary', canaryDocs, 'meshd-canary']] as const) {
  test(`revision ${revision}: the Deployment, Service, webhooks and injection template are ${meshd}'s and refer to each other`, () => {
    const one = (kind: string) => {
      const all = find(kind, docs);
      assert.equal(all.length, 1, `one ${kind}`);
      return all[0] as Doc & { spec: any; webhooks: any[]; data: Record<string, string>; subjects: any[] };
    };
    const [deployment, service, pdb, account] = ['Deployment', 'Service', 'PodDisruptionBudget', 'ServiceAccount'].map(one);
    assert.deepEqual([deployment, service, pdb, account].map((d) => d!.metadata.name), [meshd, meshd, meshd, meshd]);
    const pod = deployment!.spec.template.spec;
    const discovery = pod.containers[0];
    assert.equal(deployment!.spec.replicas, 2);
    assert.ok(pod.affinity.podAntiAffinity, 'replicas spread over nodes');
    assert.deepEqual([discovery.readinessProbe.httpGet.path, discovery.readinessProbe.httpGet.port], ['/ready', 8080]);
    assert.ok(discovery.args.includes('--httpAddr=:8080') && discovery.args.includes('--registries=Orchestrator'));
    assert.ok(discovery.resources.requests && discovery.resources.limits);
    assert.equal(pod.serviceAccountName, account!.metadata.name);
    const podLabels = deployment!.spec.template.metadata.labels as Record<string, string>;
    for (const selector of [deployment!.spec.selector.matchLabels, service!.spec.selector, pdb!.spec.selector.matchLabels, pod.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].podAffinityTerm.labelSelector.matchLabels]) {
      assert.deepEqual(selector, { app: 'meshd', 'mesh.io/rev': revision }, "selects this revision's Pods only");
      assert.ok(Object.entries(selector as Record<string, string>).every(([k, v]) => podLabels[k] === v));
    }
    assert.deepEqual(service!.spec.ports.map((p: { port: number; targetPort: number }) => `${p.port}->${p.targetPort}`), ['15010->15010', '15012->15012', '443->15017', '15014->15014']);
    const mutating = find('MutatingWebhookConfiguration', docs).filter((d) => !d.metadata.labels?.['mesh.io/tag']) as Array<Doc & { webhooks: any[] }>;
    const validating = one('ValidatingWebhookConfiguration');
    const env = envOf(discovery);
    assert.deepEqual([env['REVISION'], env['INJECTION_WEBHOOK_CONFIG_NAME'], env['VALIDATION_WEBHOOK_CONFIG_NAME']], [revision, mutating[0]!.metadata.name, validating!.metadata.name], 'meshd runs as the revision and keeps its own configurations');
    assert.equal(mutating.length, 1);
    const injection = mutating[0]!.webhooks.map((w) => w.name);
    assert.deepEqual(injection, revision === 'default' ? ['namespace.sidecar-injector.mesh.io', 'object.sidecar-injector.mesh.io', 'rev.namespace.sidecar-injector.mesh.io', 'rev.object.sidecar-injector.mesh.io'] : ['rev.namespace.sidecar-injector.mesh.io', 'rev.object.sidecar-injector.mesh.io'], 'only the default revision takes mesh-injection=enabled');
    for (const w of [...mutating.flatMap((m) => m.webhooks), ...validating!.webhooks]) assert.deepEqual([w.clientConfig.service.name, w.clientConfig.service.namespace, w.clientConfig.service.port], [meshd, RELEASE_NAMESPACE, 443], w.name);
    assert.deepEqual([mutating[0]!.metadata.labels?.['mesh.io/rev'], validating!.metadata.labels?.['mesh.io/rev']], [revision, revision], 'both carry the revision label');
    assert.equal(validating!.webhooks.at(-1).clientConfig.service.path, '/validate');
    assert.deepEqual(validating!.webhooks.at(-1).objectSelector.matchExpressions, [{ key: 'mesh.io/rev', operator: 'In', values: [revision] }], "validates the objects labelled for it");
    const configMap = one('ConfigMap');
    assert.equal(pod.volumes[0].configMap.name, configMap!.metadata.name);
    assert.equal(discovery.volumeMounts[0].mountPath, '/var/lib/mesh/inject', 'where meshd reads the injection template');
    const template = parseTemplate(configMap!.data['template.yaml']!, `ConfigMap ${configMap!.metadata.name}`);
    assert.equal(template.proxyConfig.discoveryAddress, `${meshd}.mesh-system.svc:15010`, "injected agents reach this revision's plaintext xDS port");
  });
}

test('a revision tag is a mutating configuration labelled with the tag and the revision, selecting mesh.io/rev=<tag>; the default tag also takes mesh-injection=enabled', () => {
  const tags = find('MutatingWebhookConfiguration', canaryDocs).filter((d) => d.metadata.labels?.['mesh.io/tag']) as Array<Doc & { webhooks: any[] }>;
  assert.deepEqual(tags.map((t) => [t.metadata.name, t.metadata.labels?.['mesh.io/tag'], t.metadata.labels?.['mesh.io/rev']]), [['mesh-revision-tag-prod', 'prod', 'canary']]);
  assert.deepEqual(tags[0]!.webhooks.map((w) => w.name), ['rev.namespace.sidecar-injector.mesh.io', 'rev.object.sidecar-injector.mesh.io']);
  assert.deepEqual(tags[0]!.webhooks[0].namespaceSelector.matchExpressions[0], { key: 'mesh.io/rev', operator: 'In', values: ['prod'] });
  assert.deepEqual(tags[0]!.webhooks[1].objectSelector.matchExpressions[0], { key: 'mesh.io/rev', operator: 'In', values: ['prod'] });
  const withDefault = render(mergeValues(canaryValues, { revisionTags: ['default'] }), 'mesh-b');
  const [defaultTag] = find('MutatingWebhookConfiguration', withDefault).filter((d) => d.metadata.labels?.['mesh.io/tag']) as Array<Doc & { webhooks: any[] }>;
  assert.equal(defaultTag!.metadata.name, 'mesh-revision-tag-default-mesh-b', 'outside mesh-system the name carries the namespace');
  assert.deepEqual(defaultTag!.webhooks.map((w) => w.name), ['namespace.sidecar-injector.mesh.io', 'object.sidecar-injector.mesh.io', 'rev.namespace.sidecar-injector.mesh.io', 'rev.object.sidecar-injector.mesh.io']);
  assert.deepEqual(defaultTag!.webhooks[0].namespaceSelector.matchLabels, { 'mesh-injection': 'enabled' });
});

test('two revisions in one namespace, or two installs in two namespaces, share no object (the CRDs and the namespace are not templated)', () => {
  const clash = (a: Doc[], b: Doc[]) => a.map(id).filter((x) => b.map(id).includes(x));
  assert.deepEqual(clash(chartDocs, canaryDocs), []);
  assert.ok(!chartDocs.concat(canaryDocs).some((d) => d.kind === 'CustomResourceDefinition' || d.kind === 'Namespace'), "the CRDs come from the chart's crds/ (installed once, never templated), the namespace from Helm (--create-namespace)");
  const clusterScoped = (docs: Doc[]) => docs.filter((d) => d.metadata.namespace === undefined);
  assert.deepEqual(clash(clusterScoped(render(values, 'mesh-a')), clusterScoped(render(values, 'mesh-b'))), []);
});

test('every manifest has the fields its kind requires', () => {
  const named = { type: 'object', required: ['name'], properties: { name: { type: 'string', minLength: 1 } } };
  const webhook = {
    type: 'object',
    required: ['name', 'admissionReviewVersions', 'sideEffects', 'clientConfig', 'rules'],
    properties: { clientConfig: { type: 'object', required: ['service'], properties: { service: { type: 'object', required: ['name', 'namespace', 'path'] } } } },
  };
  const container = { type: 'object', required: ['name', 'image'] };
  const spec: Record<string, object> = {
    Deployment: { required: ['spec'], properties: { spec: { type: 'object', required: ['selector', 'template'], properties: { template: { type: 'object', required: ['spec'], properties: { spec: { type: 'object', required: ['containers'], properties: { containers: { type: 'array', minItems: 1, items: container } } } } } } } } },
    Service: { required: ['spec'], properties: { spec: { type: 'object', required: ['ports', 'selector'], properties: { ports: { type: 'array', items: { type: 'object', required: ['name', 'port'] } } } } } },
    ClusterRole: { required: ['rules'], properties: { rules: { type: 'array', items: { type: 'object', required: ['apiGroups', 'resources', 'verbs'] } } } },
    ClusterRoleBinding: { required: ['roleRef', 'subjects'] },
    Role: { required: ['rules'], properties: { rules: { type: 'array', items: { type: 'object', required: ['apiGroups', 'resources', 'verbs'] } } } },
    RoleBinding: { required: ['roleRef', 'subjects'] },
    MutatingWebhookConfiguration: { required: ['webhooks'], properties: { webhooks: { type: 'array', items: webhook } } },
    ValidatingWebhookConfiguration: { required: ['webhooks'], properties: { webhooks: { type: 'array', items: webhook } } },
    PodDisruptionBudget: { required: ['spec'], properties: { spec: { type: 'object', required: ['selector'] } } },
    ConfigMap: { required: ['data'] },
    CustomResourceDefinition: { required: ['spec'], properties: { spec: { type: 'object', required: ['group', 'names', 'scope', 'versions'] } } },
    Namespace: {},
    ServiceAccount: {},
  };
  const apiVersions: Record<string, string> = {
    Deployment: 'apps/v1', Service: 'v1', ClusterRole: 'rbac.authorization.k8s.io/v1', ClusterRoleBinding: 'rbac.authorization.k8s.io/v1',
    Role: 'rbac.authorization.k8s.io/v1', RoleBinding: 'rbac.authorization.k8s.io/v1',
    MutatingWebhookConfiguration: 'admissionregistration.k8s.io/v1', ValidatingWebhookConfiguration: 'admissionregistration.k8s.io/v1',
    PodDisruptionBudget: 'policy/v1', ConfigMap: 'v1', CustomResourceDefinition: 'apiextensions.k8s.io/v1', Namespace: 'v1', ServiceAccount: 'v1',
  };
  const ajv = new Ajv({ allErrors: true, strict: false });
  for (const doc of [...manifestDocs, ...canaryManifestDocs]) {
    assert.ok(doc.kind in spec, `${id(doc)}: a kind this test knows`);
    const validate = ajv.compile({ type: 'object', required: ['apiVersion', 'kind', 'metadata'], properties: { apiVersion: { const: apiVersions[doc.kind] }, metadata: named }, ...spec[doc.kind] });
    assert.ok(validate(doc), `${id(doc)}: ${ajv.errorsText(validate.errors)}`);
  }
});

/** kubectl ships with the CI machine's image (Debian has no package of it). */
function kubectlMissing(): string | false {
  try {
    execFileSync('kubectl', ['version', '--client'], { stdio: 'ignore' });
    return false;
  } catch {
    return 'kubectl is not installed here';
  }
}

test('kubectl apply --dry-run=client accepts deploy/manifests and then the canary revision beside it', { skip: kubectlMissing() }, async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'deploy-kubectl-'));
  const { api, kubeconfig } = await standIn(dir);
  t.after(async () => {
    await api.close();
    await rm(dir, { recursive: true, force: true });
  });
  for (const [path, docs, deployment] of [[MANIFESTS, manifestDocs, 'meshd'], [join(REVISIONS, 'mesh-control-plane-canary.yaml'), canaryManifestDocs, 'meshd-canary']] as const) {
    const { stdout } = await promisify(execFile)('kubectl', ['--kubeconfig', kubeconfig, 'apply', '--dry-run=client', '--validate=false', '-f', path]);
    const applied = stdout.trim().split('\n');
    assert.equal(applied.length, docs.length);
    assert.ok(applied.every((l) => l.endsWith('created (dry run)')), stdout);
    assert.ok(applied.includes(`deployment.apps/${deployment} created (dry run)`));
  }
});
