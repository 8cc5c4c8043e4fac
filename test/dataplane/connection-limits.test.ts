// An upstream cluster's connection limits (common_http_protocol_options' idle_timeout,
// max_requests_per_connection and max_connection_duration) on real loopback connections: the cluster manager compiles each
// Cluster, requests go out through its HTTP/1.1 pool or its HTTP/2 sessions, and the assertions are
// on what the upstream server sees (connections opened and closed) and on the cluster's counters.
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { createServer as createH2Server, type Http2Server, type ServerHttp2Session } from 'node:http2';
import type { AddressInfo, Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { after, afterEach, before, describe, it } from 'node:test';
import { create, type MessageInitShape } from '@bufbuild/protobuf';
import { Cluster_DiscoveryType, ClusterSchema } from '../../src/gen/envoy/config/cluster/v3/cluster_pb.js';
import { HttpProtocolOptionsSchema as CommonOptionsSchema } from '../../src/gen/envoy/config/core/v3/protocol_pb.js';
import { HttpProtocolOptionsSchema } from '../../src/gen/envoy/extensions/upstreams/http/v3/http_protocol_options_pb.js';
import { compileCluster } from '../../src/dataplane/cluster-spec.js';
import { DynamicClusterManager } from '../../src/dataplane/clusters.js';
import { http2Exchange, type DownstreamResponse, type UpstreamEvents } from '../../src/dataplane/http-codec.js';
import { http1Exchange } from '../../src/dataplane/http1-exchange.js';
import { StatsStore } from '../../src/dataplane/stats.js';
import type { UpstreamCluster } from '../../src/dataplane/upstream-pools.js';
import { configureLogging, registerScopes } from '../../src/common/log.js';
import { requestView } from '../../src/envoy/request.js';
import { pack } from '../../src/envoy/types.js';
import { close, listen } from '../helpers/http.js';
import { eventually } from '../helpers/proc.js';

const logFile = join(mkdtempSync(join(tmpdir(), 'connection-limits-')), 'out.log');
registerScopes(['upstream']);
configureLogging({ asJson: false, caller: [], outputLevel: 'default:info', stacktraceLevel: 'default:none', targets: [logFile] });

type CommonInit = MessageInitShape<typeof CommonOptionsSchema>;

/** A STATIC cluster of one loopback endpoint; its protocol and common options as HttpProtocolOptions. */
function clusterOf(name: string, port: number, o: { h2?: boolean | { maxConcurrentStreams?: number; allowConnect?: boolean }; common?: CommonInit; extra?: { upstreamHttpProtocolOptions?: { autoSni?: boolean } } } = {}) {
  const options = pack(HttpProtocolOptionsSchema, {
    ...o.extra,
    ...(o.common ? { commonHttpProtocolOptions: o.common } : {}),
    upstreamProtocolOptions: { case: 'explicitHttpConfig', value: { protocolConfig: o.h2 ? { case: 'http2ProtocolOptions', value: o.h2 === true ? {} : o.h2 } : { case: 'httpProtocolOptions', value: {} } } },
  });
  return create(ClusterSchema, {
    name,
    clusterDiscoveryType: { case: 'type', value: Cluster_DiscoveryType.STATIC },
    loadAssignment: { clusterName: name, endpoints: [{ lbEndpoints: [{ hostIdentifier: { case: 'endpoint', value: { address: { address: { case: 'socketAddress', value: { address: '127.0.0.1', portSpecifier: { case: 'portValue', value: port } } } } } } }] }] },
    typedExtensionProtocolOptions: { 'envoy.extensions.upstreams.http.v3.HttpProtocolOptions': options },
  });
}

const ms = (n: number) => ({ seconds: BigInt(Math.floor(n / 1000)), nanos: (n % 1000) * 1_000_000 });

/**
 * One request through the cluster's pool (HTTP/2 when it has sessions; `streamed`: an HTTP/1.1
 * chunked request, which goes through node:http on a lent connection); resolves with the status
 * once the body has ended.
 */
function send(cluster: UpstreamCluster, path = '/', streamed = false): Promise<number> {
  return new Promise((resolve, reject) => {
    const sink = new Writable({ write: (_chunk, _enc, cb) => cb() }) as unknown as DownstreamResponse;
    const events: UpstreamEvents = {
      head: (h, body) => body.pipeTo(sink, { bodyDone: () => resolve(h.status) }),
      error: reject,
    };
    const r = { endpoint: cluster.pick(view)!, method: streamed ? 'POST' : 'GET', path, headers: streamed ? { host: 'app', 'transfer-encoding': 'chunked' } : { host: 'app' }, framing: streamed ? ('stream' as const) : ('none' as const) };
    if (cluster.http2) http2Exchange(r, cluster.http2, events);
    else http1Exchange(r, cluster.http1, events).finish(undefined);
  });
}
const view = requestView({});

let http1: Server;
let http1Port: number;
/** Upstream HTTP/1.1 connections: when each opened and closed. */
const h1Connections: { opened: number; closed?: number }[] = [];
let h2: Http2Server;
let h2Port: number;
const h2Sessions: { opened: number; closed?: number }[] = [];

before(async () => {
  http1 = createServer((req, res) => {
    req.resume();
    if (req.url === '/slow') setTimeout(() => res.end('ok'), 500);
    else res.end('ok');
  });
  // The upstream keeps idle connections long: only the proxy's limits close them.
  http1.keepAliveTimeout = 60_000;
  http1.on('connection', (s: Socket) => {
    const c: { opened: number; closed?: number } = { opened: Date.now() };
    h1Connections.push(c);
    s.on('close', () => (c.closed = Date.now()));
  });
  http1Port = await listen(http1);
  h2 = createH2Server();
  h2.on('stream', (stream, headers) => {
    const answer = () => {
      if (!stream.destroyed) stream.respond({ ':status': 200 }, { endStream: true });
    };
    if (headers[':path'] === '/slow') setTimeout(answer, 500);
    else answer();
  });
  h2.on('session', (s: ServerHttp2Session) => {
    const c: { opened: number; closed?: number } = { opened: Date.now() };
    h2Sessions.push(c);
    s.on('close', () => (c.closed = Date.now()));
  });
  await new Promise<void>((r) => h2.listen(0, '127.0.0.1', r));
  h2Port = (h2.address() as AddressInfo).port;
});

after(async () => {
  await close(http1);
  await new Promise((r) => h2.close(r));
});

const managers: DynamicClusterManager[] = [];
afterEach(() => {
  for (const cm of managers.splice(0)) cm.close();
});

function managerOf(...clusters: ReturnType<typeof clusterOf>[]): { cm: DynamicClusterManager; stats: StatsStore } {
  const stats = new StatsStore();
  const cm = new DynamicClusterManager(stats);
  cm.commit(cm.prepare(clusters, new Map()));
  managers.push(cm);
  return { cm, stats };
}

const counter = (stats: StatsStore, cluster: string, name: string) => stats.samples().find((s) => s.name === `cluster.${cluster}.${name}`)?.value ?? 0;

describe('upstream connection limits', () => {
  it('HTTP/1.1: an idle connection closes after idle_timeout, and one that carried max_requests_per_connection requests closes', async () => {
    const { cm, stats } = managerOf(clusterOf('idle', http1Port, { common: { idleTimeout: ms(200) } }), clusterOf('twice', http1Port, { common: { maxRequestsPerConnection: 2 } }), clusterOf('default', http1Port));
    h1Connections.length = 0;
    assert.equal(await send(cm.get('idle')!), 200);
    const idle = h1Connections[0]!;
    const answered = Date.now();
    await eventually(() => assert.ok(idle.closed, 'the idle connection is still open'), 3000);
    assert.ok(idle.closed! - answered >= 150, `closed ${idle.closed! - answered} ms after the response, before the 200 ms idle timeout`);
    assert.equal(counter(stats, 'idle', 'upstream_cx_idle_timeout'), 1);

    h1Connections.length = 0;
    for (let i = 0; i < 3; i++) assert.equal(await send(cm.get('twice')!), 200);
    // Two requests on the first connection, then a new one for the third.
    assert.equal(h1Connections.length, 2);
    await eventually(() => assert.ok(h1Connections[0]!.closed, 'the connection that carried two requests is still open'));
    assert.equal(counter(stats, 'twice', 'upstream_cx_max_requests'), 1);

    // Envoy's defaults: an hour of idleness, no request limit.
    h1Connections.length = 0;
    for (let i = 0; i < 3; i++) assert.equal(await send(cm.get('default')!), 200);
    await new Promise((r) => setTimeout(r, 500));
    assert.deepEqual([h1Connections.length, h1Connections[0]!.closed], [1, undefined]);
    assert.deepEqual([counter(stats, 'default', 'upstream_cx_idle_timeout'), counter(stats, 'default', 'upstream_cx_max_requests')], [0, 0]);
  });

  it('HTTP/2: a session with no open stream closes after idle_timeout, never while a stream is open; max_requests_per_connection drains it', async () => {
    const { cm, stats } = managerOf(clusterOf('idle2', h2Port, { h2: true, common: { idleTimeout: ms(200) } }), clusterOf('twice2', h2Port, { h2: true, common: { maxRequestsPerConnection: 2 } }));
    h2Sessions.length = 0;
    // The stream outlasts the idle timeout: the session stays.
    assert.equal(await send(cm.get('idle2')!, '/slow'), 200);
    const answered = Date.now();
    const session = h2Sessions[0]!;
    assert.equal(session.closed, undefined, 'the session closed while its stream was open');
    await eventually(() => assert.ok(session.closed, 'the idle session is still open'), 3000);
    assert.ok(session.closed! - answered >= 150, `closed ${session.closed! - answered} ms after the stream ended, before the 200 ms idle timeout`);
    assert.equal(counter(stats, 'idle2', 'upstream_cx_idle_timeout'), 1);

    h2Sessions.length = 0;
    // Two streams at once on the first session (both complete), the third on a new one.
    assert.deepEqual(await Promise.all([send(cm.get('twice2')!), send(cm.get('twice2')!)]), [200, 200]);
    assert.equal(await send(cm.get('twice2')!), 200);
    assert.equal(h2Sessions.length, 2);
    await eventually(() => assert.ok(h2Sessions[0]!.closed, 'the drained session is still open'));
    assert.equal(counter(stats, 'twice2', 'upstream_cx_max_requests'), 1);
  });

  it('max_connection_duration, HTTP/1.1: an idle connection closes when it is reached, a busy one after its response, on either client', async () => {
    const { cm, stats } = managerOf(clusterOf('aged', http1Port, { common: { maxConnectionDuration: ms(300) } }));
    const aged = cm.get('aged')!;
    for (const streamed of [false, true]) {
      h1Connections.length = 0;
      assert.equal(await send(aged, '/', streamed), 200);
      const first = h1Connections[0]!;
      await eventually(() => assert.ok(first.closed, `the idle connection outlived its 300 ms (streamed: ${streamed})`), 3000);
      assert.ok(first.closed! - first.opened >= 250, `closed ${first.closed! - first.opened} ms after it opened`);
    }
    assert.equal(counter(stats, 'aged', 'upstream_cx_max_duration_reached'), 2);
    assert.equal(counter(stats, 'aged', 'upstream_cx_idle_timeout'), 0);

    // A response that outlasts the limit still arrives; its connection carries nothing more.
    h1Connections.length = 0;
    assert.equal(await send(aged, '/slow'), 200);
    assert.equal(await send(aged), 200);
    assert.equal(h1Connections.length, 2, 'the request after the slow one took a new connection');
    await eventually(() => assert.ok(h1Connections[0]!.closed, 'the outlived connection is still open'));
    assert.equal(counter(stats, 'aged', 'upstream_cx_destroy_with_active_rq'), 0, 'no request was cut short');
  });

  it('max_connection_duration, HTTP/2: the session drains when it is reached: its open stream finishes, new streams take a new session', async () => {
    const { cm, stats } = managerOf(clusterOf('aged2', h2Port, { h2: true, common: { maxConnectionDuration: ms(200) } }));
    h2Sessions.length = 0;
    const slow = send(cm.get('aged2')!, '/slow');
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(await send(cm.get('aged2')!), 200);
    assert.equal(await slow, 200);
    assert.equal(h2Sessions.length, 2, 'the stream after the limit opened a new session');
    await eventually(() => assert.ok(h2Sessions[0]!.closed, 'the drained session is still open'));
    assert.ok(counter(stats, 'aged2', 'upstream_cx_max_duration_reached') >= 1);
    assert.equal(counter(stats, 'aged2', 'upstream_cx_destroy_with_active_rq'), 0);
  });

  it('HTTP/2 max_concurrent_streams: a session at the limit has another opened beside it; later streams reuse the first', async () => {
    const { cm } = managerOf(clusterOf('streams2', h2Port, { h2: { maxConcurrentStreams: 2 } }), clusterOf('unlimited', h2Port, { h2: true }));
    h2Sessions.length = 0;
    assert.deepEqual(await Promise.all([1, 2, 3].map(() => send(cm.get('streams2')!, '/slow'))), [200, 200, 200]);
    assert.equal(h2Sessions.length, 2, 'two streams on the first session, the third on a second');
    assert.equal(await send(cm.get('streams2')!), 200);
    assert.equal(h2Sessions.length, 2, 'a stream with room on an open session opens none');

    h2Sessions.length = 0;
    assert.deepEqual(await Promise.all([1, 2, 3].map(() => send(cm.get('unlimited')!, '/slow'))), [200, 200, 200]);
    assert.equal(h2Sessions.length, 1, 'without a limit one session carries them all');
    assert.equal(compileCluster(clusterOf('streams2', 1, { h2: { maxConcurrentStreams: 2 } }), new Map(), 'clusters[0]').maxConcurrentStreams, 2);
    compileCluster(clusterOf('connect', 1, { h2: { allowConnect: true } }), new Map(), 'clusters[5]');
    assert.match(readFileSync(logFile, 'utf8'), /clusters\[5\]\.typed_extension_protocol_options\["envoy\.extensions\.upstreams\.http\.v3\.HttpProtocolOptions"\]\.explicit_http_config\.http2_protocol_options: accepted but not applied yet: allow_connect/);
  });

  it('reads the limits from HttpProtocolOptions, else the legacy Cluster fields, and reports what it does not apply', () => {
    const typed = compileCluster(clusterOf('typed', 1, { common: { idleTimeout: ms(0), maxRequestsPerConnection: 7 } }), new Map(), 'clusters[0]');
    assert.deepEqual(typed.connection, { idleTimeoutMs: 0, maxRequests: 7, maxDurationMs: 0 });
    const legacy = clusterOf('legacy', 1);
    legacy.typedExtensionProtocolOptions = {};
    legacy.commonHttpProtocolOptions = create(CommonOptionsSchema, { idleTimeout: ms(30_000) });
    legacy.maxRequestsPerConnection = 3;
    assert.deepEqual(compileCluster(legacy, new Map(), 'clusters[1]').connection, { idleTimeoutMs: 30_000, maxRequests: 3, maxDurationMs: 0 });
    assert.deepEqual(compileCluster(clusterOf('plain', 1), new Map(), 'clusters[2]').connection, { idleTimeoutMs: 3_600_000, maxRequests: 0, maxDurationMs: 0 });
    assert.equal(compileCluster(clusterOf('aged', 1, { common: { maxConnectionDuration: ms(60_000) } }), new Map(), 'clusters[4]').connection.maxDurationMs, 60_000);

    compileCluster(clusterOf('unapplied', 1, { common: { idleTimeout: ms(5000), maxConnectionDuration: ms(60_000), maxStreamDuration: ms(1000) }, extra: { upstreamHttpProtocolOptions: { autoSni: true } } }), new Map(), 'clusters[3]');
    const log = readFileSync(logFile, 'utf8');
    assert.match(log, /clusters\[3\]\.typed_extension_protocol_options\["envoy\.extensions\.upstreams\.http\.v3\.HttpProtocolOptions"\]: accepted but not applied yet: upstream_http_protocol_options/);
    assert.match(log, /clusters\[3\]\.typed_extension_protocol_options\["envoy\.extensions\.upstreams\.http\.v3\.HttpProtocolOptions"\]\.common_http_protocol_options: accepted but not applied yet: max_stream_duration\n/);
    // What is applied is never reported.
    assert.doesNotMatch(log, /clusters\[[0-2]\]/);
    assert.doesNotMatch(log, /idle_timeout|max_requests_per_connection|max_connection_duration/);
  });
});
