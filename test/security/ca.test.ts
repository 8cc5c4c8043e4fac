// The mesh CA in a real pilot-discovery process, over real gRPC and TLS on the secured port.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CaError } from '../../src/agent/sds/ca-client.js';
import { caFixture, issue, sampleIssuer, startCaDiscovery } from '../helpers/mesh-ca.js';
import { discoveryArgs, eventually, run } from '../helpers/proc.js';

const ID = 'spiffe://cluster.local/ns/shop/sa/cart';

function roots(chain: string[]): X509Certificate[] {
  return chain.map((p) => new X509Certificate(p)).filter((c) => c.checkIssued(c) && c.verify(c.publicKey));
}

test('the CA signs a CSR for the caller\'s identity, refuses a forged one and counts both', async (t) => {
  const { issuer, d } = await caFixture(t);
  const token = await issuer.token('shop', 'cart');

  const ok = await issue(d, ID, { token }, 7200);
  assert.equal(ok.leaf.subjectAltName, `URI:${ID}`);
  const [root] = roots(ok.chain);
  assert.ok(root, 'the chain ends with the root');
  assert.ok(ok.leaf.verify(root.publicKey), 'the leaf is signed by the root');
  assert.equal(root.toString().trim(), new X509Certificate(d.rootPem()).toString().trim());
  const lifetime = (Date.parse(ok.leaf.validTo) - Date.parse(ok.leaf.validFrom)) / 1000;
  assert.equal(lifetime, 7200, 'the requested 2h');

  await assert.rejects(issue(d, 'spiffe://cluster.local/ns/bank/sa/vault', { token }), (e: CaError) => {
    assert.equal(e.code, 7, 'PERMISSION_DENIED');
    assert.match(e.message, /asks for spiffe:\/\/cluster\.local\/ns\/bank\/sa\/vault but the caller \(jwt\) is spiffe:\/\/cluster\.local\/ns\/shop\/sa\/cart/);
    return true;
  });
  await assert.rejects(issue(d, ID, { token: await issuer.token('shop', 'cart', 'someone-else') }), (e: CaError) => e.code === 16 && /token rejected/.test(e.message));
  await assert.rejects(issue(d, ID, { token: 'not-a-jwt' }), (e: CaError) => e.code === 16 && /not a JWT/.test(e.message));

  // Renewal: the current certificate is the credential.
  const renewed = await issue(d, ID, { keyPem: ok.keys.pem, chainPem: ok.chain.join('') });
  assert.equal(renewed.leaf.subjectAltName, `URI:${ID}`);
  await assert.rejects(issue(d, 'spiffe://cluster.local/ns/shop/sa/admin', { keyPem: ok.keys.pem, chainPem: ok.chain.join('') }), (e: CaError) => e.code === 7 && /caller \(certificate\)/.test(e.message));

  assert.equal(await d.metric('authority_server_csr_count'), 6);
  assert.equal(await d.metric('authority_server_success_cert_issuance_count'), 2);
  assert.equal(await d.metric('authority_server_authentication_failure_count'), 4);
  const expiry = await d.metric('authority_server_root_cert_expiry_timestamp');
  assert.equal(expiry, Math.floor(Date.parse(root.validTo) / 1000));
});

test('mesh config trustDomain: the CA issues identities in it (over TRUST_DOMAIN), its root names it; a CSR under a former trust domain gets the renamed identity, another is refused naming both', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'mesh-trust-domain-'));
  writeFileSync(join(dir, 'mesh.yaml'), 'trustDomain: corp.example\ntrustDomainAliases: [old.example]\n');
  const { issuer, d } = await caFixture(t, { TRUST_DOMAIN: 'env.example' }, discoveryArgs(undefined, { meshConfig: join(dir, 'mesh.yaml') }));
  const token = await issuer.token('shop', 'cart');
  const ok = await issue(d, 'spiffe://corp.example/ns/shop/sa/cart', { token });
  assert.equal(ok.leaf.subjectAltName, 'URI:spiffe://corp.example/ns/shop/sa/cart');
  assert.equal(new X509Certificate(d.rootPem()).subject, 'O=corp.example');
  // Agents started before the rename still ask under their TRUST_DOMAIN (an alias, or cluster.local):
  // the caller's identity in the mesh's trust domain is issued, as the Go mesh's CA signs the caller's.
  for (const former of [ID, 'spiffe://old.example/ns/shop/sa/cart']) {
    const renamed = await issue(d, former, { token });
    assert.equal(renamed.leaf.subjectAltName, 'URI:spiffe://corp.example/ns/shop/sa/cart', former);
  }
  await assert.rejects(issue(d, 'spiffe://other.example/ns/shop/sa/cart', { token }), (e: CaError) => {
    assert.equal(e.code, 7, 'PERMISSION_DENIED');
    assert.match(e.message, /asks for spiffe:\/\/other\.example\/ns\/shop\/sa\/cart but the caller \(jwt\) is spiffe:\/\/corp\.example\/ns\/shop\/sa\/cart/);
    return true;
  });
  await assert.rejects(issue(d, 'spiffe://old.example/ns/shop/sa/admin', { token }), (e: CaError) => e.code === 7 && /asks for spiffe:\/\/old\.example\/ns\/shop\/sa\/admin/.test(e.message), 'a former trust domain does not widen the account');
});

test('a mesh config trustDomain that is not a trust domain name stops pilot-discovery, naming the field', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'mesh-trust-domain-'));
  writeFileSync(join(dir, 'mesh.yaml'), 'trustDomain: spiffe://corp.example\n');
  const r = await run('pilot-discovery', discoveryArgs(undefined, { meshConfig: join(dir, 'mesh.yaml') }));
  assert.notEqual(r.code, 0);
  assert.match(r.stdout + r.stderr, /mesh\.yaml: trustDomain: expected a SPIFFE trust domain name .*got "spiffe:\/\/corp\.example"/);
});

test('TTL: above MAX_WORKLOAD_CERT_TTL is clamped, non-positive takes DEFAULT_WORKLOAD_CERT_TTL', async (t) => {
  const { issuer, d } = await caFixture(t, { MAX_WORKLOAD_CERT_TTL: '2h', DEFAULT_WORKLOAD_CERT_TTL: '30m' });
  const token = await issuer.token('shop', 'cart');
  const life = (c: X509Certificate): number => (Date.parse(c.validTo) - Date.now()) / 1000;
  const clamped = await issue(d, ID, { token }, 24 * 3600);
  assert.ok(life(clamped.leaf) <= 7200 && life(clamped.leaf) > 7000, `clamped to 2h, got ${life(clamped.leaf)}s`);
  const defaulted = await issue(d, ID, { token }, 0);
  assert.ok(life(defaulted.leaf) <= 1800 && life(defaulted.leaf) > 1700, `default 30m, got ${life(defaulted.leaf)}s`);
});

test('the self-signed root survives a discovery restart; certificates issued before still verify', async (t) => {
  const issuer = await sampleIssuer();
  t.after(() => issuer.server.close());
  const first = await startCaDiscovery({ TOKEN_ISSUER: issuer.url });
  const token = await issuer.token('shop', 'cart');
  const before = await issue(first, ID, { token });
  const rootBefore = first.rootPem();
  await first.proc.stop();

  const second = await startCaDiscovery({ TOKEN_ISSUER: issuer.url }, first.caDir);
  t.after(() => second.proc.stop());
  assert.match(second.proc.output, /using the self-signed CA root kept in/);
  assert.equal(second.rootPem(), rootBefore);
  const after = await issue(second, ID, { token });
  const [root] = roots(after.chain);
  assert.ok(before.leaf.verify(root!.publicKey), 'the old leaf verifies against the root served after the restart');
  assert.ok(readFileSync(join(first.caDir, 'ca-key.pem'), 'utf8').includes('PRIVATE KEY'));
});

test('root rotation inside the grace period: the new root signs, both roots are trusted', async (t) => {
  const { issuer, d } = await caFixture(t, {
    AUTHORITY_SELF_SIGNED_CA_CERT_TTL: '30s',
    AUTHORITY_SELF_SIGNED_ROOT_CERT_GRACE_PERIOD_PERCENTILE: '50',
    AUTHORITY_SELF_SIGNED_ROOT_CERT_CHECK_INTERVAL: '500ms',
    AUTHORITY_ENABLE_JITTER_FOR_ROOT_CERT_ROTATOR: 'false',
  });
  const token = await issuer.token('shop', 'cart');
  const rotations = (): number => (d.proc.output.match(/CA root rotated/g) ?? []).length;
  const before = await issue(d, ID, { token });
  const seen = rotations();
  const [oldRoot] = roots(before.chain);
  await eventually(() => assert.ok(rotations() > seen, 'no rotation yet'), 40_000);
  const after = await issue(d, ID, { token });
  const trusted = roots(after.chain);
  const [newRoot] = trusted;
  assert.notEqual(newRoot!.fingerprint256, oldRoot!.fingerprint256, 'new certificates come from a new root');
  assert.ok(after.leaf.verify(newRoot!.publicKey));
  assert.ok(trusted.some((r) => r.fingerprint256 === oldRoot!.fingerprint256), 'the old root is still trusted');
  assert.ok(before.leaf.verify(oldRoot!.publicKey), 'certificates of the old root stay verifiable');
  assert.ok((d.rootPem().match(/BEGIN CERTIFICATE/g) ?? []).length >= 2, 'the persisted bundle has both roots');
});

/** Runs openssl (Debian's), failing the test with its output when it fails. */
function openssl(args: string[], cwd: string): string {
  const r = spawnSync('openssl', args, { cwd, encoding: 'utf8' });
  assert.equal(r.status, 0, `openssl ${args.join(' ')}: ${r.stderr}`);
  return r.stdout;
}

/** A root and an intermediate made by openssl, laid out as the plugged-in CA directory. */
function pluggedInCa(): string {
  const dir = mkdtempSync(join(tmpdir(), 'mesh-cacerts-'));
  writeFileSync(join(dir, 'ext.cnf'), '[ca]\nbasicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign,digitalSignature\n');
  openssl(['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'root-key.pem', '-out', 'root-cert.pem', '-days', '30', '-subj', '/O=cluster.local/CN=Root CA', '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign'], dir);
  openssl(['req', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', 'ca-key.pem', '-out', 'ca.csr', '-subj', '/O=cluster.local/CN=Intermediate CA'], dir);
  openssl(['x509', '-req', '-in', 'ca.csr', '-CA', 'root-cert.pem', '-CAkey', 'root-key.pem', '-CAcreateserial', '-out', 'ca-cert.pem', '-days', '20', '-extfile', 'ext.cnf', '-extensions', 'ca'], dir);
  writeFileSync(join(dir, 'cert-chain.pem'), readFileSync(join(dir, 'ca-cert.pem'), 'utf8') + readFileSync(join(dir, 'root-cert.pem'), 'utf8'));
  return dir;
}

test('a plugged-in intermediate CA signs workload certificates that openssl verifies up to the root', async (t) => {
  const cacerts = pluggedInCa();
  const { issuer, d } = await caFixture(t, { ROOT_CA_DIR: cacerts });
  assert.match(d.proc.output, /using the plugged-in CA of .*Intermediate CA/);
  const got = await issue(d, ID, { token: await issuer.token('shop', 'cart') });
  assert.equal(got.chain.length, 3, 'leaf, intermediate, root');
  const out = mkdtempSync(join(tmpdir(), 'mesh-leaf-'));
  writeFileSync(join(out, 'leaf.pem'), got.chain[0]!);
  writeFileSync(join(out, 'untrusted.pem'), got.chain[1]!);
  const verdict = openssl(['verify', '-CAfile', join(cacerts, 'root-cert.pem'), '-untrusted', 'untrusted.pem', 'leaf.pem'], out);
  assert.match(verdict, /leaf\.pem: OK/);
  // The same leaf without the intermediate does not verify: the chain really goes through it.
  const r = spawnSync('openssl', ['verify', '-CAfile', join(cacerts, 'root-cert.pem'), 'leaf.pem'], { cwd: out, encoding: 'utf8' });
  assert.notEqual(r.status, 0);
});

test('a plugged-in CA whose key does not match its certificate stops the discovery server, naming the files', async () => {
  const cacerts = pluggedInCa();
  openssl(['genpkey', '-algorithm', 'EC', '-pkeyopt', 'ec_paramgen_curve:P-256', '-out', 'ca-key.pem'], cacerts);
  const r = await run('pilot-discovery', discoveryArgs(undefined), { env: { ROOT_CA_DIR: cacerts, AUTHORITY_SELF_SIGNED_CA_DIR: mkdtempSync(join(tmpdir(), 'mesh-ca-')) }, timeoutMs: 60_000 });
  assert.notEqual(r.code, 0);
  assert.match(r.stdout + r.stderr, /ca-key\.pem does not match ca-cert\.pem/);
});
