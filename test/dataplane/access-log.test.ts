// Access logs as a user reads them: a real proxy (in-process, real sockets, config over ADS)
// writing real files in a temporary directory. The Go mesh's default text and JSON formats for a
// request through the proxy, the response flags of requests that provoke each one, a filter, a
// tcp_proxy connection's line, a listener's line for a connection no filter chain takes, config
// errors NACKed while the last good config keeps logging, and config_dump of the loggers.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, request, type ServerResponse } from 'node:http';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { anyPack } from '@bufbuild/protobuf/wkt';
import { create } from '@bufbuild/protobuf';
import { ComparisonFilter_Op } from '../../src/gen/envoy/config/accesslog/v3/accesslog_pb.js';
import { HTTPFaultSchema } from '../../src/gen/envoy/extensions/filters/http/fault/v3/fault_pb.js';
import type { MeshProxy } from '../../src/dataplane/proxy.js';
import { TypeUrl } from '../../src/envoy/types.js';
import { close, get, listen, rawExchange, rawGet } from '../helpers/http.js';
import { eventually } from '../helpers/proc.js';
import { fileLog, logLines, MESH_JSON_FORMAT, MESH_TEXT_FORMAT } from './access-log-fixtures.js';
import { boundPort, FixtureAds, hcmChain, listener, routesResource, startBoundProxy, staticCluster, tcpChain, type AccessLogInit } from './xds-fixtures.js';

const FLAGS_FORMAT = { text: '%REQ(:PATH)% %RESPONSE_CODE% %RESPONSE_FLAGS% %RESPONSE_CODE_DETAILS% "%UPSTREAM_TRANSPORT_FAILURE_REASON%"\n' };

/** The upstream: /retry is 503, /timeout and /hang never answer, anything else is 200 "hello". */
const hanging: ServerResponse[] = [];
/** The port of the proxy's connection the app saw last (the log's %UPSTREAM_LOCAL_ADDRESS%). */
let lastPeerPort = 0;
const app = createServer((req, res) => {
  lastPeerPort = req.socket.remotePort ?? 0;
  req.resume();
  if (req.url === '/retry') res.writeHead(503).end();
  else if (req.url === '/timeout' || req.url === '/hang') hanging.push(res);
  else res.end('hello');
});

const route = (prefix: string, cluster: string, extra: object = {}) => ({
  name: prefix.slice(1),
  match: { pathSpecifier: { case: 'prefix' as const, value: prefix } },
  action: { case: 'route' as const, value: { clusterSpecifier: { case: 'cluster' as const, value: cluster }, ...extra } },
});

const ROUTES = [
  route('/app', 'app'),
  route('/retry', 'app', { retryPolicy: { retryOn: 'retriable-status-codes', retriableStatusCodes: [503], numRetries: 1 } }),
  route('/timeout', 'app', { timeout: { nanos: 200_000_000 } }),
  route('/refused', 'closed'),
  route('/empty', 'empty'),
  route('/hang', 'app'),
];

/** Delays and aborts asked for by request headers, as the fault filter allows. */
const FAULT = {
  name: 'envoy.filters.http.fault',
  any: anyPack(HTTPFaultSchema, create(HTTPFaultSchema, { delay: { faultDelaySecifier: { case: 'headerDelay', value: {} }, percentage: { numerator: 100 } }, abort: { errorType: { case: 'headerAbort', value: {} }, percentage: { numerator: 100 } } })),
};

const atLeast400 = { filterSpecifier: { case: 'statusCodeFilter' as const, value: { comparison: { op: ComparisonFilter_Op.GE, value: { defaultValue: 400, runtimeKey: 'errors' } } } } };

/** A request the client gives up on after `ms`. */
function abandoned(port: number, path: string, ms: number): Promise<void> {
  return new Promise((resolve) => {
    const req = request({ host: '127.0.0.1', port, path, agent: false });
    req.on('error', () => resolve());
    req.on('close', () => resolve());
    req.end();
    setTimeout(() => req.destroy(), ms);
  });
}

describe('access logs', { timeout: 60_000 }, () => {
  let proxy: MeshProxy;
  let ads: FixtureAds;
  let dir: string;
  let appPort: number;
  let port: number;
  const file = (name: string) => join(dir, name);
  const hcmLogs = (): AccessLogInit[] => [fileLog(file('mesh.log'), { text: MESH_TEXT_FORMAT }), fileLog(file('mesh.json'), { json: MESH_JSON_FORMAT }), fileLog(file('flags.log'), FLAGS_FORMAT), fileLog(file('errors.log'), FLAGS_FORMAT, atLeast400)];
  const httpListener = (logs: AccessLogInit[]) => listener('in', 0, [hcmChain({ rds: 'routes', extraFilters: [FAULT], accessLog: logs })]);
  const tcpFormat = { text: '%BYTES_RECEIVED% %BYTES_SENT% %UPSTREAM_HOST% %UPSTREAM_CLUSTER% %RESPONSE_FLAGS% %RESPONSE_CODE% %PROTOCOL% %DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%\n' };
  const listeners = () => [
    httpListener(hcmLogs()),
    listener('tcp', 0, [tcpChain('app', {}, { accessLog: [fileLog(file('tcp.log'), tcpFormat)] })]),
    listener('tcp-refused', 0, [tcpChain('closed', {}, { accessLog: [fileLog(file('tcp.log'), tcpFormat)] })]),
    // Only connections to port 1 have a chain: every other one is the listener's to log.
    listener('unmatched', 0, [tcpChain('app', { filterChainMatch: { destinationPort: 1 } })], { accessLog: [fileLog(file('listener.log'), { text: '%RESPONSE_FLAGS% %RESPONSE_CODE_DETAILS% %DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT% %UPSTREAM_HOST%\n' })] }),
  ];

  before(async () => {
    appPort = await listen(app);
    const gone = createServer();
    const closedPort = await listen(gone);
    await close(gone);
    dir = mkdtempSync(join(tmpdir(), 'access-log-'));
    ads = await new FixtureAds().listen();
    ads.set(TypeUrl.Cluster, [staticCluster('app', [appPort]), staticCluster('closed', [closedPort]), staticCluster('empty', [])]);
    ads.set(TypeUrl.RouteConfiguration, [routesResource('routes', ROUTES)]);
    ads.set(TypeUrl.Listener, listeners());
    proxy = await startBoundProxy(dir, ads.port, 4);
    port = boundPort(proxy, 'in');
  });

  after(async () => {
    for (const r of hanging) r.destroy();
    await proxy.stop(0);
    ads.close();
    rmSync(dir, { recursive: true, force: true });
    await close(app);
  });

  it("a request in the Go mesh's default text and JSON formats", async () => {
    const res = await rawGet(port, '/app/ok', { 'user-agent': 'access-log-test', 'x-request-id': 'req-1' });
    assert.equal(res.status, 200);
    const [text] = await logLines(file('mesh.log'), 1);
    const host = `127\\.0\\.0\\.1:${port}`;
    assert.match(
      text!,
      new RegExp(
        `^\\[\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\d\\.\\d{3}Z\\] "GET /app/ok HTTP/1\\.1" 200 - via_upstream - "-" 0 5 \\d+ \\d+ "-" "access-log-test" "req-1" "${host}" "127\\.0\\.0\\.1:${appPort}" app 127\\.0\\.0\\.1:${lastPeerPort} ${host} 127\\.0\\.0\\.1:\\d+ - app$`,
      ),
    );
    const [json] = await logLines(file('mesh.json'), 1);
    const o = JSON.parse(json!) as Record<string, unknown>;
    assert.equal(typeof o.duration, 'number');
    assert.match(String(o.start_time), /^\d{4}-.*Z$/);
    assert.match(String(o.upstream_service_time), /^\d+$/);
    assert.match(String(o.downstream_remote_address), /^127\.0\.0\.1:\d+$/);
    for (const k of ['duration', 'start_time', 'upstream_service_time', 'downstream_remote_address']) delete o[k];
    assert.deepEqual(o, {
      authority: `127.0.0.1:${port}`,
      bytes_received: 0,
      bytes_sent: 5,
      connection_termination_details: null,
      downstream_local_address: `127.0.0.1:${port}`,
      method: 'GET',
      path: '/app/ok',
      protocol: 'HTTP/1.1',
      request_id: 'req-1',
      requested_server_name: null,
      response_code: 200,
      response_code_details: 'via_upstream',
      response_flags: '-',
      route_name: 'app',
      upstream_cluster: 'app',
      upstream_host: `127.0.0.1:${appPort}`,
      upstream_local_address: `127.0.0.1:${lastPeerPort}`,
      upstream_transport_failure_reason: null,
      user_agent: 'access-log-test',
      x_forwarded_for: null,
    });
  });

  it('each response flag, for a request that provokes it', async () => {
    const before = (await logLines(file('flags.log'), 1)).length;
    const statuses: Record<string, number> = {};
    for (const [path, headers] of [
      ['/nothing', {}],
      ['/empty', {}],
      ['/refused', {}],
      ['/timeout', {}],
      ['/retry', {}],
      ['/app/fi', { 'x-envoy-fault-abort-request': '418' }],
      ['/app/di', { 'x-envoy-fault-delay-request': '10' }],
    ] as const) statuses[path] = (await rawGet(port, path, headers)).status;
    assert.deepEqual(statuses, { '/nothing': 404, '/empty': 503, '/refused': 503, '/timeout': 504, '/retry': 503, '/app/fi': 418, '/app/di': 200 });
    await abandoned(port, '/hang', 100);
    const lines = (await logLines(file('flags.log'), before + 8)).slice(before);
    assert.deepEqual(lines, [
      '/nothing 404 NR route_not_found "-"',
      '/empty 503 UH no_healthy_upstream "-"',
      '/refused 503 UF upstream_reset_before_response_started{remote_connection_failure|delayed_connect_error:_Connection_refused} "delayed connect error: Connection refused"',
      '/timeout 504 UT upstream_response_timeout "-"',
      '/retry 503 URX via_upstream "-"',
      '/app/fi 418 FI fault_filter_abort "-"',
      '/app/di 200 DI via_upstream "-"',
      '/hang 0 DC downstream_remote_disconnect "-"',
    ]);
  });

  it("a request the codec refuses is answered and logged as Envoy's codec does: 400 or 431, DPE, no request fields", async () => {
    const flags = (await logLines(file('flags.log'), 1)).length;
    const texts = (await logLines(file('mesh.log'), 1)).length;
    const badHeader = await rawExchange(port, 'GET /app/ok HTTP/1.1\r\nHost x\r\n\r\n');
    assert.match(badHeader, /^HTTP\/1\.1 400 Bad Request\r\n[^]*\r\n\r\nBad Request$/);
    const tooLarge = await rawExchange(port, `GET /app/ok HTTP/1.1\r\nHost: x\r\nx-big: ${'a'.repeat(70 * 1024)}\r\n\r\n`);
    assert.match(tooLarge, /^HTTP\/1\.1 431 Request Header Fields Too Large\r\n/);
    assert.deepEqual((await logLines(file('flags.log'), flags + 2)).slice(flags), ['- 400 DPE http1.codec_error "-"', '- 431 DPE http1.headers_too_large "-"']);
    const [text] = (await logLines(file('mesh.log'), texts + 1)).slice(texts);
    assert.match(text!, new RegExp(`^\\[[^\\]]+\\] "- - HTTP/1\\.1" 400 DPE http1\\.codec_error - "-" 0 11 \\d+ - "-" "-" "-" "-" "-" - - 127\\.0\\.0\\.1:${port} 127\\.0\\.0\\.1:\\d+ - -$`));
  });

  it('a status_code_filter (>= 400) keeps only the failures', async () => {
    const lines = await logLines(file('errors.log'), 6);
    assert.ok(lines.every((l) => / (4|5)\d\d /.test(l)), lines.join('\n'));
    assert.ok(!lines.some((l) => l.startsWith('/app/ok ') || l.startsWith('/app/di ')));
  });

  it("a tcp_proxy connection's line at its close: byte counts, upstream, flags", async () => {
    const ask = 'GET /app/tcp HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n';
    const got = await rawExchange(boundPort(proxy, 'tcp'), ask);
    assert.match(got, /^HTTP\/1\.1 200/);
    const refused = connect(boundPort(proxy, 'tcp-refused'), '127.0.0.1');
    refused.on('error', () => undefined);
    await new Promise((r) => refused.on('close', r));
    const lines = await logLines(file('tcp.log'), 2);
    assert.ok(lines.includes(`${ask.length} ${got.length} 127.0.0.1:${appPort} app - 0 - 127.0.0.1`), lines.join('\n'));
    assert.ok(lines.some((l) => / closed UF 0 - 127\.0\.0\.1$/.test(l) && l.startsWith('0 0 127.0.0.1:')), lines.join('\n'));
  });

  it("the listener's line for a connection no filter chain matches: NR", async () => {
    const s = connect(boundPort(proxy, 'unmatched'), '127.0.0.1');
    s.on('error', () => undefined);
    await new Promise((r) => s.on('close', r));
    assert.deepEqual(await logLines(file('listener.log'), 1), ['NR filter_chain_not_found 127.0.0.1 -']);
  });

  it('config_dump shows the loggers of HCMs, tcp_proxies and listeners', async () => {
    const dump = (await get(false, proxy.adminPort, '/config_dump')).body;
    assert.match(dump, /"@type": ?"type\.googleapis\.com\/envoy\.extensions\.access_loggers\.file\.v3\.FileAccessLog"/);
    for (const name of ['mesh.log', 'tcp.log', 'listener.log']) assert.ok(dump.includes(JSON.stringify(file(name)).slice(1, -1)), name);
    assert.ok(dump.includes('%RESPONSE_CODE_DETAILS%'));
  });

  it('an unknown operator, an unknown flag or a file that cannot be opened is NACKed naming it; the last good config keeps serving and logging', async () => {
    const nacks: string[] = [];
    proxy.xds.client.on('nack', (_type, _version, why) => nacks.push(why));
    const refuse = async (log: AccessLogInit, expected: RegExp) => {
      ads.set(TypeUrl.Listener, [httpListener([log]), ...listeners().slice(1)]);
      await ads.push(TypeUrl.Listener);
      await eventually(() => assert.match(nacks.at(-1) ?? '', expected));
    };
    await refuse(fileLog(file('bad.log'), { text: '%RESPONSE_CODE% %NOPE%\n' }), /access_log\[0\]\.typed_config\.log_format\.text_format_source: Not supported field in StreamInfo: NOPE/);
    await refuse(fileLog(file('bad.log'), undefined, { filterSpecifier: { case: 'responseFlagFilter', value: { flags: ['XX'] } } }), /access_log\[0\]\.filter\.response_flag_filter\.flags\[0\]: unknown response flag "XX"/);
    await refuse(fileLog(join(dir, 'missing', 'x.log')), /access_log\[0\]\.typed_config\.path: cannot open access log file .*ENOENT/);
    const before = (await logLines(file('flags.log'), 1)).length;
    assert.equal((await rawGet(port, '/app/still')).status, 200);
    const lines = await logLines(file('flags.log'), before + 1);
    assert.equal(lines.at(-1), '/app/still 200 - via_upstream "-"');
  });
});

