// REVISION: two discovery servers of different revisions against one stand-in API server. Each
// takes the config labelled for it (mesh.io/rev) or for everyone, injects the Pods routed to it
// (and labels them with its revision), and keeps only its own webhook configurations' caBundle.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { request } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { V1Pod } from '@kubernetes/client-node';
import fastJsonPatch from 'fast-json-patch';
import { DiscoveryServer } from '../../src/cli/discovery-server.js';
import { loadSettings } from '../../src/common/env.js';
import { setScopeLevel } from '../../src/common/log.js';
import type { FakeApiServer, StoredObject } from './fake-apiserver.js';
import { namespace, standIn, webhookConfiguration } from '../registry/orch-fixtures.js';
import { eventually } from '../helpers/proc.js';
import { localDiscoveryOptions } from '../security/fixtures.js';

for (const s of ['default', 'validationServer', 'validationController', 'orch']) setScopeLevel(s, 'error');

const sidecar = (name: string, labels?: Record<string, string>): StoredObject => ({
  apiVersion: 'networking.mesh.io/v1',
  kind: 'Sidecar',
  metadata: { name, namespace: 'apps', ...(labels ? { labels } : {}) },
  spec: {},
});
const labelled = (o: StoredObject, labels: Record<string, string>): StoredObject => ({ ...o, metadata: { ...o.metadata, labels } });
const pod = (ns: string, labels: Record<string, string> = {}): V1Pod => ({ apiVersion: 'v1', kind: 'Pod', metadata: { name: 'app', namespace: ns, labels }, spec: { containers: [{ name: 'app', image: 'app:1' }] } });

async function server(kubeconfig: string, env: Record<string, string>): Promise<DiscoveryServer> {
  loadSettings('discovery', { ...process.env, ...env });
  try {
    const d = new DiscoveryServer({ ...localDiscoveryOptions(mkdtempSync(join(tmpdir(), 'revision-'))), configDir: undefined, orchestrator: { kubeconfig }, registries: ['Orchestrator'] });
    await d.start();
    return d;
  } finally {
    loadSettings('discovery');
  }
}

/** The labels a server's injection gives the Pod, or undefined when it does not inject it. */
function injectedLabels(d: DiscoveryServer, p: V1Pod): Promise<Record<string, string> | undefined> {
  const review = { apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', request: { uid: 'u', operation: 'CREATE', namespace: p.metadata!.namespace, resource: { group: '', version: 'v1', resource: 'pods' }, object: p } };
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port: d.webhook.port(), path: '/inject', method: 'POST', headers: { 'content-type': 'application/json' }, ca: d.webhook.certificatePem(), servername: 'meshd.mesh-system.svc' }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => {
        const { response } = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { response: { allowed: boolean; patch?: string } };
        assert.equal(response.allowed, true);
        if (!response.patch) return resolve(undefined);
        const ops = JSON.parse(Buffer.from(response.patch, 'base64').toString('utf8'));
        resolve(fastJsonPatch.applyPatch(structuredClone(p), ops, true, false).newDocument.metadata!.labels);
      });
    });
    req.on('error', reject);
    req.end(JSON.stringify(review));
  });
}

const names = (d: DiscoveryServer) => d.store.list('Sidecar').map((s) => s.metadata.name).sort();
type WebhookKind = 'MutatingWebhookConfiguration' | 'ValidatingWebhookConfiguration';
/** The certificates a configuration's first webhook trusts, as PEM text ('' when none). */
const trusted = (api: FakeApiServer, kind: WebhookKind, name: string): string => {
  const config = api.get(webhookConfiguration(kind, name, [])) as unknown as { webhooks: Array<{ clientConfig: { caBundle?: string } }> };
  return Buffer.from(config.webhooks[0]!.clientConfig.caBundle ?? '', 'base64').toString('utf8');
};
/** The base64 body of a PEM certificate, to find it in a bundle. */
const body = (pem: string) => pem.split('\n').slice(1, -2).join('\n');

describe('two control-plane revisions side by side (REVISION)', () => {
  let api: FakeApiServer;
  let stable: DiscoveryServer;
  let canary: DiscoveryServer;

  before(async () => {
    const started = await standIn(mkdtempSync(join(tmpdir(), 'revision-api-')));
    api = started.api;
    api.put(namespace('legacy', { 'mesh-injection': 'enabled' }));
    api.put(namespace('canary-apps', { 'mesh.io/rev': 'canary' }));
    api.put(namespace('apps'));
    api.put(sidecar('everyone'));
    api.put(sidecar('stable-only', { 'mesh.io/rev': 'default' }));
    api.put(sidecar('canary-only', { 'mesh.io/rev': 'canary' }));
    for (const [name, rev] of [['injector', 'default'], ['injector-canary', 'canary']] as const) {
      api.put(labelled(webhookConfiguration('MutatingWebhookConfiguration', name, [`namespace.sidecar-injector.mesh.io`]), { 'mesh.io/rev': rev }));
    }
    // The stable server is pointed at the canary's validating configuration too: it must leave it alone.
    api.put(labelled(webhookConfiguration('ValidatingWebhookConfiguration', 'validator-canary', ['validation.mesh.io']), { 'mesh.io/rev': 'canary' }));
    stable = await server(started.kubeconfig, { REVISION: 'default', INJECTION_WEBHOOK_CONFIG_NAME: 'injector', VALIDATION_WEBHOOK_CONFIG_NAME: 'validator-canary' });
    canary = await server(started.kubeconfig, { REVISION: 'canary', INJECTION_WEBHOOK_CONFIG_NAME: 'injector-canary', VALIDATION_WEBHOOK_CONFIG_NAME: '' });
  });

  after(async () => {
    await Promise.all([stable.stop(), canary.stop()]);
    await api.close();
  });

  it('each takes the config labelled for its revision and the unlabelled config, and follows label changes', async () => {
    assert.deepEqual(names(stable), ['everyone', 'stable-only']);
    assert.deepEqual(names(canary), ['canary-only', 'everyone']);
    api.put(sidecar('canary-only', { 'mesh.io/rev': 'default' }));
    await eventually(() => assert.deepEqual([names(stable), names(canary)], [['canary-only', 'everyone', 'stable-only'], ['everyone']]));
  });

  it('each injects the Pods routed to its revision and labels them with it', async () => {
    const cases: Array<[string, V1Pod, string | undefined, string | undefined]> = [
      ['namespace mesh-injection=enabled', pod('legacy'), 'default', undefined],
      ['namespace mesh.io/rev=canary', pod('canary-apps'), undefined, 'canary'],
      ['Pod mesh.io/rev=canary in an unlabelled namespace', pod('apps', { 'mesh.io/rev': 'canary' }), undefined, 'canary'],
      ['Pod sidecar.mesh.io/inject=true in an unlabelled namespace', pod('apps', { 'sidecar.mesh.io/inject': 'true' }), 'default', undefined],
      ['unlabelled Pod and namespace', pod('apps'), undefined, undefined],
    ];
    for (const [what, p, byStable, byCanary] of cases) {
      const got = [(await injectedLabels(stable, p))?.['mesh.io/rev'], (await injectedLabels(canary, p))?.['mesh.io/rev']];
      assert.deepEqual(got, [byStable, byCanary], what);
    }
  });

  it("each keeps its own webhook configuration's caBundle and leaves another revision's alone", () => {
    const [stableCert, canaryCert] = [body(stable.webhook.certificatePem()), body(canary.webhook.certificatePem())];
    assert.notEqual(stableCert, canaryCert, 'each replica serves its own certificate');
    assert.deepEqual([trusted(api, 'MutatingWebhookConfiguration', 'injector').includes(stableCert), trusted(api, 'MutatingWebhookConfiguration', 'injector').includes(canaryCert)], [true, false]);
    assert.deepEqual([trusted(api, 'MutatingWebhookConfiguration', 'injector-canary').includes(canaryCert), trusted(api, 'MutatingWebhookConfiguration', 'injector-canary').includes(stableCert)], [true, false]);
    assert.equal(trusted(api, 'ValidatingWebhookConfiguration', 'validator-canary'), '', "the canary's validating configuration is left alone by the default revision");
  });
});
