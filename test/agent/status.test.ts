import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { programRegistry } from '../../src/common/metrics.js';
import { StatusServer, type XdsProgress } from '../../src/agent/status.js';

/** A stand-in for the proxy's admin API whose /ready answer the test sets. */
async function fakeAdmin(): Promise<{ server: Server; url: string; state: { ready: number } }> {
  const state = { ready: 503 };
  const server = createServer((req, res) => {
    if (req.url === '/ready') {
      res.writeHead(state.ready).end(state.ready === 200 ? 'LIVE\n' : 'PRE_INITIALIZING\n');
    } else if (req.url === '/stats/prometheus') {
      res.writeHead(200, { 'content-type': 'text/plain' }).end('# TYPE envoy_server_live gauge\nenvoy_server_live 1\n');
    } else res.writeHead(404).end();
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, state };
}

async function get(port: number, path: string): Promise<{ status: number; body: string }> {
  const res = await fetch(`http://127.0.0.1:${port}${path}`);
  return { status: res.status, body: await res.text() };
}

test('readiness: 503 until listeners and clusters are applied and the admin API says ready', async (t) => {
  const admin = await fakeAdmin();
  const progress: XdsProgress = { listeners: false, clusters: false };
  const status = new StatusServer({ statusAddress: '127.0.0.1:0', adminUrl: admin.url, xdsProgress: () => progress, registry: programRegistry('agent') });
  const { status: port } = await status.start();
  t.after(async () => {
    await status.close();
    admin.server.close();
  });

  let r = await get(port, '/healthz/ready');
  assert.equal(r.status, 503);
  assert.match(r.body, /listeners and clusters/);
  progress.clusters = true;
  r = await get(port, '/healthz/ready');
  assert.equal(r.status, 503);
  assert.match(r.body, /its listeners yet/);
  progress.listeners = true;
  r = await get(port, '/healthz/ready');
  assert.equal(r.status, 503);
  assert.match(r.body, /admin \/ready answered 503 \(PRE_INITIALIZING\)/);
  admin.state.ready = 200;
  r = await get(port, '/healthz/ready');
  assert.deepEqual(r, { status: 200, body: 'ready\n' });
  // A proxy that starts draining is unready again on the next probe.
  admin.state.ready = 503;
  assert.equal((await get(port, '/healthz/ready')).status, 503);
});

test('readiness without xDS tracking follows the admin API alone; an unreachable admin API is not ready', async (t) => {
  const admin = await fakeAdmin();
  admin.state.ready = 200;
  const status = new StatusServer({ statusAddress: '127.0.0.1:0', adminUrl: admin.url, registry: programRegistry('agent') });
  const { status: port } = await status.start();
  t.after(() => status.close());
  assert.equal((await get(port, '/healthz/ready')).status, 200);
  await new Promise((r) => admin.server.close(r));
  const r = await get(port, '/healthz/ready');
  assert.equal(r.status, 503);
  assert.match(r.body, /admin API unreachable: ECONNREFUSED/);
});

test('/stats/prometheus on the metrics port merges the agent registry with the proxy admin metrics', async (t) => {
  const admin = await fakeAdmin();
  const status = new StatusServer({ statusAddress: '127.0.0.1:0', metricsAddress: '127.0.0.1:0', adminUrl: admin.url, registry: programRegistry('agent') });
  const { metrics } = await status.start();
  t.after(() => status.close());
  assert.ok(metrics, 'metrics port bound');
  let r = await get(metrics, '/stats/prometheus');
  assert.equal(r.status, 200);
  assert.match(r.body, /^# TYPE meshd_connection_failures counter$/m);
  assert.match(r.body, /^envoy_server_live 1$/m);
  // The proxy gone: the agent's metrics are still served.
  await new Promise((res) => admin.server.close(res));
  r = await get(metrics, '/stats/prometheus');
  assert.equal(r.status, 200);
  assert.match(r.body, /meshd_connection_failures/);
  assert.doesNotMatch(r.body, /envoy_server_live/);
});

test('POST /quitquitquit changes state only with ENABLE_ADMIN_ENDPOINTS, and only by POST', async (t) => {
  let quits = 0;
  const off = new StatusServer({ statusAddress: '127.0.0.1:0', adminUrl: 'http://127.0.0.1:1', registry: programRegistry('agent'), quit: () => quits++ });
  const on = new StatusServer({ statusAddress: '127.0.0.1:0', adminUrl: 'http://127.0.0.1:1', registry: programRegistry('agent'), adminEndpoints: true, quit: () => quits++ });
  const offPort = (await off.start()).status;
  const onPort = (await on.start()).status;
  t.after(async () => {
    await off.close();
    await on.close();
  });
  const refused = await fetch(`http://127.0.0.1:${offPort}/quitquitquit`, { method: 'POST' });
  assert.equal(refused.status, 403);
  assert.match(await refused.text(), /ENABLE_ADMIN_ENDPOINTS is off/);
  assert.equal((await fetch(`http://127.0.0.1:${onPort}/quitquitquit`)).status, 405);
  assert.equal(quits, 0);
  const ok = await fetch(`http://127.0.0.1:${onPort}/quitquitquit`, { method: 'POST' });
  assert.equal(ok.status, 200);
  assert.equal(quits, 1);
});
