// The credential sources behind MESHD_ENABLE_SDS_SERVER: the orchestrator's Secrets (through the
// API server stand-in: list, then watched updates and deletes) and the local credentials tree.
// Both feed the store, which tells of real changes only.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CredentialStore, type CredentialChange } from '../../src/security/credentials/store.js';
import { OrchestratorCredentials } from '../../src/security/credentials/orchestrator.js';
import { DirectoryCredentials } from '../../src/security/credentials/directory.js';
import { credentialService } from '../../src/security/credentials/setup.js';
import { gatewayNotices } from '../../src/model/gateway.js';
import type { Gateway } from '../../src/api/types.js';
import { FakeApiServer } from '../config/fake-apiserver.js';
import { eventually } from '../helpers/proc.js';

const b64 = (s: string) => Buffer.from(s).toString('base64');
const text = (b: Buffer | undefined) => b?.toString();

function secret(namespace: string, name: string, data: Record<string, string>) {
  return { apiVersion: 'v1', kind: 'Secret', metadata: { name, namespace }, type: 'kubernetes.io/tls', data: Object.fromEntries(Object.entries(data).map(([k, v]) => [k, b64(v)])) };
}

test('orchestrator Secrets: listed, rotated and deleted Secrets reach the store, each change told once', async (t) => {
  const api = new FakeApiServer((kind) => (kind === 'Secret' ? 'secrets' : `${kind.toLowerCase()}s`));
  await api.start();
  t.after(() => api.close());
  api.put(secret('gw', 'site', { 'tls.crt': 'cert-v1', 'tls.key': 'key-v1', 'ca.crt': 'ca-v1' }));
  api.put(secret('gw', 'generic', { cert: 'g-cert', key: 'g-key', cacert: 'g-ca' }));
  api.put(secret('gw', 'opaque', { password: 'not a credential' }));
  const dir = mkdtempSync(join(tmpdir(), 'mesh-cred-'));
  writeFileSync(join(dir, 'kubeconfig'), api.kubeconfig());
  const store = new CredentialStore();
  const changes: CredentialChange[] = [];
  store.onChange((c) => changes.push(c));
  const source = new OrchestratorCredentials(store, { kubeconfig: join(dir, 'kubeconfig') });
  await source.start();
  t.after(() => source.close());

  assert.equal(text(store.get('gw', 'site')?.certificateChain), 'cert-v1');
  assert.equal(text(store.get('gw', 'site')?.caCertificate), 'ca-v1');
  assert.deepEqual([text(store.get('gw', 'generic')?.certificateChain), text(store.get('gw', 'generic')?.privateKey), text(store.get('gw', 'generic')?.caCertificate)], ['g-cert', 'g-key', 'g-ca']);
  assert.equal(store.get('gw', 'opaque'), undefined, 'a Secret with none of the credential keys is not a credential');
  assert.equal(store.get('other', 'site'), undefined);

  changes.length = 0;
  api.put(secret('gw', 'site', { 'tls.crt': 'cert-v2', 'tls.key': 'key-v2', 'ca.crt': 'ca-v1' }));
  await eventually(() => assert.equal(text(store.get('gw', 'site')?.certificateChain), 'cert-v2'));
  assert.deepEqual(changes, [{ namespace: 'gw', name: 'site' }]);
  api.remove(secret('gw', 'site', {}));
  await eventually(() => assert.equal(store.get('gw', 'site'), undefined));
});

test('local credentials tree: <configDir>/credentials/<namespace>/<name>/ files, rescanned on change', async (t) => {
  const configDir = mkdtempSync(join(tmpdir(), 'mesh-cred-dir-'));
  const site = join(configDir, 'credentials', 'gw', 'site');
  mkdirSync(site, { recursive: true });
  writeFileSync(join(site, 'tls.crt'), 'cert-v1');
  writeFileSync(join(site, 'tls.key'), 'key-v1');
  const store = new CredentialStore();
  const source = new DirectoryCredentials(store, configDir, 60_000);
  await source.start();
  t.after(() => source.close());
  assert.equal(text(store.get('gw', 'site')?.certificateChain), 'cert-v1');
  assert.equal(store.get('gw', 'site')?.caCertificate, undefined);

  writeFileSync(join(site, 'tls.crt'), 'cert-v2');
  await eventually(() => assert.equal(text(store.get('gw', 'site')?.certificateChain), 'cert-v2'));
  const other = join(configDir, 'credentials', 'other', 'ca');
  mkdirSync(other, { recursive: true });
  writeFileSync(join(other, 'ca.crt'), 'other-ca');
  await eventually(() => assert.equal(text(store.get('other', 'ca')?.caCertificate), 'other-ca'));
  rmSync(site, { recursive: true });
  await eventually(() => assert.equal(store.get('gw', 'site'), undefined));
});

test('MESHD_ENABLE_SDS_SERVER: off, or without the identity check, serves nothing and Gateways keep their notice', () => {
  assert.equal(credentialService({ enabled: false, identityCheck: true, configDir: '/tmp' }), undefined);
  assert.equal(credentialService({ enabled: true, identityCheck: false, configDir: '/tmp' }), undefined, 'fails closed without PILOT_ENABLE_XDS_IDENTITY_CHECK');
  assert.ok(credentialService({ enabled: true, identityCheck: true, configDir: '/tmp' }));
  const gw: Gateway = { apiVersion: 'networking.mesh.io/v1', kind: 'Gateway', metadata: { name: 'g', namespace: 'gw' }, spec: { servers: [{ port: { number: 443, name: 'https', protocol: 'HTTPS' }, hosts: ['*'], tls: { mode: 'SIMPLE', credentialName: 'site' } }] } };
  assert.match(gatewayNotices(gw).join('\n'), /credentialName is not effective/);
  assert.deepEqual(gatewayNotices(gw, true), []);
});
