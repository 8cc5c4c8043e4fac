// What an operator applies: the Helm chart (deploy/charts/mesh-control-plane) and the plain
// manifests rendered from it (deploy/manifests). Helm cannot run here, so the chart's templates are
// evaluated for the subset of Go-template syntax they use (values, the release namespace, toYaml |
// nindent) and compared structurally with the manifests; any other construct fails the test. The
// manifests pass `kubectl apply --dry-run=client` against the stand-in API server and a schema check
// of the fields each kind requires; RBAC grants exactly what the informers and the caBundle upkeep use.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Ajv } from 'ajv';
import { parseAllDocuments, parse as parseYaml, stringify } from 'yaml';
import { pluralOf } from '../../src/api/crds.js';
import { GROUP_OF_KIND, KINDS } from '../../src/api/types.js';
import { TYPES } from '../../src/registry/orchestrator/controller.js';
import { parseTemplate } from '../../src/webhooks/inject-template.js';
import { REPO_ROOT } from '../helpers/proc.js';
import { standIn } from '../registry/orch-fixtures.js';

const CHART = join(REPO_ROOT, 'deploy', 'charts', 'mesh-control-plane');
const MANIFESTS = join(REPO_ROOT, 'deploy', 'manifests');
const RELEASE_NAMESPACE = 'mesh-system';

type Doc = Record<string, unknown> & { kind: string; apiVersion: string; metadata: { name: string; namespace?: string } };

const values = parseYaml(readFileSync(join(CHART, 'values.yaml'), 'utf8')) as Record<string, unknown>;

/** Evaluates the template subset the chart uses; anything else is an error naming the file. */
function evaluate(file: string, text: string): string {
  const blocks = text.replace(/\n[ \t]*\{\{- toYaml \.Values\.(\w+) \| nindent (\d+) \}\}/g, (_m, name: string, indent: string) => {
    assert.ok(name in values, `${file}: .Values.${name} is not in values.yaml`);
    const pad = ' '.repeat(Number(indent));
    return `\n${stringify(values[name]).trimEnd().split('\n').map((l) => pad + l).join('\n')}`;
  });
  const scalars = blocks.replace(/\{\{ \.Release\.Namespace \}\}/g, RELEASE_NAMESPACE).replace(/\{\{ \.Values\.(\w+) \}\}/g, (_m, name: string) => {
    assert.ok(name in values, `${file}: .Values.${name} is not in values.yaml`);
    return String(values[name]);
  });
  const unknown = /\{\{.*?\}\}/.exec(scalars);
  assert.equal(unknown, null, `${file}: ${unknown?.[0]} is outside the template subset this test evaluates; extend the test with it`);
  return scalars;
}

function documents(text: string): Doc[] {
  return parseAllDocuments(text)
    .map((d) => d.toJS() as Doc | null)
    .filter((d): d is Doc => d !== null);
}

const chartDocs = readdirSync(join(CHART, 'templates'))
  .sort()
  .flatMap((f) => documents(evaluate(f, readFileSync(join(CHART, 'templates', f), 'utf8'))));
const manifestDocs = readdirSync(MANIFESTS)
  .sort()
  .flatMap((f) => documents(readFileSync(join(MANIFESTS, f), 'utf8')));
const crds = documents(readFileSync(join(REPO_ROOT, 'deploy', 'crds.yaml'), 'utf8'));
const id = (d: Doc) => `${d.kind}/${d.metadata.namespace ?? ''}/${d.metadata.name}`;
const find = (kind: string) => manifestDocs.filter((d) => d.kind === kind);

test('the manifests are the chart rendered with its default values, plus the CRDs', () => {
  const byId = new Map(manifestDocs.map((d) => [id(d), d]));
  assert.deepEqual([...byId.keys()].sort(), [...chartDocs, ...crds].map(id).sort(), 'the same objects');
  for (const doc of [...chartDocs, ...crds]) assert.deepEqual(byId.get(id(doc)), doc, id(doc));
  assert.deepEqual(readdirSync(join(CHART, 'crds')).map((f) => readFileSync(join(CHART, 'crds', f), 'utf8')), [readFileSync(join(REPO_ROOT, 'deploy', 'crds.yaml'), 'utf8')]);
});

test('RBAC grants list and watch on exactly what the informers read, get/patch on the two webhook configurations, get/update on the status of the mesh kinds', () => {
  const [role] = find('ClusterRole') as Array<Doc & { rules: Array<{ apiGroups: string[]; resources: string[]; verbs: string[]; resourceNames?: string[] }> }>;
  const granted = role!.rules.flatMap((r) => r.apiGroups.flatMap((g) => r.resources.map((res) => `${g}/${res}:${[...r.verbs].sort().join(',')}${r.resourceNames ? `@${r.resourceNames.join(',')}` : ''}`)));
  const read = [...Object.values(TYPES).map((t) => `${t.group}/${t.plural}`), ...KINDS.map((k) => `${GROUP_OF_KIND[k]}/${pluralOf(k)}`)].map((r) => `${r}:list,watch`);
  const webhooks = [
    `admissionregistration.k8s.io/mutatingwebhookconfigurations:get,patch@${values['injectionWebhookConfigName']}`,
    `admissionregistration.k8s.io/validatingwebhookconfigurations:get,patch@${values['validationWebhookConfigName']}`,
  ];
  const status = KINDS.map((k) => `${GROUP_OF_KIND[k]}/${pluralOf(k)}/status:get,update`);
  assert.deepEqual(granted.sort(), [...read, ...webhooks, ...status].sort());
});

test('the Deployment, Service, webhooks and injection template are what meshd expects', () => {
  const [deployment] = find('Deployment') as Array<Doc & { spec: any }>;
  const pod = deployment!.spec.template.spec;
  const discovery = pod.containers[0];
  assert.equal(deployment!.spec.replicas, 2);
  assert.ok(pod.affinity.podAntiAffinity, 'replicas spread over nodes');
  assert.deepEqual([discovery.readinessProbe.httpGet.path, discovery.readinessProbe.httpGet.port], ['/ready', 8080]);
  assert.ok(discovery.args.includes('--httpAddr=:8080') && discovery.args.includes('--registries=Orchestrator'));
  assert.ok(discovery.resources.requests && discovery.resources.limits);
  assert.equal(discovery.volumeMounts[0].mountPath, '/var/lib/mesh/inject', 'where meshd reads the injection template');
  const [service] = find('Service') as Array<Doc & { spec: any }>;
  assert.deepEqual(service!.spec.ports.map((p: { port: number; targetPort: number }) => `${p.port}->${p.targetPort}`), ['15010->15010', '15012->15012', '443->15017', '15014->15014']);
  const [mutating] = find('MutatingWebhookConfiguration') as Array<Doc & { webhooks: any[] }>;
  assert.deepEqual(mutating!.webhooks.map((w) => [w.clientConfig.service.path, w.clientConfig.service.port]), [['/inject', 443], ['/inject', 443], ['/inject', 443], ['/inject', 443]]);
  const [validating] = find('ValidatingWebhookConfiguration') as Array<Doc & { webhooks: any[] }>;
  const labels = (d: Doc | undefined) => (d?.metadata as { labels?: Record<string, string> } | undefined)?.labels;
  assert.deepEqual([labels(mutating)?.['mesh.io/rev'], labels(validating)?.['mesh.io/rev']], [values['revision'], values['revision']], 'both carry the revision label');
  assert.ok(discovery.env.some((e: { name: string; value: string }) => e.name === 'REVISION' && e.value === values['revision']), 'the Deployment runs as the revision');
  assert.equal(validating!.webhooks[0].clientConfig.service.path, '/validate');
  const [configMap] = find('ConfigMap') as Array<Doc & { data: Record<string, string> }>;
  const template = parseTemplate(configMap!.data['template.yaml']!, 'ConfigMap mesh-sidecar-injector');
  assert.equal(template.proxyConfig.discoveryAddress, 'meshd.mesh-system.svc:15010', 'injected agents reach the plaintext xDS port');
  assert.equal(find('PodDisruptionBudget').length, 1);
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
    MutatingWebhookConfiguration: 'admissionregistration.k8s.io/v1', ValidatingWebhookConfiguration: 'admissionregistration.k8s.io/v1',
    PodDisruptionBudget: 'policy/v1', ConfigMap: 'v1', CustomResourceDefinition: 'apiextensions.k8s.io/v1', Namespace: 'v1', ServiceAccount: 'v1',
  };
  const ajv = new Ajv({ allErrors: true, strict: false });
  for (const doc of manifestDocs) {
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

test('kubectl apply --dry-run=client accepts deploy/manifests', { skip: kubectlMissing() }, async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'deploy-kubectl-'));
  const { api, kubeconfig } = await standIn(dir);
  t.after(async () => {
    await api.close();
    await rm(dir, { recursive: true, force: true });
  });
  const { stdout } = await promisify(execFile)('kubectl', ['--kubeconfig', kubeconfig, 'apply', '--dry-run=client', '--validate=false', '-f', MANIFESTS]);
  const applied = stdout.trim().split('\n');
  assert.equal(applied.length, manifestDocs.length);
  assert.ok(applied.every((l) => l.endsWith('created (dry run)')), stdout);
  assert.ok(applied.includes('deployment.apps/meshd created (dry run)'));
});
