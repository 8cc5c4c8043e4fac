// The introspection facility's JSON API on a real HTTP server on loopback: every topic answers,
// a scope's level changes at run time and the scope's logger follows, and bad input is a 400 (404
// for an unknown scope) whose message names the scope and the value.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { configureLogging, registerScopes, scope } from '../../src/common/log.js';
import { programRegistry, counter } from '../../src/common/metrics.js';
import { CtrlzServer, ctrlzListenAddress } from '../../src/debug/ctrlz/server.js';

const logFile = join(mkdtempSync(join(tmpdir(), 'ctrlz-')), 'out.log');
registerScopes(['ads', 'model']);
configureLogging({ asJson: false, caller: [], outputLevel: 'default:info', stacktraceLevel: 'default:none', targets: [logFile] });

async function withCtrlz(fn: (base: string, server: CtrlzServer) => Promise<void>, proxies = true): Promise<void> {
  const server = new CtrlzServer({
    component: 'pilot-discovery',
    address: '127.0.0.1',
    port: 0,
    argv: ['pilot-discovery', 'discovery', '--ctrlz_port', '0'],
    flags: [{ name: 'ctrlz_port', value: '0', default: '9876', explicit: true, effective: true }],
    settings: () => [{ name: 'PILOT_DEBOUNCE_AFTER', value: '100ms' }],
    metrics: programRegistry('discovery'),
    ...(proxies ? { proxies: () => [{ proxyId: 'sidecar~10.0.0.1~a.default~default.svc.cluster.local', connectionId: 'c1', peer: '127.0.0.1:5000', protocol: 'sotw', connectedAt: '2026-01-01T00:00:00.000Z', types: [{ type: 'lds', state: 'SYNCED' }] }] } : {}),
  });
  assert.equal(await server.start(), true);
  try {
    await fn(`http://${server.address}`, server);
  } finally {
    await server.close();
  }
}

async function put(url: string, body: string): Promise<{ status: number; json: Record<string, unknown> }> {
  const res = await fetch(url, { method: 'PUT', body, headers: { 'content-type': 'application/json' } });
  return { status: res.status, json: (await res.json()) as Record<string, unknown> };
}

test('every topic of the index answers JSON; the page and its assets are served', async () => {
  await withCtrlz(async (base) => {
    const index = (await (await fetch(`${base}/api/v1`)).json()) as { component: string; topics: Array<{ path: string }> };
    assert.equal(index.component, 'pilot-discovery');
    assert.deepEqual(index.topics.map((t) => t.path), ['/api/v1/process', '/api/v1/version', '/api/v1/args', '/api/v1/env', '/api/v1/scopes', '/api/v1/metrics', '/api/v1/proxies']);
    for (const t of index.topics) {
      const res = await fetch(base + t.path);
      assert.equal(res.status, 200, t.path);
      assert.match(res.headers.get('content-type') ?? '', /application\/json/);
    }
    const proc = (await (await fetch(`${base}/api/v1/process`)).json()) as { pid: number; memory: { rssBytes: number }; activeResources: Record<string, number> };
    assert.equal(proc.pid, process.pid);
    assert.ok(proc.memory.rssBytes > 0);
    assert.ok((proc.activeResources.TCPServerWrap ?? 0) >= 1, 'the ctrlz listener itself is an active handle');
    const args = (await (await fetch(`${base}/api/v1/args`)).json()) as { argv: string[] };
    assert.deepEqual(args.argv, ['pilot-discovery', 'discovery', '--ctrlz_port', '0']);
    const proxies = (await (await fetch(`${base}/api/v1/proxies`)).json()) as Array<{ proxyId: string }>;
    assert.equal(proxies[0]!.proxyId, 'sidecar~10.0.0.1~a.default~default.svc.cluster.local');
    const page = await fetch(`${base}/`);
    assert.match(await page.text(), /<script src="\/ctrlz.js">/);
    assert.match(await (await fetch(`${base}/ctrlz.js`)).text(), /\/api\/v1/);
    assert.equal((await fetch(`${base}/nope`)).status, 404);
  });
});

test('metrics carry current values', async () => {
  counter('pilot_total_xds_rejects').inc({ type: 'cds' }, 3);
  await withCtrlz(async (base) => {
    const metrics = (await (await fetch(`${base}/api/v1/metrics`)).json()) as Array<{ name: string; values: Array<{ labels: Record<string, string>; value: number }> }>;
    const rejects = metrics.find((m) => m.name === 'pilot_total_xds_rejects');
    assert.ok(rejects?.values.some((v) => v.labels.type === 'cds' && v.value >= 3));
  });
});

test('the agent has no proxies topic', async () => {
  await withCtrlz(async (base) => {
    const index = (await (await fetch(`${base}/api/v1`)).json()) as { topics: Array<{ path: string }> };
    assert.ok(!index.topics.some((t) => t.path === '/api/v1/proxies'));
    assert.equal((await fetch(`${base}/api/v1/proxies`)).status, 404);
  }, false);
});

test('PUT a scope changes its level at run time: the scope logs debug lines from then on', async () => {
  await withCtrlz(async (base) => {
    scope('model').debug('before the change');
    const r = await put(`${base}/api/v1/scopes/model`, '{"outputLevel":"debug","logCallers":true}');
    assert.equal(r.status, 200);
    assert.deepEqual(r.json, { name: 'model', outputLevel: 'debug', stackTraceLevel: 'none', logCallers: true });
    scope('model').debug('after the change');
    const log = readFileSync(logFile, 'utf8');
    assert.doesNotMatch(log, /before the change/);
    assert.match(log, /\tdebug\tmodel\t[^\t]+:\d+\tafter the change/);
    assert.match(log, /introspection: scope model set to output debug/);
    const listed = (await (await fetch(`${base}/api/v1/scopes`)).json()) as Array<{ name: string; outputLevel: string }>;
    assert.equal(listed.find((s) => s.name === 'model')?.outputLevel, 'debug');
    assert.equal(((await (await fetch(`${base}/api/v1/scopes/model`)).json()) as { outputLevel: string }).outputLevel, 'debug');
    await put(`${base}/api/v1/scopes/model`, '{"outputLevel":"info","logCallers":false}');
  });
});

test('bad input: 400 naming the scope and the level or field; unknown scope 404; nothing changes', async () => {
  await withCtrlz(async (base) => {
    const cases: Array<[string, string, number, RegExp]> = [
      ['ads', '{"outputLevel":"loud"}', 400, /scope "ads": invalid outputLevel "loud" \(expected one of debug, info, warn, error, fatal, none\)/],
      ['ads', '{"stackTraceLevel":"DEBUG"}', 400, /scope "ads": invalid stackTraceLevel "DEBUG"/],
      ['ads', '{"outputLevel":"debug","colour":"red"}', 400, /scope "ads": unknown field "colour"/],
      ['ads', '{"logCallers":"yes"}', 400, /scope "ads": logCallers must be true or false/],
      ['ads', 'outputLevel=debug', 400, /scope "ads": the body is not valid JSON/],
      ['ads', '["debug"]', 400, /scope "ads": the body must be a JSON object/],
      ['ads', '{"name":"model","outputLevel":"debug"}', 400, /scope "ads": the body names scope "model"/],
      ['nosuch', '{"outputLevel":"debug"}', 404, /unknown scope "nosuch" \(known scopes: .*ads/],
    ];
    for (const [name, body, status, message] of cases) {
      const r = await put(`${base}/api/v1/scopes/${name}`, body);
      assert.equal(r.status, status, body);
      assert.match(String(r.json.error), message);
    }
    assert.equal(scope('ads').enabled('debug'), false, 'a rejected request changes nothing');
    const post = await fetch(`${base}/api/v1/scopes/ads`, { method: 'POST', body: '{}' });
    assert.equal(post.status, 405);
    assert.equal((await fetch(`${base}/api/v1/process`, { method: 'DELETE' })).status, 405);
  });
});

test('a port it cannot bind is a warning, and the facility stays off', async () => {
  const blocker = createServer();
  await new Promise<void>((r) => blocker.listen(0, '127.0.0.1', r));
  const port = (blocker.address() as { port: number }).port;
  const ctrlz = new CtrlzServer({ component: 'pilot-agent', address: '127.0.0.1', port, argv: [], flags: [], settings: () => [], metrics: programRegistry('agent') });
  try {
    assert.equal(await ctrlz.start(), false);
    assert.match(readFileSync(logFile, 'utf8'), new RegExp(`warn\\tdefault\\tunable to start the introspection facility \\(ControlZ\\): failed to listen on 127.0.0.1:${port}: address already in use`));
  } finally {
    await ctrlz.close();
    blocker.close();
  }
});

test('listen addresses: * is every address, IPv6 literals get brackets', () => {
  assert.equal(ctrlzListenAddress('*', 9876), ':9876');
  assert.equal(ctrlzListenAddress('localhost', 9876), 'localhost:9876');
  assert.equal(ctrlzListenAddress('::1', 9876), '[::1]:9876');
});
