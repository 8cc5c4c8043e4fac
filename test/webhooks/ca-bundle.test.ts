// The webhook configurations' caBundle against the stand-in API server: patched to trust the
// serving certificate on every webhook, repaired after a re-apply empties it, kept alongside another
// replica's certificate, and a missing configuration is counted without stopping the other.
import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, afterEach, before, describe, it } from 'node:test';
import { counter } from '../../src/common/metrics.js';
import { setScopeLevel } from '../../src/common/log.js';
import { OrchestratorClient } from '../../src/config/informer.js';
import { CaBundleUpkeep, mergeBundle } from '../../src/webhooks/ca-bundle.js';
import { selfSignedCertificate } from '../../src/webhooks/selfsigned.js';
import type { FakeApiServer, StoredObject } from '../config/fake-apiserver.js';
import { eventually } from '../helpers/proc.js';
import { metricValue } from '../helpers/metrics.js';
import { standIn, webhookConfiguration } from '../registry/orch-fixtures.js';

setScopeLevel('validationController', 'error');

const bundleOf = (object: StoredObject | undefined, i = 0): string =>
  Buffer.from(((object?.['webhooks'] as Array<{ clientConfig: { caBundle?: string } }>)[i]!.clientConfig.caBundle ?? ''), 'base64').toString('utf8');

describe('webhook caBundle upkeep', () => {
  let dir: string;
  let api: FakeApiServer;
  let kubeconfig: string;
  let upkeep: CaBundleUpkeep | undefined;
  const MUTATING = webhookConfiguration('MutatingWebhookConfiguration', 'mesh-sidecar-injector', ['a.mesh.io', 'b.mesh.io']);
  const VALIDATING = webhookConfiguration('ValidatingWebhookConfiguration', 'meshd-mesh-system', ['v.mesh.io'], '');

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'ca-bundle-'));
  });
  after(() => rm(dir, { recursive: true, force: true }));
  afterEach(async () => {
    await upkeep?.close();
    await api.close();
  });

  async function run(certPem: string, targets = [{ plural: 'mutatingwebhookconfigurations' as const, name: 'mesh-sidecar-injector' }, { plural: 'validatingwebhookconfigurations' as const, name: 'meshd-mesh-system' }]) {
    ({ api, kubeconfig } = await standIn(dir));
    api.put(MUTATING);
    api.put(VALIDATING);
    upkeep = new CaBundleUpkeep({ client: OrchestratorClient.connect(kubeconfig), targets, certificatePem: () => certPem, periodMs: 50 });
    await upkeep.start();
  }

  it('patches every webhook to trust the serving certificate, and repairs an emptied bundle', async () => {
    const { certPem } = await selfSignedCertificate(['meshd.mesh-system.svc']);
    const updates = await metricValue(counter('validator_validation_config_updates'));
    await run(certPem);
    const mutating = api.get(MUTATING);
    assert.equal(new X509Certificate(bundleOf(mutating, 0)).fingerprint256, new X509Certificate(certPem).fingerprint256);
    assert.equal(bundleOf(mutating, 1), bundleOf(mutating, 0));
    assert.equal(new X509Certificate(bundleOf(api.get(VALIDATING))).fingerprint256, new X509Certificate(certPem).fingerprint256);
    assert.equal(await metricValue(counter('validator_validation_config_updates')), updates + 2);
    assert.ok(api.patches.every((p) => p.contentType === 'application/json-patch+json'));
    const patchesBefore = api.patches.length;
    await upkeep!.reconcile();
    assert.equal(api.patches.length, patchesBefore, 'nothing to patch when the bundle already trusts us');

    api.put(VALIDATING); // a re-applied manifest with an empty caBundle
    await eventually(() => assert.match(bundleOf(api.get(VALIDATING)), /BEGIN CERTIFICATE/));
  });

  it('keeps another replica\'s unexpired certificate beside its own', async () => {
    const mine = await selfSignedCertificate(['meshd.mesh-system.svc']);
    const theirs = await selfSignedCertificate(['meshd.mesh-system.svc']);
    const merged = Buffer.from(mergeBundle(mine.certPem, Buffer.from(theirs.certPem).toString('base64')), 'base64').toString('utf8');
    assert.equal(merged.match(/BEGIN CERTIFICATE/g)?.length, 2);
    assert.ok(merged.startsWith(mine.certPem.trim().split('\n')[0]!));
    assert.ok(merged.includes(theirs.certPem.trim().split('\n')[1]!));
    const again = Buffer.from(mergeBundle(mine.certPem, Buffer.from(merged).toString('base64')), 'base64').toString('utf8');
    assert.equal(again.match(/BEGIN CERTIFICATE/g)?.length, 2, 'no duplicate of our own');
  });

  it('counts a missing configuration as a load error and still patches the other', async () => {
    const { certPem } = await selfSignedCertificate(['meshd.mesh-system.svc']);
    const loadErrors = await metricValue(counter('validator_validation_config_load_error'));
    await run(certPem, [{ plural: 'mutatingwebhookconfigurations', name: 'absent' }, { plural: 'validatingwebhookconfigurations', name: 'meshd-mesh-system' }]);
    assert.ok((await metricValue(counter('validator_validation_config_load_error'))) > loadErrors);
    assert.match(bundleOf(api.get(VALIDATING)), /BEGIN CERTIFICATE/);
  });
});
