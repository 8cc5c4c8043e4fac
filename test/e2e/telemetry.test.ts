// The Telemetry API's access logging through the local mesh's real programs: a mesh config
// provider, a namespace Telemetry for httpbin's inbound (SERVER) side, then one turning sleep's
// outbound (CLIENT) side off, then both deleted, each applied to the running sidecars from the
// config directory. The mesh config's accessLogFile applies wherever no Telemetry configures a side.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePorts, startLocalMesh } from '../../samples/local-mesh.js';
import { get } from '../helpers/http.js';
import { eventually } from '../helpers/proc.js';

const lines = (file: string): string[] => (existsSync(file) ? readFileSync(file, 'utf8').split('\n').filter((l) => l !== '') : []);

test('Telemetry accessLogging: per side and per namespace on running sidecars, over the mesh config file', { timeout: 150_000 }, async (t) => {
  const stateDir = mkdtempSync(join(tmpdir(), 'mesh-telemetry-'));
  const serverLog = join(stateDir, 'server.json.log');
  const meshConfig = `extensionProviders:\n- name: server-json\n  envoyFileAccessLog:\n    path: ${JSON.stringify(serverLog)}\n    logFormat: { labels: { id: "%REQ(X-REQUEST-ID)%", code: "%RESPONSE_CODE%", cluster: "%UPSTREAM_CLUSTER_RAW%" } }\n`;
  const mesh = await startLocalMesh({ stateDir, secure: true, client: true, ports: await freePorts(), output: 'pipe', accessLog: true, meshConfig });
  t.after(() => mesh.stop());
  const file = mesh.accessLogFile!;
  const host = 'httpbin.default.svc.cluster.local';
  let n = 0;
  const logged = (id: string) => ({ id, mesh: lines(file).filter((l) => l.includes(`"${id}"`)), server: lines(serverLog).filter((l) => l.includes(`"${id}"`)) });
  type Logged = ReturnType<typeof logged>;
  /**
   * Requests, each with an id of its own, until one is logged as `expect` says. The proxies flush
   * their files within a second; `settleMs` first waits past that where a line must stay absent.
   */
  const until = (expect: (l: Logged) => void, settleMs = 0) =>
    eventually(async () => {
      const id = `rid-${++n}`;
      assert.equal((await get(false, mesh.ports.service, '/status/200', { host, 'x-request-id': id })).status, 200);
      await new Promise((r) => setTimeout(r, settleMs));
      await eventually(() => expect(logged(id)), 3_000);
    }, 40_000);
  await until((p) => assert.equal(p.mesh.length, 2, 'before any Telemetry both sidecars log to accessLogFile'));

  const inbound = join(mesh.configDir, 'telemetry-default.yaml');
  writeFileSync(inbound, `apiVersion: telemetry.mesh.io/v1\nkind: Telemetry\nmetadata: { name: inbound-json, namespace: default }\nspec:\n  accessLogging:\n  - providers: [{ name: server-json }]\n    match: { mode: SERVER }\n    filter: { expression: "response.code >= 400" }\n`);
  await until((p) => {
    assert.equal(p.mesh.length, 1, `only sleep's outbound line stays in accessLogFile: ${p.mesh.join('\n')}`);
    assert.match(p.mesh[0]!, / outbound\|/);
    assert.equal(p.server.length, 1, "httpbin's inbound line goes to the provider's file");
    assert.deepEqual(JSON.parse(p.server[0]!), { id: p.id, code: 200, cluster: `inbound|${mesh.ports.inbound}||` }, 'in the provider JSON format, a 200 included (the filter is not applied)');
  });
  assert.match(mesh.output(), /Telemetry\/default\/inbound-json: spec\.accessLogging\[0\]\.filter\.expression is not effective/, 'pilot-discovery says the filter is not applied');

  const quiet = join(mesh.configDir, 'telemetry-sleep.yaml');
  writeFileSync(quiet, `apiVersion: telemetry.mesh.io/v1\nkind: Telemetry\nmetadata: { name: quiet, namespace: sleep }\nspec:\n  accessLogging:\n  - providers: [{ name: server-json }]\n    disabled: true\n`);
  await until((p) => {
    assert.equal(p.server.length, 1, 'httpbin keeps logging its side');
    assert.deepEqual(p.mesh, [], "sleep's side is explicitly off: not even accessLogFile");
  }, 2_500);

  rmSync(inbound);
  rmSync(quiet);
  await until((p) => {
    assert.equal(p.mesh.length, 2, 'without Telemetries, accessLogFile again for both');
    assert.deepEqual(p.server, []);
  });
});
