// Generated configs on the data plane's compiled filters (the one evaluator: the proxy runs them,
// and so does /debug/authz_explain): each kind of matcher decides as Envoy does, and explain()
// names the stage, rule, entry and condition that decided.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { SignJWT, exportJWK, generateKeyPair } from 'jose';
import type { RequestViewInit } from '../../src/envoy/request.js';
import { buildRbacFilters } from '../../src/security/authz/builder.js';
import { explain } from '../../src/security/explain.js';
import { buildWorkloadSecurity } from '../../src/security/filters.js';
import type { AuthorizationPolicy, RequestAuthentication, Rule } from '../../src/api/types.js';
import { authz, rbacAllows, reqAuthn, withPayload } from './fixtures.js';

function allows(rule: Rule, req: RequestViewInit): boolean {
  return rbacAllows(buildRbacFilters([authz('p', { rules: [rule] })]).filters[0]!.config, req);
}

const get = (path: string, headers: Record<string, string> = {}): RequestViewInit => ({ method: 'GET', path, authority: 'Shop.Example.com', headers });
const at = (port: number, address = '0.0.0.0') => ({ destination: { address, port } });
const from = (address: string) => ({ source: { address, port: 40000 } });
const peer = (uri: string): RequestViewInit => ({ peer: { uriSans: [uri], dnsSans: [], subject: '' } });

test('operations: hosts (any case), methods, paths (query ignored), ports, and not*', () => {
  const op = (operation: NonNullable<Rule['to']>[number]['operation']) => ({ to: [{ operation }] });
  assert.equal(allows(op({ hosts: ['shop.example.com'] }), get('/')), true);
  assert.equal(allows(op({ hosts: ['*.example.com'] }), get('/')), true);
  assert.equal(allows(op({ hosts: ['other.example.com'] }), get('/')), false);
  assert.equal(allows(op({ methods: ['GET', 'POST'] }), get('/')), true);
  assert.equal(allows(op({ notMethods: ['GET'] }), get('/')), false);
  assert.equal(allows(op({ paths: ['/api/*'] }), get('/api/v1?x=/admin')), true);
  assert.equal(allows(op({ paths: ['/api/v1'] }), get('/api/v1?debug=1')), true);
  assert.equal(allows(op({ notPaths: ['*.png'] }), get('/a.png')), false);
  assert.equal(allows(op({ ports: ['8080'] }), { ...get('/'), ...at(8080) }), true);
  assert.equal(allows(op({ ports: ['8080'] }), { ...get('/'), ...at(9090) }), false);
  assert.equal(allows(op({ methods: ['GET'], paths: ['/x'] }), get('/y')), false, 'fields of one operation are ANDed');
  assert.equal(allows({ to: [{ operation: { paths: ['/x'] } }, { operation: { paths: ['/y'] } }] }, get('/y')), true, 'to entries are ORed');
});

test('sources: peer SPIFFE identity (principals, namespaces), ip blocks, remote ip blocks', () => {
  const src = (source: NonNullable<Rule['from']>[number]['source']) => ({ from: [{ source }] });
  const frontend = peer('spiffe://cluster.local/ns/shop/sa/frontend');
  assert.equal(allows(src({ principals: ['cluster.local/ns/shop/sa/frontend'] }), frontend), true);
  assert.equal(allows(src({ principals: ['*/sa/frontend'] }), frontend), true);
  assert.equal(allows(src({ principals: ['*'] }), {}), false, 'no peer certificate: no principal');
  assert.equal(allows(src({ namespaces: ['shop'] }), frontend), true);
  assert.equal(allows(src({ namespaces: ['sh*'] }), frontend), true);
  assert.equal(allows(src({ namespaces: ['shopping'] }), frontend), false);
  assert.equal(allows(src({ notNamespaces: ['shop'] }), frontend), false);
  assert.equal(allows(src({ ipBlocks: ['10.0.0.0/8'] }), from('10.1.2.3')), true);
  assert.equal(allows(src({ ipBlocks: ['10.0.0.0/8'] }), from('11.1.2.3')), false);
  assert.equal(allows(src({ ipBlocks: ['2001:db8::/32'] }), from('2001:db8::1')), true);
  assert.equal(allows(src({ remoteIpBlocks: ['192.168.0.0/16'] }), { ...from('10.0.0.1'), remote: { address: '192.168.3.4', port: 0 } }), true);
  assert.equal(allows(src({ notRemoteIpBlocks: ['192.168.0.0/16'] }), { remote: { address: '192.168.3.4', port: 0 } }), false);
  assert.equal(allows({ from: [{ source: { namespaces: ['x'] } }, { source: { ipBlocks: ['10.0.0.0/8'] } }] }, from('10.0.0.1')), true, 'from entries are ORed');
});

test('when: headers, sni, destination ip, claims with notValues; a missing claim never matches', () => {
  const when = (key: string, values?: string[], notValues?: string[]) => ({ when: [{ key, ...(values ? { values } : {}), ...(notValues ? { notValues } : {}) }] });
  assert.equal(allows(when('request.headers[x-tenant]', ['acme']), get('/', { 'x-tenant': 'acme' })), true);
  assert.equal(allows(when('request.headers[X-Tenant]', ['*']), get('/', { 'x-tenant': '' })), true, 'names are case-insensitive, * = present');
  assert.equal(allows(when('request.headers[x-tenant]', ['*']), get('/')), false);
  assert.equal(allows(when('connection.sni', ['*.example.com']), { requestedServerName: 'a.example.com' }), true);
  assert.equal(allows(when('destination.ip', ['10.0.0.0/24']), at(80, '10.0.0.9')), true);
  assert.equal(allows(when('request.auth.claims[realm][roles]', ['admin']), withPayload({ realm: { roles: ['user', 'admin'] } })), true);
  assert.equal(allows(when('request.auth.claims[realm][roles]', ['admin']), withPayload({ realm: {} })), false);
  assert.equal(allows(when('request.auth.claims[scope]', ['read'], ['write']), withPayload({ scope: ['read', 'write'] })), false);
  assert.equal(allows(when('request.auth.claims[scope]', ['read'], ['write']), withPayload({ scope: ['read'] })), true);
  assert.equal(allows(when('request.auth.audiences', ['api']), withPayload({ aud: 'api' })), true);
  assert.equal(allows(when('request.auth.presenter', ['web']), withPayload({ azp: 'web' })), true);
  assert.equal(allows(when('request.auth.claims[n]', ['1']), withPayload({ n: 1 })), false, 'only string values match');
  assert.equal(allows(when('request.auth.claims[constructor]', ['*']), withPayload({})), false, 'inherited properties are not claims');
  assert.equal(allows(when('request.auth.claims[toString]', [], ['*']), withPayload({})), true, 'nor are they present for notValues');
  assert.equal(allows(when('request.auth.claims[constructor]', ['*']), withPayload({ constructor: 'x' })), true);
});

// ---------------------------------------------------------------------------------------------
// explain()

const ES = await (async () => {
  const { privateKey, publicKey } = await generateKeyPair('ES256');
  return { privateKey, jwks: JSON.stringify({ keys: [{ ...(await exportJWK(publicKey)), kid: 'a1', alg: 'ES256' }] }) };
})();
const sign = (claims: Record<string, unknown>, kid = 'a1') => new SignJWT(claims).setProtectedHeader({ alg: 'ES256', kid }).setIssuedAt().setExpirationTime('1h').sign(ES.privateKey);

function secOf(ra: RequestAuthentication[], ap: AuthorizationPolicy[]) {
  return buildWorkloadSecurity({ namespace: 'foo', labels: {} }, ra, ap, () => ES.jwks);
}

test('explain jwt_authn: the compiled filter decides, with Envoy status strings; the payload reaches rbac', async () => {
  const sec = secOf([reqAuthn('r', { jwtRules: [{ issuer: 'a', jwksUri: 'http://a', audiences: ['api'] }, { issuer: 'b', jwksUri: 'http://b', fromHeaders: [{ name: 'x-jwt' }] }] })], []);
  const run = async (token?: string) => explain(sec, { method: 'GET', path: '/x', ...(token ? { token } : {}) });
  const missing = await run();
  assert.equal(missing.status, 200);
  assert.match(missing.trace[0]!, /no token .*allow_missing/);
  const ok = await run(await sign({ iss: 'a', sub: 's', aud: 'api' }));
  assert.equal(ok.status, 200);
  assert.match(ok.trace[0]!, /token verified, issuer "a", subject "s"/);
  const aud = await run(await sign({ iss: 'a', aud: 'web' }));
  assert.deepEqual([aud.status, aud.stage], [403, 'jwt_authn'], 'Envoy answers 403 for an audience not allowed');
  assert.match(aud.because, /Audiences in Jwt are not allowed/);
  const bad = await run('not.a.jwt');
  assert.equal(bad.status, 401);
  assert.match(bad.because, /Jwt/);
  assert.equal((await run(await sign({ iss: 'b', sub: 's' }))).status, 200, "b's token goes in b's own header x-jwt and verifies");
  const unknown = await run(await sign({ iss: 'c' }));
  assert.equal(unknown.status, 401);
  assert.match(unknown.because, /Jwt issuer is not configured/);
  const kids: string[][] = [];
  const rotated = await explain(sec, { method: 'GET', path: '/', token: await sign({ iss: 'a', aud: 'api' }, 'a2') }, { onUnknownKid: (i, k) => kids.push([i, k]) });
  assert.equal(rotated.status, 401, 'an unknown kid never passes');
  assert.deepEqual(kids, [['a', 'a2']], 'the data plane reports the unknown kid');
});

test('explain rbac: rule, from/to entries and the failing condition, mapped back to the policy', async () => {
  const policy = authz('mixed', {
    rules: [
      { to: [{ operation: { paths: ['/admin*'] } }, { operation: { methods: ['GET'], paths: ['/public/*'] } }] },
      { from: [{ source: { namespaces: ['ops'] } }, { source: { ipBlocks: ['10.0.0.0/8'] } }], when: [{ key: 'request.headers[x-tenant]', values: ['acme'] }] },
    ],
  });
  const sec = secOf([], [policy]);
  const pub = await explain(sec, { method: 'GET', path: '/public/a' });
  assert.equal(pub.status, 200);
  assert.deepEqual(pub.policy, { namespace: 'foo', name: 'mixed', rule: 0, to: 1 });
  assert.match(pub.because, /to\[1\]\.operation\.methods holds: method = "GET".*to\[1\]\.operation\.paths holds: path = "\/public\/a"/);
  const ip = await explain(sec, { method: 'POST', path: '/x', sourceIp: '10.1.1.1', headers: { 'x-tenant': 'acme' } });
  assert.deepEqual(ip.policy, { namespace: 'foo', name: 'mixed', rule: 1, from: 1 });
  assert.match(ip.because, /from\[1\]\.source\.ipBlocks holds: source\.ip = "10\.1\.1\.1".*when\[0\] \(request\.headers\[x-tenant\]\) holds/);
  const denied = await explain(sec, { method: 'POST', path: '/x', sourceIp: '10.1.1.1', headers: { 'x-tenant': 'other' } });
  assert.deepEqual([denied.status, denied.action, denied.policy], [403, 'ALLOW', undefined]);
  assert.match(denied.because, /rule\[0\]: to\[0\]\.operation\.paths fails: path = "\/x", required one of \["\/admin\*"\] \| to\[1\]\.operation\.methods fails: method = "POST"/);
  assert.match(denied.because, /rule\[1\]: from\[0\]\.source\.namespaces fails: source\.namespace is absent, required one of \["ops"\] \| when\[0\] \(request\.headers\[x-tenant\]\) fails: request\.headers\[x-tenant\] = "other"/);
});

test('explain: no RequestAuthentication means tokens are not inspected; peer identity with or without scheme; AUDIT never decides', async () => {
  const sec = secOf([], [authz('ns-only', { rules: [{ from: [{ source: { namespaces: ['shop'] } }] }] })]);
  const base = { method: 'get', path: '/', token: 'whatever' };
  const a = await explain(sec, { ...base, sourcePrincipal: 'cluster.local/ns/shop/sa/x' });
  assert.equal(a.status, 200);
  assert.match(a.trace[0]!, /jwt_authn: absent/);
  assert.equal((await explain(sec, { ...base, sourcePrincipal: 'spiffe://cluster.local/ns/shop/sa/x' })).status, 200);
  const denied = await explain(sec, { ...base, sourcePrincipal: 'spiffe://cluster.local/ns/other/sa/x' });
  assert.equal(denied.status, 403);
  assert.match(denied.because, /from\[0\]\.source\.namespaces fails: source\.namespace = "spiffe:\/\/cluster.local\/ns\/other\/sa\/x", required one of \["shop"\]/);
  const audit = await explain(secOf([], [authz('log-all', { action: 'AUDIT', rules: [{}] })]), base);
  assert.equal(audit.status, 200);
  assert.equal(audit.stage, 'none');
  assert.match(audit.trace[1]!, /rbac AUDIT: pass: ns\[foo\]-policy\[log-all\]-rule\[0\] matched: the rule matches every request/);
  const nothing = await explain(secOf([], [authz('nothing', {})]), base);
  assert.equal(nothing.status, 403);
  assert.match(nothing.because, /the ALLOW filter has no rules: nothing is allowed/);
});
