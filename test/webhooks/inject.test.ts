// The injection webhook of a discovery server reading the stand-in orchestrator API: Pods posted
// over real HTTPS come back with a JSON Patch that fast-json-patch applies cleanly, giving the init
// container (capture flags from the template and the Pod's annotations), the proxy container, its
// volumes and env; a second pass changes nothing; namespaces without mesh-injection=enabled are
// skipped and counted; a bad annotation is denied naming it; the template file is re-read on change.
import assert from 'node:assert/strict';
import { mkdtemp, rename, rm, writeFile } from 'node:fs/promises';
import { request } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import fastJsonPatch from 'fast-json-patch';
import type { V1Container, V1Pod } from '@kubernetes/client-node';
import { DiscoveryServer } from '../../src/cli/discovery-server.js';
import { counter } from '../../src/common/metrics.js';
import { setScopeLevel } from '../../src/common/log.js';
import type { FakeApiServer } from '../config/fake-apiserver.js';
import { eventually } from '../helpers/proc.js';
import { metricValue } from '../helpers/metrics.js';
import { namespace, standIn, webhookConfiguration } from '../registry/orch-fixtures.js';
import { localDiscoveryOptions } from '../security/fixtures.js';

const { applyPatch, validate } = fastJsonPatch;
for (const s of ['default', 'validationServer', 'orch']) setScopeLevel(s, 'error');

interface Review {
  response: { uid: string; allowed: boolean; patch?: string; patchType?: string; status?: { message: string } };
}

function appPod(name: string, ns: string, annotations: Record<string, string> = {}, labels: Record<string, string> = { app: name }): V1Pod {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace: ns, labels, annotations },
    spec: { serviceAccountName: name, containers: [{ name: 'app', image: 'app:1', ports: [{ containerPort: 8080, name: 'http' }] }] },
  };
}

describe('sidecar injection webhook', () => {
  let dir: string;
  let api: FakeApiServer;
  let d: DiscoveryServer;
  let templateFile: string;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'inject-'));
    const started = await standIn(dir);
    api = started.api;
    api.put(namespace('injected', { 'mesh-injection': 'enabled' }));
    api.put(namespace('plain'));
    api.put(webhookConfiguration('MutatingWebhookConfiguration', 'mesh-sidecar-injector', ['namespace.sidecar-injector.mesh.io']));
    templateFile = join(dir, 'template.yaml');
    await writeFile(templateFile, 'image: registry.example/mesh/pilot-agent:1.0\nexcludeOutboundIPRanges: 169.254.169.254/32\nproxyConfig:\n  discoveryAddress: meshd.mesh-system.svc:15012\n');
    const configDir = await mkdtemp(join(tmpdir(), 'inject-config-'));
    d = new DiscoveryServer({ ...localDiscoveryOptions(configDir), orchestrator: { kubeconfig: started.kubeconfig }, registries: ['Orchestrator'], clusterId: 'c1', injectionTemplate: templateFile, meshMtls: { autoMtls: true, trustDomain: 'corp.example', trustDomainAliases: [] } });
    await d.start();
  });
  after(async () => {
    await d.stop();
    await api.close();
    await rm(dir, { recursive: true, force: true });
  });

  function post(body: unknown): Promise<{ status: number; body: string }> {
    return new Promise((resolve, reject) => {
      const req = request(
        { host: '127.0.0.1', port: d.webhook.port(), path: '/inject', method: 'POST', headers: { 'content-type': 'application/json' }, ca: d.webhook.certificatePem(), servername: 'meshd.mesh-system.svc' },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }));
        },
      );
      req.on('error', reject);
      req.end(JSON.stringify(body));
    });
  }

  async function admit(pod: V1Pod, uid = 'u1'): Promise<Review['response']> {
    const reply = await post({
      apiVersion: 'admission.k8s.io/v1',
      kind: 'AdmissionReview',
      request: { uid, operation: 'CREATE', namespace: pod.metadata!.namespace, resource: { group: '', version: 'v1', resource: 'pods' }, object: pod },
    });
    assert.equal(reply.status, 200, reply.body);
    const review = JSON.parse(reply.body) as Review;
    assert.equal(review.response.uid, uid);
    return review.response;
  }

  function patched(pod: V1Pod, response: Review['response']): V1Pod {
    assert.equal(response.patchType, 'JSONPatch');
    const ops = JSON.parse(Buffer.from(response.patch!, 'base64').toString('utf8'));
    assert.equal(validate(ops, pod), undefined, 'the patch is valid for the Pod');
    return applyPatch(structuredClone(pod), ops, true, false).newDocument;
  }

  const container = (pod: V1Pod, name: string, init = false): V1Container => {
    const found = (init ? pod.spec!.initContainers : pod.spec!.containers)?.find((c) => c.name === name);
    assert.ok(found, `container ${name}`);
    return found;
  };
  const arg = (args: string[], flag: string) => args[args.indexOf(flag) + 1];

  it('injects a Pod of a labelled namespace: init and proxy containers, volumes, env, status; idempotent', async () => {
    const success = await metricValue(counter('sidecar_injection_success_total'));
    const pod = appPod('echo', 'injected', { 'traffic.sidecar.mesh.io/excludeInboundPorts': '9090', 'traffic.sidecar.mesh.io/excludeOutboundPorts': '3306' });
    const response = await admit(pod);
    assert.equal(response.allowed, true);
    const out = patched(pod, response);
    const init = container(out, 'mesh-init', true);
    assert.deepEqual(init.command, ['pilot-agent']);
    const args = init.args!;
    assert.equal(args[0], 'mesh-iptables');
    assert.deepEqual(
      ['-m', '-u', '-b', '-d', '-o', '-i', '-x'].map((f) => arg(args, f)),
      ['REDIRECT', '1337', '*', '15021,15020,9090', '3306', '*', '169.254.169.254/32'],
    );
    assert.deepEqual(init.securityContext?.capabilities?.add, ['NET_ADMIN', 'NET_RAW']);
    assert.equal(init.image, 'registry.example/mesh/pilot-agent:1.0');
    const proxy = container(out, 'mesh-proxy');
    assert.deepEqual(proxy.args!.slice(0, 2), ['proxy', 'sidecar']);
    const env = new Map(proxy.env!.map((e) => [e.name, e]));
    assert.equal(env.get('POD_NAME')?.valueFrom?.fieldRef?.fieldPath, 'metadata.name');
    assert.equal(env.get('POD_NAMESPACE')?.valueFrom?.fieldRef?.fieldPath, 'metadata.namespace');
    assert.equal(env.get('INSTANCE_IP')?.valueFrom?.fieldRef?.fieldPath, 'status.podIP');
    assert.equal(env.get('SERVICE_ACCOUNT')?.valueFrom?.fieldRef?.fieldPath, 'spec.serviceAccountName');
    assert.equal(env.get('MESH_META_CLUSTER_ID')?.value, 'c1');
    // The mesh config's trustDomain, so that the agent asks the CA for the identity the CA issues.
    assert.equal(env.get('TRUST_DOMAIN')?.value, 'corp.example');
    assert.equal(env.get('MESH_META_APP_CONTAINERS')?.value, 'app');
    // A bare Pod is its own workload (the standard metrics' workload labels).
    assert.equal(env.get('MESH_META_WORKLOAD_NAME')?.value, 'echo');
    assert.equal(env.get('MESH_META_OWNER')?.value, 'kubernetes://apis/v1/namespaces/injected/pods/echo');
    assert.equal(JSON.parse(env.get('PROXY_CONFIG')!.value!).discoveryAddress, 'meshd.mesh-system.svc:15012');
    assert.equal(proxy.securityContext?.runAsUser, 1337);
    assert.deepEqual(out.spec!.volumes!.map((v) => v.name), ['mesh-podinfo', 'mesh-token', 'mesh-proxy-work', 'mesh-config']);
    assert.deepEqual(out.spec!.volumes![0]!.downwardAPI!.items!.map((i) => i.fieldRef!.fieldPath), ['metadata.labels', 'metadata.annotations']);
    assert.equal(out.spec!.volumes![1]!.projected!.sources![0]!.serviceAccountToken!.audience, 'mesh-ca');
    assert.equal(out.spec!.securityContext?.fsGroup, 1337, 'ENABLE_LEGACY_FSGROUP_INJECTION');
    assert.equal(out.metadata!.labels!['security.mesh.io/tlsMode'], 'mesh');
    assert.deepEqual([out.metadata!.labels!['service.mesh.io/canonical-name'], out.metadata!.labels!['service.mesh.io/canonical-revision']], ['echo', 'latest']);
    assert.equal(await metricValue(counter('sidecar_injection_success_total')), success + 1);

    // Admitting the injected Pod again changes nothing.
    const again = await admit(out, 'u2');
    assert.deepEqual([again.allowed, again.patch], [true, undefined]);
    assert.equal(out.spec!.containers.length, 2);
  });

  it('reads the workload of a Deployment\'s Pod from the review\'s ownerReferences', async () => {
    const pod = appPod('', 'injected', {}, { app: 'reviews', version: 'v1', 'pod-template-hash': '5b4f8c6d9' });
    pod.metadata = { ...pod.metadata, name: undefined, generateName: 'reviews-v1-5b4f8c6d9-' };
    pod.metadata.ownerReferences = [{ apiVersion: 'apps/v1', kind: 'ReplicaSet', name: 'reviews-v1-5b4f8c6d9', uid: 'rs-1', controller: true }];
    const out = patched(pod, await admit(pod));
    const env = new Map(container(out, 'mesh-proxy').env!.map((e) => [e.name, e.value]));
    assert.deepEqual([env.get('MESH_META_WORKLOAD_NAME'), env.get('MESH_META_OWNER')], ['reviews-v1', 'kubernetes://apis/apps/v1/namespaces/injected/deployments/reviews-v1']);
    assert.deepEqual([out.metadata!.labels!['service.mesh.io/canonical-name'], out.metadata!.labels!['service.mesh.io/canonical-revision']], ['reviews', 'v1']);
  });

  it('honours the interception mode and the proxy config annotations, and denies a bad one naming it', async () => {
    const pod = appPod('tp', 'injected', { 'sidecar.mesh.io/interceptionMode': 'TPROXY', 'proxy.mesh.io/config': '{"concurrency": 4}' });
    const out = patched(pod, await admit(pod));
    assert.equal(arg(container(out, 'mesh-init', true).args!, '-m'), 'TPROXY');
    const pc = JSON.parse(container(out, 'mesh-proxy').env!.find((e) => e.name === 'PROXY_CONFIG')!.value!);
    assert.deepEqual([pc.concurrency, pc.interceptionMode], [4, 'TPROXY']);

    const failures = await metricValue(counter('sidecar_injection_failure_total'));
    const denied = await admit(appPod('bad', 'injected', { 'traffic.sidecar.mesh.io/includeOutboundIPRanges': '10.0.0.0/33' }));
    assert.equal(denied.allowed, false);
    assert.match(denied.status!.message, /traffic\.sidecar\.mesh\.io\/includeOutboundIPRanges: "10\.0\.0\.0\/33" is not a CIDR/);
    const badConfig = await admit(appPod('bad2', 'injected', { 'proxy.mesh.io/config': '{"concurency": 4}' }));
    assert.match(badConfig.status!.message, /annotation proxy\.mesh\.io\/config: unknown field "concurency"/);
    assert.equal(await metricValue(counter('sidecar_injection_failure_total')), failures + 2);
  });

  it('skips and counts a namespace without the label, a Pod opting out, and host-network Pods; a Pod may opt in', async () => {
    const skipped = await metricValue(counter('sidecar_injection_skip_total'), { type: 'namespace_not_enabled' });
    const plain = await admit(appPod('web', 'plain'));
    assert.deepEqual([plain.allowed, plain.patch], [true, undefined]);
    assert.equal(await metricValue(counter('sidecar_injection_skip_total'), { type: 'namespace_not_enabled' }), skipped + 1);
    const optOut = await admit(appPod('web', 'injected', { 'sidecar.mesh.io/inject': 'false' }));
    assert.equal(optOut.patch, undefined);
    const host = appPod('node-agent', 'injected');
    host.spec!.hostNetwork = true;
    assert.equal((await admit(host)).patch, undefined);
    const optIn = await admit(appPod('web', 'plain', {}, { app: 'web', 'sidecar.mesh.io/inject': 'true' }));
    assert.ok(optIn.patch, 'the Pod label opts in');
    // Labelling the namespace later takes effect through the Namespace informer.
    api.put(namespace('plain', { 'mesh-injection': 'enabled' }));
    await eventually(async () => assert.ok((await admit(appPod('web', 'plain'))).patch));
  });

  /** Replaces the file at once, as a ConfigMap update swaps its files. */
  async function replaceTemplate(text: string): Promise<void> {
    await writeFile(`${templateFile}.new`, text);
    await rename(`${templateFile}.new`, templateFile);
  }

  it('re-reads the template file and keeps the last good one on a bad edit', async () => {
    await replaceTemplate('image: registry.example/mesh/pilot-agent:2.0\n');
    await eventually(async () => {
      const out = patched(appPod('v2', 'injected'), await admit(appPod('v2', 'injected')));
      assert.equal(container(out, 'mesh-proxy').image, 'registry.example/mesh/pilot-agent:2.0');
    });
    await replaceTemplate('imagee: typo\n');
    await eventually(() => assert.match(d.injectionTemplate.lastError, /template\.yaml: unknown field "imagee"/));
    const out = patched(appPod('v3', 'injected'), await admit(appPod('v3', 'injected')));
    assert.equal(container(out, 'mesh-proxy').image, 'registry.example/mesh/pilot-agent:2.0');
  });

  it('set the injection webhook configuration\'s caBundle to its serving certificate', () => {
    const stored = api.get(webhookConfiguration('MutatingWebhookConfiguration', 'mesh-sidecar-injector', []));
    const bundle = (stored!['webhooks'] as Array<{ clientConfig: { caBundle: string } }>)[0]!.clientConfig.caBundle;
    assert.equal(Buffer.from(bundle, 'base64').toString('utf8').trim(), d.webhook.certificatePem().trim());
  });

  it('refuses what is not an AdmissionReview', async () => {
    const reply = await post({ kind: 'Pod' });
    assert.equal(reply.status, 400);
    assert.match(reply.body, /expected an AdmissionReview/);
  });
});
