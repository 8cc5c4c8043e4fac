import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, request } from 'node:http';
import { create } from '@bufbuild/protobuf';
import { anyPack, EmptySchema } from '@bufbuild/protobuf/wkt';
import { RouterSchema } from '../../src/gen/envoy/extensions/filters/http/router/v3/router_pb.js';
import { JwtAuthenticationSchema } from '../../src/gen/envoy/extensions/filters/http/jwt_authn/v3/config_pb.js';
import { RBACSchema } from '../../src/gen/envoy/extensions/filters/http/rbac/v3/rbac_pb.js';
import { HttpConnectionManagerSchema } from '../../src/gen/envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager_pb.js';
import { buildHttpConnectionManager } from '../../src/dataplane/http-connection-manager.js';
import { httpFilterOf, registerHttpFilter, type FilterStats } from '../../src/dataplane/filters/registry.js';
import { typeUrlOf } from '../../src/envoy/types.js';
import { StaticClusterManager } from './static-cluster-manager.js';
import { close, listen } from '../helpers/http.js';

// A new HTTP filter: one registration, nothing else edited.
registerHttpFilter({
  schema: EmptySchema,
  compile(_config, name) {
    const stats = { brewed: 0 };
    return {
      // A filter file declares its group in HttpFilterStatsByGroup; kept out of this test so the
      // other tests' types see the built-in filters only.
      stats: { name, teapot: stats } as unknown as FilterStats,
      filter: {
        name,
        decodeHeaders(req) {
          if (!req.headers.has('x-teapot')) return { kind: 'continue' };
          stats.brewed++;
          return { kind: 'reply', reply: { status: 418, body: 'short and stout', headers: {}, details: 'teapot' } };
        },
      },
    };
  },
});

test('the built-in filters are registered by type URL; the router is the terminal one', () => {
  assert.ok(httpFilterOf(typeUrlOf(JwtAuthenticationSchema)));
  assert.ok(httpFilterOf(typeUrlOf(RBACSchema)));
  assert.equal(httpFilterOf(typeUrlOf(RouterSchema))?.terminal, true);
  assert.ok(httpFilterOf('type.googleapis.com/envoy.extensions.filters.http.fault.v3.HTTPFault'));
  assert.equal(httpFilterOf('type.googleapis.com/envoy.extensions.filters.http.buffer.v3.Buffer'), undefined);
});

test('a registered filter runs in the chain before the router, with its own stats', async () => {
  const hcm = create(HttpConnectionManagerSchema, {
    statPrefix: 'registry',
    routeSpecifier: {
      case: 'routeConfig',
      value: { virtualHosts: [{ name: 'all', domains: ['*'], routes: [{ match: { pathSpecifier: { case: 'prefix', value: '/' } }, action: { case: 'directResponse', value: { status: 200, body: { specifier: { case: 'inlineString', value: 'tea' } } } } }] }] },
    },
    httpFilters: [
      { name: 'example.teapot', configType: { case: 'typedConfig', value: anyPack(EmptySchema, create(EmptySchema)) } },
      { name: 'envoy.filters.http.router', configType: { case: 'typedConfig', value: anyPack(RouterSchema, create(RouterSchema)) } },
    ],
  });
  const handler = buildHttpConnectionManager(hcm, { clusters: new StaticClusterManager() });
  const server = createServer((req, res) => handler.handle(req, res));
  const port = await listen(server);
  try {
    const get = (headers: Record<string, string>) =>
      new Promise<{ status: number; body: string }>((resolve, reject) => {
        request({ port, path: '/', headers }, (res) => {
          let body = '';
          res.on('data', (d: Buffer) => (body += d.toString()));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
        })
          .on('error', reject)
          .end();
      });
    assert.deepEqual(await get({}), { status: 200, body: 'tea' }, 'continue: the router answers');
    assert.deepEqual(await get({ 'x-teapot': '1' }), { status: 418, body: 'short and stout' }, 'the filter replies locally');
    assert.deepEqual(handler.filterStats, [{ name: 'example.teapot', teapot: { brewed: 1 } }]);
  } finally {
    await close(server);
  }
});

test('an unregistered filter type is a ConfigError unless it is optional', () => {
  const buffer = { typeUrl: 'type.googleapis.com/envoy.extensions.filters.http.buffer.v3.Buffer', value: new Uint8Array() };
  const build = (isOptional: boolean) =>
    buildHttpConnectionManager(
      create(HttpConnectionManagerSchema, {
        routeSpecifier: { case: 'routeConfig', value: {} },
        httpFilters: [
          { name: 'buffer', isOptional, configType: { case: 'typedConfig', value: buffer } },
          { name: 'envoy.filters.http.router', configType: { case: 'typedConfig', value: anyPack(RouterSchema, create(RouterSchema)) } },
        ],
      }),
      { clusters: new StaticClusterManager() },
    );
  assert.throws(() => build(false), /http_filters\[0\]\.typed_config: filter type envoy.extensions.filters.http.buffer.v3.Buffer is not supported/);
  assert.deepEqual(build(true).filterStats, []);
});
