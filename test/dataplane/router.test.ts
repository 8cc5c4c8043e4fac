import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { create, type MessageInitShape } from '@bufbuild/protobuf';
import { AnySchema } from '@bufbuild/protobuf/wkt';
import { RouteConfigurationSchema } from '../../src/gen/envoy/config/route/v3/route_pb.js';
import type { RouteSchema } from '../../src/gen/envoy/config/route/v3/route_components_pb.js';
import { ConfigError } from '../../src/envoy/config-error.js';
import { RequestHeaders, requestView } from '../../src/envoy/request.js';
import { applyMutations } from '../../src/dataplane/header-mutations.js';
import { HeaderValueOption_HeaderAppendAction } from '../../src/gen/envoy/config/core/v3/base_pb.js';
import { HeaderRecord } from '../../src/dataplane/header-mutations.js';
import { compileRouteConfiguration, DEFAULT_ROUTE_TIMEOUT_MS, stripHostPort } from '../../src/dataplane/route-table.js';

type RouteInit = MessageInitShape<typeof RouteSchema>;

const toCluster = (name: string, cluster: string, match: RouteInit['match']): RouteInit => ({
  name,
  match,
  action: { case: 'route', value: { clusterSpecifier: { case: 'cluster', value: cluster } } },
});

const table = compileRouteConfiguration(
  create(RouteConfigurationSchema, {
    name: 'r',
    virtualHosts: [
      { name: 'exact', domains: ['api.example.com', 'api.example.com:8080'], routes: [toCluster('api', 'api', { pathSpecifier: { case: 'prefix', value: '/' } })] },
      { name: 'suffix', domains: ['*.example.com'], routes: [toCluster('sfx', 'sfx', { pathSpecifier: { case: 'prefix', value: '/' } })] },
      { name: 'longer-suffix', domains: ['*.svc.example.com'], routes: [toCluster('svc', 'svc', { pathSpecifier: { case: 'prefix', value: '/' } })] },
      { name: 'prefix', domains: ['internal.*'], routes: [toCluster('pfx', 'pfx', { pathSpecifier: { case: 'prefix', value: '/' } })] },
      {
        name: 'default',
        domains: ['*'],
        routes: [
          toCluster('exact-path', 'a', { pathSpecifier: { case: 'path', value: '/exact' } }),
          toCluster('regex', 'b', { pathSpecifier: { case: 'safeRegex', value: { regex: '/items/\\d+' } } }),
          toCluster('by-header', 'c', { pathSpecifier: { case: 'prefix', value: '/h' }, headers: [{ name: 'x-canary', headerMatchSpecifier: { case: 'exactMatch', value: '1' } }] }),
          toCluster('by-query', 'q', { pathSpecifier: { case: 'prefix', value: '/h' }, queryParameters: [{ name: 'v', queryParameterMatchSpecifier: { case: 'stringMatch', value: { matchPattern: { case: 'exact', value: '2' } } } }] }),
          toCluster('separated', 's', { pathSpecifier: { case: 'pathSeparatedPrefix', value: '/sep' } }),
          { name: 'direct', match: { pathSpecifier: { case: 'prefix', value: '/health' } }, action: { case: 'directResponse', value: { status: 200, body: { specifier: { case: 'inlineString', value: 'ok' } } } } },
          {
            name: 'timed',
            match: { pathSpecifier: { case: 'prefix', value: '/slow' }, caseSensitive: false },
            action: { case: 'route', value: { clusterSpecifier: { case: 'cluster', value: 't' }, timeout: { seconds: 2n, nanos: 500_000_000 } } },
          },
          toCluster('catch-all', 'd', { pathSpecifier: { case: 'prefix', value: '/h' } }),
        ],
      },
    ],
  }),
);

function routeName(authority: string, path = '/', headers: Record<string, string> = {}): string | undefined {
  return table.route(requestView({ authority, path, headers }))?.name;
}

describe('router: virtual hosts', () => {
  it('exact domains (with their port) win over wildcards; longest suffix wildcard first; then prefix; then *', () => {
    assert.equal(routeName('api.example.com'), 'api');
    assert.equal(routeName('API.example.com'), 'api', 'host matching ignores case');
    assert.equal(routeName('api.example.com:8080'), 'api');
    assert.equal(routeName('x.svc.example.com'), 'svc');
    assert.equal(routeName('x.example.com'), 'sfx');
    assert.equal(routeName('internal.corp'), 'pfx');
    assert.equal(routeName('elsewhere', '/h'), 'catch-all');
    assert.equal(routeName('elsewhere', '/'), undefined, 'the * host has no route for /');
    assert.equal(routeName('api.example.com:9090', '/h'), 'catch-all', 'a port that is not listed falls to *');
  });

  it('ignore_port_in_host_matching and strip ports', () => {
    const t = compileRouteConfiguration(
      create(RouteConfigurationSchema, { ignorePortInHostMatching: true, virtualHosts: [{ name: 'v', domains: ['a.b'], routes: [toCluster('x', 'x', { pathSpecifier: { case: 'prefix', value: '/' } })] }] }),
    );
    assert.equal(t.route(requestView({ authority: 'a.b:1234' }))?.name, 'x');
    assert.equal(stripHostPort('[::1]:80'), '[::1]');
    assert.equal(stripHostPort('::1'), '::1');
    assert.equal(stripHostPort('a:80', 81), 'a:80');
    assert.equal(stripHostPort('a:80', 80), 'a');
  });

  it("a direct response body over max_direct_response_body_size_bytes (Envoy's 4096 when unset) refuses the configuration, naming the route", () => {
    const direct = (bytes: number): RouteInit => ({ match: { pathSpecifier: { case: 'prefix', value: '/' } }, action: { case: 'directResponse', value: { status: 200, body: { specifier: { case: 'inlineString', value: 'é'.repeat(bytes / 2) } } } } });
    const rc = (bytes: number, max?: number) => create(RouteConfigurationSchema, { ...(max !== undefined ? { maxDirectResponseBodySizeBytes: max } : {}), virtualHosts: [{ name: 'v', domains: ['*'], routes: [direct(bytes)] }] });
    assert.throws(
      () => compileRouteConfiguration(rc(4098)),
      (e: unknown) => e instanceof ConfigError && e.field === 'virtual_hosts[0].routes[0].direct_response.body' && /response body size is 4098 bytes; maximum is 4096/.test(e.message),
    );
    assert.equal(compileRouteConfiguration(rc(4096)).route(requestView({ authority: 'x' }))?.action.kind, 'direct', 'the default limit itself is allowed');
    assert.equal(compileRouteConfiguration(rc(8192, 1024 * 1024)).route(requestView({ authority: 'x' }))?.action.kind, 'direct', 'the Go mesh raises it to 1 MiB');
    assert.throws(() => compileRouteConfiguration(rc(8192, 8190)), /8192 bytes; maximum is 8190/);
  });

  it('rejects a domain in two virtual hosts', () => {
    assert.throws(
      () => compileRouteConfiguration(create(RouteConfigurationSchema, { virtualHosts: [{ name: 'a', domains: ['x'] }, { name: 'b', domains: ['X'] }] })),
      (e: unknown) => e instanceof ConfigError && e.field === 'virtual_hosts[1].domains',
    );
  });
});

describe('router: routes', () => {
  it('first match wins: path, safe_regex (whole path, no query), headers, query, path_separated_prefix', () => {
    assert.equal(routeName('h', '/exact?x=1'), 'exact-path');
    assert.equal(routeName('h', '/exact/more'), undefined);
    assert.equal(routeName('h', '/items/12?y'), 'regex');
    assert.equal(routeName('h', '/items/12/x'), undefined);
    assert.equal(routeName('h', '/h', { 'x-canary': '1' }), 'by-header');
    assert.equal(routeName('h', '/h?v=2'), 'by-query');
    assert.equal(routeName('h', '/h'), 'catch-all');
    assert.equal(routeName('h', '/sep/x'), 'separated');
    assert.equal(routeName('h', '/separate'), undefined);
    assert.equal(routeName('h', '/SLOW/x'), 'timed', 'case_sensitive: false');
  });

  it('actions: cluster, timeout (default 15 s), direct_response', () => {
    const timed = table.route(requestView({ authority: 'h', path: '/slow' }))?.action;
    assert.equal(timed?.kind === 'route' && timed.timeoutMs, 2500);
    const dflt = table.route(requestView({ authority: 'h', path: '/h' }))?.action;
    assert.equal(dflt?.kind === 'route' && dflt.timeoutMs, DEFAULT_ROUTE_TIMEOUT_MS);
    assert.equal(dflt?.kind === 'route' && dflt.cluster(requestView({})).name, 'd');
    assert.deepEqual(table.route(requestView({ authority: 'h', path: '/health' }))?.action, { kind: 'direct', status: 200, body: 'ok' });
  });

  it('rejects actions it cannot perform, naming the route', () => {
    assert.throws(
      () =>
        compileRouteConfiguration(
          create(RouteConfigurationSchema, { virtualHosts: [{ name: 'a', domains: ['*'], routes: [{ match: { pathSpecifier: { case: 'prefix', value: '/' } }, action: { case: 'nonForwardingAction', value: {} } }] }] }),
        ),
      /virtual_hosts\[0\]\.routes\[0\]: action nonForwardingAction is not supported/,
    );
  });

  it('refuses per-route filter configs of a type no filter honours rather than ignoring them', () => {
    assert.throws(
      () =>
        compileRouteConfiguration(
          create(RouteConfigurationSchema, {
            virtualHosts: [{ name: 'a', domains: ['*'], routes: [{ ...toCluster('r', 'c', { pathSpecifier: { case: 'prefix', value: '/' } }), typedPerFilterConfig: { 'envoy.filters.http.rbac': create(AnySchema, { typeUrl: 'x' }) } }] }],
          }),
        ),
      /virtual_hosts\[0\]\.routes\[0\]\.typed_per_filter_config\["envoy\.filters\.http\.rbac"\]: per-route configs of type x are not supported/,
    );
  });
});

describe('router: require_tls (a gateway server with httpsRedirect)', () => {
  const rc = (requireTls: number) =>
    compileRouteConfiguration(
      create(RouteConfigurationSchema, {
        name: 'http.80',
        ignorePortInHostMatching: true,
        virtualHosts: [{ name: 'web', domains: ['web.example.com'], requireTls, routes: [toCluster('web', 'web', { pathSpecifier: { case: 'prefix', value: '/' } })] }],
      }),
    );
  const redirectOf = (t: ReturnType<typeof rc>, headers: Record<string, string>) => {
    const r = t.route(requestView({ authority: 'web.example.com:8080', path: '/a?b=1', headers }));
    return r?.action.kind === 'redirect' ? { status: r.action.redirect.status, location: r.action.redirect.location(requestView({ authority: 'web.example.com:8080', path: '/a?b=1', headers }), undefined) } : r?.name;
  };

  it('ALL: a plaintext request gets a 301 to https with the host and path as received; an https one is routed', () => {
    const t = rc(2);
    assert.deepEqual(redirectOf(t, { 'x-forwarded-proto': 'http' }), { status: 301, location: 'https://web.example.com:8080/a?b=1' });
    assert.equal(redirectOf(t, { 'x-forwarded-proto': 'https' }), 'web');
  });

  it('EXTERNAL_ONLY: only external requests are redirected; NONE routes everything', () => {
    assert.deepEqual(redirectOf(rc(1), { 'x-forwarded-proto': 'http' }), { status: 301, location: 'https://web.example.com:8080/a?b=1' });
    assert.equal(redirectOf(rc(1), { 'x-forwarded-proto': 'http', 'x-envoy-internal': 'true' }), 'web');
    assert.equal(redirectOf(rc(0), { 'x-forwarded-proto': 'http' }), 'web');
  });
});

describe('router: gRPC retry_on conditions (the Go mesh default policy names unavailable and cancelled)', () => {
  it('are accepted and retry on the grpc-status they name', async () => {
    const { compileRetryPolicy } = await import('../../src/dataplane/retry-policy.js');
    const { RetryPolicySchema } = await import('../../src/gen/envoy/config/route/v3/route_components_pb.js');
    const spec = compileRetryPolicy(create(RetryPolicySchema, { retryOn: 'connect-failure,unavailable,cancelled', numRetries: 2 }), 'retry_policy');
    assert.equal(spec.retriableResponse(200, { 'grpc-status': '14' }), true, 'UNAVAILABLE');
    assert.equal(spec.retriableResponse(200, { 'grpc-status': '1' }), true, 'CANCELLED');
    assert.equal(spec.retriableResponse(200, { 'grpc-status': '13' }), false, 'INTERNAL is not named');
    assert.equal(spec.retriableResponse(503, {}), false, 'a plain 503 is not a gRPC status');
    assert.throws(() => compileRetryPolicy(create(RetryPolicySchema, { retryOn: 'unavailable,bogus' }), 'retry_policy'), /retry condition "bogus" is not supported/);
  });
});

describe('router: the previous_priorities retry priority', () => {
  it('is read from its typed_config; an update_frequency of 0 is refused naming the field; the tried levels are left out every update_frequency attempts', async () => {
    const { compileRetryPolicy, excludeTriedPriorities } = await import('../../src/dataplane/retry-policy.js');
    const { RetryPolicySchema } = await import('../../src/gen/envoy/config/route/v3/route_components_pb.js');
    const { PreviousPrioritiesConfigSchema } = await import('../../src/gen/envoy/extensions/retry/priority/previous_priorities/v3/previous_priorities_config_pb.js');
    const { anyPack } = await import('@bufbuild/protobuf/wkt');
    const policy = (updateFrequency: number) => create(RetryPolicySchema, { retryOn: '5xx', retryPriority: { name: 'envoy.retry_priorities.previous_priorities', configType: { case: 'typedConfig', value: anyPack(PreviousPrioritiesConfigSchema, create(PreviousPrioritiesConfigSchema, { updateFrequency })) } } });
    assert.equal(compileRetryPolicy(policy(2), 'retry_policy').priorityUpdateFrequency, 2);
    assert.equal(compileRetryPolicy(create(RetryPolicySchema, { retryOn: '5xx' }), 'retry_policy').priorityUpdateFrequency, 0);
    assert.throws(() => compileRetryPolicy(policy(0), 'retry_policy'), /retry_policy\.retry_priority\.typed_config\.update_frequency: must be greater than 0, got 0/);
    const excluded = new Set<number>();
    const at = (...priorities: number[]) => [...excludeTriedPriorities(priorities.map((priority) => ({ priority })), 2, excluded)];
    assert.deepEqual(at(0), [], 'one attempt: the original load');
    assert.deepEqual(at(0, 0), [0], 'two: the levels tried leave');
    assert.deepEqual(at(0, 0, 1), [0], 'between updates the set stands');
    assert.deepEqual(at(0, 0, 1, 1), [0, 1]);
  });
});

describe('router: header mutations of the three levels', () => {
  const set = (key: string, value: string) => [{ header: { key, value }, appendAction: HeaderValueOption_HeaderAppendAction.OVERWRITE_IF_EXISTS_OR_ADD }];
  const route: RouteInit = {
    name: 'r',
    match: { pathSpecifier: { case: 'prefix', value: '/' } },
    action: { case: 'route', value: { clusterSpecifier: { case: 'cluster', value: 'c' } } },
    requestHeadersToAdd: [...set('x-level', 'route'), ...set('x-route', 'yes')],
    responseHeadersToAdd: set('x-level', 'route'),
  };
  const config = (mostSpecificHeaderMutationsWins: boolean) =>
    compileRouteConfiguration(
      create(RouteConfigurationSchema, {
        name: 'levels',
        mostSpecificHeaderMutationsWins,
        requestHeadersToAdd: set('x-level', 'route-configuration'),
        responseHeadersToAdd: set('x-level', 'route-configuration'),
        virtualHosts: [
          {
            name: 'vh',
            domains: ['*'],
            requestHeadersToAdd: set('x-level', 'virtual-host'),
            routes: [route],
          },
        ],
      }),
    );
  const outcome = (mostSpecific: boolean) => {
    const compiled = config(mostSpecific).route(requestView({ authority: 'a', path: '/' }))!;
    const req = new RequestHeaders([['x-level', 'client']]);
    applyMutations(req, compiled.requestHeaders);
    const res: Record<string, string | string[]> = {};
    applyMutations(new HeaderRecord(res), compiled.responseHeaders);
    return { request: req.joined('x-level'), route: req.joined('x-route'), response: res['x-level'] };
  };

  it("as Envoy: by default the least specific level's overwrite wins (it is applied last)", () => {
    assert.deepEqual(outcome(false), { request: 'route-configuration', route: 'yes', response: 'route-configuration' });
  });

  it("most_specific_header_mutations_wins: the route's wins", () => {
    assert.deepEqual(outcome(true), { request: 'route', route: 'yes', response: 'route' });
  });
});
