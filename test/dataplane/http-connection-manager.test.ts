// The decision table of jwt-policies.md through a real proxy: a node:http server running an HCM
// built from a Listener filter chain of generated Envoy messages, forwarding to a real upstream.
import assert from 'node:assert/strict';
import { createServer, request, Agent, type IncomingHttpHeaders, type Server } from 'node:http';
import type { Duplex } from 'node:stream';
import { after, before, describe, it } from 'node:test';
import { create, type MessageInitShape } from '@bufbuild/protobuf';
import { anyPack } from '@bufbuild/protobuf/wkt';
import { FilterChainSchema } from '../../src/gen/envoy/config/listener/v3/listener_components_pb.js';
import { RBAC_Action, type PolicySchema, type PrincipalSchema } from '../../src/gen/envoy/config/rbac/v3/rbac_pb.js';
import type { RouteConfigurationSchema } from '../../src/gen/envoy/config/route/v3/route_pb.js';
import { HTTPFaultSchema } from '../../src/gen/envoy/extensions/filters/http/fault/v3/fault_pb.js';
import { JwtAuthenticationSchema } from '../../src/gen/envoy/extensions/filters/http/jwt_authn/v3/config_pb.js';
import { RBACSchema } from '../../src/gen/envoy/extensions/filters/http/rbac/v3/rbac_pb.js';
import { RouterSchema } from '../../src/gen/envoy/extensions/filters/http/router/v3/router_pb.js';
import { HttpConnectionManagerSchema } from '../../src/gen/envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager_pb.js';
import { StaticClusterManager } from './static-cluster-manager.js';
import { ConfigError } from '../../src/envoy/config-error.js';
import { buildHcmForFilterChain, type HttpConnectionManagerHandler } from '../../src/dataplane/http-connection-manager.js';
import { HCM_FILTER_NAME } from '../../src/envoy/names.js';
import { close, listen } from '../helpers/http.js';
import { ISSUER, jwks, meshJwtAuthn, meshProvider, mint, testKey, type TestKey } from './fixtures.js';
import { answerUpgrades, upgradeVia } from './upgrade-fixtures.js';

type PolicyInit = MessageInitShape<typeof PolicySchema>;
type PrincipalInit = MessageInitShape<typeof PrincipalSchema>;
type RouteConfigInit = MessageInitShape<typeof RouteConfigurationSchema>;

const CLUSTER = 'inbound|8080||';
const JWT = 'envoy.filters.http.jwt_authn';

// ------------------------------------------------------------------ upstream and client helpers

interface Echo {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  body: string;
  trailers: Record<string, string>;
}

let upstream: Server;
let upstreamPort: number;
let upstreamConnections = 0;

interface Reply {
  status: number;
  headers: IncomingHttpHeaders;
  body: string;
  trailers: Record<string, string>;
}

const clientAgent = new Agent({ keepAlive: true });

function send(port: number, o: { method?: string; path?: string; headers?: Record<string, string>; chunks?: string[]; trailers?: Record<string, string> } = {}): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const chunked = o.chunks !== undefined;
    const req = request(
      { host: '127.0.0.1', port, method: o.method ?? 'GET', path: o.path ?? '/', agent: clientAgent, headers: { ...(chunked ? { 'transfer-encoding': 'chunked' } : {}), ...o.headers } },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => (body += d));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body, trailers: res.trailers as Record<string, string> }));
        res.on('error', reject);
      },
    );
    req.on('error', reject);
    for (const c of o.chunks ?? []) req.write(c);
    if (o.trailers) req.addTrailers(o.trailers);
    req.end();
  });
}

// ------------------------------------------------------------------ config helpers

function routeConfig(extra: RouteConfigInit = {}): RouteConfigInit {
  return {
    name: 'inbound|8080||',
    virtualHosts: [
      {
        name: 'inbound|http|8080',
        domains: ['*'],
        routes: [
          { name: 'health', match: { pathSpecifier: { case: 'path', value: '/direct' } }, action: { case: 'directResponse', value: { status: 418, body: { specifier: { case: 'inlineString', value: 'short and stout' } } } } },
          { name: 'nowhere', match: { pathSpecifier: { case: 'prefix', value: '/unknown-cluster' } }, action: { case: 'route', value: { clusterSpecifier: { case: 'cluster', value: 'nope' } } } },
          { name: 'empty', match: { pathSpecifier: { case: 'prefix', value: '/empty' } }, action: { case: 'route', value: { clusterSpecifier: { case: 'cluster', value: 'empty' } } } },
          { name: 'down', match: { pathSpecifier: { case: 'prefix', value: '/down' } }, action: { case: 'route', value: { clusterSpecifier: { case: 'cluster', value: 'down' } } } },
          {
            name: 'slow',
            match: { pathSpecifier: { case: 'prefix', value: '/hang' } },
            action: { case: 'route', value: { clusterSpecifier: { case: 'cluster', value: CLUSTER }, timeout: { seconds: 0n, nanos: 100_000_000 } } },
          },
          {
            name: 'rewrite',
            match: { pathSpecifier: { case: 'prefix', value: '/old' } },
            action: { case: 'route', value: { clusterSpecifier: { case: 'cluster', value: CLUSTER }, prefixRewrite: '/new', hostRewriteSpecifier: { case: 'hostRewriteLiteral', value: 'app.internal' } } },
            requestHeadersToAdd: [{ header: { key: 'x-route', value: 'rewrite' } }],
            requestHeadersToRemove: ['x-secret'],
            responseHeadersToAdd: [{ header: { key: 'x-served-by', value: 'mesh' } }],
          },
          { name: 'default', match: { pathSpecifier: { case: 'prefix', value: '/' } }, action: { case: 'route', value: { clusterSpecifier: { case: 'cluster', value: CLUSTER } } } },
        ],
      },
    ],
    ...extra,
  };
}

interface ChainOptions {
  /** A fault filter first that delays every request this long: a filter answering with a promise. */
  delayMs?: number;
  jwtKeys?: TestKey[];
  policies?: Record<string, PolicyInit>;
  useRemoteAddress?: boolean;
  upgrades?: string[];
}

/** A filter chain as the discovery server sends it: HCM with jwt_authn -> rbac -> router. */
function filterChain(o: ChainOptions) {
  const httpFilters = [];
  if (o.delayMs !== undefined) {
    const delay = { faultDelaySecifier: { case: 'fixedDelay' as const, value: { seconds: 0n, nanos: o.delayMs * 1_000_000 } }, percentage: { numerator: 100 } };
    httpFilters.push({ name: 'envoy.filters.http.fault', configType: { case: 'typedConfig' as const, value: anyPack(HTTPFaultSchema, create(HTTPFaultSchema, { delay })) } });
  }
  if (o.jwtKeys) {
    httpFilters.push({ name: 'envoy.filters.http.jwt_authn', configType: { case: 'typedConfig' as const, value: anyPack(JwtAuthenticationSchema, meshJwtAuthn({ origins: meshProvider(ISSUER, jwks(...o.jwtKeys)) })) } });
  }
  if (o.policies) {
    httpFilters.push({ name: 'envoy.filters.http.rbac', configType: { case: 'typedConfig' as const, value: anyPack(RBACSchema, create(RBACSchema, { rules: { action: RBAC_Action.ALLOW, policies: o.policies } })) } });
  }
  httpFilters.push({ name: 'envoy.filters.http.router', configType: { case: 'typedConfig' as const, value: anyPack(RouterSchema, create(RouterSchema, {})) } });
  const hcm = create(HttpConnectionManagerSchema, {
    statPrefix: 'inbound_0.0.0.0_8080',
    routeSpecifier: { case: 'routeConfig', value: routeConfig() },
    httpFilters,
    ...(o.useRemoteAddress !== undefined ? { useRemoteAddress: o.useRemoteAddress } : {}),
    upgradeConfigs: (o.upgrades ?? []).map((upgradeType) => ({ upgradeType })),
  });
  return create(FilterChainSchema, { filters: [{ name: HCM_FILTER_NAME, configType: { case: 'typedConfig', value: anyPack(HttpConnectionManagerSchema, hcm) } }] });
}

const clusters = new StaticClusterManager();
const proxies: Server[] = [];

async function proxy(o: ChainOptions): Promise<{ port: number; hcm: HttpConnectionManagerHandler }> {
  const hcm = buildHcmForFilterChain(filterChain(o), { clusters });
  const server = createServer((req, res) => hcm.handle(req, res));
  server.on('upgrade', (req, socket: Duplex, head: Buffer) => hcm.handleUpgrade(req, socket, head));
  proxies.push(server);
  return { port: await listen(server), hcm };
}

// Matchers the mesh emits for requestPrincipals and request.auth.claims[...].
const keyPath = (...keys: string[]) => keys.map((key) => ({ segment: { case: 'key' as const, value: key } }));
const exact = (value: string) => ({ matchPattern: { case: 'exact' as const, value } });
function requestPrincipal(iss: string, sub: string): PrincipalInit {
  const eq = (claim: string, value: string): PrincipalInit => ({ identifier: { case: 'metadata', value: { filter: JWT, path: keyPath(ISSUER, claim), value: { matchPattern: { case: 'stringMatch', value: exact(value) } } } } });
  return { identifier: { case: 'andIds', value: { ids: [eq('iss', iss), eq('sub', sub)] } } };
}
function claimHas(claim: string, value: string): PrincipalInit {
  // A string claim equals the value, or a list claim contains it.
  const str = { matchPattern: { case: 'stringMatch' as const, value: exact(value) } };
  return {
    identifier: {
      case: 'metadata',
      value: { filter: JWT, path: keyPath(ISSUER, claim), value: { matchPattern: { case: 'orMatch', value: { valueMatchers: [str, { matchPattern: { case: 'listMatch', value: { matchPattern: { case: 'oneOf', value: str } } } }] } } } },
    },
  };
}
const allOf = (...ids: PrincipalInit[]): PrincipalInit => ({ identifier: { case: 'andIds', value: { ids } } });
const ANY_PERMISSION = { rule: { case: 'any' as const, value: true } };

// ------------------------------------------------------------------ tests

let rsa: TestKey;
let other: TestKey;

before(async () => {
  [rsa, other] = await Promise.all([testKey('RS256', 'k1'), testKey('RS256', 'k1')]);
  upstream = createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (d: string) => (body += d));
    req.on('end', () => {
      const echo: Echo = { method: req.method ?? '', url: req.url ?? '', headers: req.headers, body, trailers: req.trailers as Record<string, string> };
      if (req.url === '/hang') return; // never answers
      if (req.url === '/trailers') {
        res.writeHead(200, { 'content-type': 'text/plain', trailer: 'x-upstream-trailer' });
        res.write('part1,');
        res.write('part2');
        res.addTrailers({ 'x-upstream-trailer': 'done' });
        res.end();
        return;
      }
      res.writeHead(200, { 'content-type': 'application/json', 'x-upstream': 'yes' });
      res.end(JSON.stringify(echo));
    });
  });
  upstream.on('connection', () => upstreamConnections++);
  answerUpgrades(upstream);
  upstreamPort = await listen(upstream);
  clusters.set(CLUSTER, [{ host: '127.0.0.1', port: upstreamPort }]);
  clusters.set('empty', []);
  // A port that was just free: connecting to it is refused.
  const probe = createServer();
  const freePort = await listen(probe);
  await close(probe);
  clusters.set('down', [{ host: '127.0.0.1', port: freePort }]);
});

after(async () => {
  clientAgent.destroy();
  clusters.close();
  await Promise.all([...proxies.map(close), close(upstream)]);
});

describe('decision table (jwt-policies.md) through the proxy', () => {
  it('row 2: no policy at all -> 200 from the workload', async () => {
    const { port } = await proxy({});
    const r = await send(port, { path: '/get' });
    assert.equal(r.status, 200);
    assert.equal(r.headers['x-upstream'], 'yes');
  });

  it('row 1 / rule 2: RequestAuthentication only: invalid token 401, no token 200, valid token 200', async () => {
    const { port } = await proxy({ jwtKeys: [rsa] });
    const bad = await send(port, { headers: { authorization: `Bearer ${await mint(other)}` } });
    assert.equal(bad.status, 401);
    assert.equal(bad.body, 'Jwt verification fails');
    assert.match(String(bad.headers['www-authenticate']), /^Bearer realm="http:\/\/127\.0\.0\.1:\d+\/", error="invalid_token"$/);
    assert.equal((await send(port)).status, 200);
    const good = await send(port, { headers: { authorization: `Bearer ${await mint(rsa)}` } });
    assert.equal(good.status, 200);
    assert.match((JSON.parse(good.body) as Echo).headers.authorization ?? '', /^Bearer /, 'the mesh forwards the token');
  });

  it('rows 3-4: ALLOW with requestPrincipals: listed principal 200, another 403, no token 403', async () => {
    const { port } = await proxy({ jwtKeys: [rsa], policies: { 'ns.allow-alice': { permissions: [ANY_PERMISSION], principals: [requestPrincipal(ISSUER, 'alice')] } } });
    assert.equal((await send(port, { headers: { authorization: `Bearer ${await mint(rsa, { sub: 'alice' })}` } })).status, 200);
    const bob = await send(port, { headers: { authorization: `Bearer ${await mint(rsa, { sub: 'bob' })}` } });
    assert.equal(bob.status, 403);
    assert.equal(bob.body, 'RBAC: access denied');
    assert.equal((await send(port)).status, 403);
    assert.equal((await send(port, { headers: { authorization: `Bearer ${await mint(rsa, { expIn: -600 })}` } })).status, 401, 'jwt_authn runs first');
  });

  it('rows 5-6: when request.auth.claims[groups]: group member 200, not a member 403, no claim 403; a string claim', async () => {
    const { port } = await proxy({
      jwtKeys: [rsa],
      policies: {
        groups: { permissions: [ANY_PERMISSION], principals: [allOf(requestPrincipal(ISSUER, 'alice'), claimHas('groups', 'admins'))] },
        team: { permissions: [ANY_PERMISSION], principals: [allOf(requestPrincipal(ISSUER, 'carol'), claimHas('team', 'blue'))] },
      },
    });
    const as = async (claims: Record<string, unknown>, sub = 'alice') => (await send(port, { headers: { authorization: `Bearer ${await mint(rsa, { sub, claims })}` } })).status;
    assert.equal(await as({ groups: ['dev', 'admins'] }), 200);
    assert.equal(await as({ groups: ['dev'] }), 403);
    assert.equal(await as({}), 403);
    assert.equal(await as({ team: 'blue' }, 'carol'), 200);
    assert.equal(await as({ team: 'red' }, 'carol'), 403);
  });
});

describe('connection manager and router', () => {
  it('runs the filters from generated messages and counts per filter', async () => {
    const { port, hcm } = await proxy({ jwtKeys: [rsa], policies: { p: { permissions: [ANY_PERMISSION], principals: [requestPrincipal(ISSUER, 'alice')] } } });
    const token = await mint(rsa);
    await send(port, { headers: { authorization: `Bearer ${token}` } });
    await send(port, { headers: { authorization: `Bearer ${token}` } });
    await send(port);
    assert.deepEqual(
      hcm.filterStats.map((s) => ('jwt_authn' in s ? { name: s.name, ...s.jwt_authn } : 'rbac' in s ? { name: s.name, ...s.rbac } : s)),
      [
        { name: 'envoy.filters.http.jwt_authn', allowed: 3, denied: 0, jwt_cache_hit: 1, jwt_cache_miss: 1, signature_verifications: 1 },
        { name: 'envoy.filters.http.rbac', allowed: 2, denied: 1, shadow_allowed: 0, shadow_denied: 0 },
      ],
    );
  });

  it('a filter that answers later holds the request, and the filters after it still decide', async () => {
    // Most filters decide at once and the request goes on in the same turn; a fault delay answers
    // with a promise, after which jwt_authn and rbac run as they would have.
    const { port, hcm } = await proxy({ delayMs: 60, jwtKeys: [rsa], policies: { p: { permissions: [ANY_PERMISSION], principals: [requestPrincipal(ISSUER, 'alice')] } } });
    const timed = async (headers: Record<string, string>) => {
      const started = Date.now();
      const r = await send(port, { headers });
      return { status: r.status, waited: Date.now() - started };
    };
    const allowed = await timed({ authorization: `Bearer ${await mint(rsa)}` });
    const denied = await timed({ authorization: `Bearer ${await mint(rsa, { sub: 'bob' })}` });
    const invalid = await timed({ authorization: `Bearer ${await mint(other)}` });
    assert.deepEqual([allowed.status, denied.status, invalid.status], [200, 403, 401]);
    for (const r of [allowed, denied, invalid]) assert.ok(r.waited >= 55, `answered after ${r.waited} ms, before the 60 ms delay`);
    assert.deepEqual(
      hcm.filterStats.map((s) => ('fault' in s ? { name: s.name, delays: s.fault.delays_injected } : 'rbac' in s ? { name: s.name, allowed: s.rbac.allowed, denied: s.rbac.denied } : { name: s.name })),
      [{ name: 'envoy.filters.http.fault', delays: 3 }, { name: 'envoy.filters.http.jwt_authn' }, { name: 'envoy.filters.http.rbac', allowed: 1, denied: 1 }],
    );
  });

  it('sets x-forwarded-proto and x-request-id; appends x-forwarded-for only with use_remote_address', async () => {
    const plain = await proxy({});
    const e1 = JSON.parse((await send(plain.port, { headers: { 'x-forwarded-for': '203.0.113.5', 'x-forwarded-proto': 'https' } })).body) as Echo;
    assert.equal(e1.headers['x-forwarded-proto'], 'http', 'an untrusted x-forwarded-proto is overwritten');
    assert.equal(e1.headers['x-forwarded-for'], '203.0.113.5');
    assert.match(String(e1.headers['x-request-id']), /^[0-9a-f-]{36}$/);
    const kept = JSON.parse((await send(plain.port, { headers: { 'x-request-id': 'abc' } })).body) as Echo;
    assert.equal(kept.headers['x-request-id'], 'abc');
    const edge = await proxy({ useRemoteAddress: true });
    const e2 = JSON.parse((await send(edge.port, { headers: { 'x-forwarded-for': '203.0.113.5' } })).body) as Echo;
    assert.equal(e2.headers['x-forwarded-for'], '203.0.113.5,127.0.0.1');
    assert.equal(e2.headers.host, `127.0.0.1:${edge.port}`, 'the authority is forwarded');
    assert.match(String(e2.headers['x-envoy-expected-rq-timeout-ms']), /^15000$/);
  });

  it('passes a chunked request body with trailers, and response trailers', async () => {
    const { port } = await proxy({});
    const r = await send(port, { method: 'POST', path: '/upload', chunks: ['a', 'b', 'c'], trailers: { 'x-checksum': '123' } });
    const echo = JSON.parse(r.body) as Echo;
    assert.equal(echo.body, 'abc');
    assert.deepEqual(echo.trailers, { 'x-checksum': '123' });
    const t = await send(port, { path: '/trailers' });
    assert.equal(t.body, 'part1,part2');
    assert.deepEqual(t.trailers, { 'x-upstream-trailer': 'done' });
  });

  it('reuses upstream connections (keep-alive)', async () => {
    const { port } = await proxy({});
    await send(port);
    const before = upstreamConnections;
    for (let i = 0; i < 5; i++) assert.equal((await send(port)).status, 200);
    assert.equal(upstreamConnections, before);
  });

  it('direct_response, unknown cluster 503, no healthy upstream 503, refused upstream 503', async () => {
    const { port } = await proxy({});
    const direct = await send(port, { path: '/direct' });
    assert.deepEqual([direct.status, direct.body], [418, 'short and stout']);
    const unknown = await send(port, { path: '/unknown-cluster' });
    assert.deepEqual([unknown.status, unknown.body], [503, '']);
    const empty = await send(port, { path: '/empty' });
    assert.deepEqual([empty.status, empty.body], [503, 'no healthy upstream']);
    const down = await send(port, { path: '/down' });
    assert.equal(down.status, 503);
    assert.match(down.body, /^upstream connect error or disconnect\/reset before headers/);
  });

  it('route timeout answers 504; prefix and host rewrite; header mutations', async () => {
    const { port } = await proxy({});
    const slow = await send(port, { path: '/hang' });
    assert.deepEqual([slow.status, slow.body], [504, 'upstream request timeout']);
    const r = await send(port, { path: '/old/thing?q=1', headers: { 'x-secret': 's' } });
    const echo = JSON.parse(r.body) as Echo;
    assert.equal(echo.url, '/new/thing?q=1');
    assert.equal(echo.headers.host, 'app.internal');
    assert.equal(echo.headers['x-route'], 'rewrite');
    assert.equal(echo.headers['x-secret'], undefined);
    assert.equal(r.headers['x-served-by'], 'mesh');
  });

  it('upgrades (WebSocket) pass through when upgrade_configs enables them, after the filters', async () => {
    const open = await proxy({ upgrades: ['websocket'] });
    assert.deepEqual(await upgradeVia(open.port), { status: 101, echoed: 'HELLO', xPath: '/ws' });
    const closed = await proxy({});
    assert.deepEqual(await upgradeVia(closed.port), { status: 403 });
    const guarded = await proxy({ upgrades: ['websocket'], jwtKeys: [rsa] });
    assert.deepEqual(await upgradeVia(guarded.port, { authorization: `Bearer ${await mint(other)}` }), { status: 401 });
    assert.equal((await upgradeVia(guarded.port, { authorization: `Bearer ${await mint(rsa)}` })).status, 101);
  });

  it('rejects a chain it cannot serve, naming the field', () => {
    const noRouter = create(FilterChainSchema, {
      filters: [{ name: HCM_FILTER_NAME, configType: { case: 'typedConfig', value: anyPack(HttpConnectionManagerSchema, create(HttpConnectionManagerSchema, { routeSpecifier: { case: 'routeConfig', value: routeConfig() } })) } }],
    });
    assert.throws(() => buildHcmForFilterChain(noRouter, { clusters }), (e: unknown) => e instanceof ConfigError && e.field === 'http_filters');
    assert.throws(() => buildHcmForFilterChain(create(FilterChainSchema, {}), { clusters }), /no envoy.filters.network.http_connection_manager/);
  });
});
