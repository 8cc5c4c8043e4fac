// credentialName secrets over a real ADS stream (MESHD_ENABLE_SDS_SERVER): a gateway gets the
// Secrets of its own namespace by name, never another namespace's, nothing without a verified
// identity; a rotated Secret is pushed to the proxies that watch it and only to them.
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { SecretSchema } from '../../src/gen/envoy/extensions/transport_sockets/tls/v3/secret_pb.js';
import type { PushContext } from '../../src/model/push-context.js';
import { createMeshGenerators } from '../../src/xds/generators/index.js';
import type { ProxyInfo } from '../../src/xds/generator.js';
import { TypeUrl, unpack } from '../../src/envoy/types.js';
import { CredentialStore } from '../../src/security/credentials/store.js';
import { MESH, pushOf, validated } from '../networking/fixtures.js';
import { node, sotw, startServer, type Harness, type SotwStream } from './harness.js';

const SDS = TypeUrl.Secret;
const push: PushContext = pushOf(MESH);
const harnesses: Harness[] = [];
after(() => harnesses.forEach((h) => h.close()));

const pem = (s: string) => Buffer.from(`-----BEGIN CERTIFICATE-----\n${s}\n-----END CERTIFICATE-----\n`);

async function serve(store: CredentialStore, verified: (info: ProxyInfo) => boolean = () => true, snapshot: PushContext = push): Promise<Harness> {
  const h = await startServer({ generators: createMeshGenerators({ pushContext: () => snapshot, credentials: { store, verified } }) });
  harnesses.push(h);
  return h;
}

function gateway(h: Harness, ns: string, names: string[]): SotwStream {
  const s = sotw(h.client());
  s.send({ node: node(`router~10.0.0.9~gw-1.${ns}~${ns}.svc.cluster.local`, { NAMESPACE: ns }), typeUrl: SDS, resourceNames: names });
  return s;
}

interface Got {
  name: string;
  cert?: string;
  ca?: string;
  crl?: string;
}

async function secrets(s: SotwStream): Promise<Got[]> {
  const r = await s.next();
  assert.equal(r.typeUrl, SDS);
  s.send({ typeUrl: SDS, versionInfo: r.versionInfo, responseNonce: r.nonce });
  return r.resources
    .map((any) => unpack(any, SecretSchema))
    .map((sec) => {
      const text = (b: Uint8Array | undefined) => Buffer.from(b ?? []).toString();
      if (sec.type.case === 'tlsCertificate') {
        const spec = sec.type.value.certificateChain?.specifier;
        return { name: sec.name, cert: spec?.case === 'inlineBytes' ? text(spec.value) : '' };
      }
      if (sec.type.case === 'validationContext') {
        const spec = sec.type.value.trustedCa?.specifier;
        const crl = sec.type.value.crl?.specifier;
        return { name: sec.name, ca: spec?.case === 'inlineBytes' ? text(spec.value) : '', ...(crl?.case === 'inlineBytes' ? { crl: text(crl.value) } : {}) };
      }
      return { name: sec.name };
    })
    .sort((a, b) => a.name.localeCompare(b.name));
}

test('SDS over ADS: a gateway gets its own namespace\'s certificate and CA, never another namespace\'s', async () => {
  const store = new CredentialStore();
  store.set('gw', 'site', { certificateChain: pem('site-v1'), privateKey: Buffer.from('key'), caCertificate: pem('client-ca') });
  store.set('other', 'site', { certificateChain: pem('other-v1'), privateKey: Buffer.from('key') });
  const h = await serve(store);
  const s = gateway(h, 'gw', ['orch://site', 'orch://site-cacert', 'orch://other/site', 'orch://gw/site']);
  assert.deepEqual(await secrets(s), [
    { name: 'orch://gw/site', cert: pem('site-v1').toString() },
    { name: 'orch://site', cert: pem('site-v1').toString() },
    { name: 'orch://site-cacert', ca: pem('client-ca').toString() },
  ]);
});

test('SDS over ADS: a `<name>-cacert` Secret carries the CA when there is one; a Secret without a key is not a certificate', async () => {
  const store = new CredentialStore();
  store.set('gw', 'site', { certificateChain: pem('no-key'), caCertificate: pem('inline-ca') });
  store.set('gw', 'site-cacert', { caCertificate: pem('separate-ca') });
  const h = await serve(store);
  assert.deepEqual(await secrets(gateway(h, 'gw', ['orch://site', 'orch://site-cacert'])), [{ name: 'orch://site-cacert', ca: pem('separate-ca').toString() }]);
});

test('SDS over ADS: nothing for a stream whose identity was not verified', async () => {
  const store = new CredentialStore();
  store.set('gw', 'site', { certificateChain: pem('site-v1'), privateKey: Buffer.from('key') });
  const h = await serve(store, () => false);
  assert.deepEqual(await secrets(gateway(h, 'gw', ['orch://site'])), []);
});

test('SDS over ADS: a rotated Secret is pushed to the proxies that watch it only', async () => {
  const store = new CredentialStore();
  store.set('gw', 'site', { certificateChain: pem('site-v1'), privateKey: Buffer.from('key') });
  store.set('gw', 'admin', { certificateChain: pem('admin-v1'), privateKey: Buffer.from('key') });
  const h = await serve(store);
  const site = gateway(h, 'gw', ['orch://site']);
  const admin = gateway(h, 'gw', ['orch://admin']);
  assert.deepEqual(await secrets(site), [{ name: 'orch://site', cert: pem('site-v1').toString() }]);
  assert.deepEqual(await secrets(admin), [{ name: 'orch://admin', cert: pem('admin-v1').toString() }]);

  store.set('gw', 'site', { certificateChain: pem('site-v2'), privateKey: Buffer.from('key') });
  await h.server.pushAll({ reason: 'secret:gw/site', types: new Set([SDS]) });
  assert.deepEqual(await secrets(site), [{ name: 'orch://site', cert: pem('site-v2').toString() }]);
  // The admin watcher was not sent anything for it: the next thing it sees is its own rotation.
  store.set('gw', 'admin', { certificateChain: pem('admin-v2'), privateKey: Buffer.from('key') });
  await h.server.pushAll({ reason: 'secret:gw/admin', types: new Set([SDS]) });
  assert.deepEqual(await secrets(admin), [{ name: 'orch://admin', cert: pem('admin-v2').toString() }]);
});

/** A Gateway selecting every router proxy, one server with `credentialName` (or other credential fields) in `mode`. */
function gatewayResource(namespace: string, name: string, credentialName: string, mode: string, more: Record<string, unknown> = {}) {
  return {
    apiVersion: 'networking.mesh.io/v1',
    kind: 'Gateway',
    metadata: { namespace, name },
    spec: { servers: [{ port: { number: 443, name: 'https', protocol: 'HTTPS' }, hosts: [`${name}.example.com`], tls: { mode, ...(credentialName ? { credentialName } : {}), ...more } }] },
  };
}

test('SDS over ADS: orch-gateway:// names are served only when a Gateway of the proxy\'s namespace references them', async () => {
  const store = new CredentialStore();
  store.set('gw', 'site', { certificateChain: pem('site'), privateKey: Buffer.from('key'), caCertificate: pem('site-ca') });
  store.set('gw', 'simple', { certificateChain: pem('simple'), privateKey: Buffer.from('key'), caCertificate: pem('simple-ca') });
  store.set('gw', 'unreferenced', { certificateChain: pem('unreferenced'), privateKey: Buffer.from('key') });
  store.set('gw', 'foreign', { certificateChain: pem('foreign'), privateKey: Buffer.from('key') });
  store.set('other', 'site', { certificateChain: pem('other'), privateKey: Buffer.from('key') });
  const snapshot = pushOf([
    ...MESH,
    ...validated('gateways', [
      gatewayResource('gw', 'mutual', 'orch-gateway://gw/site', 'MUTUAL'),
      gatewayResource('gw', 'simple', 'orch-gateway://gw/simple', 'SIMPLE'),
      // A Gateway of another namespace cannot vouch for a Secret of the proxy's namespace.
      gatewayResource('other', 'foreign', 'orch-gateway://gw/foreign', 'SIMPLE'),
      // Nor can one of the proxy's namespace for another namespace's Secret (that needs a ReferenceGrant).
      gatewayResource('gw', 'cross', 'orch-gateway://other/site', 'SIMPLE'),
    ]),
  ]);
  const h = await serve(store, () => true, snapshot);
  const asked = ['orch-gateway://gw/site', 'orch-gateway://gw/site-cacert', 'orch-gateway://gw/simple', 'orch-gateway://gw/simple-cacert', 'orch-gateway://gw/unreferenced', 'orch-gateway://gw/foreign', 'orch-gateway://other/site', 'orch-gateway://site'];
  assert.deepEqual(await secrets(gateway(h, 'gw', asked)), [
    { name: 'orch-gateway://gw/simple', cert: pem('simple').toString() },
    { name: 'orch-gateway://gw/site', cert: pem('site').toString() },
    { name: 'orch-gateway://gw/site-cacert', ca: pem('site-ca').toString() },
  ]);
  // A sidecar of the same namespace has no Gateway: nothing of the kind.
  const sidecar = sotw(h.client());
  sidecar.send({ node: node('sidecar~10.0.0.8~app-1.gw~gw.svc.cluster.local', { NAMESPACE: 'gw' }), typeUrl: SDS, resourceNames: ['orch-gateway://gw/site'] });
  assert.deepEqual(await secrets(sidecar), []);
});

test('SDS over ADS: a CA is served with its CRL (ca.crl); credentialNames and caCertCredentialName are verified references too', async () => {
  const store = new CredentialStore();
  const crl = Buffer.from('-----BEGIN X509 CRL-----\ncrl\n-----END X509 CRL-----\n');
  store.set('gw', 'rsa', { certificateChain: pem('rsa'), privateKey: Buffer.from('key') });
  store.set('gw', 'ecdsa', { certificateChain: pem('ecdsa'), privateKey: Buffer.from('key') });
  store.set('gw', 'clients', { caCertificate: pem('clients-ca'), crl });
  const snapshot = pushOf([
    ...MESH,
    ...validated('gateways', [gatewayResource('gw', 'pair', '', 'MUTUAL', { credentialNames: ['orch-gateway://gw/rsa', 'orch-gateway://gw/ecdsa'], caCertCredentialName: 'orch-gateway://gw/clients' })]),
  ]);
  const h = await serve(store, () => true, snapshot);
  const asked = ['orch-gateway://gw/rsa', 'orch-gateway://gw/ecdsa', 'orch-gateway://gw/clients-cacert', 'orch-gateway://gw/rsa-cacert'];
  assert.deepEqual(await secrets(gateway(h, 'gw', asked)), [
    { name: 'orch-gateway://gw/clients-cacert', ca: pem('clients-ca').toString(), crl: crl.toString() },
    { name: 'orch-gateway://gw/ecdsa', cert: pem('ecdsa').toString() },
    { name: 'orch-gateway://gw/rsa', cert: pem('rsa').toString() },
  ]);
});
