// The discovery server's JWKS decisions: what to prefetch and forget, whose unknown kid to refetch.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { jwksPrefetch, unknownKidRefresh } from '../../src/security/authn/jwks-policy.js';
import { reqAuthn } from './fixtures.js';

const JWKS = JSON.stringify({ keys: [{ kty: 'oct', k: 'c2VjcmV0', alg: 'HS256' }] });

test('jwksPrefetch: every fetched jwksUri with its issuer and timeout; inline jwks and policies without rules fetch nothing', () => {
  const policies = [
    reqAuthn('a', { jwtRules: [{ issuer: 'https://a.example', jwksUri: 'https://a.example/jwks', timeout: '2s' }, { issuer: 'inline', jwks: JWKS }] }),
    reqAuthn('b', { jwtRules: [{ issuer: 'https://b.example', jwksUri: 'https://b.example/jwks' }] }),
    reqAuthn('c', {}),
  ];
  const plan = jwksPrefetch(policies);
  assert.deepEqual(plan.fetches, [
    { issuer: 'https://a.example', jwksUri: 'https://a.example/jwks', timeoutMs: 2000 },
    { issuer: 'https://b.example', jwksUri: 'https://b.example/jwks', timeoutMs: 5000 },
  ]);
  assert.deepEqual(plan.inUse, new Set(['https://a.example/jwks', 'https://b.example/jwks']));
  assert.deepEqual(jwksPrefetch([]), { inUse: new Set(), fetches: [] });
});

test('unknownKidRefresh: only an issuer some RequestAuthentication trusts is refetched (fail closed)', () => {
  const policies = [reqAuthn('a', { jwtRules: [{ issuer: 'https://a.example', jwksUri: 'https://a.example/jwks' }] }), reqAuthn('c', {})];
  assert.deepEqual(unknownKidRefresh(policies, 'https://a.example'), { refetch: true });
  assert.deepEqual(unknownKidRefresh(policies, 'https://made-up.example'), { refetch: false, reason: 'no RequestAuthentication trusts this issuer' });
  assert.deepEqual(unknownKidRefresh([], 'https://a.example'), { refetch: false, reason: 'no RequestAuthentication trusts this issuer' });
});
