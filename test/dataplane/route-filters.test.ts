// The per-route configs of the fault and CORS filters end to end: a VirtualService translated by the
// discovery server's builders (a sidecar without capture: its outbound HTTP listener binds
// 127.0.0.1:<port>, routes over RDS) served over a real ADS stream to mesh-proxy, real HTTP to a real
// upstream. Envoy's semantics: a route's fault config replaces the filter's; CORS answers preflights
// itself and adds Access-Control-* headers to the responses of allowed origins.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { create, type MessageInitShape } from '@bufbuild/protobuf';
import { AnySchema } from '@bufbuild/protobuf/wkt';
import type { AnyResource } from '../../src/api/types.js';
import { ListenerSchema } from '../../src/gen/envoy/config/listener/v3/listener_pb.js';
import { RouteConfigurationSchema } from '../../src/gen/envoy/config/route/v3/route_pb.js';
import { RBACPerRouteSchema } from '../../src/gen/envoy/extensions/filters/http/rbac/v3/rbac_pb.js';
import { loadBootstrap } from '../../src/dataplane/bootstrap.js';
import { MeshProxy } from '../../src/dataplane/proxy.js';
import { compileRouteConfiguration } from '../../src/dataplane/route-table.js';
import { compileRetryPolicy } from '../../src/dataplane/retry-policy.js';
import { RetryPolicySchema } from '../../src/gen/envoy/config/route/v3/route_components_pb.js';
import '../../src/dataplane/filters/index.js';
import { pack, TypeUrl } from '../../src/envoy/types.js';
import { sidecarListeners, sidecarRoutes } from '../../src/xds/generators/sidecar.js';
import { freePort } from '../../samples/local-mesh.js';
import { eventually, statValue } from '../helpers/proc.js';
import { get } from '../helpers/http.js';
import { pushOf, serviceEntry, sidecarProxy } from '../networking/fixtures.js';
import { FixtureAds, staticCluster, writeBootstrap } from './xds-fixtures.js';

/** A request to the outbound listener for the web service. */
const send = (port: number, path: string, method = 'GET', headers: Record<string, string> = {}) => get(false, port, path, { host: 'web.foo.svc.cluster.local', ...headers }, method);

const VS = {
  apiVersion: 'networking.mesh.io/v1',
  kind: 'VirtualService',
  metadata: { namespace: 'foo', name: 'web' },
  spec: {
    hosts: ['web'],
    http: [
      { name: 'faulty', match: [{ uri: { prefix: '/faulty' } }], fault: { abort: { httpStatus: 418, percentage: { value: 100 } } }, route: [{ destination: { host: 'web' } }] },
      {
        name: 'cors',
        match: [{ uri: { prefix: '/cors' } }],
        corsPolicy: {
          allowOrigins: [{ exact: 'https://app.example.com' }, { regex: '.*\\.example\\.org' }],
          allowMethods: ['GET', 'POST'],
          allowHeaders: ['x-user'],
          exposeHeaders: ['x-trace'],
          maxAge: '24h',
          allowCredentials: true,
        },
        route: [{ destination: { host: 'web' } }],
      },
      {
        name: 'cors-strict',
        match: [{ uri: { prefix: '/strict' } }],
        corsPolicy: { allowOrigins: [{ exact: 'https://app.example.com' }], allowMethods: ['GET'], unmatchedPreflights: 'IGNORE' },
        route: [{ destination: { host: 'web' } }],
      },
      { name: 'rest', route: [{ destination: { host: 'web' } }] },
    ],
  },
} as AnyResource;

describe('fault and CORS per-route configs through mesh-proxy', () => {
  let dir: string;
  let ads: FixtureAds;
  let proxy: MeshProxy;
  let upstream: Server;
  let port: number;
  let push: ReturnType<typeof pushOf>;
  /** Requests the upstream saw: method and path. */
  const seen: string[] = [];

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'route-filters-'));
    upstream = createServer((req, res) => {
      seen.push(`${req.method} ${req.url}`);
      res.writeHead(200, { 'x-trace': 't1' }).end('upstream');
    });
    await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r));
    port = await freePort();
    push = pushOf([serviceEntry('foo', 'web', { hosts: ['web.foo.svc.cluster.local'], location: 'MESH_INTERNAL', resolution: 'STATIC', ports: [{ number: port, name: 'http', protocol: 'HTTP' }] }), VS]);
    const client = sidecarProxy('127.0.0.1', 'client', 'foo', { INTERCEPTION_MODE: 'NONE' });
    const listeners = sidecarListeners(client, push).filter((l) => l.name === `127.0.0.1_${port}`);
    const routes = sidecarRoutes(client, push, new Set([String(port)]));
    ads = new FixtureAds();
    await ads.listen();
    ads.set(TypeUrl.Listener, listeners.map((l) => ({ name: l.name, any: pack(ListenerSchema, l) })));
    ads.set(TypeUrl.RouteConfiguration, routes.map((r) => ({ name: r.name, any: pack(RouteConfigurationSchema, r) })));
    ads.set(TypeUrl.Cluster, [staticCluster(`outbound|${port}||web.foo.svc.cluster.local`, [(upstream.address() as { port: number }).port])]);
    proxy = new MeshProxy({ bootstrap: loadBootstrap({ path: writeBootstrap(dir, ads.port, 0) }), drainTimeMs: 1_000, initialBackoffMs: 50 });
    await proxy.start();
    await eventually(async () => assert.equal((await send(port, '/')).status, 200), 10_000);
  });

  after(async () => {
    await proxy.stop(0);
    ads.close();
    upstream.closeAllConnections();
    upstream.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('answers HTTP/1.0 with 426 until PILOT_HTTP10 sets accept_http_10 on the listener, then serves it', async () => {
    const http10 = () =>
      new Promise<string>((resolve, reject) => {
        const s = connect({ host: '127.0.0.1', port }, () => s.write('GET /other HTTP/1.0\r\nHost: web.foo.svc.cluster.local\r\n\r\n'));
        let out = '';
        s.setEncoding('latin1');
        s.on('data', (d: string) => (out += d));
        s.on('end', () => resolve(out.split('\r\n')[0]!));
        s.on('error', reject);
      });
    assert.match(await http10(), /^HTTP\/1\.[01] 426 /);
    const client = sidecarProxy('127.0.0.1', 'client', 'foo', { INTERCEPTION_MODE: 'NONE' });
    const [l] = sidecarListeners(client, push, { http10: true }).filter((x) => x.name === `127.0.0.1_${port}`);
    ads.set(TypeUrl.Listener, [{ name: l!.name, any: pack(ListenerSchema, l!) }]);
    await ads.push(TypeUrl.Listener);
    await eventually(async () => assert.match(await http10(), /^HTTP\/1\.[01] 200 /), 10_000);
  });

  it("aborts only on the route whose per-route fault config asks for it, counted in the filter's stats", async () => {
    seen.length = 0;
    const r = await send(port, '/faulty/x');
    assert.equal(r.status, 418);
    assert.equal(r.body, 'fault filter abort');
    assert.deepEqual(seen, [], 'the upstream never saw it');
    assert.equal((await send(port, '/other')).status, 200, 'the filter-level config injects nothing');
    const stats = await (await fetch(`http://127.0.0.1:${proxy.adminPort}/stats`)).text();
    assert.equal(statValue(stats, `http.outbound_127.0.0.1_${port}.fault.aborts_injected`), 1);
  });

  it('answers a preflight from an allowed origin itself, with the policy', async () => {
    seen.length = 0;
    const r = await send(port, '/cors/a', 'OPTIONS', { origin: 'https://app.example.com', 'access-control-request-method': 'POST' });
    assert.equal(r.status, 200);
    assert.equal(r.headers['access-control-allow-origin'], 'https://app.example.com');
    assert.equal(r.headers['access-control-allow-methods'], 'GET,POST');
    assert.equal(r.headers['access-control-allow-headers'], 'x-user');
    assert.equal(r.headers['access-control-max-age'], '86400');
    assert.equal(r.headers['access-control-allow-credentials'], 'true');
    assert.deepEqual(seen, [], 'the upstream never saw the preflight');
  });

  it('adds Access-Control-* to the upstream response of an allowed origin (exact or regex), not of another', async () => {
    const ok = await send(port, '/cors/b', 'GET', { origin: 'https://x.example.org' });
    assert.equal(ok.status, 200);
    assert.equal(ok.body, 'upstream');
    assert.equal(ok.headers['access-control-allow-origin'], 'https://x.example.org');
    assert.equal(ok.headers['access-control-allow-credentials'], 'true');
    assert.equal(ok.headers['access-control-expose-headers'], 'x-trace');
    const other = await send(port, '/cors/b', 'GET', { origin: 'https://evil.example.net' });
    assert.equal(other.status, 200);
    assert.equal(other.headers['access-control-allow-origin'], undefined);
    const none = await send(port, '/other', 'GET', { origin: 'https://app.example.com' });
    assert.equal(none.headers['access-control-allow-origin'], undefined, 'a route without a CORS policy');
  });

  it('forwards a preflight from an origin the policy does not allow (forward_not_matching_preflights defaults to true)', async () => {
    seen.length = 0;
    const r = await send(port, '/cors/c', 'OPTIONS', { origin: 'https://evil.example.net', 'access-control-request-method': 'POST' });
    assert.equal(r.body, 'upstream');
    assert.equal(r.headers['access-control-allow-origin'], undefined);
    assert.deepEqual(seen, ['OPTIONS /cors/c']);
  });

  it('unmatchedPreflights IGNORE: the proxy answers a preflight from an origin the policy does not allow, without CORS headers', async () => {
    seen.length = 0;
    const r = await send(port, '/strict/c', 'OPTIONS', { origin: 'https://evil.example.net', 'access-control-request-method': 'POST' });
    assert.equal(r.status, 200);
    assert.notEqual(r.body, 'upstream');
    assert.equal(r.headers['access-control-allow-origin'], undefined);
    assert.deepEqual(seen, [], 'the upstream never saw the preflight');
  });
});

it('refuses a per-route config no filter honours (it could switch a security filter off)', () => {
  const rc = create(RouteConfigurationSchema, {
    name: 'r',
    virtualHosts: [{ name: 'v', domains: ['*'], typedPerFilterConfig: { 'envoy.filters.http.rbac': pack(RBACPerRouteSchema, {}) }, routes: [] }],
  });
  assert.throws(() => compileRouteConfiguration(rc), /virtual_hosts\[0\]\.typed_per_filter_config\["envoy\.filters\.http\.rbac"\]: per-route configs of type envoy\.extensions\.filters\.http\.rbac\.v3\.RBACPerRoute are not supported/);
});

it("compiles the Go mesh's default retry_on; its gRPC conditions retry by the grpc-status of a trailers-only response", () => {
  const spec = compileRetryPolicy(create(RetryPolicySchema, { retryOn: 'connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes', retriableStatusCodes: [503], numRetries: 2 }), 'retry_policy');
  assert.equal(spec.retriableResponse(200, { 'grpc-status': '14' }), true, 'UNAVAILABLE');
  assert.equal(spec.retriableResponse(200, { 'grpc-status': '1' }), true, 'CANCELLED');
  assert.equal(spec.retriableResponse(200, { 'grpc-status': '13' }), false, 'INTERNAL is not asked for');
  assert.equal(spec.retriableResponse(200, { 'grpc-status': '0' }), false);
  assert.equal(spec.retriableResponse(503, {}), true, 'retriable-status-codes');
  assert.equal(spec.retriableResponse(500, {}), false);
});

it("retry_on's failures in Envoy's order: connect-failure and refused-stream each retry their own; reset, 5xx and gateway-error retry every failure", () => {
  const failures = ['connect-failure', 'refused-stream', 'reset', 'per-try-timeout'] as const;
  const retried = (retryOn: string) => failures.filter((f) => compileRetryPolicy(create(RetryPolicySchema, { retryOn }), 'retry_policy').retriableFailure(f));
  assert.deepEqual(retried('connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes'), ['connect-failure', 'refused-stream'], "the Go mesh's default");
  assert.deepEqual(retried('connect-failure'), ['connect-failure']);
  assert.deepEqual(retried('refused-stream'), ['refused-stream']);
  for (const all of ['reset', '5xx', 'gateway-error']) assert.deepEqual(retried(all), [...failures], all);
  assert.deepEqual(retried('retriable-4xx,unavailable'), []);
  // reset-before-request: a failure before any of the request went out, a connect failure or a per-try timeout while connecting.
  assert.deepEqual(retried('reset-before-request'), ['connect-failure']);
  const beforeRequest = compileRetryPolicy(create(RetryPolicySchema, { retryOn: 'reset-before-request' }), 'retry_policy');
  assert.equal(beforeRequest.retriableFailure('per-try-timeout', false), true);
  assert.equal(compileRetryPolicy(create(RetryPolicySchema, { retryOn: 'connect-failure' }), 'retry_policy').retriableFailure('per-try-timeout', false), false);
  // No HTTP/3 upstream: nothing to retry, as in Envoy for other protocols.
  assert.deepEqual(retried('http3-post-connect-failure'), []);
});

it('retry_host_predicate: previous_hosts (by its typed_config) picks again up to host_selection_retry_max_attempts times; without it, or with another predicate only, never', () => {
  const policy = (retryHostPredicate: MessageInitShape<typeof RetryPolicySchema>['retryHostPredicate']) =>
    compileRetryPolicy(create(RetryPolicySchema, { retryOn: '5xx', hostSelectionRetryMaxAttempts: 5n, retryHostPredicate }), 'retry_policy').reselectPrevious;
  const typed = (typeUrl: string) => ({ case: 'typedConfig' as const, value: create(AnySchema, { typeUrl }) });
  assert.equal(policy([{ name: 'any name', configType: typed('type.googleapis.com/envoy.extensions.retry.host.previous_hosts.v3.PreviousHostsPredicate') }]), 5);
  assert.equal(policy([]), 0);
  assert.equal(policy([{ name: 'envoy.retry_host_predicates.omit_host_metadata', configType: typed('type.googleapis.com/envoy.extensions.retry.host.omit_host_metadata.v3.OmitHostMetadataConfig') }]), 0, 'logged as not applied');
});

it('a response carrying x-envoy-ratelimited is retried under envoy-ratelimited and under nothing else, as in Envoy', () => {
  const spec = (retryOn: string) => compileRetryPolicy(create(RetryPolicySchema, { retryOn, retriableStatusCodes: [429] }), 'retry_policy');
  const limited = { 'x-envoy-ratelimited': 'true' };
  assert.equal(spec('envoy-ratelimited').retriableResponse(429, limited), true);
  assert.equal(spec('envoy-ratelimited').retriableResponse(429, {}), false, 'without the header');
  assert.equal(spec('5xx,retriable-status-codes').retriableResponse(503, limited), false, 'a rate-limited 503 is not retried under 5xx');
  assert.equal(spec('5xx,retriable-status-codes').retriableResponse(429, {}), true);
  assert.throws(() => spec('connect-failure,reset-on-tuesdays'), /retry_policy\.retry_on: retry condition "reset-on-tuesdays" is not supported \(supported: 5xx, gateway-error, /);
});
