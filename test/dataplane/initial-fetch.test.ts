// Envoy's initial_fetch_timeout in mesh-proxy, against a real ADS server that never sends some
// types: the bootstrap's lds_config / cds_config and each HCM's RDS config source say how long the
// proxy waits for the first response before it proceeds (0 = without limit). Readiness and listener
// warming follow it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadBootstrap } from '../../src/dataplane/bootstrap.js';
import { MeshProxy } from '../../src/dataplane/proxy.js';
import { TypeUrl } from '../../src/envoy/types.js';
import type { ResourceGenerator, XdsResource } from '../../src/xds/generator.js';
import { XdsServer } from '../../src/xds/server.js';
import { eventually } from '../helpers/proc.js';
import { bootstrapJson, FixtureAds, hcmChain, listener, staticCluster } from './xds-fixtures.js';

function get(port: number, path: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path }, (res) => {
      let body = '';
      res.on('data', (d: Buffer) => (body += d.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

/** A proxy whose bootstrap points at `xdsPort`, with `fetch` merged into lds_config / cds_config. */
async function startProxy(t: { after(fn: () => Promise<void> | void): void }, xdsPort: number, fetch: { lds?: string; cds?: string } = {}): Promise<MeshProxy> {
  const dir = mkdtempSync(join(tmpdir(), 'mesh-fetch-'));
  const json = bootstrapJson(xdsPort, 0) as { dynamic_resources: Record<string, Record<string, unknown>> };
  if (fetch.lds) json.dynamic_resources.lds_config!.initial_fetch_timeout = fetch.lds;
  if (fetch.cds) json.dynamic_resources.cds_config!.initial_fetch_timeout = fetch.cds;
  const file = join(dir, 'bootstrap.json');
  writeFileSync(file, JSON.stringify(json));
  const proxy = new MeshProxy({ bootstrap: loadBootstrap({ path: file }), drainTimeMs: 0, initialBackoffMs: 50 });
  await proxy.start();
  t.after(async () => {
    await proxy.stop(0);
    rmSync(dir, { recursive: true, force: true });
  });
  return proxy;
}

const ready = (proxy: MeshProxy) => get(proxy.adminPort, '/ready');

/** A discovery server that serves clusters (and whatever `listeners` says) but never a route configuration. */
async function routelessDiscovery(t: { after(fn: () => void): void }, rdsInitialFetchTimeout?: { seconds: bigint; nanos?: number }): Promise<FixtureAds> {
  const ads = await new FixtureAds().listen();
  t.after(() => ads.close());
  ads.set(TypeUrl.Cluster, [staticCluster('app', [9])]);
  ads.set(TypeUrl.Listener, [listener('http', 0, [hcmChain({ rds: 'never-sent', ...(rdsInitialFetchTimeout ? { rdsInitialFetchTimeout } : {}) })])]);
  return ads;
}

test('bootstrap: initial_fetch_timeout of lds_config / cds_config is read; unset is Envoy\'s 15s, 0s means no limit', () => {
  const dir = mkdtempSync(join(tmpdir(), 'mesh-fetch-'));
  try {
    const json = bootstrapJson(1, 0) as { dynamic_resources: Record<string, Record<string, unknown>> };
    json.dynamic_resources.lds_config!.initial_fetch_timeout = '0s';
    json.dynamic_resources.cds_config!.initial_fetch_timeout = '2.5s';
    writeFileSync(join(dir, 'b.json'), JSON.stringify(json));
    assert.deepEqual(loadBootstrap({ path: join(dir, 'b.json') }).initialFetchTimeoutMs, { lds: 0, cds: 2500 });
    writeFileSync(join(dir, 'd.json'), JSON.stringify(bootstrapJson(1, 0)));
    assert.deepEqual(loadBootstrap({ path: join(dir, 'd.json') }).initialFetchTimeoutMs, { lds: 15_000, cds: 15_000 });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('routes never sent, RDS initial_fetch_timeout 0.2s: the listener stops warming, serves (404: no route table) and the proxy turns ready', async (t) => {
  const ads = await routelessDiscovery(t, { seconds: 0n, nanos: 200_000_000 });
  const proxy = await startProxy(t, ads.port);
  const r = await eventually(async () => {
    const res = await ready(proxy);
    assert.equal(res.status, 200, `ready: ${res.body}`);
    return res;
  }, 10_000);
  assert.equal(r.body, 'LIVE\n');
  const port = proxy.listeners.info().find((l) => l.name === 'http')?.bound?.port;
  assert.ok(port, 'the listener is bound');
  assert.equal((await get(port, '/')).status, 404, 'served without its route table, as Envoy does after the timeout');
});

test('routes never sent, RDS initial_fetch_timeout 0s: the listener keeps warming and the proxy stays unready, until the routes come', async (t) => {
  const ads = await routelessDiscovery(t, { seconds: 0n });
  const proxy = await startProxy(t, ads.port);
  const stats = async () => (await get(proxy.adminPort, '/stats')).body;
  await eventually(async () => assert.match(await stats(), /listener_manager\.lds\.update_success: 1/), 10_000);
  const r = await ready(proxy);
  assert.equal(r.status, 503);
  assert.match(r.body, /listeners warming: waiting for route configuration never-sent/);
});

test('listeners never sent: lds_config initial_fetch_timeout 0.2s lets the proxy turn ready with its clusters; 0s keeps it waiting', async (t) => {
  // A server that answers clusters and leaves every listener request unanswered.
  let release: (() => void) | undefined;
  const never = new Promise<readonly XdsResource[]>((resolve) => (release = () => resolve([])));
  t.after(() => release?.());
  const generators = new Map<string, ResourceGenerator>([
    [TypeUrl.Cluster, { generate: () => [{ name: 'app', resource: staticCluster('app', [9]).any }] }],
    [TypeUrl.Listener, { generate: () => never }],
  ]);
  const server = new XdsServer({ generators, sendTimeoutMs: 0 });
  const port = await server.listen('127.0.0.1:0');
  t.after(() => server.close());

  // The unlimited one starts first, so it has waited at least as long when it is checked.
  const waiting = await startProxy(t, port, { lds: '0s', cds: '0s' });
  const limited = await startProxy(t, port, { lds: '0.2s', cds: '0s' });
  await eventually(async () => {
    const res = await ready(limited);
    assert.equal(res.status, 200, `ready: ${res.body}`);
  }, 10_000);
  assert.ok(limited.clusters.get('app'), 'its clusters are applied');
  await eventually(() => assert.ok(waiting.clusters.get('app'), 'the other proxy has its clusters too'));
  const res = await ready(waiting);
  assert.equal(res.status, 503);
  assert.match(res.body, /initial LDS not applied yet/);
});
