// RequestAuthentication -> jwt_authn, JWKS validation, and selection of policies for a workload.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { exportJWK, generateKeyPair } from 'jose';
import { buildJwtAuthn, type JwksLookup } from '../../src/security/authn/builder.js';
import { FAIL_CLOSED_JWKS, checkJwks } from '../../src/envoy/jwks.js';
import { selectPolicies } from '../../src/model/selection.js';
import { authz, jwtJson, reqAuthn } from './fixtures.js';

const KEYS = '{"keys":[{"kty":"oct","k":"c2VjcmV0","kid":"a"}]}';
const lookups: [string, string, number][] = [];
const lookup: JwksLookup = (issuer, uri, timeoutMs) => {
  lookups.push([issuer, uri, timeoutMs]);
  return KEYS;
};
const inline = (keys: string) => ({ local_jwks: { inline_string: keys } });
/** `scope` and `permission` are always space-delimited claims, as in the production mesh. */
const SPACE_DELIMITED = { normalize_payload_in_metadata: { space_delimited_claims: ['permission', 'scope'] } };
const defaults = { from_headers: [{ name: 'Authorization', value_prefix: 'Bearer ' }], from_params: ['access_token'], payload_in_metadata: 'jwt_payload', ...SPACE_DELIMITED };

test('no RequestAuthentication selects the workload: no jwt_authn filter', () => {
  assert.equal(buildJwtAuthn([], lookup), null);
  assert.equal(buildJwtAuthn([reqAuthn('empty', {})], lookup), null, 'a policy without jwtRules verifies nothing');
});

test('one jwtRule: provider origins-0 with every default, rule requires_any [provider, allow_missing]', () => {
  lookups.length = 0;
  const c = buildJwtAuthn([reqAuthn('jwt', { jwtRules: [{ issuer: 'testing@secure.mesh.io', jwksUri: 'https://issuer.test/jwks.json' }] })], lookup)!;
  assert.deepEqual(jwtJson(c), {
    providers: { 'origins-0': { issuer: 'testing@secure.mesh.io', ...inline(KEYS), ...defaults } },
    rules: [{ match: { prefix: '/' }, requires: { requires_any: { requirements: [{ provider_name: 'origins-0' }, { allow_missing: {} }] } } }],
    bypass_cors_preflight: true,
  });
  assert.deepEqual(lookups, [['testing@secure.mesh.io', 'https://issuer.test/jwks.json', 5000]]);
});

test('every jwtRule field reaches its provider field', () => {
  lookups.length = 0;
  const c = buildJwtAuthn([reqAuthn('jwt', {
    jwtRules: [{
      issuer: 'iss',
      jwksUri: 'http://keys/jwks',
      timeout: '1.5s',
      audiences: ['a1', 'a2'],
      fromHeaders: [{ name: 'x-jwt' }, { name: 'x-auth', prefix: 'Token ' }],
      fromParams: ['tok'],
      fromCookies: ['session'],
      forwardOriginalToken: true,
      outputPayloadToHeader: 'x-payload',
      outputClaimToHeaders: [{ header: 'x-sub', claim: 'sub' }],
      spaceDelimitedClaims: ['roles', 'scope'],
    }],
  })], lookup)!;
  assert.deepEqual(jwtJson(c), {
    providers: {
      'origins-0': {
        issuer: 'iss',
        audiences: ['a1', 'a2'],
        ...inline(KEYS),
        forward: true,
        from_headers: [{ name: 'x-jwt' }, { name: 'x-auth', value_prefix: 'Token ' }],
        from_params: ['tok'],
        from_cookies: ['session'],
        forward_payload_header: 'x-payload',
        payload_in_metadata: 'jwt_payload',
        normalize_payload_in_metadata: { space_delimited_claims: ['permission', 'roles', 'scope'] },
        claim_to_headers: [{ header_name: 'x-sub', claim_name: 'sub' }],
      },
    },
    rules: [{ match: { prefix: '/' }, requires: { requires_any: { requirements: [{ provider_name: 'origins-0' }, { allow_missing: {} }] } } }],
    bypass_cors_preflight: true,
  });
  assert.deepEqual(lookups, [['iss', 'http://keys/jwks', 1500]]);
  // Only cookies named: no default header or parameter.
  const cookie = jwtJson(buildJwtAuthn([reqAuthn('c', { jwtRules: [{ issuer: 'i', jwksUri: 'http://k', fromCookies: ['c'] }] })], lookup)!) as { providers: Record<string, object> };
  assert.deepEqual(cookie.providers['origins-0'], { issuer: 'i', ...inline(KEYS), from_cookies: ['c'], payload_in_metadata: 'jwt_payload', ...SPACE_DELIMITED });
});

test('several policies merge: a provider per rule, in selection order, and the nested any/all requirement', () => {
  const c = buildJwtAuthn([
    reqAuthn('mesh', { jwtRules: [{ issuer: 'root-iss', jwksUri: 'http://root' }] }, 'mesh-system'),
    reqAuthn('a', { jwtRules: [{ issuer: 'iss-a', jwksUri: 'http://a' }, { issuer: 'iss-b', jwksUri: 'http://b' }] }),
  ], lookup)!;
  const json = jwtJson(c) as { providers: Record<string, { issuer: string }>; rules: unknown[] };
  assert.deepEqual(Object.entries(json.providers).map(([n, p]) => [n, p.issuer]).sort(), [['origins-0', 'root-iss'], ['origins-1', 'iss-a'], ['origins-2', 'iss-b']]);
  const optional = (n: string) => ({ requires_any: { requirements: [{ provider_name: n }, { allow_missing: {} }] } });
  assert.deepEqual(json.rules, [{
    match: { prefix: '/' },
    requires: {
      requires_any: {
        requirements: [
          { provider_name: 'origins-0' },
          { provider_name: 'origins-1' },
          { provider_name: 'origins-2' },
          { requires_all: { requirements: [optional('origins-0'), optional('origins-1'), optional('origins-2')] } },
        ],
      },
    },
  }]);
});

test('inline jwks is validated like a fetched one; invalid or absent keys fail closed with a warning', async () => {
  const { publicKey } = await generateKeyPair('ES256');
  const jwk = { ...(await exportJWK(publicKey)), kid: 'k1', use: 'sig' };
  const good = JSON.stringify({ keys: [jwk, { kty: 'RSA', n: 'bad', e: 'AQAB' }] });
  const warnings: string[] = [];
  const c = buildJwtAuthn([reqAuthn('x', { jwtRules: [{ issuer: 'good', jwks: good }, { issuer: 'bad', jwks: '{"keys":[]}' }, { issuer: 'none' }] })], lookup, warnings)!;
  const src = (n: string) => (c.providers[n]!.jwksSourceSpecifier.value as { specifier: { value: string } }).specifier.value;
  assert.deepEqual(JSON.parse(src('origins-0')), { keys: [jwk] }, 'only the usable key is inlined');
  assert.equal(src('origins-1'), FAIL_CLOSED_JWKS);
  assert.equal(src('origins-2'), FAIL_CLOSED_JWKS);
  assert.match(warnings[0]!, /issuer "bad": inline jwks no usable key \(empty "keys"\)/);
  assert.match(warnings[1]!, /issuer "none": neither jwksUri nor jwks/);
  const badTimeout: string[] = [];
  buildJwtAuthn([reqAuthn('t', { jwtRules: [{ issuer: 'i', jwksUri: 'http://k', timeout: 'soon' }] })], lookup, badTimeout);
  assert.match(badTimeout[0]!, /timeout "soon" is not a positive duration/);
});

test('checkJwks: JSON, shape, and at least one usable signing key', async () => {
  assert.match((checkJwks('{') as { reason: string }).reason, /^not JSON/);
  assert.match((checkJwks('[]') as { reason: string }).reason, /expected an object with a "keys" list/);
  assert.match((checkJwks('{"keys":[{"kty":"RSA","n":"AA","e":"AQAB","use":"enc"}]}') as { reason: string }).reason, /use "enc" is not "sig"/);
  assert.match((checkJwks('{"keys":[{"kty":"EC","crv":"P-256","x":"AA","y":"AA"}]}') as { reason: string }).reason, /keys\[0\]: cannot be imported/);
  assert.match((checkJwks('{"keys":[{"kty":"XYZ"}]}') as { reason: string }).reason, /kty "XYZ"/);
  const { publicKey } = await generateKeyPair('RS256');
  const ok = checkJwks(JSON.stringify({ keys: [{ ...(await exportJWK(publicKey)), kid: 'r1', alg: 'RS256' }] }));
  assert.equal(ok.ok, true);
  assert.deepEqual(ok.ok && ok.kids, ['r1']);
  const closed = checkJwks(FAIL_CLOSED_JWKS);
  assert.equal(closed.ok, true, 'the fail-closed key set is well formed');
});

test('selection: matchLabels in the same namespace, no selector = namespace, root namespace = mesh-wide; sorted', () => {
  const w = { namespace: 'foo', labels: { app: 'httpbin', version: 'v1' } };
  const policies = [
    authz('z-ns-wide', {}),
    authz('a-match', { selector: { matchLabels: { app: 'httpbin' } } }),
    authz('both-labels', { selector: { matchLabels: { app: 'httpbin', version: 'v1' } } }),
    authz('other-app', { selector: { matchLabels: { app: 'other' } } }),
    authz('label-missing', { selector: { matchLabels: { app: 'httpbin', tier: 'web' } } }),
    authz('other-ns', {}, 'bar'),
    authz('mesh-wide', {}, 'mesh-system'),
    authz('mesh-selected', { selector: { matchLabels: { app: 'httpbin' } } }, 'mesh-system'),
    authz('mesh-other', { selector: { matchLabels: { app: 'other' } } }, 'mesh-system'),
    authz('empty-selector', { selector: {} }),
  ];
  const names = selectPolicies(w, policies).map((p) => `${p.metadata.namespace}/${p.metadata.name}`);
  assert.deepEqual(names, ['mesh-system/mesh-selected', 'mesh-system/mesh-wide', 'foo/a-match', 'foo/both-labels', 'foo/empty-selector', 'foo/z-ns-wide']);
  assert.deepEqual(selectPolicies(w, [...policies].reverse()).map((p) => p.metadata.name), selectPolicies(w, policies).map((p) => p.metadata.name), 'independent of store order');
  assert.deepEqual(selectPolicies({ namespace: 'bar', labels: {} }, policies).map((p) => p.metadata.name), ['mesh-wide', 'other-ns']);
  assert.deepEqual(selectPolicies(w, policies, 'custom-root').map((p) => p.metadata.name), ['a-match', 'both-labels', 'empty-selector', 'z-ns-wide']);
});

test('update in place: the same policy key with a new spec yields the new filter on the next build', () => {
  const v1 = reqAuthn('jwt', { jwtRules: [{ issuer: 'old', jwksUri: 'http://k' }] });
  const v2 = reqAuthn('jwt', { jwtRules: [{ issuer: 'new', jwksUri: 'http://k' }] });
  const store = new Map([['foo/jwt', v1]]);
  assert.equal(buildJwtAuthn([...store.values()], lookup)!.providers['origins-0']!.issuer, 'old');
  store.set('foo/jwt', v2);
  assert.equal(buildJwtAuthn([...store.values()], lookup)!.providers['origins-0']!.issuer, 'new');
});
