// `request` of both programs against real servers on their fixed local addresses: the discovery
// monitoring port (15014) and the proxy admin port (15000).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { discoveryArgs, run, Running, start } from '../helpers/proc.js';

test('pilot-discovery request reaches the local discovery server; non-2xx is an error', async () => {
  const d = new Running(start('pilot-discovery', discoveryArgs(undefined, { monitoringAddr: '127.0.0.1:15014' })));
  try {
    await d.waitFor(/discovery server ready/);
    const metrics = await run('pilot-discovery', ['request', 'GET', '/metrics']);
    assert.equal(metrics.code, 0, metrics.stderr);
    assert.match(metrics.stdout, /# TYPE pilot_xds gauge/);
    const debug = await run('pilot-discovery', ['request', 'get', 'debug/env']);
    assert.equal(debug.code, 0);
    assert.ok(Array.isArray(JSON.parse(debug.stdout)));
    const missing = await run('pilot-discovery', ['request', 'GET', '/debug/nope']);
    assert.equal(missing.code, 1);
    assert.match(missing.stdout, /404 page not found/);
    assert.match(missing.stderr, /^Error: GET \/debug\/nope returned HTTP 404\n$/);
  } finally {
    await d.stop();
  }
  const refused = await run('pilot-discovery', ['request', 'GET', '/metrics']);
  assert.equal(refused.code, 1);
  assert.match(refused.stderr, /^Error: GET http:\/\/127\.0\.0\.1:15014\/metrics failed: connection refused\n$/);
});

test('pilot-agent request sends method, path and body to the proxy admin API', async () => {
  const seen: string[] = [];
  const admin = createServer((req, res) => {
    let body = '';
    req.on('data', (d: Buffer) => (body += d.toString()));
    req.on('end', () => {
      seen.push(`${req.method} ${req.url} ${body}`);
      res.writeHead(req.url === '/fail' ? 500 : 200).end(`handled ${req.url}`);
    });
  });
  await new Promise<void>((r) => admin.listen(15000, '127.0.0.1', r));
  try {
    const ok = await run('pilot-agent', ['request', 'POST', '/logging?level=debug', 'payload']);
    assert.equal(ok.code, 0, ok.stderr);
    assert.equal(ok.stdout, 'handled /logging?level=debug');
    assert.deepEqual(seen, ['POST /logging?level=debug payload']);
    const fail = await run('pilot-agent', ['request', 'GET', '/fail']);
    assert.equal(fail.code, 1);
    assert.match(fail.stderr, /returned HTTP 500/);
  } finally {
    admin.close();
  }
  const refused = await run('pilot-agent', ['request', 'GET', '/ready']);
  assert.equal(refused.code, 1);
  assert.match(refused.stderr, /failed: connection refused/);
});
