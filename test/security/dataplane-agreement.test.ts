// Cross-check: the data plane's rbac filter (src/dataplane, written independently) and the control
// plane's evaluator (authz/evaluate.ts, used by /debug/authz_explain) decide the same on the RBAC
// configs this builder generates. A disagreement is a bug in one of them, or in the translation.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { buildRbacFilters } from '../../src/security/authz/builder.js';
import { evaluateRbacFilter } from '../../src/security/authz/evaluate.js';
import { compileRbacFilter } from '../../src/dataplane/filters/rbac.js';
import { compileJwtAuthn } from '../../src/dataplane/filters/jwt-authn.js';
import { SignJWT, exportJWK, generateKeyPair } from 'jose';
import { buildJwtAuthn } from '../../src/security/authn/jwt-filter.js';
import { verifyToken } from '../../src/security/authn/verify.js';
import { evaluateJwtAuthn } from '../../src/security/authn/requirement.js';
import { reqAuthn } from './fixtures.js';
import { requestView } from '../../src/dataplane/request.js';
import type { Rule } from '../../src/api/types.js';
import { authz } from './fixtures.js';

interface Case {
  readonly rule: Rule;
  readonly method?: string;
  readonly path?: string;
  readonly host?: string;
  readonly headers?: Record<string, string>;
  readonly peer?: string;
  readonly source?: string;
  readonly remote?: string;
  readonly port?: number;
  readonly sni?: string;
  readonly payload?: Record<string, unknown>;
}

const rules: Rule[] = [
  { to: [{ operation: { hosts: ['shop.example.com', '*.test'], methods: ['GET'], paths: ['/api/*'] } }] },
  { to: [{ operation: { notPaths: ['*.png'], ports: ['8080'] } }] },
  { from: [{ source: { principals: ['cluster.local/ns/shop/sa/*'], notNamespaces: ['blocked'] } }] },
  { from: [{ source: { namespaces: ['sh*'] } }, { source: { ipBlocks: ['10.0.0.0/8'], notRemoteIpBlocks: ['10.9.0.0/16'] } }] },
  { from: [{ source: { requestPrincipals: ['https://issuer.example/alice', 'iss/*'] } }] },
  { when: [{ key: 'request.auth.claims[groups]', values: ['admin'] }, { key: 'request.auth.claims[realm][role]', notValues: ['guest'] }] },
  { when: [{ key: 'request.headers[x-tenant]', values: ['acme', 'beta*'] }, { key: 'connection.sni', values: ['*.example.com'] }] },
  { when: [{ key: 'request.auth.audiences', values: ['api'] }, { key: 'destination.port', notValues: ['9090'] }] },
];

const requests: Omit<Case, 'rule'>[] = [
  { method: 'GET', path: '/api/v1?x=1', host: 'SHOP.example.com', port: 8080 },
  { method: 'POST', path: '/a.png', host: 'x.test', port: 9090 },
  { peer: 'spiffe://cluster.local/ns/shop/sa/web', source: '10.1.2.3', remote: '10.9.1.1' },
  { peer: 'spiffe://cluster.local/ns/blocked/sa/web', source: '11.0.0.1' },
  { payload: { iss: 'https://issuer.example', sub: 'alice', groups: ['admin'], realm: { role: 'user' }, aud: 'api' }, port: 8080 },
  { payload: { iss: 'iss', sub: 'bob', groups: 'admin', realm: { role: 'guest' }, aud: ['web', 'api'] }, port: 9090 },
  { payload: { iss: 'other', sub: 'alice', groups: [] }, headers: { 'x-tenant': 'beta-1' }, sni: 'a.example.com' },
  { headers: { 'x-tenant': 'acme' }, sni: 'example.org' },
];

test('the data plane rbac filter and the explain evaluator agree on generated configs', () => {
  let checked = 0;
  for (const [ri, rule] of rules.entries()) {
    for (const action of ['ALLOW', 'DENY'] as const) {
      const config = buildRbacFilters([authz('p', { action, rules: [rule] })]).filters[0]!.config;
      const engine = compileRbacFilter(config).engine!;
      for (const [qi, r] of requests.entries()) {
        const metadata = r.payload ? { 'envoy.filters.http.jwt_authn': { jwt_payload: r.payload } } : {};
        const headers: Record<string, string> = { ...(r.headers ?? {}), ':method': r.method ?? 'GET', ':path': r.path ?? '/', ':authority': r.host ?? 'h' };
        const ours = evaluateRbacFilter(config, {
          headers,
          metadata,
          ...(r.peer ? { peerPrincipal: r.peer } : {}),
          ...(r.source ? { sourceIp: r.source } : {}),
          ...(r.remote ? { remoteIp: r.remote } : {}),
          ...(r.port !== undefined ? { destinationPort: r.port } : {}),
          ...(r.sni ? { sni: r.sni } : {}),
        });
        const theirs = engine.evaluate(
          requestView({
            method: r.method ?? 'GET',
            path: r.path ?? '/',
            authority: r.host ?? 'h',
            headers: r.headers ?? {},
            source: { address: r.source ?? '0.0.0.0', port: 40000 },
            remote: { address: r.remote ?? r.source ?? '0.0.0.0', port: 40000 },
            destination: { address: '127.0.0.1', port: r.port ?? 0 },
            requestedServerName: r.sni ?? '',
            ...(r.peer ? { peer: { uriSans: [r.peer], dnsSans: [], subject: '' } } : {}),
            metadata: metadata as never,
          }),
        );
        assert.equal(ours.allowed, theirs.allowed, `rule ${ri} (${action}) request ${qi}: explain says ${ours.allowed}, data plane ${theirs.allowed}`);
        checked++;
      }
    }
  }
  assert.equal(checked, rules.length * 2 * requests.length);
});

test('the data plane jwt_authn filter and verifyToken + the requirement evaluator agree', async () => {
  const keyPair = async (kid: string) => {
    const { privateKey, publicKey } = await generateKeyPair('ES256');
    return { privateKey, kid, jwk: { ...(await exportJWK(publicKey)), kid, alg: 'ES256' } };
  };
  const [a, b, forger] = await Promise.all([keyPair('a1'), keyPair('b1'), keyPair('a1')]);
  const keys: Record<string, string> = { 'http://a': JSON.stringify({ keys: [a.jwk] }), 'http://b': JSON.stringify({ keys: [b.jwk] }) };
  const config = buildJwtAuthn(
    [reqAuthn('r', { jwtRules: [{ issuer: 'iss-a', jwksUri: 'http://a', audiences: ['api'] }, { issuer: 'iss-b', jwksUri: 'http://b' }] })],
    (_i, uri) => keys[uri]!,
  )!;
  const sign = (k: typeof a, claims: Record<string, unknown>, exp: string | number = '1h') =>
    new SignJWT(claims).setProtectedHeader({ alg: 'ES256', kid: k.kid }).setIssuedAt().setExpirationTime(exp).sign(k.privateKey);
  const tokens: (string | undefined)[] = [
    undefined,
    await sign(a, { iss: 'iss-a', sub: 's', aud: 'api' }),
    await sign(a, { iss: 'iss-a', sub: 's', aud: 'web' }),
    await sign(b, { iss: 'iss-b', sub: 's' }),
    await sign(forger, { iss: 'iss-a', sub: 's', aud: 'api' }),
    await sign(b, { iss: 'iss-a', sub: 's', aud: 'api' }),
    await sign(a, { iss: 'iss-c', sub: 's' }),
    await sign(a, { iss: 'iss-a', sub: 's', aud: 'api' }, Math.floor(Date.now() / 1000) - 120),
    'garbage',
  ];
  const filter = compileJwtAuthn(config);
  for (const [i, token] of tokens.entries()) {
    const ours = evaluateJwtAuthn(config, await verifyToken(config, token), '/x');
    const req = requestView({ path: '/x', headers: token ? { authorization: `Bearer ${token}` } : {} });
    const theirs = await filter.decodeHeaders(req);
    assert.equal(ours.allowed, theirs.kind === 'continue', `token ${i}: explain ${ours.because}; data plane ${JSON.stringify(theirs)}`);
    if (theirs.kind === 'reply') assert.equal(theirs.reply.status, ours.status, `token ${i}: ${ours.because}`);
    if (ours.allowed) assert.deepEqual(req.metadata['envoy.filters.http.jwt_authn'] ?? {}, ours.metadata['envoy.filters.http.jwt_authn'] ?? {}, `token ${i} payload`);
  }
});
