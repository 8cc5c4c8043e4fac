// The Telemetry API's access logging through the local mesh's real programs: its `json-file`
// provider, samples/telemetry/inbound-json.yaml for httpbin's inbound (SERVER) side, then a
// Telemetry turning sleep's outbound (CLIENT) side off, then both deleted, each applied to the
// running sidecars from the config directory. The mesh config's accessLogFile applies wherever no
// Telemetry configures a side; pilot-discovery names what it does not apply.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { copyFileSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePorts, startLocalMesh } from '../../samples/local-mesh.js';
import { get } from '../helpers/http.js';
import { eventually } from '../helpers/proc.js';

const lines = (file: string): string[] => (existsSync(file) ? readFileSync(file, 'utf8').split('\n').filter((l) => l !== '') : []);

test('Telemetry accessLogging: per side and per namespace on running sidecars, over the mesh config file', { timeout: 150_000 }, async (t) => {
  const stateDir = mkdtempSync(join(tmpdir(), 'mesh-telemetry-'));
  const mesh = await startLocalMesh({ stateDir, secure: true, client: true, ports: await freePorts(), output: 'pipe', accessLog: true });
  const serverLog = mesh.jsonAccessLogFile!;
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

  const inbound = join(mesh.configDir, 'inbound-json.yaml');
  copyFileSync('samples/telemetry/inbound-json.yaml', inbound);
  await until((p) => {
    assert.equal(p.mesh.length, 1, `only sleep's outbound line stays in accessLogFile: ${p.mesh.join('\n')}`);
    assert.match(p.mesh[0]!, / outbound\|/);
    assert.equal(p.server.length, 1, "httpbin's inbound line goes to the provider's file");
    const line = JSON.parse(p.server[0]!) as Record<string, unknown>;
    assert.deepEqual([line['request_id'], line['response_code'], line['upstream_cluster'], line['method']], [p.id, 200, `inbound|${mesh.ports.inbound}||`, 'GET'], "the Go mesh's default JSON fields");
  });
  // What pilot-discovery does not apply, it names when it reads the resource.
  writeFileSync(join(mesh.configDir, 'telemetry-other.yaml'), `apiVersion: telemetry.mesh.io/v1\nkind: Telemetry\nmetadata: { name: errors-only, namespace: other }\nspec:\n  accessLogging:\n  - providers: [{ name: json-file }, { name: nowhere }]\n    filter: { expression: "response.code >= 400" }\n`);
  await eventually(() => {
    assert.match(mesh.output(), /Telemetry\/other\/errors-only: spec\.accessLogging\[0\]\.filter\.expression is not effective \(mesh-proxy has no CEL filters\): the logger logs every request/);
    assert.match(mesh.output(), /Telemetry\/other\/errors-only: spec\.accessLogging\[0\]\.providers\[1\]: no access log provider named "nowhere"/);
  }, 15_000);

  const quiet = join(mesh.configDir, 'telemetry-sleep.yaml');
  writeFileSync(quiet, `apiVersion: telemetry.mesh.io/v1\nkind: Telemetry\nmetadata: { name: quiet, namespace: sleep }\nspec:\n  accessLogging:\n  - providers: [{ name: json-file }]\n    disabled: true\n`);
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
