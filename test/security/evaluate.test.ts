// The RBAC and jwt_authn evaluators on generated configs: each kind of matcher decides as Envoy does.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { buildRbacFilters } from '../../src/security/authz/builder.js';
import { evaluateRbacFilter, matchPrincipal, type RequestContext } from '../../src/security/authz/evaluate.js';
import { payloadMatcher } from '../../src/security/authz/matchers.js';
import { principal } from '../../src/security/authz/translators.js';
import { buildJwtAuthn } from '../../src/security/authn/jwt-filter.js';
import { evaluateJwtAuthn, type TokenState } from '../../src/security/authn/requirement.js';
import { FAIL_CLOSED_JWKS } from '../../src/security/authn/jwks.js';
import { explain } from '../../src/security/explain.js';
import type { Rule } from '../../src/api/types.js';
import { authz, reqAuthn } from './fixtures.js';

function allows(rule: Rule, req: Partial<RequestContext>): boolean {
  const filter = buildRbacFilters([authz('p', { rules: [rule] })]).filters[0]!.config;
  return evaluateRbacFilter(filter, { headers: {}, metadata: {}, ...req }).allowed;
}

const get = (path: string, extra: Record<string, string> = {}) => ({ headers: { ':method': 'GET', ':path': path, ':authority': 'Shop.Example.com', ...extra } });

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
  assert.equal(allows(op({ ports: ['8080'] }), { ...get('/'), destinationPort: 8080 }), true);
  assert.equal(allows(op({ ports: ['8080'] }), { ...get('/'), destinationPort: 9090 }), false);
  assert.equal(allows(op({ methods: ['GET'], paths: ['/x'] }), get('/y')), false, 'fields of one operation are ANDed');
  assert.equal(allows({ to: [{ operation: { paths: ['/x'] } }, { operation: { paths: ['/y'] } }] }, get('/y')), true, 'to entries are ORed');
});

test('sources: peer SPIFFE identity (principals, namespaces), ip blocks, remote ip blocks', () => {
  const src = (source: NonNullable<Rule['from']>[number]['source']) => ({ from: [{ source }] });
  const peer = { peerPrincipal: 'spiffe://cluster.local/ns/shop/sa/frontend' };
  assert.equal(allows(src({ principals: ['cluster.local/ns/shop/sa/frontend'] }), peer), true);
  assert.equal(allows(src({ principals: ['*/sa/frontend'] }), peer), true);
  assert.equal(allows(src({ principals: ['*'] }), {}), false, 'no peer certificate: no principal');
  assert.equal(allows(src({ namespaces: ['shop'] }), peer), true);
  assert.equal(allows(src({ namespaces: ['sh*'] }), peer), true);
  assert.equal(allows(src({ namespaces: ['shopping'] }), peer), false);
  assert.equal(allows(src({ notNamespaces: ['shop'] }), peer), false);
  assert.equal(allows(src({ ipBlocks: ['10.0.0.0/8'] }), { sourceIp: '10.1.2.3' }), true);
  assert.equal(allows(src({ ipBlocks: ['10.0.0.0/8'] }), { sourceIp: '11.1.2.3' }), false);
  assert.equal(allows(src({ ipBlocks: ['2001:db8::/32'] }), { sourceIp: '2001:db8::1' }), true);
  assert.equal(allows(src({ remoteIpBlocks: ['192.168.0.0/16'] }), { sourceIp: '10.0.0.1', remoteIp: '192.168.3.4' }), true);
  assert.equal(allows(src({ notRemoteIpBlocks: ['192.168.0.0/16'] }), { remoteIp: '192.168.3.4' }), false);
  assert.equal(allows({ from: [{ source: { namespaces: ['x'] } }, { source: { ipBlocks: ['10.0.0.0/8'] } }] }, { sourceIp: '10.0.0.1' }), true, 'from entries are ORed');
});

test('when: headers, sni, destination ip, claims with notValues; a missing claim never matches', () => {
  const when = (key: string, values?: string[], notValues?: string[]) => ({ when: [{ key, ...(values ? { values } : {}), ...(notValues ? { notValues } : {}) }] });
  assert.equal(allows(when('request.headers[x-tenant]', ['acme']), get('/', { 'x-tenant': 'acme' })), true);
  assert.equal(allows(when('request.headers[X-Tenant]', ['*']), get('/', { 'x-tenant': '' })), true, 'names are case-insensitive, * = present');
  assert.equal(allows(when('request.headers[x-tenant]', ['*']), get('/')), false);
  assert.equal(allows(when('connection.sni', ['*.example.com']), { sni: 'a.example.com' }), true);
  assert.equal(allows(when('destination.ip', ['10.0.0.0/24']), { destinationIp: '10.0.0.9' }), true);
  const claims = (payload: Record<string, unknown>) => ({ metadata: { 'envoy.filters.http.jwt_authn': { jwt_payload: payload } } });
  assert.equal(allows(when('request.auth.claims[realm][roles]', ['admin']), claims({ realm: { roles: ['user', 'admin'] } })), true);
  assert.equal(allows(when('request.auth.claims[realm][roles]', ['admin']), claims({ realm: {} })), false);
  assert.equal(allows(when('request.auth.claims[scope]', ['read'], ['write']), claims({ scope: ['read', 'write'] })), false);
  assert.equal(allows(when('request.auth.claims[scope]', ['read'], ['write']), claims({ scope: ['read'] })), true);
  assert.equal(allows(when('request.auth.audiences', ['api']), claims({ aud: 'api' })), true);
  assert.equal(allows(when('request.auth.presenter', ['web']), claims({ azp: 'web' })), true);
  assert.equal(allows(when('request.auth.claims[n]', ['1']), claims({ n: 1 })), false, 'only string values match');
  const present = principal({ case: 'metadata', value: payloadMatcher(['constructor'], { case: 'presentMatch', value: true }) });
  assert.equal(matchPrincipal(present, { headers: {}, ...claims({}) }).match, false, 'inherited properties are not claims');
  assert.equal(matchPrincipal(present, { headers: {}, ...claims({ constructor: 'x' }) }).match, true);
});

test('jwt_authn requirement: ok, missing, unknown issuer, audience, and several providers', () => {
  const lookup = () => FAIL_CLOSED_JWKS;
  const c = buildJwtAuthn([reqAuthn('r', { jwtRules: [{ issuer: 'a', jwksUri: 'http://a', audiences: ['api'] }, { issuer: 'b', jwksUri: 'http://b' }] })], lookup)!;
  const verified = (payload: Record<string, unknown>): TokenState => ({ kind: 'verified', payload });
  const d = (t: TokenState) => evaluateJwtAuthn(c, t, '/x');
  assert.equal(d({ kind: 'missing' }).allowed, true);
  assert.equal(d({ kind: 'invalid', reason: 'bad signature' }).allowed, false);
  assert.equal(d(verified({ iss: 'a', aud: ['api'] })).allowed, true);
  assert.equal(d(verified({ iss: 'a', aud: ['api'] })).provider, 'origins-0');
  assert.deepEqual(d(verified({ iss: 'a', aud: 'api', sub: 's' })).metadata, { 'envoy.filters.http.jwt_authn': { jwt_payload: { iss: 'a', aud: 'api', sub: 's' } } });
  assert.match(d(verified({ iss: 'a', aud: 'web' })).because, /audiences \["web"\] are not among \["api"\].*audience not allowed/);
  assert.equal(d(verified({ iss: 'a', aud: 'web' })).status, 403, 'Envoy answers 403 for an audience not allowed');
  assert.equal(d({ kind: 'invalid' }).status, 401);
  assert.equal(d(verified({ iss: 'b' })).allowed, true);
  const unknown = d(verified({ iss: 'c' }));
  assert.equal(unknown.allowed, false);
  assert.match(unknown.because, /unknown issuer/);
});

test('explain: no RequestAuthentication means tokens are not inspected; peer identity with or without scheme', () => {
  const policies = { requestAuthentications: [], authorizationPolicies: [authz('ns-only', { rules: [{ from: [{ source: { namespaces: ['shop'] } }] }] })] };
  const base = { method: 'get', path: '/', token: { kind: 'invalid' as const } };
  const a = explain(policies, { ...base, sourcePrincipal: 'cluster.local/ns/shop/sa/x' });
  assert.equal(a.status, 200);
  assert.match(a.trace[0]!, /jwt_authn: absent/);
  assert.equal(explain(policies, { ...base, sourcePrincipal: 'spiffe://cluster.local/ns/shop/sa/x' }).status, 200);
  const denied = explain(policies, { ...base, sourcePrincipal: 'spiffe://cluster.local/ns/other/sa/x' });
  assert.equal(denied.status, 403);
  assert.match(denied.because, /peer identity "spiffe:\/\/cluster.local\/ns\/other\/sa\/x", required regex/);
  const audit = explain({ requestAuthentications: [], authorizationPolicies: [authz('log-all', { action: 'AUDIT', rules: [{}] })] }, base);
  assert.equal(audit.status, 200);
  assert.match(audit.trace[1]!, /rbac AUDIT: pass: ns\[foo\]-policy\[log-all\]-rule\[0\] matched/);
});
