// The agent's SDS server on its Unix socket, fed by certificates from a real discovery server's CA,
// read by a grpc-js SDS client with the generated Envoy types (SotW and Delta).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { copyFileSync, mkdtempSync } from 'node:fs';
import { X509Certificate } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { create } from '@bufbuild/protobuf';
import type { Any } from '@bufbuild/protobuf/wkt';
import { credentials, type ClientDuplexStream } from '@grpc/grpc-js';
import { SecretSchema, type Secret } from '../../src/gen/envoy/extensions/transport_sockets/tls/v3/secret_pb.js';
import {
  DeltaDiscoveryRequestSchema,
  DiscoveryRequestSchema,
  type DeltaDiscoveryRequest,
  type DeltaDiscoveryResponse,
  type DiscoveryRequest,
  type DiscoveryResponse,
} from '../../src/gen/envoy/service/discovery/v3/discovery_pb.js';
import { SecretDiscoveryService } from '../../src/gen/envoy/service/secret/v3/sds_pb.js';
import { SdsServer } from '../../src/agent/sds/server.js';
import { readMounted, SecretManager } from '../../src/agent/sds/secret-manager.js';
import { grpcClient } from '../../src/envoy/grpc-service.js';
import { TypeUrl, unpack } from '../../src/envoy/types.js';
import { counter } from '../../src/common/metrics.js';
import { caFixture, SERVER_NAME, type CaDiscovery } from '../helpers/mesh-ca.js';
import { eventually } from '../helpers/proc.js';

const ID = 'spiffe://cluster.local/ns/shop/sa/cart';

interface SdsGrpc {
  streamSecrets(): ClientDuplexStream<DiscoveryRequest, DiscoveryResponse>;
  deltaSecrets(): ClientDuplexStream<DeltaDiscoveryRequest, DeltaDiscoveryResponse>;
  close(): void;
}

function secretsOf(resources: readonly Any[]): Map<string, Secret> {
  const out = new Map<string, Secret>();
  for (const any of resources) {
    assert.equal(any.typeUrl, TypeUrl.Secret);
    const s = unpack(any, SecretSchema);
    out.set(s.name, s);
  }
  return out;
}

function leafOf(s: Secret): X509Certificate {
  assert.equal(s.type.case, 'tlsCertificate');
  const chain = s.type.value.certificateChain?.specifier;
  assert.equal(chain?.case, 'inlineBytes');
  return new X509Certificate(Buffer.from(chain.value as Uint8Array));
}

/** Certificates for ID from the fixture's CA, authenticated with `token()` (read at each request). */
function caSecrets(d: CaDiscovery, token: () => string, ttlMs: number, more: { retryMs?: number } = {}): SecretManager {
  return new SecretManager({
    source: { kind: 'ca', ca: { address: d.secureAddress, rootPem: d.rootPem(), serverName: SERVER_NAME }, spiffeId: ID, token, keyAlgorithm: { kind: 'ECDSA', curve: 'P-256' }, ttlMs },
    graceRatio: 0.5,
    ...more,
  });
}

test('SDS serves default and ROOTCA from the CA and pushes a renewed certificate on the open stream', async (t) => {
  const { issuer, d } = await caFixture(t);
  const token = await issuer.token('shop', 'cart');
  const secrets = caSecrets(d, () => token, 4_000);
  const socket = join(mkdtempSync(join(tmpdir(), 'mesh-sds-')), 'var/run/secrets/workload-spiffe-uds/socket');
  const sds = new SdsServer(secrets, socket);
  const client = grpcClient(SecretDiscoveryService, `unix:${socket}`, credentials.createInsecure()) as unknown as SdsGrpc;
  t.after(async () => {
    client.close();
    sds.close();
    secrets.close();
  });
  await secrets.start();
  await sds.start();

  const responses: DiscoveryResponse[] = [];
  let ended = false;
  const stream = client.streamSecrets();
  stream.on('data', (r: DiscoveryResponse) => {
    responses.push(r);
    stream.write(create(DiscoveryRequestSchema, { typeUrl: TypeUrl.Secret, resourceNames: ['default', 'ROOTCA'], versionInfo: r.versionInfo, responseNonce: r.nonce }));
  });
  stream.on('end', () => (ended = true));
  stream.on('error', () => (ended = true));
  stream.write(create(DiscoveryRequestSchema, { typeUrl: TypeUrl.Secret, resourceNames: ['default', 'ROOTCA'], node: { id: 'sidecar~10.0.0.1~cart-1.shop~shop.svc.cluster.local' } }));

  const first = secretsOf((await eventually(() => responses[0] ?? assert.fail('no response yet'), 10_000)).resources);
  assert.deepEqual([...first.keys()].sort(), ['ROOTCA', 'default']);
  const leaf = leafOf(first.get('default')!);
  assert.equal(leaf.subjectAltName, `URI:${ID}`);
  const root = first.get('ROOTCA')!;
  assert.equal(root.type.case, 'validationContext');
  const rootCert = new X509Certificate(Buffer.from(root.type.value.trustedCa!.specifier.value as Uint8Array));
  assert.ok(leaf.verify(rootCert.publicKey), 'default is signed by ROOTCA');
  const key = first.get('default')!.type.value as { privateKey?: { specifier: { value: unknown } } };
  // SEC1 for ECDSA without PKCS8_KEY, as the Go mesh's agent writes it.
  assert.match(Buffer.from(key.privateKey!.specifier.value as Uint8Array).toString(), /^-----BEGIN EC PRIVATE KEY-----\n/);

  // Renewal at half of the 4 s lifetime: a push on the same stream with a new certificate.
  const renewed = await eventually(() => {
    const later = responses.slice(1).map((r) => secretsOf(r.resources).get('default')).find((s) => s && leafOf(s).serialNumber !== leaf.serialNumber);
    return later ?? assert.fail('no renewed certificate pushed yet');
  }, 20_000);
  assert.equal(leafOf(renewed).subjectAltName, `URI:${ID}`);
  assert.equal(ended, false, 'the stream stayed open across the renewal');
  assert.ok((await counter('total_pushes').get()).values[0]!.value >= 2);

  // Delta: both resources on subscribe, with versions.
  const delta = client.deltaSecrets();
  const deltas: DeltaDiscoveryResponse[] = [];
  delta.on('data', (r: DeltaDiscoveryResponse) => deltas.push(r));
  delta.on('error', () => undefined);
  delta.write(create(DeltaDiscoveryRequestSchema, { typeUrl: TypeUrl.Secret, resourceNamesSubscribe: ['default', 'ROOTCA'] }));
  const dres = await eventually(() => deltas[0] ?? assert.fail('no delta response'), 10_000);
  assert.deepEqual(dres.resources.map((r) => r.name).sort(), ['ROOTCA', 'default']);
  assert.ok(dres.resources.every((r) => r.version !== ''));
  delta.end();
  stream.end();
});

test('FILE_MOUNTED_CERTS: a key that does not match the chain is refused with both file names', async (t) => {
  const { issuer, d } = await caFixture(t);
  const out = mkdtempSync(join(tmpdir(), 'mesh-certs-'));
  const token = await issuer.token('shop', 'cart');
  const source = { kind: 'ca' as const, ca: { address: d.secureAddress, rootPem: d.rootPem(), serverName: SERVER_NAME }, spiffeId: ID, token: () => token, keyAlgorithm: { kind: 'RSA' as const, bits: 2048 }, ttlMs: 3600_000 };
  const a = new SecretManager({ source, graceRatio: 0.5, outputDir: out });
  await a.start();
  a.close();
  const mounted = readMounted(out);
  assert.equal(new X509Certificate(mounted.chainPem).subjectAltName, `URI:${ID}`, 'OUTPUT_CERTS wrote a usable set');
  assert.match(mounted.keyPem, /^-----BEGIN RSA PRIVATE KEY-----\n/, 'PKCS#1 for RSA without PKCS8_KEY');
  const pkcs8 = new SecretManager({ source: { ...source, pkcs8: true }, graceRatio: 0.5 });
  assert.match((await pkcs8.start()).keyPem, /^-----BEGIN PRIVATE KEY-----\n/, 'PKCS8_KEY=true');
  pkcs8.close();
  const other = mkdtempSync(join(tmpdir(), 'mesh-certs-'));
  const b = new SecretManager({ source, graceRatio: 0.5, outputDir: other });
  await b.start();
  b.close();
  copyFileSync(join(other, 'key.pem'), join(out, 'key.pem'));
  assert.throws(() => readMounted(out), /key\.pem does not match .*cert-chain\.pem/);
});

test('renewals are authenticated with the token, as the Go mesh: a revoked token stops them, the current certificate stays until a good one returns', async (t) => {
  const { issuer, d } = await caFixture(t);
  let token = await issuer.token('shop', 'cart');
  const secrets = caSecrets(d, () => token, 3_000, { retryMs: 200 });
  t.after(() => secrets.close());
  const issued: string[] = [];
  secrets.on('update', (s: { chainPem: string }) => issued.push(new X509Certificate(s.chainPem).serialNumber));
  await secrets.start();
  assert.equal(issued.length, 1);
  // Another account's token: a renewal with the certificate would still succeed; with the token the CA refuses the CSR.
  token = await issuer.token('shop', 'intruder');
  const failed = async () => (await counter('num_failed_outgoing_requests').get()).values.find((v) => v.labels['request_type'] === 'csr')?.value ?? 0;
  const failedBefore = await failed();
  await eventually(async () => assert.ok((await failed()) >= failedBefore + 2, 'renewals are attempted and refused'), 10_000);
  assert.equal(issued.length, 1, 'no certificate for the revoked credential; the current one is kept');
  token = await issuer.token('shop', 'cart');
  await eventually(() => assert.ok(issued.length >= 2, 'a good token renews again'), 10_000);
  assert.notEqual(issued[1], issued[0]);
});
