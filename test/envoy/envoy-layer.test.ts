import { test } from 'node:test';
import assert from 'node:assert/strict';
import { generateKeyPairSync } from 'node:crypto';
import { ConfigError, withinResource } from '../../src/envoy/config-error.js';
import { checkJwks, importJwk, jwksKeys, JWT_SIGNING_ALGS } from '../../src/envoy/jwks.js';
import { messageNameOf, shortTypeName, TypeUrl, typeNameOf, typeUrlOf } from '../../src/envoy/types.js';
import { ListenerSchema } from '../../src/gen/envoy/config/listener/v3/listener_pb.js';

test('type URLs: one prefix, the full name and the message name read back from it', () => {
  assert.equal(typeUrlOf(ListenerSchema), TypeUrl.Listener);
  assert.equal(typeNameOf(TypeUrl.Listener), 'envoy.config.listener.v3.Listener');
  assert.equal(typeNameOf('example.com/a.b.C'), 'a.b.C', 'any host part is cut off');
  assert.equal(messageNameOf(TypeUrl.ClusterLoadAssignment), 'ClusterLoadAssignment');
  assert.equal(shortTypeName(TypeUrl.ClusterLoadAssignment), 'eds');
  assert.equal(shortTypeName('type.googleapis.com/x.y.Other'), 'Other');
});

test('withinResource prefixes the field of a ConfigError and leaves other errors alone', () => {
  const e = withinResource('listener in', new ConfigError('filter_chains[0].filters', 'at least one network filter is required'));
  assert.ok(e instanceof ConfigError);
  assert.equal(e.field, 'listener in.filter_chains[0].filters');
  assert.equal(e.message, 'listener in.filter_chains[0].filters: at least one network filter is required');
  assert.equal(e.detail, 'at least one network filter is required');
  const other = new TypeError('boom');
  assert.equal(withinResource('listener in', other), other);
});

test('jwksKeys: the keys list, or whether the text is not JSON or not a JWKS', () => {
  assert.deepEqual(jwksKeys('{"keys":[1]}'), { keys: [1] });
  assert.equal((jwksKeys('{') as { error: string }).error, 'json');
  assert.equal((jwksKeys('[]') as { error: string }).error, 'keys');
  assert.equal((jwksKeys('{"keys":{}}') as { error: string }).error, 'keys');
});

test('importJwk keeps the public part only and names what it cannot import', () => {
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const jwk = privateKey.export({ format: 'jwk' }) as Record<string, unknown>;
  assert.equal(importJwk(jwk).type, 'public', 'a private JWK yields its public key');
  assert.equal(importJwk({ kty: 'oct', k: 'c2VjcmV0' }).type, 'secret');
  assert.throws(() => importJwk({ kty: 'oct' }), /\[k\] field is missing/);
  assert.throws(() => importJwk({ kty: 'OKP', crv: 'X25519', x: 'AA' }), /\[crv\] field is not supported/);
  assert.throws(() => importJwk({ kty: 'foo' }), /\[kty\] is not supported/);
});

test('one algorithm list: checkJwks refuses a key bound to an algorithm outside it', () => {
  assert.ok(JWT_SIGNING_ALGS.has('EdDSA') && JWT_SIGNING_ALGS.has('PS512') && !JWT_SIGNING_ALGS.has('none'));
  const r = checkJwks('{"keys":[{"kty":"oct","k":"c2VjcmV0","alg":"none"}]}');
  assert.equal(r.ok, false);
  assert.match((r as { reason: string }).reason, /alg "none" is not a supported signature algorithm/);
  assert.equal(checkJwks('{"keys":[{"kty":"oct","k":"c2VjcmV0","alg":"HS256"}]}').ok, true);
});
