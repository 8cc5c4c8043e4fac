// The workload health checker (ProxyConfig.readinessProbe) against real applications on loopback:
// an HTTP server whose answers change, a TCP port that closes, commands that fail or hang, a gRPC
// health service, and a proxy that is not ready yet (a real status server over a stub admin API).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer as createHttpServer, type IncomingHttpHeaders, type Server as HttpServer } from 'node:http';
import { createServer as createTcpServer, type AddressInfo, type Server as NetServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Server as GrpcServer, ServerCredentials } from '@grpc/grpc-js';
import { HealthImplementation } from 'grpc-health-check';
import { programRegistry } from '../../src/common/metrics.js';
import type { AppProbe, ExecProbe } from '../../src/agent/app-probes.js';
import { healthCheckSpec, type HealthCheckSpec } from '../../src/agent/readiness-probe.js';
import { StatusServer } from '../../src/agent/status.js';
import { defaultProbeHost, WorkloadHealthChecker } from '../../src/agent/workload-health.js';
import type { HealthReport } from '../../src/envoy/types.js';
import { eventually } from '../helpers/proc.js';

async function listening<S extends NetServer | HttpServer>(server: S): Promise<number> {
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return (server.address() as AddressInfo).port;
}

/** An HTTP application answering its n-th request (from 1) with statuses[n-1], then the last one. */
async function httpApp(statuses: number[]) {
  const app = { port: 0, requests: 0, headers: {} as IncomingHttpHeaders, paths: [] as string[] };
  const server = createHttpServer((req, res) => {
    app.requests++;
    app.headers = req.headers;
    app.paths.push(req.url ?? '');
    res.writeHead(statuses[Math.min(app.requests, statuses.length) - 1]!).end();
  });
  app.port = await listening(server);
  return { app, close: () => (server.closeAllConnections(), server.close()) };
}

const spec = (action: AppProbe | ExecProbe, o: Partial<HealthCheckSpec> = {}): HealthCheckSpec => ({
  initialDelayMs: 0,
  periodMs: 20,
  successThreshold: 1,
  failureThreshold: 1,
  action,
  ...o,
});

/** Runs a checker (the proxy ready unless told otherwise); reports are collected, with what the app had seen by then. */
function checker(s: HealthCheckSpec, t: { after(fn: () => void): void }, o: { proxyReady?: () => Promise<string | null>; seen?: () => number } = {}) {
  const reports: Array<HealthReport & { seen?: number }> = [];
  const c = new WorkloadHealthChecker({
    spec: s,
    defaultHost: '127.0.0.1',
    proxyReady: o.proxyReady ?? (async () => null),
    report: (r) => void reports.push({ ...r, ...(o.seen ? { seen: o.seen() } : {}) }),
  });
  t.after(() => c.stop());
  c.start();
  return { c, reports };
}

const httpGet = (port: number, path = '/healthz'): AppProbe => ({ kind: 'httpGet', path, port, scheme: 'HTTP', headers: [{ name: 'X-Probe', value: 'agent' }], timeoutMs: 1000 });

test("Go's defaults: thresholds and timeout 1, period 10 s, no initial delay, HTTP path / and scheme http", () => {
  assert.deepEqual(healthCheckSpec({ httpGet: { port: 8080, scheme: 'https' } }), {
    initialDelayMs: 0,
    periodMs: 10_000,
    successThreshold: 1,
    failureThreshold: 1,
    action: { kind: 'httpGet', path: '/', port: 8080, host: undefined, scheme: 'HTTPS', headers: [], timeoutMs: 1000 },
  });
  const s = healthCheckSpec({ tcpSocket: { port: 9000, host: 'db.local' }, initialDelaySeconds: 3, periodSeconds: 2, timeoutSeconds: 4, successThreshold: 2, failureThreshold: 5 });
  assert.deepEqual(s, { initialDelayMs: 3000, periodMs: 2000, successThreshold: 2, failureThreshold: 5, action: { kind: 'tcpSocket', port: 9000, host: 'db.local', timeoutMs: 4000 } });
  assert.deepEqual(healthCheckSpec({ httpGet: { port: 80, path: 'ready' } }).action, { kind: 'httpGet', path: '/ready', port: 80, host: undefined, scheme: 'HTTP', headers: [], timeoutMs: 1000 });
  assert.deepEqual(healthCheckSpec({ exec: { command: ['/bin/check'] } }).action, { kind: 'exec', command: ['/bin/check'], timeoutMs: 1000 });
  assert.deepEqual(healthCheckSpec({ grpc: { port: 9090 } }).action, { kind: 'grpc', port: 9090, service: '', timeoutMs: 1000 });
  // The probe's default host: the workload's first IP, as the Go mesh's agent.
  assert.equal(defaultProbeHost(['10.0.0.5', '10.0.0.6']), '10.0.0.5');
  assert.equal(defaultProbeHost(['']), 'localhost');
  assert.equal(defaultProbeHost([]), 'localhost');
});

// Early in the file, so no other test's timers come and go while it counts.
test('stop() leaves nothing behind: no more probes, no timers, the command in flight killed', async (t) => {
  const timers = () => process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;
  const before = timers();
  const { app, close } = await httpApp([200]);
  t.after(close);
  const http = checker(spec(httpGet(app.port), { periodMs: 200 }), t);
  await eventually(() => assert.equal(http.reports.length, 1));
  http.c.stop();
  await new Promise((r) => setTimeout(r, 400));
  assert.equal(app.requests, 1, 'no probe after stop()');

  const pidFile = join(mkdtempSync(join(tmpdir(), 'health-stop-')), 'pid');
  const exec = checker(spec({ kind: 'exec', command: ['/bin/sh', '-c', `echo $$ > ${pidFile}; exec sleep 30`], timeoutMs: 20_000 }), t);
  await eventually(() => assert.ok(existsSync(pidFile) && readFileSync(pidFile, 'utf8').trim() !== '', 'the command has started'));
  const pid = Number(readFileSync(pidFile, 'utf8'));
  exec.c.stop();
  await eventually(() => assert.throws(() => process.kill(pid, 0), /ESRCH/, 'the command in flight is killed'));
  await eventually(() => assert.equal(timers(), before, 'no timer left'));
  assert.deepEqual(exec.reports, [], 'nothing reported after stop()');
});

test('HTTP: consecutive thresholds, reports on transitions only, 3xx is healthy, the message names the request and the status', async (t) => {
  // Request:   1    2    3    4    5    6    7    8    9   10   11...
  const { app, close } = await httpApp([200, 302, 200, 503, 200, 503, 500, 503, 204, 200, 200]);
  t.after(close);
  const { c, reports } = checker(spec(httpGet(app.port), { successThreshold: 2, failureThreshold: 2 }), t, { seen: () => app.requests });
  await eventually(() => assert.ok(app.requests >= 14, `${app.requests} probes so far`));
  c.stop();
  const url = `GET http://127.0.0.1:${app.port}/healthz`;
  assert.deepEqual(reports, [
    { healthy: true, seen: 2 },
    // 4 fails once, 5 passes: the failures were not consecutive.
    { healthy: false, message: `${url}: 500`, seen: 7 },
    // 8 fails again while already unhealthy: nothing to report.
    { healthy: true, seen: 10 },
  ]);
  assert.equal(app.headers['x-probe'], 'agent', "the probe's headers reach the application");
  assert.deepEqual(new Set(app.paths), new Set(['/healthz']));
});

test('TCP: healthy while the port accepts, unhealthy once it closes', async (t) => {
  const server = createTcpServer((s) => s.destroy());
  const port = await listening(server);
  t.after(() => server.close());
  // Two failures: a probe caught in the closing listener's backlog is reset rather than refused.
  const { reports } = checker(spec({ kind: 'tcpSocket', port, timeoutMs: 1000 }, { failureThreshold: 2 }), t);
  await eventually(() => assert.equal(reports.length, 1));
  assert.deepEqual(reports[0], { healthy: true });
  server.close();
  await eventually(() => assert.equal(reports.length, 2));
  assert.deepEqual(reports[1], { healthy: false, message: `connect 127.0.0.1:${port}: ECONNREFUSED` });
});

test('exec: the command runs without a shell; exit 0 is healthy, a non-zero exit names the code and its stderr', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'health-exec-'));
  const flag = join(dir, 'ok');
  const command = ['/bin/sh', '-c', `test -e ${flag} || { echo "flag file missing" >&2; exit 3; }`];
  const { reports } = checker(spec({ kind: 'exec', command, timeoutMs: 2000 }), t);
  await eventually(() => assert.equal(reports.length, 1));
  assert.deepEqual(reports[0], { healthy: false, message: `exec ${JSON.stringify(command)}: exit code 3 (flag file missing)` }, 'the first report can be unhealthy');
  writeFileSync(flag, '');
  await eventually(() => assert.deepEqual(reports.slice(1), [{ healthy: true }]));
});

test('exec: a missing command, and one that outlives the timeout (killed)', async (t) => {
  const missing = checker(spec({ kind: 'exec', command: ['/nonexistent/check', '--quick'], timeoutMs: 1000 }), t);
  await eventually(() => assert.deepEqual(missing.reports, [{ healthy: false, message: 'exec ["/nonexistent/check","--quick"]: ENOENT' }]));
  missing.c.stop();

  const pidFile = join(mkdtempSync(join(tmpdir(), 'health-exec-')), 'pid');
  const command = ['/bin/sh', '-c', `echo $$ > ${pidFile}; exec sleep 30`];
  const slow = checker(spec({ kind: 'exec', command, timeoutMs: 300 }, { periodMs: 60_000 }), t);
  await eventually(() => assert.deepEqual(slow.reports, [{ healthy: false, message: `exec ${JSON.stringify(command)}: timed out after 0.3s` }]));
  const pid = Number(readFileSync(pidFile, 'utf8'));
  assert.throws(() => process.kill(pid, 0), /ESRCH/, 'the timed-out command is killed');
});

test('gRPC: SERVING is healthy, NOT_SERVING is not', async (t) => {
  const health = new HealthImplementation({ '': 'SERVING' });
  const server = new GrpcServer();
  health.addToServer(server);
  const port = await new Promise<number>((r, j) => server.bindAsync('127.0.0.1:0', ServerCredentials.createInsecure(), (e, p) => (e ? j(e) : r(p))));
  t.after(() => server.forceShutdown());
  const { reports } = checker(spec({ kind: 'grpc', port, service: '', timeoutMs: 1000 }), t);
  await eventually(() => assert.deepEqual(reports, [{ healthy: true }]));
  health.setStatus('', 'NOT_SERVING');
  await eventually(() => assert.deepEqual(reports.slice(1), [{ healthy: false, message: `grpc.health.v1.Health/Check on 127.0.0.1:${port}: NOT_SERVING` }]));
});

test('the first probe runs after the initial delay, then one per period', async (t) => {
  const { app, close } = await httpApp([200]);
  t.after(close);
  const started = Date.now();
  const times: number[] = [];
  const { reports } = checker(spec(httpGet(app.port), { initialDelayMs: 400, periodMs: 150 }), t, { seen: () => times.push(Date.now() - started) });
  await new Promise((r) => setTimeout(r, 300));
  assert.equal(app.requests, 0, 'nothing before the initial delay');
  await eventually(() => assert.ok(app.requests >= 3, `${app.requests} probes so far`));
  assert.ok(times[0]! >= 400, `first probe at ${times[0]}ms`);
  assert.deepEqual(reports, [{ healthy: true, seen: 1 }], 'one report: later successes are no transition');
});

test('the proxy comes first: not ready is unhealthy without probing the application, then its probe decides', async (t) => {
  let adminReady = 503;
  const admin = createHttpServer((req, res) => res.writeHead(req.url === '/ready' ? adminReady : 404).end(adminReady === 200 ? 'LIVE' : 'PRE_INITIALIZING'));
  const adminPort = await listening(admin);
  t.after(() => admin.close());
  const progress = { listeners: false, clusters: false };
  const status = new StatusServer({ statusAddress: '127.0.0.1:0', adminUrl: `http://127.0.0.1:${adminPort}`, registry: programRegistry('agent'), xdsProgress: () => progress });
  const { app, close } = await httpApp([200]);
  t.after(close);

  const { reports } = checker(spec(httpGet(app.port)), t, { proxyReady: () => status.notReadyReason(), seen: () => app.requests });
  await eventually(() => assert.equal(reports.length, 1));
  assert.deepEqual(reports[0], { healthy: false, message: 'the proxy is not ready: the proxy has not applied its listeners and clusters yet', seen: 0 });
  progress.listeners = progress.clusters = true;
  await eventually(() => assert.equal(reports.length, 2));
  assert.match(reports[1]!.message ?? '', /^the proxy is not ready: .*503/, 'still unhealthy, for a new reason: reported again with it');
  await new Promise((r) => setTimeout(r, 100));
  assert.equal(reports.length, 2, 'the same reason again: no new report');
  assert.equal(app.requests, 0, 'the application is not probed while the proxy is not ready');
  adminReady = 200;
  await eventually(() => assert.deepEqual(reports.slice(2), [{ healthy: true, seen: 1 }]));
});

test('unhealthy for the proxy, then for the application: the condition follows the current reason', async (t) => {
  let proxyReady = false;
  const { app, close } = await httpApp([503]);
  t.after(close);
  const { reports } = checker(spec(httpGet(app.port)), t, { proxyReady: async () => (proxyReady ? null : 'starting') });
  await eventually(() => assert.equal(reports.length, 1));
  proxyReady = true;
  await eventually(() => assert.equal(reports.length, 2));
  assert.deepEqual(reports, [
    { healthy: false, message: 'the proxy is not ready: starting' },
    { healthy: false, message: `GET http://127.0.0.1:${app.port}/healthz: 503` },
  ]);
});
