// The decision table of jwt-policies.md (Authentication) and its three additional rules: each row
// as fixtures -> the generated filters (asserted field by field) -> the decision evaluated from
// those filters by the data plane's compiled jwt_authn and rbac filters, with real signed tokens
// verified against the inlined key sets.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { SignJWT, exportJWK, generateKeyPair, type CryptoKey } from 'jose';
import { buildJwtAuthn, type JwksLookup } from '../../src/security/authn/builder.js';
import { buildRbacFilters } from '../../src/security/authz/builder.js';
import { explainForWorkload, type Explanation } from '../../src/security/explain.js';
import type { AuthorizationPolicy, RequestAuthentication } from '../../src/api/types.js';
import { authz, claim, idValues, issSub, jwtJson, rbacJson, reqAuthn } from './fixtures.js';

const ISS = 'testing@secure.mesh.io';
const ISS_B = 'https://issuer-b.example';
const WORKLOAD = { namespace: 'foo', labels: { app: 'httpbin' } };

interface Issuer {
  readonly key: CryptoKey;
  readonly jwks: string;
}

async function issuer(kid: string): Promise<Issuer> {
  const { privateKey, publicKey } = await generateKeyPair('RS256');
  return { key: privateKey, jwks: JSON.stringify({ keys: [{ ...(await exportJWK(publicKey)), kid, alg: 'RS256', use: 'sig' }] }) };
}

const [A, B, FORGER] = await Promise.all([issuer('a1'), issuer('b1'), issuer('a1')]);
const JWKS_BY_URI: Record<string, string> = { 'https://a.test/jwks': A.jwks, 'https://b.test/jwks': B.jwks };
const lookup: JwksLookup = (_iss, uri) => JWKS_BY_URI[uri]!;

function sign(by: Issuer, kid: string, claims: Record<string, unknown>, expiresIn: string | number = '1h'): Promise<string> {
  return new SignJWT(claims).setProtectedHeader({ alg: 'RS256', kid }).setIssuedAt().setExpirationTime(expiresIn).sign(by.key);
}

const RA = reqAuthn('jwt-example', { selector: { matchLabels: { app: 'httpbin' } }, jwtRules: [{ issuer: ISS, jwksUri: 'https://a.test/jwks' }] });
const RA_B = reqAuthn('jwt-b', { jwtRules: [{ issuer: ISS_B, jwksUri: 'https://b.test/jwks' }] });
const AP = authz('require-jwt', {
  selector: { matchLabels: { app: 'httpbin' } },
  action: 'ALLOW',
  rules: [{ from: [{ source: { requestPrincipals: [`${ISS}/${ISS}`] } }], when: [{ key: 'request.auth.claims[groups]', values: ['group1'] }] }],
});

/** What the workload's proxy decides: selection, both builders, token verification, evaluation. */
function decide(store: { ra: RequestAuthentication[]; ap: AuthorizationPolicy[] }, token?: string, path = '/headers'): Promise<Explanation> {
  return explainForWorkload({
    workload: WORKLOAD,
    requestAuthentications: store.ra,
    authorizationPolicies: store.ap,
    lookup,
    request: { method: 'GET', path, ...(token !== undefined ? { token } : {}) },
  });
}

const good = () => sign(A, 'a1', { iss: ISS, sub: ISS, groups: ['group1', 'group2'] });

test('the fixtures translate to: jwt_authn with one provider (allow_missing), rbac ALLOW on iss/sub and groups', () => {
  const jwt = jwtJson(buildJwtAuthn([RA], lookup)!) as { providers: Record<string, { issuer: string; payload_in_metadata: string }>; rules: unknown };
  assert.equal(jwt.providers['origins-0']!.issuer, ISS);
  assert.equal(jwt.providers['origins-0']!.payload_in_metadata, 'jwt_payload');
  assert.deepEqual(jwt.rules, [{ match: { prefix: '/' }, requires: { requires_any: { requirements: [{ provider_name: 'origins-0' }, { allow_missing: {} }] } } }]);
  const { filters } = buildRbacFilters([AP]);
  assert.deepEqual(filters.map((f) => f.action), ['ALLOW']);
  assert.deepEqual(rbacJson(filters[0]!.config), {
    rules: {
      policies: {
        'ns[foo]-policy[require-jwt]-rule[0]': {
          permissions: [{ any: true }],
          principals: [{ and_ids: { ids: [idValues(issSub({ exact: ISS }, { exact: ISS })), idValues(claim(['groups'], { exact: 'group1' }))] } }],
        },
      },
    },
  });
});

test('row 1: RequestAuthentication selects the workload and the token does not validate: 401', async () => {
  const store = { ra: [RA], ap: [] };
  // Expired beyond the proxy's default 60 s clock skew, as Envoy applies it.
  const forged = await sign(FORGER, 'a1', { iss: ISS, sub: ISS });
  for (const token of [forged, await sign(A, 'a1', { iss: ISS, sub: ISS }, Math.floor(Date.now() / 1000) - 120), 'not.a.jwt', await sign(B, 'b1', { iss: 'https://unknown.example', sub: 'x' })]) {
    const d = await decide(store, token);
    assert.equal(d.status, 401, d.because);
    assert.equal(d.stage, 'jwt_authn');
  }
  // The same with an ALLOW policy: authentication fails first.
  assert.equal((await decide({ ra: [RA], ap: [AP] }, forged)).status, 401);
});

test('row 2 and additional rule 2: no token and no AuthorizationPolicy: allowed, also with a RequestAuthentication', async () => {
  const d = await decide({ ra: [RA], ap: [] });
  assert.equal(d.status, 200);
  assert.match(d.trace[0]!, /allow_missing/);
  assert.equal((await decide({ ra: [], ap: [] })).status, 200);
});

test('row 3: ALLOW policy, valid token, requestPrincipal listed, when holds: allowed, by that rule', async () => {
  const d = await decide({ ra: [RA], ap: [AP] }, await good());
  assert.equal(d.status, 200, d.because);
  assert.deepEqual(d.policy, { namespace: 'foo', name: 'require-jwt', rule: 0, from: 0 });
  assert.match(d.because, /from\[0\]\.source\.requestPrincipals holds: request\.auth\.principal = "testing@secure\.mesh\.io\/testing@secure\.mesh\.io"/);
  assert.match(d.because, /when\[0\] \(request\.auth\.claims\[groups\]\) holds: request\.auth\.claims\[groups\] = \["group1","group2"\]/);
});

test('row 4: ALLOW policy and no token: 403', async () => {
  const d = await decide({ ra: [RA], ap: [AP] });
  assert.equal(d.status, 403);
  assert.equal(d.action, 'ALLOW');
  assert.match(d.because, /no ALLOW rule matched: ns\[foo\]-policy\[require-jwt\]-rule\[0\]: from\[0\]\.source\.requestPrincipals fails: request\.auth\.principal is absent/);
});

test('row 5: the token lacks the claim of a when condition: 403', async () => {
  const d = await decide({ ra: [RA], ap: [AP] }, await sign(A, 'a1', { iss: ISS, sub: ISS }));
  assert.equal(d.status, 403);
  assert.match(d.because, /when\[0\] \(request\.auth\.claims\[groups\]\) fails: request\.auth\.claims\[groups\] is absent, required one of \["group1"\]/);
});

test('row 6: request.auth.claims[groups] holds when the groups list contains the value', async () => {
  const withGroups = async (groups: unknown) => (await decide({ ra: [RA], ap: [AP] }, await sign(A, 'a1', { iss: ISS, sub: ISS, groups }))).status;
  assert.equal(await withGroups(['group1']), 200);
  assert.equal(await withGroups(['other', 'group1']), 200);
  assert.equal(await withGroups(['group2']), 403);
  assert.equal(await withGroups([]), 403);
  assert.equal(await withGroups('group1'), 200, 'a string claim matches its value');
  assert.equal(await withGroups('group10'), 403);
});

test('additional rule 1: a token is validated with the keys of the provider whose issuer is its iss', async () => {
  const store = { ra: [RA, RA_B], ap: [] };
  assert.equal((await decide(store, await sign(B, 'b1', { iss: ISS_B, sub: 'x' }))).status, 200);
  assert.equal((await decide(store, await sign(A, 'a1', { iss: ISS_B, sub: 'x' }))).status, 401, "A's key does not sign for B");
  assert.equal((await decide(store, await sign(B, 'b1', { iss: ISS, sub: ISS }))).status, 401, "B's key does not sign for A");
  assert.equal((await decide(store, await good())).status, 200);
});

test('additional rule 3: adding an ALLOW policy rejects every request that matches none of its rules', async () => {
  const otherSub = await sign(A, 'a1', { iss: ISS, sub: 'someone-else', groups: ['group1'] });
  assert.equal((await decide({ ra: [RA], ap: [] }, otherSub)).status, 200);
  const d = await decide({ ra: [RA], ap: [AP] }, otherSub);
  assert.equal(d.status, 403);
  assert.match(d.because, /request\.auth\.principal = "testing@secure\.mesh\.io\/someone-else", required one of \["testing@secure\.mesh\.io\/testing@secure\.mesh\.io"\]/);
  // Policies of another workload or namespace do not apply.
  assert.equal((await decide({ ra: [RA], ap: [authz('x', {}, 'bar'), authz('y', { selector: { matchLabels: { app: 'other' } } })] }, otherSub)).status, 200);
});

test('DENY before ALLOW, and the deciding policy is named', async () => {
  const deny = authz('deny-admin', { action: 'DENY', rules: [{ to: [{ operation: { paths: ['/admin*'] } }] }] });
  const d = await decide({ ra: [RA], ap: [AP, deny] }, await good(), '/admin/x');
  assert.equal(d.status, 403);
  assert.equal(d.action, 'DENY');
  assert.deepEqual(d.policy, { namespace: 'foo', name: 'deny-admin', rule: 0, to: 0 });
  assert.match(d.because, /to\[0\]\.operation\.paths holds: path = "\/admin\/x", required one of \["\/admin\*"\]/);
  assert.equal((await decide({ ra: [RA], ap: [AP, deny] }, await good(), '/headers?admin=1')).status, 200);
});

test('explainForWorkload: names the selected policies and reports a token whose kid is unknown', async () => {
  const unknown: [string, string][] = [];
  const d = await explainForWorkload({
    workload: WORKLOAD,
    requestAuthentications: [RA, reqAuthn('elsewhere', {}, 'bar')],
    authorizationPolicies: [AP],
    lookup,
    request: { method: 'GET', path: '/', token: await sign(A, 'a2-rotated', { iss: ISS, sub: ISS }) },
    onUnknownKid: (iss, kid) => unknown.push([iss, kid]),
  });
  assert.equal(d.status, 401, 'an unknown kid never passes');
  assert.deepEqual(unknown, [[ISS, 'a2-rotated']]);
  assert.deepEqual(d.selected, ['RequestAuthentication/foo/jwt-example', 'AuthorizationPolicy/foo/require-jwt']);
});
