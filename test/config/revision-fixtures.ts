// Shared by the REVISION tests: discovery servers of a revision against the stand-in API server, an
// injection request to one, and what a webhook configuration's caBundle trusts.
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { request } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { V1Pod } from '@kubernetes/client-node';
import fastJsonPatch from 'fast-json-patch';
import { DiscoveryServer } from '../../src/cli/discovery-server.js';
import { loadSettings } from '../../src/common/env.js';
import type { FakeApiServer, StoredObject } from './fake-apiserver.js';
import { webhookConfiguration } from '../registry/orch-fixtures.js';
import { localDiscoveryOptions } from '../security/fixtures.js';

export const labelled = (o: StoredObject, labels: Record<string, string>): StoredObject => ({ ...o, metadata: { ...o.metadata, labels } });
export const pod = (ns: string, labels: Record<string, string> = {}): V1Pod => ({ apiVersion: 'v1', kind: 'Pod', metadata: { name: 'app', namespace: ns, labels }, spec: { containers: [{ name: 'app', image: 'app:1' }] } });

export async function server(kubeconfig: string, env: Record<string, string>): Promise<DiscoveryServer> {
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
export function injectedLabels(d: DiscoveryServer, p: V1Pod): Promise<Record<string, string> | undefined> {
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

export type WebhookKind = 'MutatingWebhookConfiguration' | 'ValidatingWebhookConfiguration';
/** The certificates a configuration's first webhook trusts, as PEM text ('' when none). */
export const trusted = (api: FakeApiServer, kind: WebhookKind, name: string): string => {
  const config = api.get(webhookConfiguration(kind, name, [])) as unknown as { webhooks: Array<{ clientConfig: { caBundle?: string } }> };
  return Buffer.from(config.webhooks[0]!.clientConfig.caBundle ?? '', 'base64').toString('utf8');
};
/** The base64 body of a PEM certificate, to find it in a bundle. */
export const body = (pem: string) => pem.split('\n').slice(1, -2).join('\n');
