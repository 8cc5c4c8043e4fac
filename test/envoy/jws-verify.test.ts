// jwt_authn's signature check on node:crypto (src/envoy/jws-verify.ts) against tokens signed by jose,
// an independent implementation: every algorithm of Envoy's list verifies with the key the proxy
// imports from the JWK, and nothing else does.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { generateKeyPairSync, sign } from 'node:crypto';
import { CompactSign, exportJWK, generateKeyPair, generateSecret } from 'jose';
import { importJwk, JWT_SIGNING_ALGS } from '../../src/envoy/jwks.js';
import { verifyJws } from '../../src/envoy/jws-verify.js';

const PAYLOAD = Buffer.from(JSON.stringify({ iss: 'https://issuer', sub: 'alice' }));

interface Signed {
  header: Record<string, unknown>;
  signingInput: string;
  signature: Buffer;
}

function split(compact: string): Signed {
  const [h, p, s] = compact.split('.') as [string, string, string];
  return { header: JSON.parse(Buffer.from(h, 'base64url').toString()) as Record<string, unknown>, signingInput: `${h}.${p}`, signature: Buffer.from(s, 'base64url') };
}

/** A token of `alg` signed by jose, and the verification key as the proxy imports it from the JWK. */
async function signedBy(alg: string, header: Record<string, unknown> = {}): Promise<Signed & { key: ReturnType<typeof importJwk> }> {
  const { sign: signingKey, verify: jwk } = alg.startsWith('HS')
    ? await generateSecret(alg, { extractable: true }).then(async (k) => ({ sign: k, verify: await exportJWK(k) }))
    : await generateKeyPair(alg, { extractable: true }).then(async (k) => ({ sign: k.privateKey, verify: await exportJWK(k.publicKey) }));
  const compact = await new CompactSign(PAYLOAD).setProtectedHeader({ alg, ...header }).sign(signingKey);
  return { ...split(compact), key: importJwk(jwk as Record<string, unknown>) };
}

test('every algorithm of Envoy\'s list verifies a token jose signed, and fails once the signature or the signed bytes change', async () => {
  for (const alg of JWT_SIGNING_ALGS) {
    const t = await signedBy(alg);
    assert.equal(verifyJws(alg, t.key, t.header, t.signingInput, t.signature), true, `${alg} verifies`);
    const flipped = Buffer.from(t.signature);
    flipped[flipped.length - 1]! ^= 1;
    assert.equal(verifyJws(alg, t.key, t.header, t.signingInput, flipped), false, `${alg}: a changed signature`);
    assert.equal(verifyJws(alg, t.key, t.header, `${t.signingInput}x`, t.signature), false, `${alg}: changed signed bytes`);
    assert.equal(verifyJws(alg, t.key, t.header, t.signingInput, t.signature.subarray(1)), false, `${alg}: a short signature`);
  }
});

test('a key of another type, curve or secret, or another algorithm claimed, does not verify', async () => {
  const [rs, ps, es256, es384, ed, hs] = await Promise.all(['RS256', 'PS256', 'ES256', 'ES384', 'EdDSA', 'HS256'].map((a) => signedBy(a)));
  const otherSecret = await signedBy('HS256');
  assert.equal(verifyJws('RS256', es256!.key, rs!.header, rs!.signingInput, rs!.signature), false, 'an EC key for RS256');
  assert.equal(verifyJws('ES256', es384!.key, es256!.header, es256!.signingInput, es256!.signature), false, 'a P-384 key for ES256');
  assert.equal(verifyJws('EdDSA', rs!.key, ed!.header, ed!.signingInput, ed!.signature), false, 'an RSA key for EdDSA');
  assert.equal(verifyJws('HS256', rs!.key, hs!.header, hs!.signingInput, hs!.signature), false, 'an RSA public key as an HMAC secret');
  assert.equal(verifyJws('HS256', otherSecret.key, hs!.header, hs!.signingInput, hs!.signature), false, 'another secret');
  assert.equal(verifyJws('RS256', ps!.key, ps!.header, ps!.signingInput, ps!.signature), false, 'a PS256 signature checked as RS256');
  assert.equal(verifyJws('HS384', hs!.key, hs!.header, hs!.signingInput, hs!.signature), false, 'HS256 claimed as HS384');
  for (const alg of ['none', 'RS1', 'ES256K', 'HS']) assert.equal(verifyJws(alg, rs!.key, rs!.header, rs!.signingInput, rs!.signature), false, alg);
});

test('an ECDSA signature in DER instead of r || s, an RSA key below 2048 bits, and a crit header do not verify', async () => {
  const es = generateKeyPairSync('ec', { namedCurve: 'prime256v1' });
  const input = 'eyJhbGciOiJFUzI1NiJ9.e30';
  const der = sign('sha256', Buffer.from(input), es.privateKey);
  const p1363 = sign('sha256', Buffer.from(input), { key: es.privateKey, dsaEncoding: 'ieee-p1363' });
  assert.equal(verifyJws('ES256', es.publicKey, { alg: 'ES256' }, input, p1363), true, 'the same key and input in JWS encoding');
  assert.equal(verifyJws('ES256', es.publicKey, { alg: 'ES256' }, input, der), false, 'DER');

  const small = generateKeyPairSync('rsa', { modulusLength: 1024 });
  const rsInput = 'eyJhbGciOiJSUzI1NiJ9.e30';
  assert.equal(verifyJws('RS256', small.publicKey, { alg: 'RS256' }, rsInput, sign('sha256', Buffer.from(rsInput), small.privateKey)), false, 'a 1024-bit key');

  // jose will not sign a header whose crit it does not know: signed here, and checked without crit first.
  const rsa = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const signed = (header: Record<string, unknown>) => {
    const signingInput = `${Buffer.from(JSON.stringify(header)).toString('base64url')}.e30`;
    return [header, signingInput, sign('sha256', Buffer.from(signingInput), rsa.privateKey)] as const;
  };
  assert.equal(verifyJws('RS256', rsa.publicKey, ...signed({ alg: 'RS256', exp: 1 })), true);
  assert.equal(verifyJws('RS256', rsa.publicKey, ...signed({ alg: 'RS256', crit: ['exp'], exp: 1 })), false, 'an extension this verifier does not understand');
});
