// `pilot-agent proxy` serves the introspection facility too: the real agent process (its proxy
// pointed at an unreachable discovery server) answers the API as pilot-agent, without the
// discovery-only proxies topic, and a scope changed through it is confirmed in the agent's log.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Running, start } from '../helpers/proc.js';

test('pilot-agent proxy: the introspection API on --ctrlz_address:--ctrlz_port', { timeout: 60_000 }, async () => {
  const dir = mkdtempSync(join(tmpdir(), 'ctrlz-agent-'));
  const proxyConfig = { discoveryAddress: '127.0.0.1:1', proxyAdminPort: 0, statusPort: 0, metricsPort: 0, xdsProxyPort: 0, interceptionMode: 'NONE', configPath: join(dir, 'proxy'), terminationDrainDuration: '1s' };
  const a = new Running(
    start('pilot-agent', ['proxy', '--ctrlz_address', '127.0.0.1', '--ctrlz_port', '0'], {
      cwd: dir,
      env: { POD_NAME: 'app-1', POD_NAMESPACE: 'default', INSTANCE_IP: '127.0.0.1', PROXY_CONFIG: JSON.stringify(proxyConfig) },
    }),
  );
  try {
    const base = (await a.waitFor(/introspection facility \(ControlZ\) listening on (http:\S+)/, 30_000))[1]!.replace(/\/$/, '');
    const index = (await (await fetch(`${base}/api/v1`)).json()) as { component: string; topics: Array<{ path: string }> };
    assert.equal(index.component, 'pilot-agent');
    assert.ok(!index.topics.some((t) => t.path === '/api/v1/proxies'));
    const args = (await (await fetch(`${base}/api/v1/args`)).json()) as { flags: Array<{ name: string; value: string; explicit: boolean }> };
    assert.deepEqual(args.flags.find((f) => f.name === 'ctrlz_port'), { name: 'ctrlz_port', value: '0', default: '9876', explicit: true, effective: true });
    const scopes = (await (await fetch(`${base}/api/v1/scopes`)).json()) as Array<{ name: string }>;
    assert.ok(scopes.some((s) => s.name === 'xdsproxy'), 'the agent scopes');
    const r = await fetch(`${base}/api/v1/scopes/xdsproxy`, { method: 'PUT', body: '{"outputLevel":"debug"}' });
    assert.equal(r.status, 200);
    await a.waitFor(/warn\tdefault\tintrospection: scope xdsproxy set to output debug/);
  } finally {
    await a.stop();
  }
});
