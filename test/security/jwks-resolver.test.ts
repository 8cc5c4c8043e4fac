// The JWKS resolver against real local issuers over HTTP and HTTPS (self-signed CA handed to it).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer as createHttp, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createHttps } from 'node:https';
import { createPrivateKey, webcrypto } from 'node:crypto';
import type { AddressInfo } from 'node:net';
// @peculiar/x509 needs the Reflect metadata API; the webhooks module provides a shim for it.
import 'reflect-metadata';
import * as x509 from '@peculiar/x509';
import { exportJWK, generateKeyPair } from 'jose';
import { JwksResolver } from '../../src/security/authn/jwks-resolver.js';
import { FAIL_CLOSED_JWKS } from '../../src/envoy/jwks.js';
import { counter } from '../../src/common/metrics.js';
import { eventually } from '../helpers/proc.js';
import { configureLogging } from '../../src/common/log.js';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

// Log lines go to a file, so the "logged once per reason" rule can be checked.
const LOG = join(mkdtempSync(join(tmpdir(), 'jwks-')), 'log.json');
configureLogging({ asJson: true, caller: [], outputLevel: 'info', stacktraceLevel: 'none', targets: [LOG] });
const logLines = (uri: string) =>
  readFileSync(LOG, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l) as { level: string; msg: string; jwksUri?: string }).filter((l) => l.jwksUri === uri);

async function jwks(...kids: string[]): Promise<string> {
  const keys = await Promise.all(kids.map(async (kid) => ({ ...(await exportJWK((await generateKeyPair('ES256')).publicKey)), kid })));
  return JSON.stringify({ keys });
}

/** An issuer whose answer the test changes: a body, a status, or a delay longer than the client waits. */
class Issuer {
  body = '';
  status = 200;
  delayMs = 0;
  hits = 0;
  constructor(readonly server: Server) {
    server.on('request', (req: IncomingMessage, res: ServerResponse) => this.handle(req, res));
  }
  private handle(_req: IncomingMessage, res: ServerResponse): void {
    this.hits++;
    const send = () => res.writeHead(this.status, { 'content-type': 'application/json' }).end(this.body);
    if (this.delayMs > 0) setTimeout(send, this.delayMs).unref();
    else send();
  }
  listen(port = 0): Promise<number> {
    return new Promise((resolve) => this.server.listen(port, '127.0.0.1', () => resolve((this.server.address() as AddressInfo).port)));
  }
  close(): Promise<void> {
    this.server.closeAllConnections();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }
}

async function selfSigned(): Promise<{ cert: string; key: string }> {
  const alg = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' };
  const keys = (await webcrypto.subtle.generateKey(alg, true, ['sign', 'verify'])) as webcrypto.CryptoKeyPair;
  const cert = await x509.X509CertificateGenerator.createSelfSigned({
    serialNumber: '01',
    name: 'CN=issuer.test',
    notBefore: new Date(Date.now() - 60_000),
    notAfter: new Date(Date.now() + 3_600_000),
    keys,
    signingAlgorithm: alg,
    extensions: [new x509.BasicConstraintsExtension(true, undefined, true), new x509.SubjectAlternativeNameExtension([{ type: 'ip', value: '127.0.0.1' }])],
  }, webcrypto as unknown as Parameters<typeof x509.X509CertificateGenerator.createSelfSigned>[1]);
  const pkcs8 = Buffer.from(await webcrypto.subtle.exportKey('pkcs8', keys.privateKey));
  return { cert: cert.toString('pem'), key: createPrivateKey({ key: pkcs8, format: 'der', type: 'pkcs8' }).export({ format: 'pem', type: 'pkcs8' }) as string };
}

const fetched = () => counter('pilot_jwks_resolver_network_fetch_success_total').get().then((m) => m.values[0]?.value ?? 0);
const failedFetches = () => counter('pilot_jwks_resolver_network_fetch_fail_total').get().then((m) => m.values[0]?.value ?? 0);
const kidsOf = (text: string) => (JSON.parse(text) as { keys: { kid?: string }[] }).keys.map((k) => k.kid);

test('HTTPS issuer: first use fails closed and fetches; the keys arrive, are inlined, and the server is notified', async (t) => {
  const tls = await selfSigned();
  const issuer = new Issuer(createHttps({ cert: tls.cert, key: tls.key }));
  issuer.body = await jwks('k1');
  const port = await issuer.listen();
  const uri = `https://127.0.0.1:${port}/jwks.json`;
  const changed: string[] = [];
  const resolver = new JwksResolver({ ca: tls.cert, onChange: (u) => changed.push(u) });
  t.after(async () => {
    resolver.close();
    await issuer.close();
  });
  const before = await fetched();
  assert.equal(resolver.lookup('iss', uri, 2000), FAIL_CLOSED_JWKS, 'nothing fetched yet: fail closed');
  await resolver.idle();
  assert.deepEqual(kidsOf(resolver.lookup('iss', uri, 2000)), ['k1']);
  assert.deepEqual(changed, [uri]);
  assert.equal(await fetched(), before + 1);
  assert.equal(issuer.hits, 1, 'cached: later lookups do not fetch');
  await resolver.firstFetches([uri]);
  assert.equal(issuer.hits, 1, 'firstFetches() after the first fetch returns at once');

  // A push can wait for a new issuer's first fetch instead of shipping the fail-closed set.
  const waiting = new JwksResolver({ ca: tls.cert });
  t.after(() => waiting.close());
  waiting.track([{ issuer: 'iss', jwksUri: uri, timeoutMs: 2000 }]);
  assert.deepEqual([...waiting.awaited()], [uri]);
  await waiting.firstFetches([uri]);
  assert.deepEqual(kidsOf(waiting.lookup('iss', uri, 2000)), ['k1']);
  assert.deepEqual([...waiting.awaited()], []);

  // Without the CA the issuer's certificate is not trusted.
  const untrusting = new JwksResolver();
  t.after(() => untrusting.close());
  await untrusting.resolve(uri, 2000);
  assert.equal(untrusting.status(uri)!.usable, false);
  assert.match(untrusting.status(uri)!.failure!, /fetch failed \(.*(CERT|SELF_SIGNED|certificate).*\)/i);
});

test('HTTP issuer down at start, up later: fail closed, count failures, retry with backoff, then notify', async (t) => {
  const issuer = new Issuer(createHttp());
  const port = await issuer.listen();
  await issuer.close();
  const uri = `http://127.0.0.1:${port}/jwks`;
  const changed: string[] = [];
  const resolver = new JwksResolver({ retryInitialMs: 20, retryMaxMs: 100, onChange: (u) => changed.push(u) });
  t.after(() => resolver.close());
  const failsBefore = await failedFetches();
  assert.equal(resolver.lookup('iss', uri, 1000), FAIL_CLOSED_JWKS);
  await eventually(async () => assert.ok((await failedFetches()) >= failsBefore + 2, 'retried'));
  assert.match(resolver.status(uri)!.failure!, /ECONNREFUSED/);
  assert.deepEqual(changed, []);
  assert.equal(logLines(uri).filter((l) => l.level === 'warn').length, 1, 'a repeating failure is logged once');

  const up = new Issuer(createHttp());
  up.body = await jwks('k1');
  await up.listen(port);
  t.after(() => up.close());
  await eventually(() => assert.equal(resolver.status(uri)!.usable, true), 5000);
  assert.deepEqual(kidsOf(resolver.lookup('iss', uri, 1000)), ['k1']);
  assert.deepEqual(changed, [uri]);
  assert.equal(resolver.status(uri)!.failure, undefined);
  assert.deepEqual(logLines(uri).map((l) => l.level), ['warn', 'info'], 'the recovery is logged');
});

test('key rotation: periodic refresh and an unknown kid both pick up the new keys; notified once per change', async (t) => {
  const issuer = new Issuer(createHttp());
  issuer.body = await jwks('k1');
  const uri = `http://127.0.0.1:${await issuer.listen()}/jwks`;
  const changed: string[] = [];
  const resolver = new JwksResolver({ refreshIntervalMs: 50, unknownKidCooldownMs: 60_000, onChange: (u) => changed.push(u) });
  t.after(async () => {
    resolver.close();
    await issuer.close();
  });
  await resolver.resolve(uri, 1000);
  resolver.lookup('iss', uri, 1000);
  await eventually(() => assert.ok(issuer.hits >= 3, 'refreshed periodically'));
  assert.equal(changed.length, 1, 'an unchanged key set is not a change');
  issuer.body = await jwks('k1', 'k2');
  await eventually(() => assert.deepEqual(resolver.status(uri)!.kids, ['k1', 'k2']));
  assert.equal(changed.length, 2);

  // Rotation noticed by a proxy before the periodic refresh: the unknown kid triggers a refetch.
  const slow = new JwksResolver({ refreshIntervalMs: 3_600_000, onChange: (u) => changed.push(u) });
  t.after(() => slow.close());
  issuer.body = await jwks('k2');
  slow.lookup('iss', uri, 1000);
  await slow.idle();
  issuer.body = await jwks('k2', 'k3');
  assert.equal(slow.refreshForUnknownKid('iss', 'k2'), false, 'a known kid is no reason to refetch');
  assert.equal(slow.refreshForUnknownKid('other-issuer', 'k3'), false, 'an issuer it does not serve');
  assert.equal(slow.refreshForUnknownKid('iss', 'k3'), true);
  await slow.idle();
  assert.deepEqual(slow.status(uri)!.kids, ['k2', 'k3']);
});

test('forged kid flood: at most one refetch per issuer per cooldown', async (t) => {
  const issuer = new Issuer(createHttp());
  issuer.body = await jwks('k1');
  const uri = `http://127.0.0.1:${await issuer.listen()}/jwks`;
  let now = 1_000_000;
  const resolver = new JwksResolver({ refreshIntervalMs: 3_600_000, unknownKidCooldownMs: 30_000, now: () => now });
  t.after(async () => {
    resolver.close();
    await issuer.close();
  });
  resolver.lookup('iss', uri, 1000);
  await resolver.idle();
  const base = issuer.hits;
  const started = Array.from({ length: 500 }, (_, i) => resolver.refreshForUnknownKid('iss', `forged-${i}`)).filter(Boolean).length;
  await resolver.idle();
  assert.equal(started, 1);
  assert.equal(issuer.hits, base + 1);
  now += 29_999;
  assert.equal(resolver.refreshForUnknownKid('iss', 'forged-x'), false, 'still within the cooldown');
  now += 1;
  assert.equal(resolver.refreshForUnknownKid('iss', 'forged-y'), true, 'the next window allows one more');
  await resolver.idle();
  assert.equal(issuer.hits, base + 2);
});

test('bad JSON and key sets without a usable key: fail closed at first, keep the last usable keys later', async (t) => {
  const issuer = new Issuer(createHttp());
  issuer.body = '{"keys": [';
  const uri = `http://127.0.0.1:${await issuer.listen()}/jwks`;
  const resolver = new JwksResolver({ retryInitialMs: 3_600_000, refreshIntervalMs: 3_600_000 });
  t.after(async () => {
    resolver.close();
    await issuer.close();
  });
  await resolver.resolve(uri, 1000);
  assert.equal(resolver.lookup('iss', uri, 1000), FAIL_CLOSED_JWKS);
  assert.match(resolver.status(uri)!.failure!, /^invalid JWKS: not JSON/);
  issuer.body = '{"keys":[{"kty":"RSA","n":"AQAB","e":"AQAB"}]}';
  await resolver.resolve(uri, 1000);
  assert.match(resolver.status(uri)!.failure!, /^invalid JWKS: no usable key \(keys\[0\]: RSA modulus/);
  issuer.status = 503;
  await resolver.resolve(uri, 1000);
  assert.match(resolver.status(uri)!.failure!, /^HTTP status 503$/);
  assert.equal(resolver.lookup('iss', uri, 1000), FAIL_CLOSED_JWKS);

  issuer.status = 200;
  issuer.body = await jwks('good');
  await resolver.resolve(uri, 1000);
  assert.deepEqual(kidsOf(resolver.lookup('iss', uri, 1000)), ['good']);
  issuer.body = 'garbage';
  await resolver.resolve(uri, 1000);
  assert.match(resolver.status(uri)!.failure!, /not JSON/);
  assert.deepEqual(kidsOf(resolver.lookup('iss', uri, 1000)), ['good'], 'a failed refresh keeps the last usable keys');
});

test('a server slower than the rule timeout is a failure, not a hang', async (t) => {
  const issuer = new Issuer(createHttp());
  issuer.body = await jwks('k1');
  issuer.delayMs = 5_000;
  const uri = `http://127.0.0.1:${await issuer.listen()}/jwks`;
  const resolver = new JwksResolver({ retryInitialMs: 3_600_000 });
  t.after(async () => {
    resolver.close();
    await issuer.close();
  });
  const failsBefore = await failedFetches();
  resolver.lookup('iss', uri, 150);
  await resolver.idle();
  assert.match(resolver.status(uri)!.failure!, /^no answer within 150ms$/);
  assert.equal(resolver.lookup('iss', uri, 150), FAIL_CLOSED_JWKS);
  assert.equal(await failedFetches(), failsBefore + 1);
  assert.match((await (async () => {
    const r = new JwksResolver();
    t.after(() => r.close());
    await r.resolve('ftp://127.0.0.1/jwks');
    return r.status('ftp://127.0.0.1/jwks')!.failure!;
  })()), /not an http or https URL/);
});

test('a jwksUri no policy references any more stops being refreshed and retried; one referenced again starts afresh', async (t) => {
  const kept = new Issuer(createHttp());
  const dropped = new Issuer(createHttp());
  const down = new Issuer(createHttp());
  kept.body = dropped.body = await jwks('k1');
  down.status = 503;
  const [keptUri, droppedUri, downUri] = await Promise.all([kept, dropped, down].map(async (i) => `http://127.0.0.1:${await i.listen()}/jwks`));
  const changed: string[] = [];
  const resolver = new JwksResolver({ refreshIntervalMs: 20, retryInitialMs: 20, retryMaxMs: 20, unknownKidCooldownMs: 60_000, onChange: (u) => changed.push(u) });
  t.after(async () => {
    resolver.close();
    await Promise.all([kept, dropped, down].map((i) => i.close()));
  });
  resolver.lookup('iss-kept', keptUri, 1000);
  resolver.lookup('iss-dropped', droppedUri, 1000);
  resolver.lookup('iss-down', downUri, 1000);
  await eventually(() => assert.ok(dropped.hits >= 2 && down.hits >= 2 && kept.hits >= 2, 'all three are refreshed or retried'));
  assert.equal(resolver.refreshForUnknownKid('iss-dropped', 'k9'), true, 'starts the cooldown of the dropped issuer');

  // The config changed: only keptUri is still referenced.
  resolver.retain(new Set([keptUri]));
  const [droppedAt, downAt, keptAt] = [dropped.hits, down.hits, kept.hits];
  dropped.body = await jwks('k2'); // a refresh of the dropped uri would now report a change
  assert.deepEqual(resolver.uris(), [keptUri]);
  assert.equal(resolver.status(droppedUri), undefined);
  assert.equal(resolver.refreshForUnknownKid('iss-dropped', 'k9'), false, 'an issuer no policy names is never fetched for');
  // Time passes (the kept uri is refreshed many times); the others get at most a request already under way.
  await eventually(() => assert.ok(kept.hits >= keptAt + 5, 'the kept uri goes on being refreshed'));
  assert.ok(dropped.hits <= droppedAt + 1, `the dropped uri is not refreshed (${dropped.hits - droppedAt} more requests)`);
  assert.ok(down.hits <= downAt + 1, `the failing dropped uri is not retried (${down.hits - downAt} more requests)`);
  assert.deepEqual(changed.filter((u) => u === droppedUri), [droppedUri], 'no change is reported for a dropped uri');

  // Referenced again: a new first fetch (fail closed until it arrives), and its cooldown starts afresh.
  const before = dropped.hits;
  assert.equal(resolver.lookup('iss-dropped', droppedUri, 1000), FAIL_CLOSED_JWKS);
  await eventually(() => assert.equal(resolver.status(droppedUri)?.usable, true, 'fetched again'));
  assert.ok(dropped.hits > before);
  assert.deepEqual(resolver.status(droppedUri)!.kids, ['k2']);
  assert.equal(resolver.refreshForUnknownKid('iss-dropped', 'k9'), true, 'the old cooldown was forgotten with the issuer');
});
