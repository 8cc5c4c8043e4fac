import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createRemoteJWKSet, jwtVerify, errors } from 'jose';
import { startHttpbin } from '../../samples/apps/httpbin.js';
import { startIssuer } from '../../samples/apps/issuer.js';

test('httpbin echoes headers, origin, status codes and bodies', async () => {
  const { server, address } = await startHttpbin(0);
  const base = `http://127.0.0.1:${address.port}`;
  try {
    const h = (await (await fetch(`${base}/headers`, { headers: { 'x-request-id': 'abc' } })).json()) as { headers: Record<string, string> };
    assert.equal(h.headers['X-Request-Id'], 'abc');
    const ip = (await (await fetch(`${base}/ip`)).json()) as { origin: string };
    assert.match(ip.origin, /127\.0\.0\.1/);
    assert.equal((await fetch(`${base}/status/418`)).status, 418);
    const any = (await (await fetch(`${base}/anything/x?a=1`, { method: 'POST', body: 'hello' })).json()) as Record<string, unknown>;
    assert.deepEqual([any.method, any.url, any.args, any.data], ['POST', '/anything/x?a=1', { a: '1' }, 'hello']);
    assert.equal((await fetch(`${base}/nope`)).status, 404);
  } finally {
    server.close();
  }
});

test('the sample issuer mints tokens its JWKS verifies, with list claims, expiry and audience', async () => {
  const state = join(mkdtempSync(join(tmpdir(), 'issuer-')), 'key.json');
  const first = await startIssuer(state, 0);
  const base = `http://127.0.0.1:${first.address.port}`;
  const jwks = createRemoteJWKSet(new URL(`${base}/.well-known/jwks.json`));
  const kidOf = async (port: number) => ((await (await fetch(`http://127.0.0.1:${port}/.well-known/jwks.json`)).json()) as { keys: Array<{ kid: string }> }).keys.map((k) => k.kid);
  const firstKids = await kidOf(first.address.port);
  try {
    const token = (await (await fetch(`${base}/token?sub=alice&groups=admins,dev&scope=read&claim.team=blue&aud=httpbin`)).text()).trim();
    const { payload } = await jwtVerify(token, jwks, { issuer: first.issuer, audience: 'httpbin' });
    assert.equal(payload.sub, 'alice');
    assert.deepEqual(payload.groups, ['admins', 'dev']);
    assert.deepEqual(payload.scope, ['read']);
    assert.equal(payload.team, 'blue');
    const expired = (await (await fetch(`${base}/token?exp=-1h`)).text()).trim();
    await assert.rejects(jwtVerify(expired, jwks), errors.JWTExpired);
    assert.equal((await fetch(`${base}/token?exp=soon`)).status, 400);
  } finally {
    first.server.close();
  }
  // The key survives a restart, so tokens minted before still verify.
  const second = await startIssuer(state, 0);
  try {
    assert.deepEqual(await kidOf(second.address.port), firstKids);
  } finally {
    second.server.close();
  }
});

test('the sample issuer rotates its key: new tokens use the new kid, old tokens still verify, across a restart', async () => {
  const state = join(mkdtempSync(join(tmpdir(), 'issuer-')), 'key.json');
  const first = await startIssuer(state, 0);
  const base = `http://127.0.0.1:${first.address.port}`;
  const jwksUrl = new URL(`${base}/.well-known/jwks.json`);
  const kids = async (b: string) => ((await (await fetch(`${b}/.well-known/jwks.json`)).json()) as { keys: Array<{ kid: string }> }).keys.map((k) => k.kid);
  const kidOfToken = (t: string) => (JSON.parse(Buffer.from(t.split('.')[0]!, 'base64url').toString()) as { kid: string }).kid;
  const stats = async (b: string) => ((await (await fetch(`${b}/stats`)).json()) as { jwksRequests: number }).jwksRequests;
  let oldKid: string;
  let newKid: string;
  let oldToken: string;
  try {
    oldToken = (await (await fetch(`${base}/token?sub=alice`)).text()).trim();
    [oldKid] = (await kids(base)) as [string];
    assert.equal((await fetch(`${base}/rotate`)).status, 405, 'rotation needs POST');
    const rotated = await fetch(`${base}/rotate`, { method: 'POST' });
    assert.equal(rotated.status, 200);
    newKid = (await rotated.text()).trim();
    assert.notEqual(newKid, oldKid);
    assert.deepEqual(await kids(base), [newKid, oldKid], 'the JWKS serves the new key and the previous one');
    const newToken = (await (await fetch(`${base}/token?sub=bob`)).text()).trim();
    assert.equal(kidOfToken(newToken), newKid, 'new tokens are signed with the new key');
    const jwks = createRemoteJWKSet(jwksUrl);
    assert.equal((await jwtVerify(newToken, jwks)).payload.sub, 'bob');
    assert.equal((await jwtVerify(oldToken, jwks)).payload.sub, 'alice', 'a token of the previous key still verifies');
    assert.ok((await stats(base)) >= 3, 'JWKS fetches are counted');
    // A second rotation keeps only the last previous key.
    const third = (await (await fetch(`${base}/rotate`, { method: 'POST' })).text()).trim();
    assert.deepEqual(await kids(base), [third, newKid]);
    newKid = third;
  } finally {
    first.server.close();
  }
  const second = await startIssuer(state, 0);
  try {
    const b = `http://127.0.0.1:${second.address.port}`;
    assert.equal((await kids(b))[0], newKid, 'the rotated key survives a restart');
    assert.equal(kidOfToken((await (await fetch(`${b}/token`)).text()).trim()), newKid);
    assert.equal(await stats(b), 1, 'a new process counts from zero');
  } finally {
    second.server.close();
  }
});
