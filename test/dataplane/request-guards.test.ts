// issue 11: HTTP edge cases answered as Envoy answers them, on a real proxy (in-process, real
// sockets, a real ADS server) whose HTTP connection manager is the one the discovery server
// builds (src/networking/common.ts, with the Go mesh's WebSocket upgrade config), guarded by
// jwt_authn (a real signed token) and an RBAC policy on path and principal.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import { connect, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { create } from '@bufbuild/protobuf';
import { HttpFilterSchema } from '../../src/gen/envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager_pb.js';
import { RBAC_Action } from '../../src/gen/envoy/config/rbac/v3/rbac_pb.js';
import { JwtAuthenticationSchema } from '../../src/gen/envoy/extensions/filters/http/jwt_authn/v3/config_pb.js';
import { RBACSchema } from '../../src/gen/envoy/extensions/filters/http/rbac/v3/rbac_pb.js';
import { loadBootstrap } from '../../src/dataplane/bootstrap.js';
import { MeshProxy } from '../../src/dataplane/proxy.js';
import { pack, TypeUrl } from '../../src/envoy/types.js';
import { hcmFilter } from '../../src/networking/common.js';
import { rawExchange, rawGet } from '../helpers/http.js';
import { eventually } from '../helpers/proc.js';
import { ISSUER, jwks, meshJwtAuthn, meshProvider, mint, testKey } from './fixtures.js';
import { FixtureAds, listener, routeConfig, staticCluster, writeBootstrap } from './xds-fixtures.js';

interface Seen {
  path: string;
  headers: IncomingHttpHeaders;
}

function statusOf(answer: string): number {
  return Number(/^HTTP\/1\.1 (\d{3})/.exec(answer)?.[1] ?? 0);
}


describe('HTTP edge cases as Envoy (issue 11)', () => {
  let dir: string;
  let ads: FixtureAds;
  let app: Server;
  let proxy: MeshProxy;
  let port: number;
  let token: string;
  let badToken: string;
  const seen: Seen[] = [];

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'mesh-proxy-guards-'));
    app = createServer({ maxHeaderSize: 128 * 1024 }, (req, res) => {
      seen.push({ path: req.url ?? '', headers: req.headers });
      res.end(`app saw ${req.url}`);
    });
    app.on('upgrade', (req, socket) => {
      seen.push({ path: req.url ?? '', headers: req.headers });
      socket.end(`HTTP/1.1 101 Switching Protocols\r\nUpgrade: ${String(req.headers.upgrade)}\r\nConnection: Upgrade\r\n\r\n`);
    });
    await new Promise<void>((r) => app.listen(0, '127.0.0.1', r));
    const key = await testKey('RS256', 'k1');
    token = await mint(key, { sub: 'alice' });
    badToken = await mint(await testKey('RS256', 'k1'), { sub: 'alice' });
    const jwtFilter = create(HttpFilterSchema, { name: 'envoy.filters.http.jwt_authn', configType: { case: 'typedConfig', value: pack(JwtAuthenticationSchema, meshJwtAuthn({ origins: meshProvider(ISSUER, jwks(key)) })) } });
    // alice, on paths under /allowed/ only.
    const rbac = pack(RBACSchema, {
      rules: {
        action: RBAC_Action.ALLOW,
        policies: {
          alice: {
            permissions: [{ rule: { case: 'urlPath', value: { rule: { case: 'path', value: { matchPattern: { case: 'prefix', value: '/allowed/' } } } } } }],
            principals: [
              {
                identifier: {
                  case: 'metadata',
                  value: {
                    filter: 'envoy.filters.http.jwt_authn',
                    path: [ISSUER, 'sub'].map((k) => ({ segment: { case: 'key' as const, value: k } })),
                    value: { matchPattern: { case: 'stringMatch', value: { matchPattern: { case: 'exact', value: 'alice' } } } },
                  },
                },
              },
            ],
          },
        },
      },
    });
    const rbacFilter = create(HttpFilterSchema, { name: 'envoy.filters.http.rbac', configType: { case: 'typedConfig', value: rbac } });
    const hcm = hcmFilter('inbound_guards', { inline: routeConfig('inline', 'app') }, [jwtFilter, rbacFilter]);
    ads = await new FixtureAds().listen();
    ads.set(TypeUrl.Cluster, [staticCluster('app', [(app.address() as AddressInfo).port])]);
    ads.set(TypeUrl.Listener, [listener('inbound', 0, [{ filters: [hcm] }])]);
    proxy = new MeshProxy({ bootstrap: loadBootstrap({ path: writeBootstrap(dir, ads.port, 0) }), drainTimeMs: 1_000, initialBackoffMs: 50 });
    await proxy.start();
    port = await eventually(() => {
      const l = proxy.listeners.info().find((i) => i.name === 'inbound');
      assert.ok(l?.bound, 'the listener is bound');
      return l.bound.port;
    }, 10_000);
  });

  after(async () => {
    await proxy.stop(0);
    ads.close();
    app.closeAllConnections();
    app.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const auth = () => ({ authorization: `Bearer ${token}` });

  it('more than 100 request headers is 431 (the token among them is never dropped silently); 100 pass', async () => {
    const many = (n: number) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`x-h${i}`, 'v']));
    // host, connection and authorization are three of the fields.
    assert.equal((await rawGet(port, '/allowed/a', { ...many(97), ...auth() })).status, 200);
    const over = await rawGet(port, '/allowed/a', { ...many(98), ...auth() });
    assert.equal(over.status, 431, over.body);
    assert.equal(over.headers.connection, 'close');
  });

  it('request headers up to 60 KiB pass, more is 431', async () => {
    assert.equal((await rawGet(port, '/allowed/b', { 'x-big': 'a'.repeat(40 * 1024), ...auth() })).status, 200, 'above node\'s 16 KiB default');
    const answer = await rawExchange(port, `GET /allowed/b HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${token}\r\nx-big: ${'a'.repeat(61 * 1024)}\r\n\r\n`);
    assert.equal(statusOf(answer), 431, answer.slice(0, 200));
  });

  it('two Host headers are 400, even with a valid token', async () => {
    const answer = await rawExchange(port, `GET /allowed/c HTTP/1.1\r\nhost: one\r\nhost: two\r\nauthorization: Bearer ${token}\r\n\r\n`);
    assert.equal(statusOf(answer), 400, answer.slice(0, 200));
    assert.match(answer, /connection: close/i);
  });

  it('an absolute-form request target: RBAC sees its path as the path, its host is the authority', async () => {
    seen.length = 0;
    const answer = await rawExchange(port, `GET http://svc.example:8080/allowed/d?q=1 HTTP/1.1\r\nhost: other\r\nauthorization: Bearer ${token}\r\nconnection: close\r\n\r\n`);
    assert.equal(statusOf(answer), 200, answer.slice(0, 300));
    assert.deepEqual({ path: seen[0]?.path, host: seen[0]?.headers.host }, { path: '/allowed/d?q=1', host: 'svc.example:8080' });
    const denied = await rawExchange(port, `GET http://svc.example/elsewhere HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${token}\r\nconnection: close\r\n\r\n`);
    assert.equal(statusOf(denied), 403, 'RBAC still decides on the path');
  });

  it('WebSocket upgrades are enabled on the mesh\'s HCM and pass through jwt_authn and rbac', async () => {
    const ws = (headers: Record<string, string>) =>
      rawExchange(port, `GET /allowed/ws HTTP/1.1\r\nhost: x\r\nconnection: Upgrade\r\nupgrade: websocket\r\nsec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n${Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join('')}\r\n`);
    assert.equal(statusOf(await ws(auth())), 101, 'a valid token upgrades');
    assert.equal(statusOf(await ws({ authorization: `Bearer ${badToken}` })), 401, 'a bad token is 401');
    assert.equal(statusOf(await ws({})), 403, 'no token: rbac denies');
  });

  it('an h2c upgrade request is served as a plain HTTP/1.1 request, through the filters', async () => {
    seen.length = 0;
    const h2c = (headers: string) => rawExchange(port, `GET /allowed/h2c HTTP/1.1\r\nhost: x\r\nconnection: Upgrade, HTTP2-Settings\r\nupgrade: h2c\r\nhttp2-settings: AAMAAABkAAQAAP__\r\n${headers}\r\n`);
    const answer = await h2c(`authorization: Bearer ${token}\r\n`);
    assert.equal(statusOf(answer), 200, answer.slice(0, 300));
    assert.match(answer, /app saw \/allowed\/h2c/);
    assert.equal(seen[0]?.headers.upgrade, undefined, 'the upgrade is not forwarded');
    assert.equal(seen[0]?.headers['http2-settings'], undefined);
    assert.equal(statusOf(await h2c('')), 403, 'no token: rbac denies');
  });

  it('a denied request\'s body is not read: 403 with connection: close, then the connection is closed', async () => {
    const total = 50 * 1024 * 1024;
    const outcome = await new Promise<{ sent: number; answer: string; closedEarly: boolean }>((resolve) => {
      const s = connect(port, '127.0.0.1');
      let sent = 0;
      let answer = '';
      const chunk = Buffer.alloc(64 * 1024, 'x');
      s.setEncoding('latin1');
      s.on('data', (d: string) => (answer += d));
      const done = (closedEarly: boolean) => resolve({ sent, answer, closedEarly });
      s.on('error', () => done(true));
      s.on('close', () => done(sent < total));
      s.write(`POST /allowed/upload HTTP/1.1\r\nhost: x\r\ncontent-length: ${total}\r\n\r\n`);
      const pump = (): void => {
        while (sent < total) {
          sent += chunk.length;
          if (!s.write(chunk)) {
            s.once('drain', pump);
            return;
          }
        }
        // Everything was taken: the proxy read the whole body. Give it a moment to answer, then stop.
        setTimeout(() => {
          s.destroy();
          done(false);
        }, 2000).unref();
      };
      pump();
    });
    assert.equal(statusOf(outcome.answer), 403, outcome.answer.slice(0, 200));
    assert.match(outcome.answer, /connection: close/i);
    assert.ok(outcome.closedEarly, `the proxy closed the connection before reading the ${total} bytes (the client got ${outcome.sent} out)`);
  });
});
