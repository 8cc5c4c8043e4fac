// The application's probes through the status port (MESH_APP_PROBERS): real HTTP, TCP and gRPC
// applications on loopback, healthy, unhealthy and hanging; bad configuration refused at startup.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { createServer as createHttpServer, type IncomingHttpHeaders, type RequestListener } from 'node:http';
import { createServer as createTcpServer, type AddressInfo, type Server as NetServer, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Server as GrpcServer, ServerCredentials } from '@grpc/grpc-js';
import { HealthImplementation } from 'grpc-health-check';
import { programRegistry } from '../../src/common/metrics.js';
import { parseAppProbers } from '../../src/agent/app-probes.js';
import { StatusServer } from '../../src/agent/status.js';
import { freePort } from '../../samples/local-mesh.js';
import { run } from '../helpers/proc.js';

async function listening<S extends NetServer>(server: S): Promise<number> {
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return (server.address() as AddressInfo).port;
}

async function httpApp(handler: RequestListener): Promise<{ port: number; close(): void }> {
  const server = createHttpServer(handler);
  const port = await listening(server);
  return { port, close: () => (server.closeAllConnections(), server.close()) };
}

async function grpcApp(health: HealthImplementation): Promise<{ port: number; close(): void }> {
  const server = new GrpcServer();
  health.addToServer(server);
  const port = await new Promise<number>((r, j) => server.bindAsync('127.0.0.1:0', ServerCredentials.createInsecure(), (e, p) => (e ? j(e) : r(p))));
  return { port, close: () => server.forceShutdown() };
}

async function probe(port: number, path: string): Promise<{ status: number; body: string }> {
  const res = await fetch(`http://127.0.0.1:${port}${path}`);
  return { status: res.status, body: await res.text() };
}

test('HTTP, TCP and gRPC probes run against the application and answer as it does', async (t) => {
  let seen: IncomingHttpHeaders = {};
  let seenPath = '';
  const app = await httpApp((req, res) => {
    seen = req.headers;
    seenPath = req.url ?? '';
    if (req.url === '/healthz') res.writeHead(200).end('fine');
    else if (req.url === '/ready') res.writeHead(503).end('warming up');
    // /slow never answers: the probe's timeout decides
  });
  const tcp = createTcpServer((s) => s.destroy());
  const tcpPort = await listening(tcp);
  const closedPort = await freePort();
  const health = new HealthImplementation({ '': 'SERVING', 'shop.Orders': 'NOT_SERVING' });
  const grpc = await grpcApp(health);
  t.after(() => {
    app.close();
    tcp.close();
    grpc.close();
  });

  const probers = {
    '/app-health/web/livez': { httpGet: { path: '/healthz', port: app.port, scheme: 'HTTP', httpHeaders: [{ name: 'Host', value: 'web.example' }, { name: 'X-Probe', value: 'yes' }] }, timeoutSeconds: 2 },
    '/app-health/web/readyz': { httpGet: { path: '/ready', port: String(app.port) }, timeoutSeconds: 2 },
    '/app-health/web/startupz': { httpGet: { path: '/slow', port: app.port }, timeoutSeconds: 1 },
    '/app-health/db/livez': { tcpSocket: { port: tcpPort }, timeoutSeconds: 2 },
    '/app-health/db/readyz': { tcpSocket: { port: closedPort }, timeoutSeconds: 2 },
    '/app-health/rpc/livez': { grpc: { port: grpc.port }, timeoutSeconds: 2 },
    '/app-health/rpc/readyz': { grpc: { port: grpc.port, service: 'shop.Orders' }, timeoutSeconds: 2 },
    '/app-health/rpc/startupz': { grpc: { port: grpc.port, service: 'shop.Unknown' }, timeoutSeconds: 2 },
  };
  const status = new StatusServer({ statusAddress: '127.0.0.1:0', adminUrl: 'http://127.0.0.1:1', registry: programRegistry('agent'), appProbes: parseAppProbers(JSON.stringify(probers)) });
  const { status: port } = await status.start();
  t.after(() => status.close());

  assert.equal((await probe(port, '/app-health/web/livez')).status, 200);
  assert.equal(seenPath, '/healthz');
  assert.equal(seen.host, 'web.example', 'the probe’s Host header reaches the application');
  assert.equal(seen['x-probe'], 'yes');
  // The application's own status code is passed on.
  assert.equal((await probe(port, '/app-health/web/readyz')).status, 503);
  const slow = await probe(port, '/app-health/web/startupz');
  assert.equal(slow.status, 500);
  assert.match(slow.body, /timed out after 1s/);

  assert.equal((await probe(port, '/app-health/db/livez')).status, 200);
  const refused = await probe(port, '/app-health/db/readyz');
  assert.equal(refused.status, 500);
  assert.match(refused.body, /ECONNREFUSED/);

  assert.deepEqual(await probe(port, '/app-health/rpc/livez'), { status: 200, body: 'SERVING\n' });
  assert.deepEqual(await probe(port, '/app-health/rpc/readyz'), { status: 500, body: 'NOT_SERVING\n' });
  const unknown = await probe(port, '/app-health/rpc/startupz');
  assert.equal(unknown.status, 500);
  assert.match(unknown.body, /Health\/Check/);
  // The application recovering is seen on the next probe.
  health.setStatus('shop.Orders', 'SERVING');
  assert.equal((await probe(port, '/app-health/rpc/readyz')).status, 200);
  // Paths not configured are not probes.
  assert.equal((await probe(port, '/app-health/other/livez')).status, 404);
});

test('a probe of a hanging gRPC application fails at its timeout', async (t) => {
  const sockets = new Set<Socket>();
  // Accepts and never speaks HTTP/2.
  const silent = createTcpServer((s) => sockets.add(s));
  const port = await listening(silent);
  t.after(() => {
    for (const s of sockets) s.destroy();
    silent.close();
  });
  const status = new StatusServer({
    statusAddress: '127.0.0.1:0',
    adminUrl: 'http://127.0.0.1:1',
    registry: programRegistry('agent'),
    appProbes: parseAppProbers(JSON.stringify({ '/app-health/rpc/livez': { grpc: { port }, timeoutSeconds: 1 } })),
  });
  const { status: statusPort } = await status.start();
  t.after(() => status.close());
  const r = await probe(statusPort, '/app-health/rpc/livez');
  assert.equal(r.status, 500);
  assert.match(r.body, /Deadline exceeded|deadline/i);
});

test('MESH_APP_PROBERS errors name the variable, the probe and what is wrong', () => {
  assert.equal(parseAppProbers('').size, 0);
  assert.throws(() => parseAppProbers('{"/app-health/a/livez": '), /^Error: MESH_APP_PROBERS: not valid JSON/);
  assert.throws(() => parseAppProbers('[]'), /MESH_APP_PROBERS: expected a JSON object/);
  assert.throws(() => parseAppProbers('{"/healthz": {"tcpSocket": {"port": 80}}}'), /MESH_APP_PROBERS: \/healthz: not a probe path/);
  assert.throws(() => parseAppProbers('{"/app-health/a/livez": {"tcpSocket": {"port": 80}, "httpGet": {"port": 80}}}'), /exactly one of httpGet, tcpSocket, grpc \(found httpGet, tcpSocket\)/);
  assert.throws(() => parseAppProbers('{"/app-health/a/livez": {"httpGet": {"port": "http"}}}'), /\/app-health\/a\/livez\.httpGet: port "http" is not a port number/);
  assert.throws(() => parseAppProbers('{"/app-health/a/livez": {"httpGet": {"port": 80, "scheme": "FTP"}}}'), /scheme "FTP" is not HTTP or HTTPS/);
  assert.throws(() => parseAppProbers('{"/app-health/a/livez": {"grpc": {"port": 80}, "timeoutSeconds": "1"}}'), /timeoutSeconds "1" is not a non-negative integer/);
});

test('pilot-agent proxy refuses to start on bad MESH_APP_PROBERS or MESH_METRICS_ANNOTATIONS, naming the variable', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'agent-probers-'));
  for (const [name, value] of [['MESH_APP_PROBERS', '{not json'], ['MESH_METRICS_ANNOTATIONS', '{"scrape":"true","port":"x"}']] as const) {
    const r = await run('pilot-agent', ['proxy', '--meshConfig', join(dir, 'absent')], { cwd: dir, env: { [name]: value, POD_NAME: 'p' } });
    assert.notEqual(r.code, 0);
    assert.match(r.stderr + r.stdout, new RegExp(`${name}: `));
  }
});
