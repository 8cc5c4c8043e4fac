// Mesh config extensionProviders: what is accepted, and every error naming the provider and field.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ExtensionProviderError, parseExtensionProviders } from '../../src/model/extension-providers.js';
import { MeshConfigError, parseMeshConfig } from '../../src/model/mesh-config.js';

test('ext_authz providers are read with their fields; other kinds are reported as not effective', () => {
  const p = parseExtensionProviders([
    { name: 'http', envoyExtAuthzHttp: { service: 'foo/authz.foo.svc.cluster.local', port: 8000, timeout: '1.5s', statusOnError: '503', failOpen: true, headersToUpstreamOnAllow: ['x-*'] } },
    { name: 'grpc', envoyExtAuthzGrpc: { service: 'authz-grpc.foo.svc.cluster.local', port: 9000 } },
    { name: 'tracing', zipkin: { service: 'zipkin.mesh-system.svc.cluster.local', port: 9411 } },
  ]);
  const http = p.authorizers.get('http');
  assert.equal(http?.kind, 'envoyExtAuthzHttp');
  assert.equal(http?.timeoutMs, 1500);
  assert.equal(http?.statusOnError, 503);
  assert.equal(http?.failOpen, true);
  assert.equal(p.authorizers.get('grpc')?.timeoutMs, undefined, 'no timeout: the builder applies the default');
  assert.deepEqual(p.notEffective, ['tracing (zipkin)']);
  const mesh = parseMeshConfig('extensionProviders:\n- name: tracing\n  zipkin: {service: z, port: 9411}\n', 'mesh');
  assert.deepEqual(mesh.notEffective, ['extensionProviders: tracing (zipkin)']);
});

test('bad providers: the error names the index, the field and what is expected', () => {
  const bad: [unknown, RegExp][] = [
    [{}, /extensionProviders: expected a list/],
    [[{ envoyExtAuthzHttp: { service: 's', port: 1 } }], /extensionProviders\[0\]\.name: required/],
    [[{ name: 'Upper', envoyExtAuthzHttp: { service: 's', port: 1 } }], /extensionProviders\[0\]\.name: "Upper" must be at most 63 lowercase/],
    [[{ name: 'a', envoyExtAuthzHttp: { service: 's', port: 1 } }, { name: 'a', envoyExtAuthzGrpc: { service: 's', port: 1 } }], /extensionProviders\[1\]\.name: "a" is already the name/],
    [[{ name: 'a', envoyExtAuthzHttp: { port: 80 } }], /extensionProviders\[0\]\.envoyExtAuthzHttp\.service: required/],
    [[{ name: 'a', envoyExtAuthzHttp: { service: 's', port: 70000 } }], /envoyExtAuthzHttp\.port: must be in the range \[1, 65535\], got 70000/],
    [[{ name: 'a', envoyExtAuthzGrpc: { service: 's', port: 1, timeout: 'soon' } }], /envoyExtAuthzGrpc\.timeout: "soon" is not a duration/],
    [[{ name: 'a', envoyExtAuthzGrpc: { service: 's', port: 1, statusOnError: '999' } }], /envoyExtAuthzGrpc\.statusOnError: "999" is not an HTTP status code/],
    [[{ name: 'a', envoyExtAuthzHttp: { service: 's', port: 1, pathPrefix: 'check' } }], /envoyExtAuthzHttp\.pathPrefix: must begin with "\/"/],
    [[{ name: 'a', envoyExtAuthzHttp: { service: 's', port: 1, headersToUpstreamOnAllow: ['x', '*'] } }], /envoyExtAuthzHttp\.headersToUpstreamOnAllow\[1\]: a single wildcard/],
    [[{ name: 'a', envoyExtAuthzGrpc: { service: 's', port: 1, pathPrefix: '/x' } }], /envoyExtAuthzGrpc\.pathPrefix: unknown field/],
    [[{ name: 'a', envoyExtAuthzHttp: { service: 's', port: 1, failOpen: 'yes' } }], /envoyExtAuthzHttp\.failOpen: expected true or false/],
    [[{ name: 'a', envoyExtAuthzHttp: { service: 's', port: 1, includeRequestBodyInCheck: { maxRequestBytes: -1 } } }], /includeRequestBodyInCheck\.maxRequestBytes: expected a non-negative integer/],
    [[{ name: 'a', envoyExtAuthzHttp: { service: 's', port: 1 }, envoyExtAuthzGrpc: { service: 's', port: 1 } }], /extensionProviders\[0\]: expected exactly one provider kind/],
    [[{ name: 'a', opa: {} }], /extensionProviders\[0\]: unknown provider kind "opa"/],
  ];
  for (const [value, message] of bad) assert.throws(() => parseExtensionProviders(value), (e: unknown) => e instanceof ExtensionProviderError && message.test(e.message), JSON.stringify(value));
  assert.throws(() => parseMeshConfig('extensionProviders:\n- name: a\n  envoyExtAuthzHttp: {service: s}\n', '/etc/mesh'), (e: unknown) => e instanceof MeshConfigError && /^\/etc\/mesh: extensionProviders\[0\]\.envoyExtAuthzHttp\.port/.test(e.message));
});
