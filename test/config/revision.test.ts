// REVISION: two discovery servers of different revisions against one stand-in API server. Each
// takes the config labelled for it (mesh.io/rev) or for everyone, injects the Pods routed to it
// (and labels them with its revision), and keeps only its own webhook configurations' caBundle.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { V1Pod } from '@kubernetes/client-node';
import type { DiscoveryServer } from '../../src/cli/discovery-server.js';
import { setScopeLevel } from '../../src/common/log.js';
import type { FakeApiServer, StoredObject } from './fake-apiserver.js';
import { namespace, standIn, webhookConfiguration } from '../registry/orch-fixtures.js';
import { eventually } from '../helpers/proc.js';
import { body, injectedLabels, labelled, pod, server, trusted } from './revision-fixtures.js';

for (const s of ['default', 'validationServer', 'validationController', 'orch']) setScopeLevel(s, 'error');

const sidecar = (name: string, labels?: Record<string, string>): StoredObject => ({
  apiVersion: 'networking.mesh.io/v1',
  kind: 'Sidecar',
  metadata: { name, namespace: 'apps', ...(labels ? { labels } : {}) },
  spec: {},
});
const names = (d: DiscoveryServer) => d.store.list('Sidecar').map((s) => s.metadata.name).sort();

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
