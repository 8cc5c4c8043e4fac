import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { before, describe, it } from 'node:test';
import { create } from '@bufbuild/protobuf';
import { exportSPKI, importJWK } from 'jose';
import { JwtAuthenticationSchema } from '../../src/gen/envoy/extensions/filters/http/jwt_authn/v3/config_pb.js';
import { ConfigError } from '../../src/envoy/config-error.js';
import { compileJwtAuthn, type JwtAuthnOptions } from '../../src/envoy/jwt-authn.js';
import { JwtStatus, parseJwt } from '../../src/envoy/jwt-token.js';
import { JWT_AUTHN_FILTER_NAME } from '../../src/envoy/names.js';
import { requestView, type StreamRequest } from '../../src/envoy/request.js';
import { b64, ISSUER, jwks, meshJwtAuthn, meshProvider, mint, OTHER_ISSUER, testKey, type TestKey } from './fixtures.js';

let rsa: TestKey;
let ec: TestKey;
let ed: TestKey;
let stranger: TestKey;

before(async () => {
  [rsa, ec, ed, stranger] = await Promise.all([testKey('RS256', 'rsa-1'), testKey('ES256', 'ec-1'), testKey('EdDSA', 'ed-1'), testKey('RS256', 'rsa-1')]);
});

function bearer(token: string, extra: Parameters<typeof requestView>[0] = {}): StreamRequest {
  return requestView({ path: '/get', authority: 'svc.local', ...extra, headers: { authorization: `Bearer ${token}`, ...extra.headers } });
}

function meshFilter(opts: JwtAuthnOptions = {}) {
  return compileJwtAuthn(meshJwtAuthn({ main: meshProvider(ISSUER, jwks(rsa, ec, ed)) }), opts);
}

async function rejection(filter: ReturnType<typeof meshFilter>, req: StreamRequest): Promise<{ status: number; body: string; challenge: string | undefined }> {
  const out = await filter.decodeHeaders(req);
  assert.equal(out.kind, 'reply', 'expected a local reply');
  if (out.kind !== 'reply') throw new Error('unreachable');
  return { status: out.reply.status, body: out.reply.body, challenge: out.reply.headers['www-authenticate'] as string | undefined };
}

describe('jwt_authn: the mesh configuration (requires_any providers + allow_missing)', () => {
  for (const which of ['rsa', 'ec', 'ed'] as const) {
    it(`accepts a valid ${which} token and puts the payload in dynamic metadata`, async () => {
      const key = { rsa, ec, ed }[which];
      const f = meshFilter();
      const req = bearer(await mint(key, { claims: { groups: ['admins', 'dev'], scope: 'read write' } }));
      assert.deepEqual(await f.decodeHeaders(req), { kind: 'continue' });
      const payload = req.metadata[JWT_AUTHN_FILTER_NAME]?.[ISSUER] as Record<string, unknown>;
      assert.equal(payload.iss, ISSUER);
      assert.equal(payload.sub, 'alice');
      assert.deepEqual(payload.groups, ['admins', 'dev']);
      assert.equal(payload.scope, 'read write');
    });
  }

  it('passes a request without a token, with no metadata', async () => {
    const req = requestView({ path: '/' });
    assert.deepEqual(await meshFilter().decodeHeaders(req), { kind: 'continue' });
    assert.equal(req.metadata[JWT_AUTHN_FILTER_NAME], undefined);
  });

  it('rejects an expired token with 401, the realm and invalid_token', async () => {
    const r = await rejection(meshFilter(), bearer(await mint(rsa, { expIn: -120 })));
    assert.equal(r.status, 401);
    assert.equal(r.body, 'Jwt is expired');
    assert.equal(r.challenge, 'Bearer realm="http://svc.local/get", error="invalid_token"');
  });

  it('accepts a token expired or not yet valid within the 60 s clock skew', async () => {
    const f = meshFilter();
    assert.equal((await f.decodeHeaders(bearer(await mint(rsa, { expIn: -30 })))).kind, 'continue');
    assert.equal((await f.decodeHeaders(bearer(await mint(rsa, { nbfIn: 30 })))).kind, 'continue');
  });

  it('rejects a token not yet valid beyond the skew', async () => {
    assert.equal((await rejection(meshFilter(), bearer(await mint(rsa, { nbfIn: 300 })))).body, 'Jwt not yet valid');
  });

  it('honours a provider clock_skew_seconds', async () => {
    const f = compileJwtAuthn(meshJwtAuthn({ main: meshProvider(ISSUER, jwks(rsa), { clockSkewSeconds: 5 }) }));
    assert.equal((await rejection(f, bearer(await mint(rsa, { expIn: -30 })))).body, 'Jwt is expired');
  });

  it('rejects a token of an issuer that no provider has', async () => {
    const r = await rejection(meshFilter(), bearer(await mint(rsa, { iss: OTHER_ISSUER })));
    assert.equal(r.status, 401);
    assert.equal(r.body, 'Jwt issuer is not configured');
  });

  it('rejects a token signed by another key with the same kid', async () => {
    assert.equal((await rejection(meshFilter(), bearer(await mint(stranger)))).body, 'Jwt verification fails');
  });

  it('rejects alg none', async () => {
    const token = `${b64({ alg: 'none', typ: 'JWT' })}.${b64({ iss: ISSUER, sub: 'alice', exp: 9999999999 })}.`;
    const r = await rejection(meshFilter(), bearer(token));
    assert.equal(r.status, 401);
    assert.equal(r.body, 'Jwt header [alg] is not supported');
  });

  it('rejects HS256 signed with the public key as the secret', async () => {
    const pem = await exportSPKI(await importJWK(rsa.jwk, 'RS256', { extractable: true }) as Parameters<typeof exportSPKI>[0]);
    const head = `${b64({ alg: 'HS256', kid: rsa.kid })}.${b64({ iss: ISSUER, sub: 'alice', exp: 9999999999 })}`;
    const sig = createHmac('sha256', pem).update(head).digest('base64url');
    const r = await rejection(meshFilter(), bearer(`${head}.${sig}`));
    assert.equal(r.status, 401);
    assert.equal(r.body, "Jwks doesn't have key to match kid or alg from Jwt");
  });

  it('rejects truncated and malformed tokens', async () => {
    const f = meshFilter();
    const token = await mint(rsa);
    assert.equal((await rejection(f, bearer(token.slice(0, token.lastIndexOf('.'))))).body, 'Jwt is not in the form of Header.Payload.Signature with two dots and 3 sections');
    // Cut inside the signature, keeping valid base64url.
    const cut = token.slice(0, token.length - 8);
    assert.equal((await rejection(f, bearer(cut))).body, 'Jwt verification fails');
    assert.equal((await rejection(f, bearer('a.b'))).body, JwtStatus.JwtBadFormat);
    assert.equal((await rejection(f, bearer(`%%%.${b64({})}.x`))).body, JwtStatus.JwtHeaderParseErrorBadBase64);
    assert.equal((await rejection(f, bearer(`${b64({ alg: 'RS256' })}.${b64({ exp: 'soon' })}.x`))).body, JwtStatus.JwtPayloadParseErrorExpNotInteger);
  });

  it('answers 403 for a disallowed audience, as Envoy does', async () => {
    const f = compileJwtAuthn(meshJwtAuthn({ main: meshProvider(ISSUER, jwks(rsa), { audiences: ['svc.ns'] }) }));
    const r = await rejection(f, bearer(await mint(rsa, { aud: 'other' })));
    assert.equal(r.status, 403);
    assert.equal(r.body, 'Audiences in Jwt are not allowed');
    // Scheme prefix and trailing slash do not count.
    assert.equal((await f.decodeHeaders(bearer(await mint(rsa, { aud: ['x', 'https://svc.ns/'] })))).kind, 'continue');
  });

  it('rejects an unknown kid and asks once for a refetch through onUnknownKid', async () => {
    const asked: string[] = [];
    const f = meshFilter({ onUnknownKid: (iss, kid) => asked.push(`${iss} ${kid}`) });
    const token = await mint(stranger, { kid: 'rotated-2' });
    assert.equal((await rejection(f, bearer(token))).body, "Jwks doesn't have key to match kid or alg from Jwt");
    await rejection(f, bearer(token));
    assert.deepEqual(asked, [`${ISSUER} rotated-2`]);
  });

  it('picks the provider by issuer among several', async () => {
    const f = compileJwtAuthn(meshJwtAuthn({ a: meshProvider(ISSUER, jwks(rsa)), b: meshProvider(OTHER_ISSUER, jwks(ec)) }));
    assert.equal((await f.decodeHeaders(bearer(await mint(ec, { iss: OTHER_ISSUER })))).kind, 'continue');
    // A token of issuer b signed with a's key: b's key set verifies it, and fails.
    assert.equal((await rejection(f, bearer(await mint(rsa, { iss: OTHER_ISSUER })))).body, "Jwks doesn't have key to match kid or alg from Jwt");
  });

  it('requires_any aggregates like Envoy: flags on the group, the most telling failure wins', async () => {
    const anyOf = (...reqs: object[]) =>
      compileJwtAuthn(
        create(JwtAuthenticationSchema, {
          providers: { a: meshProvider(ISSUER, jwks(rsa)), b: meshProvider(OTHER_ISSUER, jwks(ec)) },
          rules: [{ match: { pathSpecifier: { case: 'prefix', value: '/' } }, requirementType: { case: 'requires', value: { requiresType: { case: 'requiresAny', value: { requirements: reqs } } } } }],
        }),
      );
    const a = { requiresType: { case: 'providerName', value: 'a' } };
    const b = { requiresType: { case: 'providerName', value: 'b' } };
    const failedOk = { requiresType: { case: 'allowMissingOrFailed', value: {} } };
    assert.equal((await rejection(anyOf(a, b), requestView({}))).body, 'Jwt is missing');
    // b says "unknown issuer", a says "verification fails": the latter is the answer, whatever the order.
    assert.equal((await rejection(anyOf(b, a), bearer(await mint(stranger)))).body, 'Jwt verification fails');
    assert.equal((await rejection(anyOf(a, b), bearer(await mint(stranger, { iss: 'https://nobody' })))).body, 'Jwt issuer is not configured');
    assert.equal((await anyOf(a, b, failedOk).decodeHeaders(bearer(await mint(stranger)))).kind, 'continue');
  });

  it('fails closed for a provider whose JWKS is unusable', async () => {
    const f = compileJwtAuthn(meshJwtAuthn({ main: meshProvider(ISSUER, '{"keys": []}') }));
    assert.equal((await rejection(f, bearer(await mint(rsa)))).body, "Jwks doesn't have any valid public key");
    assert.equal((await f.decodeHeaders(requestView({}))).kind, 'continue');
  });
});

describe('jwt_authn: verified-token cache', () => {
  it('verifies a signature once for a repeated token', async () => {
    const f = meshFilter();
    const token = await mint(rsa);
    for (let i = 0; i < 5; i++) assert.equal((await f.decodeHeaders(bearer(token))).kind, 'continue');
    assert.equal(f.stats.signature_verifications, 1);
    assert.equal(f.stats.jwt_cache_hit, 4);
    assert.equal(f.stats.allowed, 5);
  });

  it('still checks expiry for a cached token', async () => {
    let now = Math.floor(Date.now() / 1000);
    const f = meshFilter({ now: () => now });
    const token = await mint(rsa, { expIn: 100, now });
    assert.equal((await f.decodeHeaders(bearer(token))).kind, 'continue');
    now += 130; // past exp, within the skew: still served from the cache
    assert.equal((await f.decodeHeaders(bearer(token))).kind, 'continue');
    now += 1000;
    assert.equal((await rejection(f, bearer(token))).body, 'Jwt is expired');
    assert.equal(f.stats.signature_verifications, 1);
  });

  it('does not cache a failed token', async () => {
    const f = meshFilter();
    const token = await mint(stranger);
    await rejection(f, bearer(token));
    await rejection(f, bearer(token));
    assert.equal(f.stats.signature_verifications, 2);
  });

  it('is bounded by jwt_cache_config.jwt_cache_size (least recently used goes first)', async () => {
    const f = compileJwtAuthn(meshJwtAuthn({ main: meshProvider(ISSUER, jwks(rsa), { jwtCacheConfig: { jwtCacheSize: 2 } }) }));
    const [t1, t2, t3] = await Promise.all([mint(rsa, { sub: '1' }), mint(rsa, { sub: '2' }), mint(rsa, { sub: '3' })]);
    for (const t of [t1, t2, t1, t3, t1]) await f.decodeHeaders(bearer(t));
    // t1, t2, t3 verified; t2 evicted by t3; t1 stayed as most recently used.
    assert.equal(f.stats.signature_verifications, 3);
    await f.decodeHeaders(bearer(t2));
    assert.equal(f.stats.signature_verifications, 4);
  });

  it('a token repeated back to back still counts as used for the LRU order', async () => {
    const f = compileJwtAuthn(meshJwtAuthn({ main: meshProvider(ISSUER, jwks(rsa), { jwtCacheConfig: { jwtCacheSize: 2 } }) }));
    const [t1, t2, t3] = await Promise.all([mint(rsa, { sub: '1' }), mint(rsa, { sub: '2' }), mint(rsa, { sub: '3' })]);
    for (const t of [t1, t2, t2, t1, t1, t3]) assert.equal((await f.decodeHeaders(bearer(t))).kind, 'continue');
    assert.equal(f.stats.signature_verifications, 3);
    // t2 was used before t1's repeats: t3 evicted t2, t1 is still cached.
    await f.decodeHeaders(bearer(t1));
    assert.equal(f.stats.signature_verifications, 3);
    await f.decodeHeaders(bearer(t2));
    assert.equal(f.stats.signature_verifications, 4);
  });

  it('an entry never outlives its JWKS: a config with other keys checks the signature again and rejects', async () => {
    const token = await mint(rsa);
    const before = meshFilter();
    assert.equal((await before.decodeHeaders(bearer(token))).kind, 'continue');
    // Same issuer and kid, the key replaced (rotation gone wrong, or a revoked key).
    const after = compileJwtAuthn(meshJwtAuthn({ main: meshProvider(ISSUER, jwks(stranger)) }));
    assert.equal((await rejection(after, bearer(token))).body, 'Jwt verification fails');
    assert.equal(after.stats.signature_verifications, 1);
  });

  it('a cached token gives every request the same normalized payload', async () => {
    const f = compileJwtAuthn(
      meshJwtAuthn({ main: meshProvider(ISSUER, jwks(rsa), { payloadInMetadata: 'jwt_payload', normalizePayloadInMetadata: { spaceDelimitedClaims: ['scope'] } }) }),
    );
    const token = await mint(rsa, { claims: { scope: 'read write' } });
    for (let i = 0; i < 3; i++) {
      const req = bearer(token);
      assert.equal((await f.decodeHeaders(req)).kind, 'continue');
      const payload = req.metadata[JWT_AUTHN_FILTER_NAME]?.['jwt_payload'] as Record<string, unknown>;
      assert.deepEqual([payload.sub, payload.scope], ['alice', ['read', 'write']]);
    }
    assert.equal(f.stats.jwt_cache_hit, 2);
  });
});

describe('jwt_authn: providers and requirements', () => {
  function single(extra: Parameters<typeof meshProvider>[2], requirement: 'provider' | 'allowMissingOrFailed' = 'provider') {
    return compileJwtAuthn(
      create(JwtAuthenticationSchema, {
        providers: { p: meshProvider(ISSUER, jwks(rsa), extra) },
        rules: [
          { match: { pathSpecifier: { case: 'prefix', value: '/public' } } },
          {
            match: { pathSpecifier: { case: 'prefix', value: '/' } },
            requirementType: {
              case: 'requires',
              value: { requiresType: requirement === 'provider' ? { case: 'providerName', value: 'p' } : { case: 'allowMissingOrFailed', value: {} } },
            },
          },
        ],
      }),
    );
  }

  it('a provider requirement rejects a missing token with 401 and no error attribute', async () => {
    const r = await rejection(single({}), requestView({ path: '/x', authority: 'h' }));
    assert.equal(r.body, 'Jwt is missing');
    assert.equal(r.challenge, 'Bearer realm="http://h/x"');
  });

  it('rules select by path prefix; a rule without requirement verifies nothing', async () => {
    assert.equal((await single({}).decodeHeaders(requestView({ path: '/public/x' }))).kind, 'continue');
  });

  it('allow_missing_or_failed lets a bad token through without metadata', async () => {
    const req = bearer(await mint(stranger), { path: '/x' });
    assert.equal((await single({}, 'allowMissingOrFailed').decodeHeaders(req)).kind, 'continue');
    assert.equal(req.metadata[JWT_AUTHN_FILTER_NAME], undefined);
  });

  it('from_headers with value_prefix, and forward=false removes the header', async () => {
    const f = single({ fromHeaders: [{ name: 'x-jwt', valuePrefix: 'Token ' }], forward: false });
    const req = requestView({ path: '/x', headers: { 'x-jwt': `Token ${await mint(rsa)}` } });
    assert.equal((await f.decodeHeaders(req)).kind, 'continue');
    assert.equal(req.headers.has('x-jwt'), false);
    // The default Authorization location is not used once a location is configured.
    assert.equal((await rejection(f, bearer(await mint(rsa), { path: '/x' }))).body, 'Jwt is missing');
  });

  it('default locations: Authorization Bearer and the access_token parameter (removed unless forwarded)', async () => {
    const f = single({ forward: false });
    const token = await mint(rsa);
    const req = requestView({ path: `/x?a=1&access_token=${token}` });
    assert.equal((await f.decodeHeaders(req)).kind, 'continue');
    assert.equal(req.path, '/x?a=1');
  });

  it('from_params and from_cookies', async () => {
    const token = await mint(rsa);
    assert.equal((await single({ fromParams: ['jwt'] }).decodeHeaders(requestView({ path: `/x?jwt=${token}` }))).kind, 'continue');
    const f = single({ fromCookies: ['session'] });
    assert.equal((await f.decodeHeaders(requestView({ path: '/x', headers: { cookie: `a=b; session=${token}` } }))).kind, 'continue');
    assert.equal((await rejection(f, requestView({ path: '/x', headers: { cookie: 'a=b' } }))).body, 'Jwt is missing');
  });

  it('forward_payload_header, claim_to_headers (spoofed values removed) and space-delimited claims', async () => {
    const f = single({
      forwardPayloadHeader: 'x-jwt-payload',
      claimToHeaders: [{ headerName: 'x-sub', claimName: 'sub' }, { headerName: 'x-level', claimName: 'level' }, { headerName: 'x-groups', claimName: 'groups' }],
      normalizePayloadInMetadata: { spaceDelimitedClaims: ['scope'] },
    });
    const token = await mint(rsa, { claims: { level: 3, groups: ['a'], scope: 'read write' } });
    const req = bearer(token, { path: '/x', headers: { 'x-sub': 'mallory' } });
    assert.equal((await f.decodeHeaders(req)).kind, 'continue');
    assert.equal(req.headers.joined('x-jwt-payload'), token.split('.')[1]);
    assert.equal(req.headers.joined('x-sub'), 'alice');
    assert.equal(req.headers.joined('x-level'), '3');
    assert.equal(req.headers.has('x-groups'), false, 'a list claim is not copied to a header');
    assert.deepEqual((req.metadata[JWT_AUTHN_FILTER_NAME]?.[ISSUER] as Record<string, unknown>).scope, ['read', 'write']);
  });

  it('subjects, max_lifetime and require_expiration', async () => {
    const subj = single({ subjects: { matchPattern: { case: 'prefix', value: 'spiffe://' } } });
    assert.equal((await subj.decodeHeaders(bearer(await mint(rsa, { sub: 'spiffe://a' }), { path: '/x' }))).kind, 'continue');
    assert.equal((await rejection(subj, bearer(await mint(rsa, { sub: 'alice' }), { path: '/x' }))).body, 'Jwt verification fails');
    const short = single({ maxLifetime: { seconds: 600n, nanos: 0 } });
    assert.equal((await short.decodeHeaders(bearer(await mint(rsa, { expIn: 300 }), { path: '/x' }))).kind, 'continue');
    assert.equal((await rejection(short, bearer(await mint(rsa, { expIn: 3600 }), { path: '/x' }))).body, 'Jwt is expired');
    const noExp = `${b64({ alg: 'RS256', kid: rsa.kid })}.${b64({ iss: ISSUER, sub: 'a' })}.AAAA`;
    assert.equal((await rejection(single({ requireExpiration: true }), bearer(noExp, { path: '/x' }))).body, 'Jwt is expired');
  });

  it('rejects configs it cannot honour, naming the field', () => {
    assert.throws(
      () => compileJwtAuthn(create(JwtAuthenticationSchema, { providers: { p: { issuer: ISSUER, jwksSourceSpecifier: { case: 'remoteJwks', value: {} } } } })),
      (e: unknown) => e instanceof ConfigError && e.field === 'providers[p].remote_jwks',
    );
    assert.throws(
      () => compileJwtAuthn(create(JwtAuthenticationSchema, { rules: [{ match: { pathSpecifier: { case: 'prefix', value: '/' } }, requirementType: { case: 'requires', value: { requiresType: { case: 'providerName', value: 'nope' } } } }] })),
      /rules\[0\]\.requires\.provider_name: provider "nope" is not configured/,
    );
  });
});

describe('parseJwt', () => {
  it('reports claim type errors in Envoy words', () => {
    assert.equal(parseJwt(`${b64({ alg: 'RS256' })}.${b64({ iss: 1 })}.`), JwtStatus.JwtPayloadParseErrorIssNotString);
    assert.equal(parseJwt(`${b64({ alg: 'RS256' })}.${b64({ aud: [1] })}.`), JwtStatus.JwtPayloadParseErrorAudNotString);
    assert.equal(parseJwt(`${b64({ alg: 5 })}.${b64({})}.`), JwtStatus.JwtHeaderBadAlg);
    assert.equal(parseJwt(`${b64([1])}.${b64({})}.`), JwtStatus.JwtHeaderParseErrorBadJson);
  });
});
