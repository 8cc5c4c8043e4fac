// Revision tags (mesh.io/tag): two discovery servers of revisions blue and green against one stand-in
// API server, and tag configurations as the chart renders them (mesh-revision-tag-<tag>, labelled
// mesh.io/tag and mesh.io/rev). A namespace labelled mesh.io/rev=<tag> is injected by the revision
// the tag points at only, that revision keeps the tag configuration's caBundle, and moving the tag
// moves both; the `default` tag takes the default revision's namespaces (mesh-injection=enabled).
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { DiscoveryServer } from '../../src/cli/discovery-server.js';
import { setScopeLevel } from '../../src/common/log.js';
import { injectionVerdict } from '../../src/webhooks/inject-policy.js';
import { tagMap } from '../../src/webhooks/revision-tags.js';
import type { FakeApiServer, StoredObject } from './fake-apiserver.js';
import { namespace, standIn, webhookConfiguration } from '../registry/orch-fixtures.js';
import { eventually } from '../helpers/proc.js';
import { body, injectedLabels, labelled, pod, server, trusted } from './revision-fixtures.js';

for (const s of ['default', 'validationServer', 'validationController', 'orch']) setScopeLevel(s, 'error');

const tagConfiguration = (tag: string, revision: string, caBundle?: string): StoredObject =>
  labelled(webhookConfiguration('MutatingWebhookConfiguration', `mesh-revision-tag-${tag}`, ['rev.namespace.sidecar-injector.mesh.io', 'rev.object.sidecar-injector.mesh.io'], caBundle), { 'mesh.io/tag': tag, 'mesh.io/rev': revision });
const bundleOf = (api: FakeApiServer, name: string): string | undefined =>
  (api.get(webhookConfiguration('MutatingWebhookConfiguration', name, [])) as unknown as { webhooks: Array<{ clientConfig: { caBundle?: string } }> }).webhooks[0]!.clientConfig.caBundle;

describe('revision tags (mesh.io/tag)', () => {
  let api: FakeApiServer;
  let blue: DiscoveryServer;
  let green: DiscoveryServer;
  /** Which revision injects a Pod: the mesh.io/rev label each server's patch gives it. */
  const injectedBy = async (p: ReturnType<typeof pod>) => [(await injectedLabels(blue, p))?.['mesh.io/rev'], (await injectedLabels(green, p))?.['mesh.io/rev']];

  before(async () => {
    const started = await standIn(mkdtempSync(join(tmpdir(), 'revision-tags-api-')));
    api = started.api;
    api.put(namespace('prod-apps', { 'mesh.io/rev': 'prod' }));
    api.put(namespace('legacy', { 'mesh-injection': 'enabled' }));
    api.put(namespace('apps'));
    for (const rev of ['blue', 'green']) api.put(labelled(webhookConfiguration('MutatingWebhookConfiguration', `mesh-sidecar-injector-${rev}`, ['rev.namespace.sidecar-injector.mesh.io']), { 'mesh.io/rev': rev }));
    api.put(tagConfiguration('prod', 'blue'));
    blue = await server(started.kubeconfig, { REVISION: 'blue', INJECTION_WEBHOOK_CONFIG_NAME: 'mesh-sidecar-injector-blue', VALIDATION_WEBHOOK_CONFIG_NAME: '' });
    green = await server(started.kubeconfig, { REVISION: 'green', INJECTION_WEBHOOK_CONFIG_NAME: 'mesh-sidecar-injector-green', VALIDATION_WEBHOOK_CONFIG_NAME: '' });
  });

  after(async () => {
    await Promise.all([blue.stop(), green.stop()]);
    await api.close();
  });

  it('a namespace labelled with a tag is injected by the revision the tag points at only, which keeps the tag configuration trusting it', async () => {
    assert.deepEqual(await injectedBy(pod('prod-apps')), ['blue', undefined], 'injected by blue, labelled with the revision (not the tag)');
    assert.deepEqual(await injectedBy(pod('apps', { 'mesh.io/rev': 'prod' })), ['blue', undefined], 'a Pod labelled with the tag in an unlabelled namespace');
    assert.deepEqual(await injectedBy(pod('apps', { 'mesh.io/rev': 'green' })), [undefined, 'green'], 'a revision is still addressed by its own name');
    const bundle = () => trusted(api, 'MutatingWebhookConfiguration', 'mesh-revision-tag-prod');
    await eventually(() => assert.ok(bundle().includes(body(blue.webhook.certificatePem())), 'blue patched the tag configuration'));
    assert.ok(!bundle().includes(body(green.webhook.certificatePem())), 'green left the tag configuration of blue alone');
  });

  it('moving the tag to the other revision moves injection and the caBundle upkeep', async () => {
    // As re-applying the tag configuration rendered by green's release does: the labels change, the bundle stays.
    api.put(tagConfiguration('prod', 'green', bundleOf(api, 'mesh-revision-tag-prod')));
    await eventually(async () => assert.deepEqual(await injectedBy(pod('prod-apps')), [undefined, 'green']));
    const greenCert = body(green.webhook.certificatePem());
    await eventually(() => assert.ok(trusted(api, 'MutatingWebhookConfiguration', 'mesh-revision-tag-prod').startsWith(`-----BEGIN CERTIFICATE-----\n${greenCert.split('\n')[0]}`), "green's certificate first in the tag configuration's bundle"));
    api.remove(tagConfiguration('prod', 'green'));
    await eventually(async () => assert.deepEqual(await injectedBy(pod('prod-apps')), [undefined, undefined], 'a removed tag names no revision'));
  });

  it('the default tag takes the namespaces of the default revision (mesh-injection=enabled) and Pods opting in', async () => {
    assert.deepEqual(await injectedBy(pod('legacy')), [undefined, undefined], 'neither is the default revision while there is no default tag');
    api.put(tagConfiguration('default', 'green'));
    await eventually(async () => assert.deepEqual(await injectedBy(pod('legacy')), [undefined, 'green']));
    assert.deepEqual(await injectedBy(pod('apps', { 'sidecar.mesh.io/inject': 'true' })), [undefined, 'green']);
    assert.deepEqual(await injectedBy(pod('apps', { 'mesh.io/rev': 'default' })), [undefined, 'green'], 'mesh.io/rev=default names the tag too');
    api.remove(tagConfiguration('default', 'green'));
    await eventually(async () => assert.deepEqual(await injectedBy(pod('legacy')), [undefined, undefined]));
  });
});

describe('tagMap', () => {
  it('maps each tag to its revision, and a tag claimed for two revisions to none', () => {
    const tags = tagMap([
      { name: 'mesh-revision-tag-prod', tag: 'prod', revision: 'blue' },
      { name: 'mesh-revision-tag-prod-other', tag: 'prod', revision: 'blue' },
      { name: 'mesh-revision-tag-stable', tag: 'stable', revision: 'blue' },
      { name: 'mesh-revision-tag-stable-ns2', tag: 'stable', revision: 'green' },
    ]);
    assert.deepEqual([...tags], [['prod', 'blue'], ['stable', '']]);
  });
});

describe('injectionVerdict with revision tags', () => {
  const legacy = { 'mesh-injection': 'enabled' };
  it('the revision named default leaves mesh-injection=enabled namespaces to the revision the default tag points at', () => {
    const verdict = (revision: string, tags: Map<string, string>) => injectionVerdict(pod('legacy'), 'legacy', legacy, revision, tags);
    assert.deepEqual([verdict('default', new Map()).inject, verdict('canary', new Map()).inject], [true, false]);
    const moved = new Map([['default', 'canary']]);
    assert.deepEqual([verdict('default', moved).inject, verdict('canary', moved).inject], [false, true]);
    const skipped = verdict('default', moved);
    assert.ok(!skipped.inject && /default \(a tag pointing at revision canary\)/.test(skipped.message), JSON.stringify(skipped));
  });

  it('a tag claimed for two revisions is injected by neither, and says so', () => {
    const verdict = injectionVerdict(pod('shop'), 'shop', { 'mesh.io/rev': 'prod' }, 'blue', new Map([['prod', '']]));
    assert.ok(!verdict.inject && verdict.message.includes('prod (a tag pointing at no single revision)'), JSON.stringify(verdict));
  });
});
