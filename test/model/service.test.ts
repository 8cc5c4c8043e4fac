import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parseLocality, portProtocol, visibleTo, type Service } from '../../src/model/service.js';

test('port protocol: explicit protocol, then appProtocol, then the name prefix', () => {
  assert.equal(portProtocol({ name: 'tcp-x', protocol: 'http' }), 'HTTP');
  assert.equal(portProtocol({ name: 'tcp-x', appProtocol: 'grpc' }), 'GRPC');
  assert.equal(portProtocol({ name: 'x', appProtocol: 'kubernetes.io/h2c' }), 'HTTP2');
  assert.equal(portProtocol({ name: 'http-web' }), 'HTTP');
  assert.equal(portProtocol({ name: 'grpc' }), 'GRPC');
  assert.equal(portProtocol({ name: 'grpc-web' }), 'GRPC');
  assert.equal(portProtocol({ name: 'http2-api' }), 'HTTP2');
  assert.equal(portProtocol({ name: 'tcp' }), 'TCP');
  assert.equal(portProtocol({ name: 'metrics' }), 'UNSUPPORTED');
  assert.equal(portProtocol({}), 'UNSUPPORTED');
  assert.equal(portProtocol({ name: 'web', protocol: 'bogus' }), 'UNSUPPORTED');
});

test('locality strings', () => {
  assert.deepEqual(parseLocality('us-east/zone-a/rack-1'), { region: 'us-east', zone: 'zone-a', subZone: 'rack-1' });
  assert.deepEqual(parseLocality('us-east'), { region: 'us-east', zone: '', subZone: '' });
  assert.deepEqual(parseLocality(undefined), { region: '', zone: '', subZone: '' });
});

test('exportTo', () => {
  const s = (exportTo: string[]): Service => ({ hostname: 'h', namespace: 'foo', addresses: [], ports: [], resolution: 'STATIC', exportTo, external: false, registry: 'Mock', labels: {} });
  assert.equal(visibleTo(s([]), 'bar'), true);
  assert.equal(visibleTo(s(['*']), 'bar'), true);
  assert.equal(visibleTo(s(['.']), 'bar'), false);
  assert.equal(visibleTo(s(['.']), 'foo'), true);
  assert.equal(visibleTo(s(['bar']), 'bar'), true);
  assert.equal(visibleTo(s(['baz']), 'bar'), false);
});
