// ENABLE_ADMIN_ENDPOINTS on the real pilot-discovery: as in the Go mesh, it adds the one debug
// endpoint that changes state, /debug/force_disconnect, which ends a proxy's xDS streams so the proxy
// reconnects. Without it the path is unknown (404) and /debug does not list it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { copyFileSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AdsClient } from '../../src/envoy/ads-client.js';
import { discoveryArgs, eventually, REPO_ROOT, Running, start } from '../helpers/proc.js';

const PROXY_ID = 'sidecar~127.0.0.1~httpbin-1.default~default.svc.cluster.local';

async function withDiscovery(env: Record<string, string>, body: (http: string, ads: AdsClient) => Promise<void>): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'mesh-admin-'));
  copyFileSync(join(REPO_ROOT, 'samples', 'config', 'workloads.yaml'), join(dir, 'workloads.yaml'));
  const d = new Running(start('pilot-discovery', discoveryArgs(dir), { env }));
  let ads: AdsClient | undefined;
  try {
    const grpc = (await d.waitFor(/gRPC xDS server listening on (\S+)/, 30_000))[1]!;
    const http = (await d.waitFor(/http server listening on (\S+)/, 30_000))[1]!;
    await d.waitFor(/discovery server ready/, 30_000);
    ads = new AdsClient({ address: grpc, node: { id: PROXY_ID, metadata: { NAMESPACE: 'default', LABELS: { app: 'httpbin' }, INTERCEPTION_MODE: 'NONE' } }, onUpdate: () => undefined, initialBackoffMs: 50 });
    ads.start();
    await body(http, ads);
  } finally {
    ads?.close();
    await d.stop();
  }
}

async function connectionIds(http: string): Promise<string[]> {
  const list = (await (await fetch(`http://${http}/debug/connections`)).json()) as { proxyId: string; connectionId: string }[];
  return list.filter((c) => c.proxyId === PROXY_ID).map((c) => c.connectionId);
}

test('ENABLE_ADMIN_ENDPOINTS=true: /debug/force_disconnect ends the proxy\'s stream and the proxy reconnects on a new one', async () => {
  await withDiscovery({ ENABLE_ADMIN_ENDPOINTS: 'true' }, async (http, ads) => {
    const [first] = await eventually(async () => {
      const ids = await connectionIds(http);
      assert.equal(ids.length, 1, 'the proxy is connected');
      return ids;
    }, 15_000);
    const listed = (await (await fetch(`http://${http}/debug`)).json()) as unknown;
    assert.match(JSON.stringify(listed), /\/debug\/force_disconnect/);
    const disconnected = new Promise<string>((resolve) => ads.once('disconnected', (why) => resolve(why)));
    const res = await fetch(`http://${http}/debug/force_disconnect?proxyID=${encodeURIComponent(PROXY_ID)}`);
    assert.equal(res.status, 200);
    assert.deepEqual(await res.json(), { proxyID: PROXY_ID, streamsEnded: 1 });
    assert.match(await disconnected, /force_disconnect/, 'the proxy sees why its stream ended');
    await eventually(async () => {
      const ids = await connectionIds(http);
      assert.equal(ids.length, 1, 'the proxy reconnected');
      assert.notEqual(ids[0], first, 'on a new stream');
    }, 15_000);
    const unknown = await fetch(`http://${http}/debug/force_disconnect?proxyID=nobody`);
    assert.equal(unknown.status, 400);
    assert.match(((await unknown.json()) as { error: string }).error, /proxy "nobody" is not connected/);
  });
});

test('ENABLE_ADMIN_ENDPOINTS unset (the default, off): /debug/force_disconnect is not served and the proxy stays connected', async () => {
  await withDiscovery({}, async (http) => {
    const [first] = await eventually(async () => {
      const ids = await connectionIds(http);
      assert.equal(ids.length, 1, 'the proxy is connected');
      return ids;
    }, 15_000);
    const res = await fetch(`http://${http}/debug/force_disconnect?proxyID=${encodeURIComponent(PROXY_ID)}`);
    assert.equal(res.status, 404);
    const listed = (await (await fetch(`http://${http}/debug`)).json()) as unknown;
    assert.doesNotMatch(JSON.stringify(listed), /force_disconnect/);
    // Still served, the same stream: nothing was ended (checked after the request was answered).
    assert.deepEqual(await connectionIds(http), [first]);
  });
});
