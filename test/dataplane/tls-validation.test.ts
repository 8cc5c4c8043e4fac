// CertificateValidationContext as mesh-proxy's TLS contexts honour it, with real handshakes on
// loopback: certificate hash and SPKI pins, CRLs (inline and from a file), ACCEPT_UNTRUSTED, on
// the server side (a listener's DownstreamTlsContext, node:tls clients) and the client side (a
// cluster's UpstreamTlsContext against a node:tls server); malformed pins and CRLs are refused
// naming the field.
import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, X509Certificate } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { connect as netConnect, createServer as netServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect as tlsConnect, createServer as tlsServer, type TLSSocket } from 'node:tls';
import { create, type MessageInitShape } from '@bufbuild/protobuf';
import { CertificateValidationContext_TrustChainVerification as TrustChain, type CertificateValidationContextSchema } from '../../src/gen/envoy/extensions/transport_sockets/tls/v3/common_pb.js';
import { DownstreamTlsContextSchema, UpstreamTlsContextSchema } from '../../src/gen/envoy/extensions/transport_sockets/tls/v3/tls_pb.js';
import { DownstreamTls, sslStats, type SslStats } from '../../src/dataplane/tls/downstream.js';
import { SecretManager } from '../../src/dataplane/tls/secrets.js';
import { UpstreamTls } from '../../src/dataplane/tls/upstream.js';
import { StatsStore } from '../../src/dataplane/stats.js';
import { meshCa, spiffe, type MeshCa } from './tls-fixtures.js';

type ValidationInit = MessageInitShape<typeof CertificateValidationContextSchema>;
interface Creds {
  readonly keyPem: string;
  readonly chainPem: string;
}

const inline = (value: string) => ({ specifier: { case: 'inlineString' as const, value } });
const certificate = (c: Creds) => ({ certificateChain: inline(c.chainPem), privateKey: inline(c.keyPem) });
const hashOf = (c: Creds) => new X509Certificate(c.chainPem).fingerprint256;
const spkiOf = (c: Creds) => createHash('sha256').update(new X509Certificate(c.chainPem).publicKey.export({ type: 'spki', format: 'der' })).digest('base64');
const serialOf = (c: Creds) => new X509Certificate(c.chainPem).serialNumber;

function stats(): SslStats {
  return sslStats(new StatsStore(), 'listener', { name: 'envoy_listener_address', value: 'test' });
}

/** A listener's TLS: each verified connection is answered `ok`. */
async function server(t: TestContext, serverCreds: Creds, validation: ValidationInit | undefined, requireClientCertificate = false): Promise<{ port: number; stats: SslStats }> {
  const s = stats();
  const ctx = create(DownstreamTlsContextSchema, {
    commonTlsContext: { tlsCertificates: [certificate(serverCreds)], ...(validation ? { validationContextType: { case: 'validationContext', value: validation } } : {}) },
    requireClientCertificate,
  });
  const tls = new DownstreamTls(ctx, 'listener', new SecretManager(), s);
  const srv = netServer((raw) => tls.handshake(raw, (secured) => secured.end('ok')));
  await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', resolve));
  t.after(() => srv.close());
  return { port: (srv.address() as { port: number }).port, stats: s };
}

/** A client (with `creds`, or none): whether the server answered it. */
function served(port: number, creds?: Creds): Promise<boolean> {
  return new Promise((resolve) => {
    const c = tlsConnect({ host: '127.0.0.1', port, rejectUnauthorized: false, ...(creds ? { key: creds.keyPem, cert: creds.chainPem } : {}) });
    let text = '';
    c.on('data', (d: Buffer) => (text += d.toString()));
    c.on('error', () => undefined);
    c.on('close', () => resolve(text === 'ok'));
  });
}

/** A cluster's TLS towards a node:tls server presenting `serverCreds`: whether the connection was secured. */
async function upstream(t: TestContext, serverCreds: Creds, validation: ValidationInit): Promise<{ connected: boolean; stats: SslStats }> {
  const srv = tlsServer({ key: serverCreds.keyPem, cert: serverCreds.chainPem }, (s) => s.end());
  await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', resolve));
  t.after(() => srv.close());
  const s = stats();
  const tls = new UpstreamTls(create(UpstreamTlsContextSchema, { commonTlsContext: { validationContextType: { case: 'validationContext', value: validation } } }), 'cluster', new SecretManager(), s);
  const socket = tls.wrap(netConnect((srv.address() as { port: number }).port, '127.0.0.1'));
  const connected = await new Promise<boolean>((resolve) => {
    socket.once('secureConnect', () => resolve(true));
    socket.once('error', () => resolve(false));
  });
  (socket as TLSSocket).destroy();
  return { connected, stats: s };
}

async function certs(): Promise<{ ca: MeshCa; other: MeshCa; serverCreds: Creds; alice: Creds; bob: Creds }> {
  const ca = await meshCa();
  return { ca, other: await meshCa('other.domain'), serverCreds: await ca.issue(spiffe('server'), ['server.example.com']), alice: await ca.issue(spiffe('alice')), bob: await ca.issue(spiffe('bob')) };
}

test('downstream: certificate hash and SPKI pins let only the pinned client in, with or without a trusted CA', async (t) => {
  const { ca, serverCreds, alice, bob } = await certs();
  // The hash with colons (as openssl prints it) and the SPKI pin of another certificate: either matching passes.
  const pinned = await server(t, serverCreds, { trustedCa: inline(ca.rootPem), verifyCertificateHash: [hashOf(alice)], verifyCertificateSpki: [spkiOf(serverCreds)] });
  assert.equal(await served(pinned.port, alice), true, 'the pinned certificate');
  assert.equal(await served(pinned.port, bob), false, 'another certificate of the same CA');
  assert.equal(pinned.stats.fail_verify_cert_hash.value, 1);
  assert.equal(await served(pinned.port), false, 'pins make a client certificate required');
  assert.equal(pinned.stats.fail_verify_no_cert.value, 1);

  // Pins alone (no CA), hex without colons, and SPKI: the pin is the verification.
  const bare = await server(t, serverCreds, { verifyCertificateHash: [hashOf(bob).replaceAll(':', '').toLowerCase()] });
  assert.equal(await served(bare.port, bob), true);
  assert.equal(await served(bare.port, alice), false);
  const spki = await server(t, serverCreds, { verifyCertificateSpki: [spkiOf(alice)] });
  assert.equal(await served(spki.port, alice), true);
  assert.equal(await served(spki.port, bob), false);
  assert.equal(spki.stats.fail_verify_cert_hash.value, 1);
});

test('downstream: a CRL (inline or from a file) refuses a revoked client certificate', async (t) => {
  const { ca, serverCreds, alice, bob } = await certs();
  const crl = await ca.crl([serialOf(bob)]);
  const withCrl = await server(t, serverCreds, { trustedCa: inline(ca.rootPem), crl: inline(crl) }, true);
  assert.equal(await served(withCrl.port, alice), true, 'not revoked');
  assert.equal(await served(withCrl.port, bob), false, 'revoked');
  assert.equal(withCrl.stats.fail_verify_error.value, 1);

  const file = join(mkdtempSync(join(tmpdir(), 'tls-crl-')), 'ca.crl');
  writeFileSync(file, await ca.crl([serialOf(alice)]));
  const fromFile = await server(t, serverCreds, { trustedCa: inline(ca.rootPem), crl: { specifier: { case: 'filename', value: file } } }, true);
  assert.equal(await served(fromFile.port, alice), false);
  assert.equal(await served(fromFile.port, bob), true);
  // A CRL inside the CA bundle applies too.
  const inBundle = await server(t, serverCreds, { trustedCa: inline(`${ca.rootPem}\n${crl}`) }, true);
  assert.equal(await served(inBundle.port, bob), false);
});

test('downstream: ACCEPT_UNTRUSTED serves a client whatever its certificate, counting the failures', async (t) => {
  const { ca, other, serverCreds, alice } = await certs();
  const stranger = await other.issue(spiffe('stranger'));
  const strict = await server(t, serverCreds, { trustedCa: inline(ca.rootPem) }, true);
  assert.equal(await served(strict.port, stranger), false);
  const lax = await server(t, serverCreds, { trustedCa: inline(ca.rootPem), trustChainVerification: TrustChain.ACCEPT_UNTRUSTED, verifyCertificateHash: [hashOf(alice)] });
  assert.equal(await served(lax.port, stranger), true, 'another CA');
  assert.equal(lax.stats.fail_verify_error.value, 1);
  assert.equal(await served(lax.port, await ca.issue(spiffe('carol'))), true, 'a hash mismatch');
  assert.equal(lax.stats.fail_verify_cert_hash.value, 1);
  assert.equal(await served(lax.port), true, 'no certificate (not required)');
});

test('upstream: CRL, pins and ACCEPT_UNTRUSTED on the server certificate', async (t) => {
  const { ca, other, serverCreds, alice } = await certs();
  const root = inline(ca.rootPem);
  assert.equal((await upstream(t, serverCreds, { trustedCa: root })).connected, true);
  const revoked = await upstream(t, serverCreds, { trustedCa: root, crl: inline(await ca.crl([serialOf(serverCreds)])) });
  assert.equal(revoked.connected, false, 'a revoked server certificate');
  assert.equal(revoked.stats.fail_verify_error.value, 1);
  assert.equal((await upstream(t, serverCreds, { trustedCa: root, crl: inline(await ca.crl([serialOf(alice)])) })).connected, true, 'another one revoked');

  const wrongPin = await upstream(t, serverCreds, { trustedCa: root, verifyCertificateHash: [hashOf(alice)] });
  assert.equal(wrongPin.connected, false);
  assert.equal(wrongPin.stats.fail_verify_cert_hash.value, 1);
  assert.equal((await upstream(t, serverCreds, { trustedCa: root, verifyCertificateSpki: [spkiOf(serverCreds)] })).connected, true);

  // insecureSkipVerify as the Go mesh writes it: a CA that did not sign the server, ACCEPT_UNTRUSTED.
  const untrusted = await upstream(t, serverCreds, { trustedCa: inline(other.rootPem), trustChainVerification: TrustChain.ACCEPT_UNTRUSTED });
  assert.equal(untrusted.connected, true);
  assert.equal(untrusted.stats.fail_verify_error.value, 1);
  assert.equal((await upstream(t, serverCreds, { trustedCa: inline(other.rootPem) })).connected, false, 'the same CA without ACCEPT_UNTRUSTED');
  assert.equal((await upstream(t, serverCreds, { trustChainVerification: TrustChain.ACCEPT_UNTRUSTED })).connected, true, 'no CA at all');
});

test('malformed pins, unparsable CRLs and CRLs without a CA are refused naming the field', async () => {
  const { ca, serverCreds } = await certs();
  const down = (validation: ValidationInit) => () =>
    new DownstreamTls(create(DownstreamTlsContextSchema, { commonTlsContext: { tlsCertificates: [certificate(serverCreds)], validationContextType: { case: 'validationContext', value: validation } } }), 'l', new SecretManager(), stats());
  const root = inline(ca.rootPem);
  assert.throws(down({ trustedCa: root, verifyCertificateHash: ['abcd'] }), /l\.common_tls_context\.validation_context\.verify_certificate_hash\[0\]: "abcd" is not a hex-encoded SHA-256/);
  assert.throws(down({ trustedCa: root, verifyCertificateHash: [hashOf(serverCreds), `${hashOf(serverCreds).slice(0, -1)}Z`] }), /verify_certificate_hash\[1\]/);
  assert.throws(down({ trustedCa: root, verifyCertificateSpki: ['bm90IGEgaGFzaA=='] }), /verify_certificate_spki\[0\]: "bm90IGEgaGFzaA==" is not a base64-encoded SHA-256/);
  assert.throws(down({ trustedCa: root, crl: inline('not a crl') }), /validation_context\.crl: holds no PEM CRL/);
  assert.throws(down({ trustedCa: root, crl: inline('-----BEGIN X509 CRL-----\nAAAA\n-----END X509 CRL-----\n') }), /validation_context\.crl: CRL 1 does not parse/);
  assert.throws(down({ crl: inline(await ca.crl([])) }), /validation_context\.crl: a CRL needs trusted_ca/);
  assert.throws(down({ matchTypedSubjectAltNames: [{ sanType: 3, matcher: { matchPattern: { case: 'exact', value: 'x' } } }] }), /SAN or certificate pin checks without trusted_ca are refused/);
  assert.throws(
    () => new UpstreamTls(create(UpstreamTlsContextSchema, { commonTlsContext: { validationContextType: { case: 'validationContext', value: { verifyCertificateHash: [hashOf(serverCreds)] } } } }), 'c', new SecretManager(), stats()),
    /c\.common_tls_context\.validation_context: certificate pins without trusted_ca are not supported on upstream connections/,
  );
});

test('several certificates: the client\'s signature algorithms pick RSA or ECDSA; two of one key type are refused', async (t) => {
  const ca = await meshCa();
  const rsa = await ca.issue(spiffe('server'), [], { kind: 'RSA', bits: 2048 });
  const ecdsa = await ca.issue(spiffe('server'));
  const tls = new DownstreamTls(create(DownstreamTlsContextSchema, { commonTlsContext: { tlsCertificates: [certificate(rsa), certificate(ecdsa)] } }), 'l', new SecretManager(), stats());
  const srv = netServer((raw) => tls.handshake(raw, (secured) => secured.end('ok')));
  await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', resolve));
  t.after(() => srv.close());
  const presented = (sigalgs: string) =>
    new Promise<string>((resolve, reject) => {
      const c = tlsConnect({ host: '127.0.0.1', port: (srv.address() as { port: number }).port, ca: ca.rootPem, servername: 'x', checkServerIdentity: () => undefined, sigalgs }, () => {
        resolve(c.getPeerX509Certificate()!.fingerprint256);
        c.destroy();
      });
      c.on('error', reject);
    });
  assert.equal(await presented('rsa_pss_rsae_sha256:rsa_pkcs1_sha256'), hashOf(rsa));
  assert.equal(await presented('ecdsa_secp256r1_sha256'), hashOf(ecdsa));

  const other = await ca.issue(spiffe('other'));
  assert.throws(
    () => new DownstreamTls(create(DownstreamTlsContextSchema, { commonTlsContext: { tlsCertificates: [certificate(ecdsa), certificate(other)] } }), 'l', new SecretManager(), stats()),
    /l\.common_tls_context\.tls_certificates: two certificates with EC keys/,
  );
});
