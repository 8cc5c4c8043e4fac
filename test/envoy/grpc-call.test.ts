// The proxy's gRPC calls on node:http2 (src/envoy/grpc-call.ts) against grpc-js servers, the
// implementation the discovery server and the agent serve with, and against HTTP/2 servers that
// are not gRPC: messages both ways, statuses, deadlines, limits, targets, and failures.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { once, type EventEmitter } from 'node:events';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer as createHttp2Server } from 'node:http2';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { create } from '@bufbuild/protobuf';
import { Server, ServerCredentials, status, type ServerDuplexStream, type ServerUnaryCall, type sendUnaryData } from '@grpc/grpc-js';
import { AggregatedDiscoveryService } from '../../src/gen/envoy/service/discovery/v3/ads_pb.js';
import { DiscoveryRequestSchema, DiscoveryResponseSchema, type DiscoveryRequest, type DiscoveryResponse } from '../../src/gen/envoy/service/discovery/v3/discovery_pb.js';
import { JwksService, RequestRefreshRequestSchema, RequestRefreshResponseSchema, type RequestRefreshRequest, type RequestRefreshResponse } from '../../src/gen/mesh/v1/jwks_pb.js';
import { FrameReader, GrpcChannel, GrpcError, GrpcStatus, grpcFrame, MAX_RECEIVE_BYTES, type CallStatus, type GrpcCallEvents } from '../../src/envoy/grpc-call.js';
import { grpcServiceDefinition } from '../../src/envoy/grpc-service.js';

type Refresh = (call: ServerUnaryCall<RequestRefreshRequest, RequestRefreshResponse>, done: sendUnaryData<RequestRefreshResponse>) => void;
type Stream = (call: ServerDuplexStream<DiscoveryRequest, DiscoveryResponse>) => void;

/** A grpc-js server with JwksService and ADS's SotW method; resolves once bound. */
async function grpcServer(at: string, handlers: { refresh?: Refresh; stream?: Stream }, options: ConstructorParameters<typeof Server>[0] = {}): Promise<{ server: Server; port: number }> {
  const server = new Server(options);
  const unimplemented = (_: unknown, done: sendUnaryData<never>): void => done({ code: status.UNIMPLEMENTED, details: 'not in this test' });
  server.addService(grpcServiceDefinition(JwksService), { requestRefresh: handlers.refresh ?? unimplemented });
  if (handlers.stream) server.addService(grpcServiceDefinition(AggregatedDiscoveryService), { streamAggregatedResources: handlers.stream, deltaAggregatedResources: () => undefined });
  const port = await new Promise<number>((resolve, reject) => server.bindAsync(at, ServerCredentials.createInsecure(), (e, p) => (e ? reject(e) : resolve(p))));
  return { server, port };
}

const refresh = (issuer: string, kid = 'k') => create(RequestRefreshRequestSchema, { issuer, kid });
const echoIssuer: Refresh = (call, done) => done(null, create(RequestRefreshResponseSchema, { accepted: true, reason: call.request.issuer }));
const ads = AggregatedDiscoveryService.method.streamAggregatedResources;
const requestRefresh = JwksService.method.requestRefresh;

/** Resolves with the call's end status and every message it received before. */
function collect<T>(call: EventEmitter<GrpcCallEvents<T>>): Promise<{ messages: T[]; status: CallStatus }> {
  const messages: T[] = [];
  call.on('message', (m) => messages.push(m));
  return new Promise((resolve) => call.once('end', (s) => resolve({ messages, status: s })));
}

test('a bidi stream carries messages both ways in order and ends with the server\'s status, percent-decoded', async (t) => {
  const { server, port } = await grpcServer('127.0.0.1:0', {
    stream: (call) => {
      call.on('data', (req: DiscoveryRequest) => {
        if (req.typeUrl === 'end') call.emit('error', { code: status.FAILED_PRECONDITION, details: 'über 100% done' });
        else call.write(create(DiscoveryResponseSchema, { typeUrl: req.typeUrl, nonce: req.responseNonce }));
      });
    },
  });
  t.after(() => server.forceShutdown());
  const channel = new GrpcChannel(`127.0.0.1:${port}`);
  t.after(() => channel.close());
  const call = channel.call(ads);
  const done = collect<DiscoveryResponse>(call);
  for (const n of ['1', '2', '3']) call.write(create(DiscoveryRequestSchema, { typeUrl: 't', responseNonce: n }));
  call.write(create(DiscoveryRequestSchema, { typeUrl: 'end' }));
  const { messages, status: s } = await done;
  assert.deepEqual(
    messages.map((m) => m.nonce),
    ['1', '2', '3'],
  );
  assert.deepEqual(s, { code: 9, details: 'über 100% done' });
});

test('unary calls: the response, the server\'s error, an unimplemented method, and the deadline', async (t) => {
  const { server, port } = await grpcServer('127.0.0.1:0', {
    refresh: (call, done) => {
      if (call.request.issuer === 'slow') setTimeout(() => done(null, create(RequestRefreshResponseSchema, {})), 2_000);
      else if (call.request.issuer === 'bad') done({ code: status.INVALID_ARGUMENT, details: 'issuer: bad' });
      else echoIssuer(call, done);
    },
  });
  t.after(() => server.forceShutdown());
  const channel = new GrpcChannel(`127.0.0.1:${port}`);
  t.after(() => channel.close());
  const res = await channel.unary(requestRefresh, refresh('https://a'), 1_000);
  assert.deepEqual([res.accepted, res.reason], [true, 'https://a']);
  await assert.rejects(channel.unary(requestRefresh, refresh('bad'), 1_000), (e: unknown) => e instanceof GrpcError && e.code === 3 && e.message === '3 issuer: bad');
  await assert.rejects(channel.unary(ads as never, create(DiscoveryRequestSchema, {}) as never, 1_000), (e: unknown) => e instanceof GrpcError && e.code === GrpcStatus.UNIMPLEMENTED);
  const started = Date.now();
  await assert.rejects(channel.unary(requestRefresh, refresh('slow'), 150), (e: unknown) => e instanceof GrpcError && e.code === GrpcStatus.DEADLINE_EXCEEDED);
  assert.ok(Date.now() - started < 1_500, 'the deadline ends the call, not the server\'s answer');
  const again = await channel.unary(requestRefresh, refresh('https://b'), 1_000);
  assert.equal(again.reason, 'https://b', 'the connection serves the next call');
});

test('a message over the 4 MiB receive limit ends the call with RESOURCE_EXHAUSTED', async (t) => {
  const { server, port } = await grpcServer('127.0.0.1:0', {
    stream: (call) => call.on('data', () => call.write(create(DiscoveryResponseSchema, { versionInfo: 'x'.repeat(MAX_RECEIVE_BYTES) }))),
  });
  t.after(() => server.forceShutdown());
  const channel = new GrpcChannel(`127.0.0.1:${port}`);
  t.after(() => channel.close());
  const call = channel.call(ads);
  const done = collect(call);
  call.write(create(DiscoveryRequestSchema, {}));
  const { messages, status: s } = await done;
  assert.equal(messages.length, 0);
  assert.equal(s.code, GrpcStatus.RESOURCE_EXHAUSTED);
  assert.match(s.details, new RegExp(`larger than max \\(${MAX_RECEIVE_BYTES + 5} vs\\. ${MAX_RECEIVE_BYTES}\\)`));
});

test('a Unix socket target, and a server that goes away ends the stream with UNAVAILABLE; the next call reconnects', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'grpc-call-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const socket = join(dir, 'sds.sock');
  const stream: Stream = (call) => call.on('data', (req: DiscoveryRequest) => call.write(create(DiscoveryResponseSchema, { typeUrl: req.typeUrl })));
  let { server } = await grpcServer(`unix:${socket}`, { stream, refresh: echoIssuer });
  t.after(() => server.forceShutdown());
  const channel = new GrpcChannel(`unix:${socket}`);
  t.after(() => channel.close());
  const call = channel.call(ads);
  const done = collect(call);
  call.write(create(DiscoveryRequestSchema, { typeUrl: 'over-uds' }));
  await once(call, 'message');
  server.forceShutdown();
  const { status: s } = await done;
  assert.equal(s.code, GrpcStatus.UNAVAILABLE, s.details);
  ({ server } = await grpcServer(`unix:${socket}`, { stream, refresh: echoIssuer }));
  assert.equal((await channel.unary(requestRefresh, refresh('back'), 2_000)).reason, 'back');
});

test('the server\'s GOAWAY (its max connection age) ends a stream; the next call opens a new connection', async (t) => {
  const peers = new Set<string>();
  const { server, port } = await grpcServer(
    '127.0.0.1:0',
    {
      stream: (call) => {
        peers.add(call.getPeer());
        call.on('data', (req: DiscoveryRequest) => call.write(create(DiscoveryResponseSchema, { typeUrl: req.typeUrl })));
      },
    },
    { 'grpc.max_connection_age_ms': 300, 'grpc.max_connection_age_grace_ms': 200 },
  );
  t.after(() => server.forceShutdown());
  const channel = new GrpcChannel(`127.0.0.1:${port}`);
  t.after(() => channel.close());
  for (const round of [1, 2]) {
    const call = channel.call(ads);
    const done = collect<DiscoveryResponse>(call);
    call.write(create(DiscoveryRequestSchema, { typeUrl: `round ${round}` }));
    const { messages, status: s } = await done;
    assert.deepEqual(
      messages.map((m) => m.typeUrl),
      [`round ${round}`],
    );
    assert.deepEqual(s, { code: GrpcStatus.UNAVAILABLE, details: 'Connection dropped' }, `round ${round}: the stream ends when its connection ages out`);
  }
  assert.equal(peers.size, 2, 'each stream came on its own connection');
});

test('nothing listening: UNAVAILABLE naming the connect error', async () => {
  const { server, port } = await grpcServer('127.0.0.1:0', {});
  server.forceShutdown();
  const channel = new GrpcChannel(`127.0.0.1:${port}`);
  try {
    await assert.rejects(channel.unary(requestRefresh, refresh('x'), 2_000), (e: unknown) => e instanceof GrpcError && e.code === GrpcStatus.UNAVAILABLE && /ECONNREFUSED/.test(e.details));
  } finally {
    channel.close();
  }
});

test('an HTTP/2 server that is not gRPC: its HTTP status or content type is the error', async (t) => {
  const h2 = createHttp2Server((req, res) => {
    if (req.url.endsWith('/RequestRefresh')) res.writeHead(404).end('no such page');
    else res.writeHead(200, { 'content-type': 'text/html' }).end('<html>');
  });
  h2.listen(0, '127.0.0.1');
  await once(h2, 'listening');
  t.after(() => h2.close());
  const channel = new GrpcChannel(`127.0.0.1:${(h2.address() as AddressInfo).port}`);
  t.after(() => channel.close());
  await assert.rejects(channel.unary(requestRefresh, refresh('x'), 2_000), (e: unknown) => e instanceof GrpcError && e.code === GrpcStatus.UNIMPLEMENTED && /HTTP status code 404/.test(e.details));
  const call = channel.call(ads);
  const { status: s } = await collect(call);
  assert.deepEqual(s, { code: GrpcStatus.UNKNOWN, details: 'Received content-type "text/html", not gRPC' });
});

test('a target that is neither host:port nor unix:path is refused when the channel is made', () => {
  for (const bad of ['localhost', 'unix:', 'http://a:1', 'a:99999', '[::1]']) {
    assert.throws(() => new GrpcChannel(bad), new RegExp(`gRPC target ${JSON.stringify(bad).replace(/[[\]]/g, '\\$&')}`), bad);
  }
  for (const good of ['a.b.svc:15012', '[::1]:15010', 'dns:///istiod:15012', 'unix:./etc/sds', 'unix:///var/run/sds']) new GrpcChannel(good).close();
});

test('frames split anywhere are reassembled; a compressed frame is refused', () => {
  const messages = [Buffer.from('first'), Buffer.alloc(0), Buffer.from('x'.repeat(70_000))];
  const wire = Buffer.concat(messages.map((m) => grpcFrame(m)));
  for (const size of [1, 3, 5, 7, 4096, wire.length]) {
    const reader = new FrameReader();
    const out: Buffer[] = [];
    for (let at = 0; at < wire.length; at += size) out.push(...reader.push(wire.subarray(at, at + size)));
    assert.deepEqual(out, messages, `chunks of ${size}`);
  }
  const compressed = grpcFrame(Buffer.from('z'));
  compressed[0] = 1;
  assert.throws(() => new FrameReader().push(compressed), /compressed message, but no compression was negotiated/);
});

test('a call in progress keeps the process alive; an idle channel does not', () => {
  const module = new URL('../../src/envoy/grpc-call.js', import.meta.url).href;
  const gen = new URL('../../src/gen/envoy/service/discovery/v3/ads_pb.js', import.meta.url).href;
  const script = `
    import { createServer } from 'node:net';
    import { GrpcChannel } from ${JSON.stringify(module)};
    import { AggregatedDiscoveryService } from ${JSON.stringify(gen)};
    // A server that accepts and never answers. Neither it, its connections nor the timer that
    // cancels the stream keep the process alive: only the channel could.
    const server = createServer((socket) => socket.unref()).listen(0, '127.0.0.1', () => {
      server.unref();
      const channel = new GrpcChannel('127.0.0.1:' + server.address().port);
      const started = Date.now();
      const call = channel.call(AggregatedDiscoveryService.method.streamAggregatedResources);
      call.once('end', (s) => console.log(s.code, Date.now() - started >= 290));
      setTimeout(() => call.cancel(), 300).unref();
    });`;
  const out = execFileSync(process.execPath, ['--input-type=module', '-e', script], { timeout: 10_000 }).toString().trim();
  assert.equal(out, '1 true', 'the stream lived until cancelled, then the process exited with the channel still open');
});
