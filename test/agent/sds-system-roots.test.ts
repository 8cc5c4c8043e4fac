// The agent's SDS serves `file-root:system`, the operating system's roots (what a DestinationRule's
// SIMPLE TLS without caCertificates verifies against), read by a grpc-js SDS client: the bundle of
// SSL_CERT_FILE (a test CA bundle, so the test does not depend on the machine's), the first
// distribution file that exists, Node's bundled roots without one, and nothing at all for an
// unreadable SSL_CERT_FILE (fail closed).
import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, renameSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { rootCertificates } from 'node:tls';
import { create } from '@bufbuild/protobuf';
import { credentials, type ClientDuplexStream } from '@grpc/grpc-js';
import { SecretSchema } from '../../src/gen/envoy/extensions/transport_sockets/tls/v3/secret_pb.js';
import { DiscoveryRequestSchema, type DiscoveryRequest, type DiscoveryResponse } from '../../src/gen/envoy/service/discovery/v3/discovery_pb.js';
import { SecretDiscoveryService } from '../../src/gen/envoy/service/secret/v3/sds_pb.js';
import { SdsServer } from '../../src/agent/sds/server.js';
import { SecretManager } from '../../src/agent/sds/secret-manager.js';
import { readSystemRoots, SYSTEM_ROOT_SECRET } from '../../src/agent/sds/system-roots.js';
import { grpcClient } from '../../src/envoy/grpc-service.js';
import { TypeUrl, unpack } from '../../src/envoy/types.js';
import { meshCa } from '../dataplane/tls-fixtures.js';
import { eventually } from '../helpers/proc.js';

type Fetch = (req: DiscoveryRequest, cb: (err: Error | null, res: DiscoveryResponse) => void) => void;
interface Client {
  fetchSecrets: Fetch;
  streamSecrets(): ClientDuplexStream<DiscoveryRequest, DiscoveryResponse>;
  close(): void;
}

/** An agent SDS server with no workload certificate yet, and `fetchSecrets` on its socket. */
async function agentSds(t: TestContext, env: NodeJS.ProcessEnv): Promise<{ fetch: (names: string[]) => Promise<DiscoveryResponse>; client: Client }> {
  const dir = mkdtempSync(join(tmpdir(), 'mesh-sysroots-'));
  const secrets = new SecretManager({ source: { kind: 'files', dir }, graceRatio: 0.5 });
  const sds = new SdsServer(secrets, join(dir, 'socket'), undefined, () => readSystemRoots(env));
  await sds.start();
  const client = grpcClient(SecretDiscoveryService, `unix:${sds.socketPath}`, credentials.createInsecure()) as unknown as Client;
  t.after(() => {
    client.close();
    sds.close();
  });
  const fetch = (names: string[]): Promise<DiscoveryResponse> =>
    new Promise((resolve, reject) => client.fetchSecrets(create(DiscoveryRequestSchema, { typeUrl: TypeUrl.Secret, resourceNames: names }), (err, res) => (err ? reject(err) : resolve(res))));
  return { fetch, client };
}

function trustedCaOf(res: DiscoveryResponse): string {
  assert.equal(res.resources.length, 1);
  const s = unpack(res.resources[0]!, SecretSchema);
  assert.equal(s.name, SYSTEM_ROOT_SECRET);
  assert.equal(s.type.case, 'validationContext');
  return Buffer.from(s.type.value.trustedCa!.specifier.value as Uint8Array).toString();
}

test('file-root:system is the SSL_CERT_FILE bundle, served before any workload certificate', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'mesh-sysroots-bundle-'));
  const bundle = join(dir, 'bundle.pem');
  const pem = (await meshCa('one.example')).rootPem + (await meshCa('two.example')).rootPem;
  writeFileSync(bundle, pem);
  const { fetch } = await agentSds(t, { SSL_CERT_FILE: bundle });
  assert.equal(trustedCaOf(await fetch([SYSTEM_ROOT_SECRET])), pem);
  assert.equal((await fetch(['ROOTCA'])).resources.length, 0, 'the mesh roots still wait for the workload certificate');
});

test('an unreadable SSL_CERT_FILE serves no file-root:system (no wider bundle instead)', async (t) => {
  const { fetch } = await agentSds(t, { SSL_CERT_FILE: '/nonexistent/bundle.pem' });
  assert.equal((await fetch([SYSTEM_ROOT_SECRET])).resources.length, 0);
  assert.throws(() => readSystemRoots({ SSL_CERT_FILE: '/nonexistent/bundle.pem' }), /SSL_CERT_FILE=\/nonexistent\/bundle\.pem: not a readable PEM certificate bundle/);
});

test('without SSL_CERT_FILE: the first distribution bundle that exists, else the roots bundled with Node', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'mesh-sysroots-os-'));
  const rhel = join(dir, 'ca-bundle.crt');
  const alpine = join(dir, 'cert.pem');
  writeFileSync(rhel, (await meshCa('rhel.example')).rootPem);
  writeFileSync(alpine, (await meshCa('alpine.example')).rootPem);
  const empty = join(dir, 'empty.crt');
  writeFileSync(empty, '');
  assert.equal(readSystemRoots({}, [join(dir, 'absent.crt'), empty, rhel, alpine]).source, rhel);
  const fallback = readSystemRoots({}, [join(dir, 'absent.crt')]);
  assert.equal(fallback.source, 'node');
  assert.equal(fallback.pem.match(/BEGIN CERTIFICATE/g)?.length, rootCertificates.length);
});

test('a rewritten bundle is pushed on the open stream; an unreadable one keeps the roots read before', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'mesh-sysroots-update-'));
  const bundle = join(dir, 'bundle.pem');
  /** As update-ca-certificates: a new file renamed into place. */
  const install = (text: string) => {
    writeFileSync(join(dir, 'new.tmp'), text);
    renameSync(join(dir, 'new.tmp'), bundle);
  };
  const first = (await meshCa('first.example')).rootPem;
  install(first);
  const { fetch, client } = await agentSds(t, { SSL_CERT_FILE: bundle });
  const pushed: string[] = [];
  const stream = client.streamSecrets();
  stream.on('data', (r: DiscoveryResponse) => {
    pushed.push(trustedCaOf(r));
    stream.write(create(DiscoveryRequestSchema, { typeUrl: TypeUrl.Secret, resourceNames: [SYSTEM_ROOT_SECRET], versionInfo: r.versionInfo, responseNonce: r.nonce }));
  });
  stream.on('error', () => undefined);
  t.after(() => stream.end());
  stream.write(create(DiscoveryRequestSchema, { typeUrl: TypeUrl.Secret, resourceNames: [SYSTEM_ROOT_SECRET] }));
  await eventually(() => assert.deepEqual(pushed, [first]), 10_000);

  install('not a certificate\n');
  const second = (await meshCa('second.example')).rootPem;
  install(second);
  await eventually(() => assert.equal(pushed.at(-1), second), 10_000);
  assert.ok(!pushed.includes('not a certificate\n'), 'the unreadable bundle was never served');
  assert.equal(trustedCaOf(await fetch([SYSTEM_ROOT_SECRET])), second);
});
