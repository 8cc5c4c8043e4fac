// Envoy's traffic-management route fields through a real connection manager: an HCM compiled from
// generated Envoy messages on a node:http server, forwarding to real upstream servers on loopback.
import assert from 'node:assert/strict';
import { Agent, createServer, request, type Server } from 'node:http';
import { constants as h2, createServer as createH2Server, type Http2Server } from 'node:http2';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { create, type MessageInitShape } from '@bufbuild/protobuf';
import { anyPack } from '@bufbuild/protobuf/wkt';
import { FilterChainSchema } from '../../src/gen/envoy/config/listener/v3/listener_components_pb.js';
import type { RouteSchema, VirtualHostSchema } from '../../src/gen/envoy/config/route/v3/route_components_pb.js';
import { HTTPFaultSchema } from '../../src/gen/envoy/extensions/filters/http/fault/v3/fault_pb.js';
import { PreviousHostsPredicateSchema } from '../../src/gen/envoy/extensions/retry/host/previous_hosts/v3/previous_hosts_pb.js';
import { RouterSchema } from '../../src/gen/envoy/extensions/filters/http/router/v3/router_pb.js';
import { HttpConnectionManagerSchema } from '../../src/gen/envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager_pb.js';
import type { FaultStats } from '../../src/dataplane/filters/fault.js';
import { buildHcmForFilterChain, type HttpConnectionManagerHandler } from '../../src/dataplane/http-connection-manager.js';
import { HCM_FILTER_NAME } from '../../src/envoy/names.js';
import { close, get, listen } from '../helpers/http.js';
import { StaticClusterManager } from './static-cluster-manager.js';
import { eventually } from '../helpers/proc.js';

type RouteInit = MessageInitShape<typeof RouteSchema>;
type VhostInit = MessageInitShape<typeof VirtualHostSchema>;
type VhostRetryHeaders = NonNullable<NonNullable<VhostInit['retryPolicy']>['retriableHeaders']>;

const agent = new Agent({ keepAlive: true, maxSockets: 32 });

const send = (port: number, path: string, headers: Record<string, string> = {}) => get(agent, port, path, headers);

const servers: Server[] = [];
const h2Servers: Http2Server[] = [];
const clusters = new StaticClusterManager();
/** What each upstream saw: url, host and attempt count, by upstream name. */
const seen = new Map<string, { url: string; host: string; attempt: string | undefined }[]>();

/** An upstream that answers its name (and the url), after `handle` may have answered instead. */
async function upstream(name: string, handle?: (url: string, hits: number) => number | 'hang' | undefined): Promise<number> {
  let hits = 0;
  seen.set(name, []);
  const server = createServer((req, res) => {
    hits++;
    seen.get(name)!.push({ url: req.url ?? '', host: req.headers.host ?? '', attempt: req.headers['x-envoy-attempt-count'] as string | undefined });
    const status = handle?.(req.url ?? '', hits);
    if (status === 'hang') return;
    res.writeHead(status ?? 200, { 'x-upstream': name }).end(`${name} ${req.url}`);
  });
  servers.push(server);
  const port = await listen(server);
  clusters.set(name, [{ host: '127.0.0.1', port }]);
  return port;
}

const toCluster = (cluster: string) => ({ clusterSpecifier: { case: 'cluster' as const, value: cluster } });
const prefix = (value: string) => ({ pathSpecifier: { case: 'prefix' as const, value } });

type FilterInit = MessageInitShape<typeof HttpConnectionManagerSchema>['httpFilters'];

async function proxy(vhost: Omit<VhostInit, 'name' | 'domains' | '$typeName'>, filters: FilterInit = [], onHcm?: (h: HttpConnectionManagerHandler) => void): Promise<number> {
  const hcm = create(HttpConnectionManagerSchema, {
    statPrefix: 'traffic',
    routeSpecifier: { case: 'routeConfig', value: { name: 'r', virtualHosts: [{ name: 'v', domains: ['*'], ...vhost }] } },
    httpFilters: [...(filters ?? []), { name: 'envoy.filters.http.router', configType: { case: 'typedConfig', value: anyPack(RouterSchema, create(RouterSchema, {})) } }],
  });
  const chain = create(FilterChainSchema, { filters: [{ name: HCM_FILTER_NAME, configType: { case: 'typedConfig', value: anyPack(HttpConnectionManagerSchema, hcm) } }] });
  const handler = buildHcmForFilterChain(chain, { clusters });
  onHcm?.(handler);
  const server = createServer((req, res) => handler.handle(req, res));
  servers.push(server);
  return listen(server);
}

const routes = (...r: RouteInit[]) => ({ routes: r });

before(async () => {
  await upstream('a');
  await upstream('b');
  // Fails every odd request with 503.
  await upstream('flaky', (_url, hits) => (hits % 2 === 1 ? 503 : undefined));
  await upstream('slow', () => 'hang');
  await upstream('shadow', () => 'hang');
  clusters.set('dead-then-a', [{ host: '127.0.0.1', port: 1 }, { host: '127.0.0.1', port: (await upstream('c')) }]);
  clusters.set('dead', [{ host: '127.0.0.1', port: 1 }]);
  // Round robin over an always-503 endpoint listed twice, then a good one: a plain retry lands on the failed host again.
  const failing = { host: '127.0.0.1', port: await upstream('always-503', () => 503) };
  const good = { host: '127.0.0.1', port: await upstream('good') };
  for (const name of ['twice-failing', 'twice-failing-avoided']) clusters.set(name, [failing, { ...failing }, good]);
  clusters.set('refusing', [{ host: '127.0.0.1', port: await refusingUpstream() }], { http2: true });
  // Rate-limits (429 with x-envoy-ratelimited, as an upstream Envoy's rate limit says it) the first request of every path.
  const limited = new Map<string, number>();
  const server = createServer((req, res) => {
    const n = (limited.get(req.url ?? '') ?? 0) + 1;
    limited.set(req.url ?? '', n);
    seen.get('ratelimited')!.push({ url: req.url ?? '', host: req.headers.host ?? '', attempt: undefined });
    if (n === 1) res.writeHead(429, { 'x-envoy-ratelimited': 'true' }).end('limited');
    else res.end('ok');
  });
  servers.push(server);
  seen.set('ratelimited', []);
  clusters.set('ratelimited', [{ host: '127.0.0.1', port: await listen(server) }]);
  // Answers the first request of every path 200 with x-retry-me (or 418 for a path under /teapot), the next ones plainly.
  const marked = new Map<string, number>();
  const marking = createServer((req, res) => {
    const url = req.url ?? '';
    const n = (marked.get(url) ?? 0) + 1;
    marked.set(url, n);
    seen.get('marking')!.push({ url, host: req.headers.host ?? '', attempt: undefined });
    if (n === 1 && url.startsWith('/teapot')) res.writeHead(418).end('teapot');
    else if (n === 1) res.writeHead(200, { 'x-retry-me': 'please' }).end('marked');
    else res.end('plain');
  });
  servers.push(marking);
  seen.set('marking', []);
  clusters.set('marking', [{ host: '127.0.0.1', port: await listen(marking) }]);
  // 503 for the first request of every path.
  const failedOnce = new Set<string>();
  await upstream('first-503', (url) => (failedOnce.has(url) ? undefined : (failedOnce.add(url), 503)));
});

/** A POST with a body (a request the router streams, so never retries). */
function post(port: number, path: string, body: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path, method: 'POST', agent }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString() }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

/** Streams the h2c upstream 'refusing' was sent, by path. */
const refusedSeen = new Map<string, number>();

/** An h2c upstream that refuses (RST_STREAM REFUSED_STREAM) the first stream of every path and answers the next ones. */
async function refusingUpstream(): Promise<number> {
  const server = createH2Server();
  server.on('stream', (stream, headers) => {
    const path = String(headers[':path']);
    const n = (refusedSeen.get(path) ?? 0) + 1;
    refusedSeen.set(path, n);
    // Closing with an error code is also an 'error' on the server's own stream.
    stream.on('error', () => {});
    if (n === 1) stream.close(h2.NGHTTP2_REFUSED_STREAM);
    else stream.respond({ ':status': 200, 'x-upstream': 'refusing' }, { endStream: true });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  h2Servers.push(server);
  return (server.address() as AddressInfo).port;
}

after(async () => {
  agent.destroy();
  clusters.close();
  await Promise.all(servers.map(close));
  await Promise.all(h2Servers.map((s) => new Promise((r) => s.close(r))));
});

describe('traffic: weighted clusters and matching', () => {
  it('splits 90/10 over 2000 requests within 3 %', async () => {
    const port = await proxy(
      routes({
        match: prefix('/'),
        action: { case: 'route', value: { clusterSpecifier: { case: 'weightedClusters', value: { clusters: [{ name: 'a', weight: 90 }, { name: 'b', weight: 10 }] } } } },
      }),
    );
    const counts = { a: 0, b: 0 } as Record<string, number>;
    for (let batch = 0; batch < 100; batch++) {
      const replies = await Promise.all(Array.from({ length: 20 }, () => send(port, '/w')));
      for (const r of replies) counts[String(r.headers['x-upstream'])]!++;
    }
    assert.equal(counts.a! + counts.b!, 2000);
    assert.ok(Math.abs(counts.a! / 2000 - 0.9) <= 0.03, `a got ${counts.a} of 2000`);
  });

  it('routes by header (exact, present, inverted regex), query parameter and case-insensitive path', async () => {
    const port = await proxy(
      routes(
        { match: { ...prefix('/'), headers: [{ name: 'x-canary', headerMatchSpecifier: { case: 'exactMatch', value: '1' } }] }, action: { case: 'route', value: toCluster('b') } },
        {
          match: { ...prefix('/'), headers: [{ name: 'x-user', headerMatchSpecifier: { case: 'safeRegexMatch', value: { regex: 'admin-\\d+' } }, invertMatch: true }, { name: 'x-user', headerMatchSpecifier: { case: 'presentMatch', value: true } }] },
          action: { case: 'route', value: toCluster('c') },
        },
        { match: { ...prefix('/'), queryParameters: [{ name: 'v', queryParameterMatchSpecifier: { case: 'stringMatch', value: { matchPattern: { case: 'exact', value: '2' } } } }] }, action: { case: 'route', value: toCluster('b') } },
        { match: { pathSpecifier: { case: 'path', value: '/CASE' }, caseSensitive: false }, action: { case: 'route', value: toCluster('c') } },
        { match: prefix('/'), action: { case: 'route', value: toCluster('a') } },
      ),
    );
    assert.equal((await send(port, '/x', { 'x-canary': '1' })).headers['x-upstream'], 'b');
    assert.equal((await send(port, '/x', { 'x-canary': '2' })).headers['x-upstream'], 'a');
    assert.equal((await send(port, '/x', { 'x-user': 'bob' })).headers['x-upstream'], 'c');
    assert.equal((await send(port, '/x', { 'x-user': 'admin-7' })).headers['x-upstream'], 'a', 'the inverted regex excludes admins');
    assert.equal((await send(port, '/x?v=2')).headers['x-upstream'], 'b');
    assert.equal((await send(port, '/case')).headers['x-upstream'], 'c');
  });

  it('answers a ReDoS-shaped regex against a long input without hanging (RE2 semantics)', async () => {
    const port = await proxy(
      routes(
        { match: { pathSpecifier: { case: 'safeRegex', value: { regex: '/(a+)+$' } } }, action: { case: 'route', value: toCluster('b') } },
        { match: { ...prefix('/'), headers: [{ name: 'x-evil', headerMatchSpecifier: { case: 'safeRegexMatch', value: { regex: '(x+x+)+y' } } }] }, action: { case: 'route', value: toCluster('b') } },
        { match: prefix('/'), action: { case: 'route', value: toCluster('a') } },
      ),
    );
    // A backtracking engine takes exponential time on these; RE2 is linear.
    assert.equal((await send(port, `/${'a'.repeat(5000)}!`)).headers['x-upstream'], 'a');
    assert.equal((await send(port, '/x', { 'x-evil': `${'x'.repeat(5000)}z` })).headers['x-upstream'], 'a');
    assert.equal((await send(port, '/aaa')).headers['x-upstream'], 'b');
  });
});

describe('traffic: rewrites, redirects, direct responses', () => {
  it('regex_rewrite substitutes capture groups in the path and keeps the query', async () => {
    const port = await proxy(
      routes({ match: prefix('/v1/'), action: { case: 'route', value: { ...toCluster('a'), regexRewrite: { pattern: { regex: '^/v1/users/(\\d+)$' }, substitution: '/users/\\1/profile' } } } }),
    );
    assert.equal((await send(port, '/v1/users/42?x=1')).body, 'a /users/42/profile?x=1');
  });

  it('redirects: https with the default port dropped, path_redirect, prefix_rewrite and strip_query, response codes', async () => {
    const port = await proxy(
      routes(
        { match: prefix('/secure'), action: { case: 'redirect', value: { schemeRewriteSpecifier: { case: 'httpsRedirect', value: true } } } },
        { match: prefix('/moved'), action: { case: 'redirect', value: { hostRedirect: 'new.example.com', pathRewriteSpecifier: { case: 'pathRedirect', value: '/landing' }, responseCode: 1 } } },
        { match: prefix('/old/'), action: { case: 'redirect', value: { pathRewriteSpecifier: { case: 'prefixRewrite', value: '/new/' }, stripQuery: true, responseCode: 4, portRedirect: 8443 } } },
        { match: prefix('/teapot'), action: { case: 'directResponse', value: { status: 418, body: { specifier: { case: 'inlineString', value: 'short and stout' } } } } },
      ),
    );
    const secure = await send(port, '/secure?q=1', { host: 'shop.example.com:80' });
    assert.equal(secure.status, 301);
    assert.equal(secure.headers.location, 'https://shop.example.com/secure?q=1');
    const moved = await send(port, '/moved?q=1', { host: 'shop.example.com' });
    assert.equal(moved.status, 302);
    assert.equal(moved.headers.location, 'http://new.example.com/landing?q=1');
    const old = await send(port, '/old/page?q=1', { host: 'shop.example.com' });
    assert.equal(old.status, 308);
    assert.equal(old.headers.location, 'http://shop.example.com:8443/new/page');
    const teapot = await send(port, '/teapot');
    assert.equal(teapot.status, 418);
    assert.equal(teapot.body, 'short and stout');
  });
});

describe('traffic: timeouts, retries, mirroring', () => {
  it('a retry turns a flaky upstream 503 into 200, with x-envoy-attempt-count both ways', async () => {
    const port = await proxy({
      includeRequestAttemptCount: true,
      includeAttemptCountInResponse: true,
      ...routes({ match: prefix('/'), action: { case: 'route', value: { ...toCluster('flaky'), retryPolicy: { retryOn: '5xx', numRetries: 2 } } } }),
    });
    const before = seen.get('flaky')!.length;
    const r = await send(port, '/retry');
    assert.equal(r.status, 200);
    assert.equal(r.headers['x-envoy-attempt-count'], '2');
    assert.deepEqual(seen.get('flaky')!.slice(before).map((s) => s.attempt), ['1', '2']);
  });

  it('without a matching retry_on the 503 goes downstream; retriable-status-codes is honoured', async () => {
    const plain = await proxy(routes({ match: prefix('/'), action: { case: 'route', value: { ...toCluster('flaky'), retryPolicy: { retryOn: 'connect-failure', numRetries: 3 } } } }));
    const codes = await proxy(routes({ match: prefix('/'), action: { case: 'route', value: { ...toCluster('flaky'), retryPolicy: { retryOn: 'retriable-status-codes', retriableStatusCodes: [503] } } } }));
    // The flaky upstream alternates; find its next answer being a 503.
    const statuses = [(await send(plain, '/x')).status, (await send(plain, '/x')).status];
    assert.ok(statuses.includes(503), `a 503 reaches the client: ${statuses.join(',')}`);
    assert.equal((await send(codes, '/x')).status, 200);
    assert.equal((await send(codes, '/x')).status, 200);
  });

  it('connect-failure retries on another endpoint', async () => {
    const port = await proxy(routes({ match: prefix('/'), action: { case: 'route', value: { ...toCluster('dead-then-a'), retryPolicy: { retryOn: 'connect-failure', numRetries: 1 } } } }));
    for (let i = 0; i < 4; i++) assert.equal((await send(port, '/x')).status, 200);
  });

  it("an HTTP/2 stream the upstream refused is retried under the Go mesh's default retry_on (refused-stream), not under connect-failure alone", async () => {
    const retryOn = (on: string) => proxy(routes({ match: prefix('/'), action: { case: 'route', value: { ...toCluster('refusing'), retryPolicy: { retryOn: on, numRetries: 2 } } } }));
    const byDefault = await retryOn('connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes');
    const r = await send(byDefault, '/refused-once');
    assert.equal(r.status, 200);
    assert.equal(r.headers['x-upstream'], 'refusing');
    assert.equal(refusedSeen.get('/refused-once'), 2, 'the refused stream, then its retry');
    const connectOnly = await send(await retryOn('connect-failure'), '/refused-for-good');
    assert.equal(connectOnly.status, 503);
    assert.equal(connectOnly.body, 'upstream connect error or disconnect/reset before headers. reset reason: remote refused stream reset');
    assert.equal(refusedSeen.get('/refused-for-good'), 1, 'no retry');
  });

  it('a rate-limited response (x-envoy-ratelimited) is retried under envoy-ratelimited, and not under retriable-status-codes naming its 429', async () => {
    const retryOn = (on: string) => proxy(routes({ match: prefix('/'), action: { case: 'route', value: { ...toCluster('ratelimited'), retryPolicy: { retryOn: on, numRetries: 1, retriableStatusCodes: [429] } } } }));
    const hits = (url: string) => seen.get('ratelimited')!.filter((s) => s.url === url).length;
    const retried = await send(await retryOn('envoy-ratelimited'), '/limited-once');
    assert.deepEqual([retried.status, retried.body, hits('/limited-once')], [200, 'ok', 2]);
    const kept = await send(await retryOn('5xx,retriable-status-codes'), '/limited-kept');
    assert.deepEqual([kept.status, kept.body, hits('/limited-kept')], [429, 'limited', 1]);
  });

  it('previous_hosts: a retry picks again (host_selection_retry_max_attempts) rather than go back to the host that failed', async () => {
    const previousHosts = { name: 'envoy.retry_host_predicates.previous_hosts', configType: { case: 'typedConfig' as const, value: anyPack(PreviousHostsPredicateSchema, create(PreviousHostsPredicateSchema)) } };
    const retried = (cluster: string, predicate: boolean) =>
      proxy(routes({ match: prefix('/'), action: { case: 'route', value: { ...toCluster(cluster), retryPolicy: { retryOn: '5xx', numRetries: 1, hostSelectionRetryMaxAttempts: 5n, retryHostPredicate: predicate ? [previousHosts] : [] } } } }));
    const plain = await send(await retried('twice-failing', false), '/plain');
    assert.equal(plain.status, 503, 'the retry went to the same failing host');
    const avoided = await send(await retried('twice-failing-avoided', true), '/avoided');
    assert.deepEqual([avoided.status, avoided.body], [200, 'good /avoided']);
    assert.equal(seen.get('always-503')!.filter((s) => s.url === '/avoided').length, 1, 'the failing host saw the first try only');
  });

  it("a refused connection is Envoy's remote connection failure with its transport failure reason; after a retry, 'retried and the latest'", async () => {
    const once = await proxy(routes({ match: prefix('/'), action: { case: 'route', value: toCluster('dead') } }));
    const refused = await send(once, '/x');
    assert.equal(refused.status, 503);
    assert.equal(refused.body, 'upstream connect error or disconnect/reset before headers. reset reason: remote connection failure, transport failure reason: delayed connect error: Connection refused');
    const retried = await proxy(routes({ match: prefix('/'), action: { case: 'route', value: { ...toCluster('dead'), retryPolicy: { retryOn: 'connect-failure', numRetries: 1 } } } }));
    assert.equal(
      (await send(retried, '/x')).body,
      'upstream connect error or disconnect/reset before headers. retried and the latest reset reason: remote connection failure, transport failure reason: delayed connect error: Connection refused',
    );
  });

  it('a 1 s route timeout on a hanging upstream answers 504 without waiting for it', async () => {
    const port = await proxy(routes({ match: prefix('/'), action: { case: 'route', value: { ...toCluster('slow'), timeout: { seconds: 1n } } } }));
    const started = Date.now();
    const r = await send(port, '/slow');
    assert.equal(r.status, 504);
    assert.equal(r.body, 'upstream request timeout');
    // The upstream never answers: the reply came from the timeout (well before a 3 s upstream would).
    assert.ok(Date.now() - started < 3000);
  });

  it('a per-try timeout retries, then gives 504', async () => {
    const port = await proxy(
      routes({ match: prefix('/'), action: { case: 'route', value: { ...toCluster('slow'), retryPolicy: { retryOn: 'reset', numRetries: 1, perTryTimeout: { nanos: 200_000_000 } } } } }),
    );
    const before = seen.get('slow')!.length;
    const r = await send(port, '/per-try');
    assert.equal(r.status, 504);
    assert.equal(seen.get('slow')!.length - before, 2, 'two attempts reached the upstream');
  });

  it('a per-try timeout bounds an attempt that is not retried too (a request with a body), as in Envoy', async () => {
    const port = await proxy(
      routes({ match: prefix('/'), action: { case: 'route', value: { ...toCluster('slow'), retryPolicy: { retryOn: 'reset', numRetries: 1, perTryTimeout: { nanos: 200_000_000 } } } } }),
    );
    const before = seen.get('slow')!.length;
    const started = Date.now();
    const r = await post(port, '/per-try-body', 'hello');
    assert.deepEqual([r.status, r.body], [504, 'upstream request timeout']);
    assert.ok(Date.now() - started < 3000, 'answered by the per-try timeout, not the 15 s route timeout');
    assert.equal(seen.get('slow')!.length - before, 1, 'one attempt: a streamed body is not sent again');
  });

  it('retriable-headers retries a response that matches retriable_headers (:status too); without the condition, or with no match, the response stands', async () => {
    const retried = (retryOn: string, retriableHeaders: VhostRetryHeaders) =>
      proxy(routes({ match: prefix('/'), action: { case: 'route', value: { ...toCluster('marking'), retryPolicy: { retryOn, numRetries: 1, retriableHeaders } } } }));
    const marker = [{ name: 'X-Retry-Me', headerMatchSpecifier: { case: 'exactMatch' as const, value: 'please' } }];
    const hits = (url: string) => seen.get('marking')!.filter((s) => s.url === url).length;
    const byHeader = await send(await retried('retriable-headers', marker), '/marked');
    assert.deepEqual([byHeader.status, byHeader.body, hits('/marked')], [200, 'plain', 2]);
    const byStatus = await send(await retried('retriable-headers', [{ name: ':status', headerMatchSpecifier: { case: 'exactMatch', value: '418' } }]), '/teapot');
    assert.deepEqual([byStatus.status, byStatus.body, hits('/teapot')], [200, 'plain', 2]);
    const notAsked = await send(await retried('5xx', marker), '/not-asked');
    assert.deepEqual([notAsked.status, notAsked.body, hits('/not-asked')], [200, 'marked', 1]);
    const noMatch = await send(await retried('retriable-headers', [{ name: 'x-retry-me', headerMatchSpecifier: { case: 'exactMatch', value: 'never' } }]), '/no-match');
    assert.deepEqual([noMatch.status, noMatch.body, hits('/no-match')], [200, 'marked', 1]);
  });

  it('retriable_request_headers: only a request matching one of them is retried', async () => {
    const port = await proxy(
      routes({
        match: prefix('/'),
        action: {
          case: 'route',
          value: {
            ...toCluster('first-503'),
            retryPolicy: {
              retryOn: '5xx',
              numRetries: 1,
              retriableRequestHeaders: [
                { name: 'x-idempotent', headerMatchSpecifier: { case: 'presentMatch', value: true } },
                { name: ':method', headerMatchSpecifier: { case: 'exactMatch', value: 'HEAD' } },
              ],
            },
          },
        },
      }),
    );
    assert.equal((await send(port, '/unmarked')).status, 503, 'no matching request header: the 503 stands');
    assert.equal((await send(port, '/marked', { 'x-idempotent': '1' })).status, 200);
    assert.equal((await get(agent, port, '/head', {}, 'HEAD')).status, 200, 'matched by :method');
  });

  it('mirrors a request to the shadow cluster (host -shadow) without waiting for it', async () => {
    const port = await proxy(routes({ match: prefix('/'), action: { case: 'route', value: { ...toCluster('a'), requestMirrorPolicies: [{ cluster: 'shadow' }] } } }));
    const r = await send(port, '/mirrored', { host: 'shop.example.com:8080' });
    // The shadow never answers, so a response at all means it did not wait for the mirror.
    assert.equal(r.status, 200);
    assert.equal(r.body, 'a /mirrored');
    for (let i = 0; i < 50 && !seen.get('shadow')!.some((s) => s.url === '/mirrored'); i++) await new Promise((res) => setTimeout(res, 20));
    assert.deepEqual(seen.get('shadow')!.find((s) => s.url === '/mirrored')?.host, 'shop.example.com-shadow:8080');
  });

  it("mirrors through the mirror cluster's own pools: HTTP/2 to an HTTP/2 cluster, kept-alive HTTP/1.1 connections", async () => {
    const h2Shadow = createH2Server();
    const h2Seen: { path: string; authority: string }[] = [];
    h2Shadow.on('stream', (stream, headers) => {
      h2Seen.push({ path: String(headers[':path']), authority: String(headers[':authority']) });
      stream.respond({ ':status': 200 }, { endStream: true });
    });
    await new Promise<void>((r) => h2Shadow.listen(0, '127.0.0.1', r));
    h2Servers.push(h2Shadow);
    clusters.set('shadow-h2', [{ host: '127.0.0.1', port: (h2Shadow.address() as AddressInfo).port }], { http2: true });
    let shadowConnections = 0;
    let h1Shadows = 0;
    const h1Shadow = createServer((req, res) => {
      h1Shadows++;
      req.resume();
      res.end('shadow');
    });
    h1Shadow.on('connection', () => shadowConnections++);
    servers.push(h1Shadow);
    clusters.set('shadow-h1', [{ host: '127.0.0.1', port: await listen(h1Shadow) }]);

    const port = await proxy(routes({ match: prefix('/'), action: { case: 'route', value: { ...toCluster('a'), requestMirrorPolicies: [{ cluster: 'shadow-h2' }, { cluster: 'shadow-h1' }] } } }));
    for (let i = 0; i < 5; i++) {
      assert.equal((await send(port, `/m${i}`, { host: 'shop.example.com' })).status, 200);
      // One shadow at a time, so that each (but for a race with the last one's response) finds the previous one's connection idle.
      await eventually(() => assert.deepEqual([h2Seen.length, h1Shadows], [i + 1, i + 1]));
      await new Promise((r) => setTimeout(r, 20));
    }
    assert.deepEqual(h2Seen[0], { path: '/m0', authority: 'shop.example.com-shadow' });
    assert.ok(shadowConnections <= 2, `the HTTP/1.1 shadows took ${shadowConnections} connections for 5 requests: they are not kept alive`);
  });

  it('mirrors the request body too, sized or chunked, to HTTP/1.1 and HTTP/2 mirrors alike', async () => {
    const bodies: { cluster: string; path: string; body: string }[] = [];
    const h2Body = createH2Server();
    h2Body.on('stream', (stream, headers) => {
      const chunks: Buffer[] = [];
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('end', () => {
        bodies.push({ cluster: 'h2', path: String(headers[':path']), body: Buffer.concat(chunks).toString() });
        stream.respond({ ':status': 200 }, { endStream: true });
      });
    });
    await new Promise<void>((r) => h2Body.listen(0, '127.0.0.1', r));
    h2Servers.push(h2Body);
    clusters.set('body-h2', [{ host: '127.0.0.1', port: (h2Body.address() as AddressInfo).port }], { http2: true });
    const h1Body = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        bodies.push({ cluster: 'h1', path: req.url ?? '', body: Buffer.concat(chunks).toString() });
        res.end();
      });
    });
    servers.push(h1Body);
    clusters.set('body-h1', [{ host: '127.0.0.1', port: await listen(h1Body) }]);
    // The main upstream answers once it has read the body: a response before the body's end would end the request, and its shadows' with it.
    const reader = createServer((req, res) => {
      req.resume();
      req.on('end', () => res.end('read'));
    });
    servers.push(reader);
    clusters.set('body-reader', [{ host: '127.0.0.1', port: await listen(reader) }]);
    const port = await proxy(routes({ match: prefix('/'), action: { case: 'route', value: { ...toCluster('body-reader'), requestMirrorPolicies: [{ cluster: 'body-h2' }, { cluster: 'body-h1' }] } } }));

    assert.equal((await post(port, '/sized', 'a sized body')).status, 200);
    // A chunked request: node writes the body in two chunks.
    const chunked = await new Promise<number>((resolve, reject) => {
      const req = request({ host: '127.0.0.1', port, path: '/chunked', method: 'POST', agent, headers: { 'transfer-encoding': 'chunked' } }, (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
      });
      req.on('error', reject);
      req.write('first,');
      setTimeout(() => req.end('second'), 20);
    });
    assert.equal(chunked, 200);
    await eventually(() => assert.equal(bodies.length, 4, JSON.stringify(bodies)));
    const sorted = [...bodies].sort((x, y) => `${x.path}${x.cluster}`.localeCompare(`${y.path}${y.cluster}`));
    assert.deepEqual(sorted, [
      { cluster: 'h1', path: '/chunked', body: 'first,second' },
      { cluster: 'h2', path: '/chunked', body: 'first,second' },
      { cluster: 'h1', path: '/sized', body: 'a sized body' },
      { cluster: 'h2', path: '/sized', body: 'a sized body' },
    ]);

    // The client goes away halfway through its body: the shadow is reset too, not left waiting for the rest.
    const cutPort = await proxy(routes({ match: prefix('/'), action: { case: 'route', value: { ...toCluster('body-reader'), requestMirrorPolicies: [{ cluster: 'body-h1' }] } } }));
    let shadowStarted = false;
    let shadowClosed = false;
    h1Body.once('request', (req) => {
      shadowStarted = true;
      req.once('close', () => (shadowClosed = true));
    });
    const cut = request({ host: '127.0.0.1', port: cutPort, path: '/cut', method: 'POST', agent: false, headers: { 'transfer-encoding': 'chunked' } });
    cut.on('error', () => {});
    cut.write('only the start');
    await eventually(() => assert.ok(shadowStarted, 'the shadow never started'));
    cut.destroy();
    await eventually(() => assert.ok(shadowClosed, 'the shadow still waits for a body that will not come'), 5000);
  });

  it('a mirror with runtime fraction 0 sends nothing', async () => {
    const port = await proxy(
      routes({ match: prefix('/'), action: { case: 'route', value: { ...toCluster('a'), requestMirrorPolicies: [{ cluster: 'shadow', runtimeFraction: { defaultValue: { numerator: 0 } } }] } } }),
    );
    assert.equal((await send(port, '/not-mirrored')).status, 200);
    await new Promise((res) => setTimeout(res, 100));
    assert.equal(seen.get('shadow')!.some((s) => s.url === '/not-mirrored'), false);
  });
});

describe('traffic: the fault filter', () => {
  const fault = (config: MessageInitShape<typeof HTTPFaultSchema>) => [{ name: 'envoy.filters.http.fault', configType: { case: 'typedConfig' as const, value: anyPack(HTTPFaultSchema, create(HTTPFaultSchema, config)) } }];
  const toA = routes({ match: prefix('/'), action: { case: 'route', value: toCluster('a') } });

  it('aborts about half of the requests at 50 % with 503 "fault filter abort"', async () => {
    const port = await proxy(toA, fault({ abort: { errorType: { case: 'httpStatus', value: 503 }, percentage: { numerator: 50 } } }));
    let aborted = 0;
    for (let batch = 0; batch < 20; batch++) {
      const replies = await Promise.all(Array.from({ length: 20 }, () => send(port, '/f')));
      for (const r of replies) {
        if (r.status === 503) {
          assert.equal(r.body, 'fault filter abort');
          aborted++;
        } else assert.equal(r.status, 200);
      }
    }
    // 400 requests at p = 0.5: the standard deviation is 10, so 4 of them either side.
    assert.ok(aborted >= 160 && aborted <= 240, `${aborted} of 400 aborted`);
  });

  it('delays, then aborts, only the requests its header matchers select, and counts them', async () => {
    let handler: HttpConnectionManagerHandler | undefined;
    const port = await proxy(
      toA,
      fault({
        headers: [{ name: 'x-chaos', headerMatchSpecifier: { case: 'presentMatch', value: true } }],
        delay: { faultDelaySecifier: { case: 'fixedDelay', value: { nanos: 100_000_000 } }, percentage: { numerator: 100 } },
        abort: { errorType: { case: 'httpStatus', value: 418 }, percentage: { numerator: 100 } },
      }),
      (h) => (handler = h),
    );
    assert.equal((await send(port, '/f')).status, 200);
    assert.equal((await send(port, '/f', { 'x-chaos': '1' })).status, 418);
    const stats = handler!.filterStats.find((f) => 'fault' in f) as { fault: FaultStats } | undefined;
    assert.deepEqual(stats?.fault, { delays_injected: 1, aborts_injected: 1, faults_overflow: 0 });
  });

  it('x-envoy-fault-abort-request counts only with header_abort configured', async () => {
    const withHeader = await proxy(toA, fault({ abort: { errorType: { case: 'headerAbort', value: {} }, percentage: { numerator: 100 } } }));
    const fixed = await proxy(toA, fault({ abort: { errorType: { case: 'httpStatus', value: 503 }, percentage: { numerator: 0 } } }));
    assert.equal((await send(withHeader, '/f', { 'x-envoy-fault-abort-request': '429' })).status, 429);
    assert.equal((await send(withHeader, '/f')).status, 200);
    assert.equal((await send(fixed, '/f', { 'x-envoy-fault-abort-request': '429' })).status, 200);
  });

  it('refuses what it cannot apply rather than ignoring it', async () => {
    const bad: MessageInitShape<typeof HTTPFaultSchema> = { upstreamCluster: 'x', abort: { errorType: { case: 'httpStatus', value: 503 } } };
    await assert.rejects(proxy(toA, fault(bad)), /upstream_cluster/);
  });
});
