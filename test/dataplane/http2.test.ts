// HTTP/2 through mesh-proxy: a real grpc-js client calls a real grpc-js server through the proxy
// (h2c with prior knowledge on both sides), configured over ADS with the mesh's jwt_authn -> rbac ->
// router chain. Local replies to gRPC calls are gRPC statuses; trailers pass through; HTTP/1.1
// still works on the same listener (codec AUTO).
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, request, type Server } from 'node:http';
import { connect as h2connect } from 'node:http2';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { create } from '@bufbuild/protobuf';
import { Client, credentials, Metadata, Server as GrpcServer, ServerCredentials, status, type ServiceDefinition, type ServiceError, type StatusObject, type UntypedServiceImplementation } from '@grpc/grpc-js';
import { ClusterSchema } from '../../src/gen/envoy/config/cluster/v3/cluster_pb.js';
import { Http2ProtocolOptionsSchema } from '../../src/gen/envoy/config/core/v3/protocol_pb.js';
import { RouteConfigurationSchema } from '../../src/gen/envoy/config/route/v3/route_pb.js';
import { HttpConnectionManager_CodecType, HttpConnectionManagerSchema } from '../../src/gen/envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager_pb.js';
import { HttpProtocolOptionsSchema } from '../../src/gen/envoy/extensions/upstreams/http/v3/http_protocol_options_pb.js';
import { loadBootstrap } from '../../src/dataplane/bootstrap.js';
import { MeshProxy } from '../../src/dataplane/proxy.js';
import { pack, TypeUrl, unpack } from '../../src/envoy/types.js';
import { eventually } from '../helpers/proc.js';
import { ISSUER, jwks, meshJwtAuthn, meshProvider, mint, testKey } from './fixtures.js';
import { boundPort, FixtureAds, hcmChain, listener, staticCluster, writeBootstrap } from './xds-fixtures.js';

const ECHO = '/test.Echo/Echo';
const same = (b: Buffer): Buffer => b;
const echoService: ServiceDefinition = {
  Echo: { path: ECHO, requestStream: false, responseStream: false, requestSerialize: same, requestDeserialize: same, responseSerialize: same, responseDeserialize: same },
};

/** The app: echoes the message and the metadata it got; "fail" is answered with NOT_FOUND. */
async function grpcApp(port = 0): Promise<{ server: GrpcServer; port: number }> {
  const server = new GrpcServer();
  const impl: UntypedServiceImplementation = {
    Echo(call: { request: Buffer; metadata: Metadata; sendMetadata(m: Metadata): void }, cb: (e: Partial<ServiceError> | null, v?: Buffer, trailer?: Metadata) => void) {
      const msg = call.request.toString();
      if (msg === 'fail') {
        cb({ code: status.NOT_FOUND, details: 'no such thing' });
        return;
      }
      const headers = new Metadata();
      headers.set('x-app-header', 'hello');
      call.sendMetadata(headers);
      const trailer = new Metadata();
      trailer.set('x-app-trailer', 'bye');
      cb(null, Buffer.from(JSON.stringify({ msg, metadata: call.metadata.getMap() })), trailer);
    },
  };
  server.addService(echoService, impl);
  const bound = await new Promise<number>((resolve, reject) => server.bindAsync(`127.0.0.1:${port}`, ServerCredentials.createInsecure(), (e, p) => (e ? reject(e) : resolve(p))));
  return { server, port: bound };
}

interface CallResult {
  readonly error?: ServiceError;
  readonly value?: { msg: string; metadata: Record<string, string> };
  readonly headers?: Metadata;
  readonly status: StatusObject;
}

function callEcho(client: Client, msg: string, md: Record<string, string> = {}): Promise<CallResult> {
  const metadata = new Metadata();
  for (const [k, v] of Object.entries(md)) metadata.set(k, v);
  return new Promise((resolve) => {
    let error: ServiceError | undefined;
    let value: Buffer | undefined;
    let headers: Metadata | undefined;
    const call = client.makeUnaryRequest(ECHO, same, same, Buffer.from(msg), metadata, {}, (e, v) => {
      error = e ?? undefined;
      value = v;
    });
    call.on('metadata', (m: Metadata) => (headers = m));
    call.on('status', (s: StatusObject) => {
      // The callback runs before 'status'.
      setImmediate(() => resolve({ ...(error ? { error } : {}), ...(value ? { value: JSON.parse(value.toString()) } : {}), ...(headers ? { headers } : {}), status: s }));
    });
  });
}

function httpGet(port: number, path: string, headers: Record<string, string> = {}): Promise<{ status: number; body: string; version: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path, headers, agent: false }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body, version: res.httpVersion }));
    });
    req.on('error', reject);
    req.end();
  });
}

/** A static cluster reached over HTTP/2, either way Envoy's config can say so. */
function h2Cluster(name: string, port: number, how: 'typed' | 'legacy') {
  const c = unpack(staticCluster(name, [port]).any, ClusterSchema);
  if (how === 'legacy') c.http2ProtocolOptions = create(Http2ProtocolOptionsSchema);
  else {
    c.typedExtensionProtocolOptions['envoy.extensions.upstreams.http.v3.HttpProtocolOptions'] = pack(HttpProtocolOptionsSchema, {
      upstreamProtocolOptions: { case: 'explicitHttpConfig', value: { protocolConfig: { case: 'http2ProtocolOptions', value: {} } } },
    });
  }
  return { name, any: pack(ClusterSchema, c) };
}

/** hcmChain with another codec_type. */
function withCodec(chain: ReturnType<typeof hcmChain>, codec: HttpConnectionManager_CodecType): ReturnType<typeof hcmChain> {
  const f = chain.filters![0]!;
  const hcm = unpack(f.configType!.value as Parameters<typeof unpack>[0], HttpConnectionManagerSchema);
  hcm.codecType = codec;
  return { ...chain, filters: [{ ...f, configType: { case: 'typedConfig', value: pack(HttpConnectionManagerSchema, hcm) } }] };
}

const ANY = { rule: { case: 'any' as const, value: true } };
/** ALLOW only a token of ISSUER whose subject is alice (the mesh's requestPrincipals). */
const onlyAlice = {
  alice: {
    permissions: [ANY],
    principals: [
      {
        identifier: {
          case: 'metadata' as const,
          value: {
            filter: 'envoy.filters.http.jwt_authn',
            path: [ISSUER, 'sub'].map((key) => ({ segment: { case: 'key' as const, value: key } })),
            value: { matchPattern: { case: 'stringMatch' as const, value: { matchPattern: { case: 'exact' as const, value: 'alice' } } } },
          },
        },
      },
    ],
  },
};

describe('HTTP/2 and gRPC through mesh-proxy', () => {
  let dir: string;
  let ads: FixtureAds;
  let app: { server: GrpcServer; port: number };
  let web: { server: Server; port: number };
  let proxy: MeshProxy;
  let token: string;
  let bob: string;
  const clients: Client[] = [];

  const portOf = (name: string): number => boundPort(proxy, name);
  const client = (port: number): Client => {
    const c = new Client(`127.0.0.1:${port}`, credentials.createInsecure());
    clients.push(c);
    return c;
  };
  const stat = (name: string): number => proxy.stats.samples().find((s) => s.name === name)?.value ?? 0;

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'mesh-proxy-h2-'));
    app = await grpcApp();
    const httpServer = createServer((req, res) => res.end(`h1 ${req.url} ${req.headers['x-forwarded-proto']}`));
    await new Promise<void>((r) => httpServer.listen(0, '127.0.0.1', r));
    web = { server: httpServer, port: (httpServer.address() as AddressInfo).port };
    const key = await testKey('RS256', 'k1');
    token = await mint(key, { sub: 'alice' });
    bob = await mint(key, { sub: 'bob' });
    const jwt = meshJwtAuthn({ origins: meshProvider(ISSUER, jwks(key)) });
    ads = new FixtureAds();
    await ads.listen();
    ads.set(TypeUrl.Cluster, [h2Cluster('grpc-app', app.port, 'typed'), h2Cluster('grpc-legacy', app.port, 'legacy'), staticCluster('web', [web.port])]);
    ads.set(TypeUrl.RouteConfiguration, [
      {
        name: 'r1',
        any: pack(RouteConfigurationSchema, {
          name: 'r1',
          virtualHosts: [
            {
              name: 'all',
              domains: ['*'],
              routes: [
                { match: { pathSpecifier: { case: 'prefix', value: '/test.Echo/' } }, action: { case: 'route', value: { clusterSpecifier: { case: 'cluster', value: 'grpc-app' } } } },
                { match: { pathSpecifier: { case: 'prefix', value: '/' } }, action: { case: 'route', value: { clusterSpecifier: { case: 'cluster', value: 'web' } } } },
              ],
            },
          ],
        }),
      },
    ]);
    ads.set(TypeUrl.Listener, [
      listener('inbound', 0, [hcmChain({ rds: 'r1', jwt, policies: onlyAlice, statPrefix: 'inbound_h2' })]),
      listener('h2only', 0, [withCodec(hcmChain({ cluster: 'grpc-legacy', statPrefix: 'h2only' }), HttpConnectionManager_CodecType.HTTP2)]),
      listener('h1only', 0, [withCodec(hcmChain({ cluster: 'web', statPrefix: 'h1only' }), HttpConnectionManager_CodecType.HTTP1)]),
    ]);
    proxy = new MeshProxy({ bootstrap: loadBootstrap({ path: writeBootstrap(dir, ads.port, 0) }), drainTimeMs: 2_000, initialBackoffMs: 50 });
    await proxy.start();
    await eventually(() => {
      assert.deepEqual(proxy.listeners.info().filter((l) => l.bound).map((l) => l.name).sort(), ['h1only', 'h2only', 'inbound']);
      assert.deepEqual(proxy.clusters.info().map((c) => c.name).sort(), ['grpc-app', 'grpc-legacy', 'web', 'xds-grpc']);
    }, 10_000);
  });

  after(async () => {
    for (const c of clients) c.close();
    await proxy.stop(0);
    ads.close();
    app.server.forceShutdown();
    web.server.closeAllConnections();
    web.server.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('an allowed call reaches the app over HTTP/2 with its headers, and response metadata and trailers come back', async () => {
    const c = client(portOf('inbound'));
    const r = await callEcho(c, 'hi', { authorization: `Bearer ${token}`, 'x-custom': 'v1' });
    assert.equal(r.error, undefined, r.error?.message);
    assert.equal(r.status.code, status.OK);
    assert.equal(r.value?.msg, 'hi');
    assert.equal(r.value?.metadata['x-custom'], 'v1');
    assert.equal(r.value?.metadata['x-forwarded-proto'], 'http');
    assert.match(r.value?.metadata['x-request-id'] ?? '', /^[0-9a-f-]{36}$/);
    assert.deepEqual(r.headers?.get('x-app-header'), ['hello']);
    assert.deepEqual(r.headers?.get('server'), ['mesh-proxy']);
    assert.deepEqual(r.status.metadata.get('x-app-trailer'), ['bye']);
    // More calls share the one pooled upstream session.
    for (const m of ['a', 'b', 'c']) assert.equal((await callEcho(c, m, { authorization: `Bearer ${token}` })).value?.msg, m);
    assert.equal(stat('cluster.grpc-app.upstream_cx_total'), 1);
    assert.ok(stat('http.inbound_h2.downstream_rq_2xx') >= 4);
  });

  it('an app error (trailers-only) reaches the client with its status and message', async () => {
    const r = await callEcho(client(portOf('inbound')), 'fail', { authorization: `Bearer ${token}` });
    assert.equal(r.status.code, status.NOT_FOUND);
    assert.equal(r.status.details, 'no such thing');
  });

  it('an RBAC denial is PERMISSION_DENIED; a jwt failure is UNAUTHENTICATED (HTTP 200 with grpc-status)', async () => {
    const c = client(portOf('inbound'));
    const denied = await callEcho(c, 'hi', { authorization: `Bearer ${bob}` });
    assert.equal(denied.status.code, status.PERMISSION_DENIED);
    assert.equal(denied.status.details, 'RBAC: access denied');
    const none = await callEcho(c, 'hi');
    assert.equal(none.status.code, status.PERMISSION_DENIED);
    const bad = await callEcho(c, 'hi', { authorization: 'Bearer not-a-jwt' });
    assert.equal(bad.status.code, status.UNAUTHENTICATED);
    assert.match(bad.status.details, /^Jwt is not in the form of Header.Payload.Signature/);
    // On the wire: one HEADERS frame, :status 200, END_STREAM (trailers-only), as Envoy sends it.
    const session = h2connect(`http://127.0.0.1:${portOf('inbound')}`);
    try {
      const wire = await new Promise<{ headers: Record<string, unknown>; endStream: boolean }>((resolve, reject) => {
        const s = session.request({ ':method': 'POST', ':path': ECHO, 'content-type': 'application/grpc', te: 'trailers', authorization: 'Bearer not-a-jwt' });
        s.on('response', (headers, flags) => resolve({ headers, endStream: (flags & 1) !== 0 }));
        s.on('error', reject);
        s.end();
      });
      assert.equal(wire.headers[':status'], 200);
      assert.equal(wire.headers['grpc-status'], '16');
      assert.equal(wire.headers['content-type'], 'application/grpc');
      assert.match(String(wire.headers['www-authenticate']), /invalid_token/);
      assert.equal(wire.endStream, true);
    } finally {
      session.close();
    }
    assert.ok(stat('http.inbound_h2.rbac.denied') >= 2);
  });

  it('HTTP/1.1 still works on the same listener (codec AUTO), through the same filters', async () => {
    const port = portOf('inbound');
    const ok = await httpGet(port, '/hello', { authorization: `Bearer ${token}` });
    assert.deepEqual([ok.status, ok.version, ok.body], [200, '1.1', 'h1 /hello http']);
    const denied = await httpGet(port, '/hello');
    assert.deepEqual([denied.status, denied.body], [403, 'RBAC: access denied']);
    const bad = await httpGet(port, '/hello', { authorization: 'Bearer not-a-jwt' });
    assert.equal(bad.status, 401);
  });

  it('plain HTTP/2 requests reach an HTTP/1.1 upstream, through the same filters', async () => {
    const session = h2connect(`http://127.0.0.1:${portOf('inbound')}`);
    const get = (headers: Record<string, string>) =>
      new Promise<{ status: unknown; body: string }>((resolve, reject) => {
        const s = session.request({ ':path': '/plain', ...headers });
        let status: unknown;
        let body = '';
        s.setEncoding('utf8');
        s.on('response', (h) => (status = h[':status']));
        s.on('data', (d: string) => (body += d));
        s.on('end', () => resolve({ status, body }));
        s.on('error', reject);
        s.end();
      });
    try {
      assert.deepEqual(await get({ authorization: `Bearer ${token}` }), { status: 200, body: 'h1 /plain http' });
      assert.deepEqual(await get({}), { status: 403, body: 'RBAC: access denied' });
    } finally {
      session.close();
    }
  });

  it('a local reply to a request whose body is still arriving ends the stream with RST_STREAM NO_ERROR after the reply, as Envoy', async () => {
    const session = h2connect(`http://127.0.0.1:${portOf('inbound')}`);
    try {
      const s = session.request({ ':method': 'POST', ':path': '/upload', 'content-type': 'application/octet-stream' });
      // The client keeps its side open: only the proxy's reset can end this stream.
      s.write(Buffer.alloc(1024 * 1024));
      let status: unknown;
      let body = '';
      s.setEncoding('utf8');
      s.on('response', (h) => (status = h[':status']));
      s.on('data', (d: string) => (body += d));
      const rstCode = await new Promise<number | 'still open'>((resolve) => {
        const timer = setTimeout(() => resolve('still open'), 3000);
        s.on('close', () => {
          clearTimeout(timer);
          resolve(s.rstCode);
        });
        s.on('error', () => {});
      });
      assert.deepEqual({ status, body, rstCode }, { status: 403, body: 'RBAC: access denied', rstCode: 0 });
    } finally {
      session.destroy();
    }
  });

  it('codec HTTP2 serves prior-knowledge h2c (to a cluster with the legacy http2_protocol_options); codec HTTP1 refuses it', async () => {
    const r = await callEcho(client(portOf('h2only')), 'legacy');
    assert.equal(r.status.code, status.OK);
    assert.equal(r.value?.msg, 'legacy');
    assert.equal(stat('cluster.grpc-legacy.upstream_cx_total'), 1);
    const h1 = await callEcho(client(portOf('h1only')), 'nope');
    assert.equal(h1.status.code, status.UNAVAILABLE);
    assert.deepEqual((await httpGet(portOf('h1only'), '/x')).body, 'h1 /x http');
  });

  it('a new upstream session replaces one the app closed (GOAWAY)', async () => {
    const c = client(portOf('h2only'));
    assert.equal((await callEcho(c, 'before')).status.code, status.OK);
    const before = stat('cluster.grpc-legacy.upstream_cx_total');
    // The app goes away and comes back on the same port: its sessions get GOAWAY and close.
    app.server.forceShutdown();
    app = await grpcApp(app.port);
    await eventually(async () => assert.equal((await callEcho(c, 'after')).status.code, status.OK), 10_000);
    assert.ok(stat('cluster.grpc-legacy.upstream_cx_total') > before);
  });
});
