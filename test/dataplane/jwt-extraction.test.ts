// Token extraction and time claims as Envoy's jwt_authn reads them: which token is the request's
// identity when it carries several, where a header token ends, which exp/nbf values are valid.
import assert from 'node:assert/strict';
import { before, describe, it } from 'node:test';
import { compileJwtAuthn } from '../../src/envoy/jwt-authn.js';
import { JwtStatus, parseJwt } from '../../src/envoy/jwt-token.js';
import { JWT_AUTHN_FILTER_NAME } from '../../src/envoy/names.js';
import { requestView, type RequestViewInit } from '../../src/envoy/request.js';
import { b64, ISSUER, jwks, meshJwtAuthn, meshProvider, mint, testKey, type TestKey } from './fixtures.js';

let rsa: TestKey;
before(async () => {
  rsa = await testKey('RS256', 'rsa-1');
});

/** The subject jwt_authn leaves in metadata for the request (undefined: rejected or none). */
async function identity(init: RequestViewInit): Promise<string | undefined> {
  const f = compileJwtAuthn(meshJwtAuthn({ main: meshProvider(ISSUER, jwks(rsa)) }));
  const req = requestView({ path: '/get', authority: 'svc.local', ...init });
  const out = await f.decodeHeaders(req);
  if (out.kind === 'reply') return `rejected ${out.reply.status}`;
  return (req.metadata[JWT_AUTHN_FILTER_NAME]?.[ISSUER] as { sub?: string } | undefined)?.sub;
}

describe('jwt_authn token extraction', () => {
  it('several Authorization values: every one must verify, the first is the identity', async () => {
    const alice = await mint(rsa, { sub: 'alice' });
    const mallory = await mint(rsa, { sub: 'mallory' });
    assert.equal(await identity({ headers: { authorization: [`Bearer ${mallory}`, `Bearer ${alice}`] } }), 'mallory');
    assert.equal(await identity({ headers: { authorization: [`Bearer ${alice}`, `Bearer ${mallory}`] } }), 'alice');
    assert.equal(await identity({ headers: { authorization: [`Bearer ${alice}`, 'Bearer x.y.z'] } }), 'rejected 401');
  });

  it('a header token and an access_token parameter: the header is the identity', async () => {
    const alice = await mint(rsa, { sub: 'alice' });
    const mallory = await mint(rsa, { sub: 'mallory' });
    assert.equal(await identity({ path: `/get?access_token=${alice}`, headers: { authorization: `Bearer ${mallory}` } }), 'mallory');
    assert.equal(await identity({ path: `/get?access_token=${mallory}`, headers: { authorization: `Bearer ${alice}` } }), 'alice');
  });

  it('the token after the prefix stops at whitespace, = padding or any non-base64url character', async () => {
    const alice = await mint(rsa, { sub: 'alice' });
    assert.equal(await identity({ headers: { authorization: `Bearer ${alice} trailing words` } }), 'alice');
    assert.equal(await identity({ headers: { authorization: `Bearer ${alice}==` } }), 'alice');
    assert.equal(await identity({ headers: { authorization: `Bearer   ${alice},other` } }), 'alice');
    assert.equal(await identity({ headers: { authorization: `Bearer ${alice.replace('.', ' .')}` } }), 'rejected 401');
  });
});

describe('jwt time claims', () => {
  const token = (payload: Record<string, unknown>) => `${b64({ alg: 'RS256', typ: 'JWT' })}.${b64({ iss: ISSUER, sub: 'a', ...payload })}.c2ln`;

  it('exp and nbf must be numbers in [0, 2^64); a fraction is dropped, as Envoy does', () => {
    assert.equal(parseJwt(token({ exp: 1e300 })), JwtStatus.JwtPayloadParseErrorExpNotInteger);
    assert.equal(parseJwt(token({ exp: 2 ** 64 })), JwtStatus.JwtPayloadParseErrorExpNotInteger);
    assert.equal(parseJwt(token({ exp: -1 })), JwtStatus.JwtPayloadParseErrorExpNotInteger);
    assert.equal(parseJwt(token({ exp: '9999999999' })), JwtStatus.JwtPayloadParseErrorExpNotInteger);
    assert.equal(parseJwt(token({ nbf: 1e300 })), JwtStatus.JwtPayloadParseErrorNbfNotInteger);
    assert.equal(parseJwt(token({ nbf: true })), JwtStatus.JwtPayloadParseErrorNbfNotInteger);
    const ok = parseJwt(token({ exp: 1700000000.9, nbf: 1600000000 }));
    assert.equal(typeof ok, 'object');
    if (typeof ok === 'object') {
      assert.equal(ok.exp, 1700000000);
      assert.equal(ok.nbf, 1600000000);
    }
  });
});
