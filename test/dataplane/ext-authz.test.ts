// CUSTOM authorization through a real connection manager: the filters exactly as the discovery
// server generates them for a CUSTOM policy (rbac shadow rules + ext_authz), a node:http server
// running them, a real upstream app, and real external authorizers (HTTP and gRPC) on loopback.
import assert from 'node:assert/strict';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import { after, before, describe, it } from 'node:test';
import { create } from '@bufbuild/protobuf';
import { anyPack, anyUnpack } from '@bufbuild/protobuf/wkt';
import { FilterChainSchema } from '../../src/gen/envoy/config/listener/v3/listener_components_pb.js';
import { RouterSchema } from '../../src/gen/envoy/extensions/filters/http/router/v3/router_pb.js';
import { ExtAuthzSchema } from '../../src/gen/envoy/extensions/filters/http/ext_authz/v3/ext_authz_pb.js';
import { HttpConnectionManagerSchema, type HttpFilter } from '../../src/gen/envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager_pb.js';
import { buildHcmForFilterChain, type HttpConnectionManagerHandler } from '../../src/dataplane/http-connection-manager.js';
import { HCM_FILTER_NAME } from '../../src/envoy/names.js';
import { parseExtensionProviders } from '../../src/model/extension-providers.js';
import { authorizerLookup } from '../../src/security/authz/ext-authz.js';
import { buildWorkloadSecurity, securityHttpFilters } from '../../src/security/filters.js';
import { FAIL_CLOSED_JWKS } from '../../src/envoy/jwks.js';
import { StaticClusterManager } from './static-cluster-manager.js';
import { close, get, listen } from '../helpers/http.js';
import { startGrpcAuthorizer, startHttpAuthorizer, type Authorizer, type HttpCheck } from '../../samples/apps/ext-authz.js';
import { authz } from '../security/fixtures.js';
import type { CheckRequest } from '../../src/gen/envoy/service/auth/v3/external_auth_pb.js';

const APP = 'inbound|8080||';
const HTTP_AUTHZ = 'outbound|8000||ext-authz.foo.svc.cluster.local';
const GRPC_AUTHZ = 'outbound|9000||ext-authz-grpc.foo.svc.cluster.local';
const DEAD = 'outbound|8000||dead.foo.svc.cluster.local';

/** The providers as an operator writes them in mesh config. */
const PROVIDERS = parseExtensionProviders([
  {
    name: 'http-authz',
    envoyExtAuthzHttp: {
      service: 'ext-authz.foo.svc.cluster.local',
      port: 8000,
      pathPrefix: '/check',
      includeRequestHeadersInCheck: ['x-ext-authz'],
      includeAdditionalHeadersInCheck: { 'x-added-by-proxy': 'yes' },
      headersToUpstreamOnAllow: ['x-ext-authz-check-*'],
      headersToDownstreamOnDeny: ['x-ext-authz-check-result'],
      headersToDownstreamOnAllow: ['x-ext-authz-to-client'],
    },
  },
  { name: 'grpc-authz', envoyExtAuthzGrpc: { service: 'ext-authz-grpc.foo.svc.cluster.local', port: 9000, timeout: '1s' } },
  { name: 'dead-closed', envoyExtAuthzHttp: { service: 'dead.foo.svc.cluster.local', port: 8000, timeout: '300ms' } },
  { name: 'dead-open', envoyExtAuthzHttp: { service: 'dead.foo.svc.cluster.local', port: 8000, failOpen: true } },
  { name: 'dead-503', envoyExtAuthzHttp: { service: 'dead.foo.svc.cluster.local', port: 8000, statusOnError: '503' } },
  { name: 'slow', envoyExtAuthzHttp: { service: 'ext-authz.foo.svc.cluster.local', port: 8000, timeout: '200ms', includeRequestHeadersInCheck: ['x-ext-authz'] } },
  { name: 'slow-grpc', envoyExtAuthzGrpc: { service: 'ext-authz-grpc.foo.svc.cluster.local', port: 9000, timeout: '200ms' } },
]);
const lookup = authorizerLookup(PROVIDERS, () => true);

/** The security filters the discovery server generates for a CUSTOM policy on `/protected*` with `provider`. */
function customFilters(provider: string): HttpFilter[] {
  const policy = authz('ext', { action: 'CUSTOM', provider: { name: provider }, rules: [{ to: [{ operation: { paths: ['/protected*'] } }] }] });
  const sec = buildWorkloadSecurity({ namespace: 'foo', labels: {} }, [], [policy], () => FAIL_CLOSED_JWKS, undefined, { authorizers: lookup });
  // The provider is usable on HTTP chains; TCP chains have no ext_authz, there the rules deny.
  assert.deepEqual(sec.warnings, [`AuthorizationPolicy foo/ext (CUSTOM): TCP chains have no network ext_authz filter to ask provider "${provider}"; the requests its rules match are denied`]);
  return securityHttpFilters(sec);
}

const clusters = new StaticClusterManager();
const servers: Server[] = [];
let appSaw: IncomingHttpHeaders[] = [];

async function proxy(filters: HttpFilter[]): Promise<{ port: number; hcm: HttpConnectionManagerHandler }> {
  const hcm = create(HttpConnectionManagerSchema, {
    statPrefix: 'inbound_0.0.0.0_8080',
    routeSpecifier: {
      case: 'routeConfig',
      value: { name: 'inbound', virtualHosts: [{ name: 'all', domains: ['*'], routes: [{ match: { pathSpecifier: { case: 'prefix', value: '/' } }, action: { case: 'route', value: { clusterSpecifier: { case: 'cluster', value: APP } } } }] }] },
    },
    httpFilters: [...filters, { name: 'envoy.filters.http.router', configType: { case: 'typedConfig', value: anyPack(RouterSchema, create(RouterSchema, {})) } }],
  });
  const chain = create(FilterChainSchema, { filters: [{ name: HCM_FILTER_NAME, configType: { case: 'typedConfig', value: anyPack(HttpConnectionManagerSchema, hcm) } }] });
  const handler = buildHcmForFilterChain(chain, { clusters });
  const server = createServer((req, res) => handler.handle(req, res));
  servers.push(server);
  return { port: await listen(server), hcm: handler };
}

const statsOf = (hcm: HttpConnectionManagerHandler) => {
  const s = hcm.filterStats.find((f) => 'ext_authz' in f);
  assert.ok(s && 'ext_authz' in s, 'the ext_authz filter reports its counters');
  return s.ext_authz;
};

let httpAuthz: Authorizer<HttpCheck>;
let grpcAuthz: Authorizer<CheckRequest>;

before(async () => {
  const app = createServer((req, res) => {
    appSaw.push(req.headers);
    res.end(`app ${req.url}`);
  });
  servers.push(app);
  const appPort = await listen(app);
  // A port nothing listens on: the authorizer is down.
  const gone = createServer();
  const deadPort = await listen(gone);
  await close(gone);
  [httpAuthz, grpcAuthz] = await Promise.all([startHttpAuthorizer(), startGrpcAuthorizer()]);
  clusters.set(APP, [{ host: '127.0.0.1', port: appPort }]);
  clusters.set(HTTP_AUTHZ, [{ host: '127.0.0.1', port: httpAuthz.port }]);
  clusters.set(GRPC_AUTHZ, [{ host: '127.0.0.1', port: grpcAuthz.port }]);
  clusters.set(DEAD, [{ host: '127.0.0.1', port: deadPort }]);
});

after(async () => {
  await Promise.all([...servers.map((s) => close(s)), httpAuthz.close(), grpcAuthz.close()]);
  for (const name of [APP, HTTP_AUTHZ, GRPC_AUTHZ, DEAD]) clusters.remove(name);
});

describe('ext_authz with an HTTP authorizer', () => {
  it('asks only for the requests a CUSTOM rule matches, with method, path_prefix + path and the allowed headers', async () => {
    const { port, hcm } = await proxy(customFilters('http-authz'));
    httpAuthz.checks.length = 0;
    const open = await get(false, port, '/public', { 'x-ext-authz': 'deny' });
    assert.equal(open.status, 200, 'no CUSTOM rule matches /public: the authorizer is not asked');
    assert.equal(httpAuthz.checks.length, 0);
    const r = await get(false, port, '/protected/a?b=1', { 'x-ext-authz': 'allow', 'x-other': 'no', authorization: 'Bearer t' });
    assert.equal(r.status, 200);
    assert.equal(r.body, 'app /protected/a?b=1');
    assert.equal(httpAuthz.checks.length, 1);
    const check = httpAuthz.checks[0]!;
    assert.equal(check.method, 'GET');
    assert.equal(check.url, '/check/protected/a?b=1');
    assert.equal(check.headers['x-ext-authz'], 'allow', 'includeRequestHeadersInCheck');
    assert.equal(check.headers['authorization'], 'Bearer t', 'Authorization is always sent');
    assert.equal(check.headers['x-added-by-proxy'], 'yes', 'includeAdditionalHeadersInCheck');
    assert.equal(check.headers['x-other'], undefined, 'headers not listed are not sent');
    assert.deepEqual(statsOf(hcm), { ok: 1, denied: 0, error: 0, disabled: 1, failure_mode_allowed: 0 });
  });

  it('allowed: headersToUpstreamOnAllow reach the app, the others do not', async () => {
    const { port } = await proxy(customFilters('http-authz'));
    appSaw = [];
    const r = await get(false, port, '/protected', { 'x-ext-authz': 'allow', 'x-ext-authz-check-result': 'forged-by-client' });
    assert.equal(r.status, 200);
    assert.equal(appSaw.length, 1);
    assert.equal(appSaw[0]!['x-ext-authz-check-result'], 'allowed', "the authorizer's value replaces the client's");
    assert.equal(appSaw[0]!['x-not-for-upstream'], undefined);
    assert.equal(appSaw[0]!['x-ext-authz-to-client'], undefined, 'headersToDownstreamOnAllow are for the client only');
    assert.equal(r.headers['x-ext-authz-to-client'], 'allowed', 'headersToDownstreamOnAllow reach the client');
    assert.equal(r.headers['x-ext-authz-check-result'], undefined, 'the upstream-only header does not');
  });

  it("denied: the authorizer's status, body and headersToDownstreamOnDeny reach the client; the app is not called", async () => {
    const { port, hcm } = await proxy(customFilters('http-authz'));
    appSaw = [];
    const r = await get(false, port, '/protected/x', { 'x-ext-authz': 'deny' });
    assert.equal(r.status, 401);
    assert.equal(r.body, 'denied by ext_authz for /check/protected/x');
    assert.equal(r.headers['x-ext-authz-check-result'], 'denied');
    assert.equal(r.headers['x-not-for-client'], undefined, 'only the listed headers (and status, location, www-authenticate)');
    assert.equal(appSaw.length, 0);
    assert.equal(statsOf(hcm).denied, 1);
  });

  it('a 5xx from the authorizer is an error: status_on_error, 403 by default', async () => {
    const { port, hcm } = await proxy(customFilters('http-authz'));
    const r = await get(false, port, '/protected', { 'x-ext-authz': 'fail' });
    assert.equal(r.status, 403);
    assert.equal(statsOf(hcm).error, 1);
  });

  it('authorizer down: failOpen false -> 403, statusOnError -> that status, failOpen true -> allowed', async () => {
    const closed = await proxy(customFilters('dead-closed'));
    assert.equal((await get(false, closed.port, '/protected')).status, 403);
    assert.equal((await get(false, closed.port, '/public')).status, 200);
    assert.deepEqual(statsOf(closed.hcm), { ok: 0, denied: 0, error: 1, disabled: 1, failure_mode_allowed: 0 });
    const status = await proxy(customFilters('dead-503'));
    assert.equal((await get(false, status.port, '/protected')).status, 503);
    const open = await proxy(customFilters('dead-open'));
    appSaw = [];
    const r = await get(false, open.port, '/protected');
    assert.equal(r.status, 200);
    assert.equal(appSaw[0]!['x-envoy-auth-failure-mode-allowed'], undefined, 'the header only with failure_mode_allow_header_add');
    assert.deepEqual(statsOf(open.hcm), { ok: 0, denied: 0, error: 1, disabled: 0, failure_mode_allowed: 1 });
  });

  it('failure_mode_allow_header_add: the upstream learns the check failed', async () => {
    const filters = customFilters('dead-open');
    const ext = filters.find((f) => f.name === 'envoy.filters.http.ext_authz')!;
    const config = anyUnpack(ext.configType.value as never, ExtAuthzSchema)!;
    config.failureModeAllowHeaderAdd = true;
    ext.configType = { case: 'typedConfig', value: anyPack(ExtAuthzSchema, config) };
    const { port } = await proxy(filters);
    appSaw = [];
    assert.equal((await get(false, port, '/protected')).status, 200);
    assert.equal(appSaw[0]!['x-envoy-auth-failure-mode-allowed'], 'true');
  });

  it('an authorizer slower than the timeout is an error (403)', async () => {
    const { port, hcm } = await proxy(customFilters('slow'));
    appSaw = [];
    const r = await get(false, port, '/protected', { 'x-ext-authz': 'hang' });
    assert.equal(r.status, 403);
    assert.equal(appSaw.length, 0);
    assert.equal(statsOf(hcm).error, 1);
  });
});

describe('ext_authz with a gRPC authorizer (envoy.service.auth.v3.Authorization)', () => {
  it('OK: the header mutations apply; the CheckRequest carries the request as Envoy fills it', async () => {
    const { port, hcm } = await proxy(customFilters('grpc-authz'));
    grpcAuthz.checks.length = 0;
    appSaw = [];
    const r = await get(false, port, '/protected/g?q=1', { 'x-ext-authz': 'allow', 'x-remove-me': 'x', 'x-request-id': 'rid-1' });
    assert.equal(r.status, 200);
    assert.equal(appSaw[0]!['x-ext-authz-check-result'], 'allowed');
    assert.equal(appSaw[0]!['x-remove-me'], undefined, 'headers_to_remove');
    assert.equal(r.headers['x-ext-authz-to-client'], 'allowed', 'response_headers_to_add reach the client');
    assert.equal(appSaw[0]!['x-ext-authz-to-client'], undefined, 'and not the app');
    const attrs = grpcAuthz.checks[0]!.attributes!;
    const http = attrs.request!.http!;
    assert.equal(http.method, 'GET');
    assert.equal(http.path, '/protected/g?q=1');
    assert.equal(http.host, `127.0.0.1:${port}`);
    assert.equal(http.scheme, 'http');
    assert.equal(http.id, 'rid-1');
    assert.equal(http.headers['x-ext-authz'], 'allow', 'every header when allowed_headers is not set');
    assert.equal(http.headers[':path'], '/protected/g?q=1');
    const src = attrs.source?.address?.address;
    assert.equal(src?.case, 'socketAddress');
    assert.equal(src?.case === 'socketAddress' ? src.value.address : '', '127.0.0.1');
    assert.equal(statsOf(hcm).ok, 1);
  });

  it('denied: the denied_response status, body and headers reach the client', async () => {
    const { port, hcm } = await proxy(customFilters('grpc-authz'));
    appSaw = [];
    const r = await get(false, port, '/protected/g', { 'x-ext-authz': 'deny' });
    assert.equal(r.status, 401);
    assert.equal(r.body, 'denied by grpc ext_authz for /protected/g');
    assert.equal(r.headers['x-ext-authz-check-result'], 'denied');
    assert.equal(appSaw.length, 0);
    assert.equal(statsOf(hcm).denied, 1);
  });

  it('a failed call (UNAVAILABLE) and a deadline are errors: 403', async () => {
    const { port, hcm } = await proxy(customFilters('grpc-authz'));
    assert.equal((await get(false, port, '/protected', { 'x-ext-authz': 'fail' })).status, 403);
    assert.equal(statsOf(hcm).error, 1);
    const slow = await proxy(customFilters('slow-grpc'));
    assert.equal((await get(false, slow.port, '/protected', { 'x-ext-authz': 'hang' })).status, 403);
    assert.equal(statsOf(slow.hcm).error, 1);
  });
});
