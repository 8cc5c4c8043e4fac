// A route's timeouts beyond `timeout`, with Envoy's semantics, through a real proxy fed over ADS
// (real sockets; gRPC over h2c both ways): max_grpc_timeout / grpc_timeout_offset make a gRPC
// client's grpc-timeout the route timeout (504 -> grpc-status UNAVAILABLE `upstream request
// timeout`, cluster upstream_rq_timeout) and what the upstream is told; MaxStreamDuration's
// grpc_timeout_header_max and max_stream_duration (route or HCM) bound the stream (DEADLINE_EXCEEDED
// or 504/408 `downstream duration timeout`, http downstream_rq_max_duration_reached); the route's
// idle_timeout replaces the HCM's stream_idle_timeout (504 `stream timeout`).
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type IncomingHttpHeaders, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { connect as h2connect, createServer as createH2Server, type ClientHttp2Session, type Http2Server, type IncomingHttpHeaders as H2Headers, type ServerHttp2Stream } from 'node:http2';
import { connect, type AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it, test } from 'node:test';
import { create, type MessageInitShape } from '@bufbuild/protobuf';
import { Client, credentials, Metadata, status, type ServiceError } from '@grpc/grpc-js';
import { RouteActionSchema } from '../../src/gen/envoy/config/route/v3/route_components_pb.js';
import type { MeshProxy } from '../../src/dataplane/proxy.js';
import { compileRouteTimeouts, formatGrpcTimeout, grpcRouterTimeoutMs, parseGrpcTimeout, streamDurationMs, streamTimersOf } from '../../src/dataplane/route-timeouts.js';
import { TypeUrl } from '../../src/envoy/types.js';
import { close, get } from '../helpers/http.js';
import { eventually } from '../helpers/proc.js';
import { boundPort, FixtureAds, hcmChain, listener, routesResource, staticCluster, startBoundProxy } from './xds-fixtures.js';

const ms = (n: number) => ({ seconds: BigInt(Math.floor(n / 1000)), nanos: (n % 1000) * 1_000_000 });
const GRPC = { 'content-type': 'application/grpc', te: 'trailers' };

type ActionInit = MessageInitShape<typeof RouteActionSchema>;
const route = (prefix: string, cluster: string, action: Omit<ActionInit, 'clusterSpecifier' | '$typeName'>) => ({
  match: { pathSpecifier: { case: 'prefix' as const, value: prefix } },
  action: { case: 'route' as const, value: { clusterSpecifier: { case: 'cluster' as const, value: cluster }, ...action } },
});

function assertAbout(elapsed: number, expected: number, what: string): void {
  assert.ok(elapsed >= expected - 50 && elapsed < expected + 400, `${what}: ${elapsed} ms, expected about ${expected} ms`);
}

interface H2Answer {
  readonly headers: H2Headers;
  readonly body: string;
  readonly at: number;
}

/** One stream over an h2c session (the client enforces no deadline of its own): the response headers (trailers merged), the body, when it ended. */
function h2Call(session: ClientHttp2Session, headers: Record<string, string>, body?: Buffer): Promise<H2Answer> {
  return new Promise((resolve) => {
    const stream = session.request(headers, { endStream: body === undefined });
    if (body) stream.end(body);
    let got: H2Headers = {};
    let text = '';
    stream.setEncoding('latin1');
    stream.on('response', (h) => (got = { ...got, ...h }));
    stream.on('trailers', (t) => (got = { ...got, ...t }));
    stream.on('data', (d: string) => (text += d));
    stream.on('close', () => resolve({ headers: got, body: text, at: Date.now() }));
    stream.on('error', () => undefined);
  });
}

/** A unary gRPC call of an empty message, as raw h2c. */
const grpcCall = (session: ClientHttp2Session, path: string, headers: Record<string, string> = {}): Promise<H2Answer> =>
  h2Call(session, { ':method': 'POST', ':path': path, ...GRPC, ...headers }, Buffer.alloc(5));

test('grpc-timeout read and written as Envoy does: units H M S m u n, 8 digits at most, sub-ms rounded up; written in ms while it fits', () => {
  assert.deepEqual(['2H', '3M', '4S', '250m', '1500u', '1n', '0m'].map(parseGrpcTimeout), [7_200_000, 180_000, 4000, 250, 2, 1, 0]);
  assert.deepEqual(['', '5', 'm', '123456789m', '1.5S', '-1S', '5s'].map(parseGrpcTimeout), Array(7).fill(undefined), 'malformed: not read');
  assert.deepEqual([300, 99_999_999, 100_000_000, 6_000_000_000_000].map(formatGrpcTimeout), ['300m', '99999999m', '100000S', '1666666H']);
});

test('max_grpc_timeout: the header (none: infinity) less the offset while something is left, capped unless the cap is 0', () => {
  assert.equal(grpcRouterTimeoutMs({ maxMs: 300, offsetMs: 0 }, '10S'), 300);
  assert.equal(grpcRouterTimeoutMs({ maxMs: 300, offsetMs: 0 }, undefined), 300, 'no header: the cap');
  assert.equal(grpcRouterTimeoutMs({ maxMs: 0, offsetMs: 0 }, undefined), 0, 'no header, no cap: no timeout');
  assert.equal(grpcRouterTimeoutMs({ maxMs: 0, offsetMs: 50 }, '300m'), 250);
  assert.equal(grpcRouterTimeoutMs({ maxMs: 0, offsetMs: 500 }, '300m'), 300, 'an offset that would leave nothing is not applied');
  assert.equal(grpcRouterTimeoutMs({ maxMs: 200, offsetMs: 50 }, '300m'), 200, 'offset first, then the cap');
});

test('stream duration: grpc_timeout_header_max with a header, else the route max_stream_duration (0: none), else the HCM', () => {
  const header = { grpcHeader: { maxMs: 500, offsetMs: 100 } };
  assert.equal(streamDurationMs(header, 0, '1S'), 400, 'capped then offset');
  assert.equal(streamDurationMs(header, 0, '50m'), 0, 'an offset past the timeout ends the stream at once');
  assert.equal(streamDurationMs(header, 700, undefined), 700, 'no header: the HCM');
  assert.equal(streamDurationMs({ maxMs: 0 }, 700, '1S'), undefined, 'route 0s: none; the header is read only with grpc_timeout_header_max');
  assert.equal(streamDurationMs(undefined, 0, '1S'), undefined);
  const inbound = compileRouteTimeouts(create(RouteActionSchema, { maxStreamDuration: { maxStreamDuration: ms(0), grpcTimeoutHeaderMax: ms(0) } }));
  assert.deepEqual(inbound, { stream: { maxMs: 0, grpcHeader: { maxMs: 0, offsetMs: 0 } }, perStream: true });
  assert.deepEqual(streamTimersOf(inbound, 0, '2S', true), { timers: { durationMs: 2000 }, grpcTimeout: '2000m' });
  assert.deepEqual(streamTimersOf(inbound, 0, undefined, true), {}, 'nothing to time');
  assert.deepEqual(compileRouteTimeouts(create(RouteActionSchema, { maxGrpcTimeout: ms(0), maxStreamDuration: {} })), { stream: {}, perStream: true }, 'with MaxStreamDuration, max_grpc_timeout is not used');
  assert.deepEqual(compileRouteTimeouts(create(RouteActionSchema, { maxGrpcTimeout: ms(0) })), { grpc: { maxMs: 0, offsetMs: 0 }, perStream: false }, 'the mesh\'s outbound routes: the router\'s only');
  assert.equal(compileRouteTimeouts(create(RouteActionSchema, { timeout: ms(5) })), undefined, 'a route with none costs nothing per request');
});

describe('route timeouts: max_grpc_timeout, MaxStreamDuration, idle_timeout; HCM max_stream_duration', { timeout: 60_000 }, () => {
  let dir: string;
  let ads: FixtureAds;
  let grpcApp: Http2Server;
  let web: Server;
  let proxy: MeshProxy;
  let session: ClientHttp2Session;
  /** The headers each upstream request came with, by path; streams and responses never answered. */
  const seen = new Map<string, H2Headers | IncomingHttpHeaders>();
  const heldStreams: ServerHttp2Stream[] = [];
  const heldResponses: ServerResponse[] = [];
  const heldSockets: Duplex[] = [];

  const portOf = (name: string): number => boundPort(proxy, name);
  const stats = async (): Promise<string> => (await get(false, proxy.adminPort, '/stats')).body;
  const stat = async (name: string): Promise<number> => Number(new RegExp(`^${name.replace(/[.|]/g, '\\$&')}: (\\d+)$`, 'm').exec(await stats())?.[1] ?? 0);

  /** A gRPC call with this grpc-timeout answered about `afterMs` later with a trailers-only HTTP 200 of this grpc-status and grpc-message. */
  const expectGrpcReply = async (path: string, grpcTimeout: string, afterMs: number, grpcStatus: string, message: string): Promise<void> => {
    const started = Date.now();
    const r = await grpcCall(session, path, { 'grpc-timeout': grpcTimeout });
    assertAbout(r.at - started, afterMs, 'answered after');
    assert.equal(r.headers[':status'], 200);
    assert.equal(r.headers['grpc-status'], grpcStatus);
    assert.equal(r.headers['grpc-message'], message);
    assert.equal(r.body, '');
  };

  /** A GET on listener `name` that gets, about 250 ms later, 504 with `body`, counted once more as http.<name>.<counter>. */
  const expect504 = async (name: string, path: string, counter: string, body: string): Promise<void> => {
    const counted = await stat(`http.${name}.${counter}`);
    const started = Date.now();
    const r = await get(false, portOf(name), path);
    assertAbout(Date.now() - started, 250, 'answered after');
    assert.equal(r.status, 504);
    assert.equal(r.body, body);
    assert.equal(await stat(`http.${name}.${counter}`), counted + 1);
  };

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'mesh-route-timeouts-'));
    // gRPC upstream: notes the request headers; /…/Hang never answers, anything else is OK at once.
    grpcApp = createH2Server();
    grpcApp.on('stream', (stream: ServerHttp2Stream, headers: H2Headers) => {
      seen.set(String(headers[':path']), headers);
      stream.on('error', () => undefined);
      stream.resume();
      if (String(headers[':path']).endsWith('/Hang')) heldStreams.push(stream);
      else stream.respond({ ':status': 200, 'content-type': 'application/grpc', 'grpc-status': '0' }, { endStream: true });
    });
    await new Promise<void>((r) => grpcApp.listen(0, '127.0.0.1', r));
    // HTTP/1.1 upstream: /hang never answers, /slow answers after 400 ms, anything else at once.
    web = createServer((req: IncomingMessage, res: ServerResponse) => {
      seen.set(req.url ?? '', req.headers);
      req.resume();
      if (req.url?.endsWith('/hang')) heldResponses.push(res);
      else if (req.url?.endsWith('/slow')) setTimeout(() => res.end('slow done\n'), 400);
      else res.end('done\n');
    });
    // An upgrade it never answers.
    web.on('upgrade', (req: IncomingMessage, socket: Duplex) => {
      seen.set(req.url ?? '', req.headers);
      heldSockets.push(socket);
    });
    await new Promise<void>((r) => web.listen(0, '127.0.0.1', r));
    ads = await new FixtureAds().listen();
    ads.set(TypeUrl.Cluster, [
      staticCluster('grpc-up', [(grpcApp.address() as AddressInfo).port], { http2ProtocolOptions: {} }),
      staticCluster('web', [(web.address() as AddressInfo).port]),
    ]);
    ads.set(TypeUrl.RouteConfiguration, [
      routesResource('r', [
        // The Go mesh's outbound shape with a VirtualService timeout of 300 ms.
        route('/capped.', 'grpc-up', { timeout: ms(300), maxGrpcTimeout: ms(300) }),
        // Without a VirtualService timeout: 0s both, grpc-timeout alone bounds the call; with an offset.
        route('/uncapped.', 'grpc-up', { timeout: ms(0), maxGrpcTimeout: ms(0), grpcTimeoutOffset: ms(50) }),
        // The Go mesh's inbound shape; its `timeout` is not the router's once MaxStreamDuration is set.
        route('/inbound.', 'grpc-up', { timeout: ms(100), maxStreamDuration: { maxStreamDuration: ms(0), grpcTimeoutHeaderMax: ms(0) } }),
        route('/web/duration/', 'web', { timeout: ms(0), maxStreamDuration: { maxStreamDuration: ms(250) } }),
        route('/web/idle/', 'web', { timeout: ms(0), idleTimeout: ms(250) }),
        route('/web/no-idle/', 'web', { timeout: ms(0), idleTimeout: ms(0) }),
        route('/ws/duration/', 'web', { upgradeConfigs: [{ upgradeType: 'websocket' }], maxStreamDuration: { maxStreamDuration: ms(250) } }),
        route('/ws/', 'web', { timeout: ms(0), upgradeConfigs: [{ upgradeType: 'websocket' }] }),
        route('/web/', 'web', { timeout: ms(0) }),
      ]),
    ]);
    ads.set(TypeUrl.Listener, [
      // No stream idle timeout (as the mesh's HCMs).
      listener('routes', 0, [hcmChain({ rds: 'r', statPrefix: 'routes', timeouts: { streamIdleTimeout: ms(0) } })]),
      listener('idle', 0, [hcmChain({ rds: 'r', statPrefix: 'idle', timeouts: { streamIdleTimeout: ms(250) } })]),
      listener('maxdur', 0, [hcmChain({ rds: 'r', statPrefix: 'maxdur', common: { maxStreamDuration: ms(250) } })]),
    ]);
    proxy = await startBoundProxy(dir, ads.port, 3, 500);
    session = h2connect(`http://127.0.0.1:${portOf('routes')}`);
    session.on('error', () => undefined);
  });

  after(async () => {
    session.destroy();
    for (const s of heldStreams) s.destroy();
    for (const r of heldResponses) r.destroy();
    for (const r of heldSockets) r.destroy();
    await proxy.stop(0);
    ads.close();
    await close(web);
    await new Promise<void>((r) => grpcApp.close(() => r()));
    rmSync(dir, { recursive: true, force: true });
  });

  it('max_grpc_timeout caps a real gRPC client\'s deadline: UNAVAILABLE `upstream request timeout` at the route timeout, counted as upstream_rq_timeout', async () => {
    const counted = await stat('cluster.grpc-up.upstream_rq_timeout');
    const client = new Client(`127.0.0.1:${portOf('routes')}`, credentials.createInsecure());
    try {
      const started = Date.now();
      const e = await new Promise<ServiceError | null>((resolve) =>
        client.makeUnaryRequest('/capped.Svc/Hang', (b: Buffer) => b, (b: Buffer) => b, Buffer.alloc(0), new Metadata(), { deadline: Date.now() + 10_000 }, (err) => resolve(err)),
      );
      assertAbout(Date.now() - started, 300, 'failed after');
      assert.equal(e?.code, status.UNAVAILABLE);
      assert.equal(e?.details, 'upstream request timeout');
    } finally {
      client.close();
    }
    // The upstream was told the time it actually had, not the client's 10 s.
    const up = seen.get('/capped.Svc/Hang') as H2Headers;
    assert.equal(up['grpc-timeout'], '300m');
    assert.equal(up['x-envoy-expected-rq-timeout-ms'], '300');
    assert.equal(await stat('cluster.grpc-up.upstream_rq_timeout'), counted + 1);
  });

  it('max_grpc_timeout 0s: the grpc-timeout, less grpc_timeout_offset, is the route timeout; the reply is a trailers-only HTTP 200', async () => {
    await expectGrpcReply('/uncapped.Svc/Hang', '300m', 250, '14', 'upstream request timeout');
    assert.equal((seen.get('/uncapped.Svc/Hang') as H2Headers)['grpc-timeout'], '250m');
    // Without a grpc-timeout there is no limit (and no offset): a call that is answered gets through as is.
    const ok = await grpcCall(session, '/uncapped.Svc/Ok');
    assert.equal(ok.headers['grpc-status'], '0');
    assert.equal((seen.get('/uncapped.Svc/Ok') as H2Headers)['grpc-timeout'], undefined);
  });

  it('MaxStreamDuration grpc_timeout_header_max 0s (the inbound shape): the grpc-timeout bounds the stream: DEADLINE_EXCEEDED `downstream duration timeout`; the route timeout is not applied', async () => {
    const counted = await stat('http.routes.downstream_rq_max_duration_reached');
    // Not at the route's 100 ms timeout: with MaxStreamDuration Envoy's router leaves it aside.
    await expectGrpcReply('/inbound.Svc/Hang', '1S', 1000, '4', 'downstream duration timeout');
    assert.equal((seen.get('/inbound.Svc/Hang') as H2Headers)['grpc-timeout'], '1000m');
    assert.equal(await stat('http.routes.downstream_rq_max_duration_reached'), counted + 1);
  });

  it('route max_stream_duration: an HTTP/1.1 request still waiting gets 504 `downstream duration timeout`', async () => {
    await expect504('routes', '/web/duration/hang', 'downstream_rq_max_duration_reached', 'downstream duration timeout');
  });

  it('HCM common_http_protocol_options.max_stream_duration bounds every stream of the connection manager', async () => {
    await expect504('maxdur', '/web/hang', 'downstream_rq_max_duration_reached', 'downstream duration timeout');
    assert.equal((await get(false, portOf('maxdur'), '/web/ok')).status, 200, 'a quick request is not affected');
  });

  it('route idle_timeout where the HCM has none: an idle HTTP/1.1 request gets 504 `stream timeout`, counted as downstream_rq_idle_timeout', async () => {
    await expect504('routes', '/web/idle/hang', 'downstream_rq_idle_timeout', 'stream timeout');
    // The next request of the connection manager, on a route without one, is not timed.
    assert.equal((await get(false, portOf('routes'), '/web/slow')).body, 'slow done\n');
  });

  it('route idle_timeout over HTTP/2 times the stream on its own', async () => {
    const r = await h2Call(session, { ':path': '/web/idle/hang' });
    assert.equal(r.headers[':status'], 504);
    assert.equal(r.body, 'stream timeout');
  });

  it('route idle_timeout 0s turns the HCM\'s stream_idle_timeout off for that route only', async () => {
    const off = await get(false, portOf('idle'), '/web/no-idle/slow');
    assert.equal(off.status, 200);
    assert.equal(off.body, 'slow done\n');
    const timed = await get(false, portOf('idle'), '/web/slow');
    assert.equal(timed.status, 504);
    assert.equal(timed.body, 'stream timeout');
  });

  /** A WebSocket upgrade whose upstream never answers: what the client gets, and when the proxy closed the connection. */
  const upgrade = async (listenerName: string, path: string): Promise<{ text: string; elapsed: number }> => {
    const c = connect(portOf(listenerName), '127.0.0.1');
    let text = '';
    let closedAt: number | undefined;
    c.setEncoding('latin1');
    c.on('data', (d: string) => (text += d));
    c.on('error', () => undefined);
    c.on('close', () => (closedAt = Date.now()));
    const started = Date.now();
    c.write(`GET ${path} HTTP/1.1\r\nhost: test\r\nconnection: Upgrade\r\nupgrade: websocket\r\nsec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n`);
    const at = await eventually(() => {
      assert.ok(closedAt !== undefined, `the proxy closed the connection; got ${JSON.stringify(text)}`);
      return closedAt;
    });
    return { text, elapsed: at - started };
  };

  /** An upgrade on listener `name` whose upstream never answers gets, about 250 ms later, 408 with `body`, then the close; counted as http.<name>.<counter>. */
  const expectUpgrade408 = async (name: string, path: string, counter: string, body: string): Promise<void> => {
    const counted = await stat(`http.${name}.${counter}`);
    const r = await upgrade(name, path);
    assert.match(r.text, /^HTTP\/1\.1 408 Request Timeout\r\n/);
    assert.ok(r.text.endsWith(`\r\n\r\n${body}`), r.text);
    assertAbout(r.elapsed, 250, 'closed after');
    assert.equal(await stat(`http.${name}.${counter}`), counted + 1);
  };

  it('an upgrade (WebSocket) idle before the 101 gets 408 `stream timeout`, then the connection closes', async () => {
    await expectUpgrade408('idle', '/ws/hang', 'downstream_rq_idle_timeout', 'stream timeout');
  });

  it('an upgrade past its route max_stream_duration before the 101 gets 408 `downstream duration timeout`', async () => {
    await expectUpgrade408('routes', '/ws/duration/hang', 'downstream_rq_max_duration_reached', 'downstream duration timeout');
  });
});
