// Mesh config accessLogFile through the local mesh's real programs: pilot-discovery builds the
// Go mesh's file logger, both sidecars (sleep's outbound, httpbin's inbound over mesh mTLS) write
// one line per request to the shared file in the Go mesh's default format; then the discovery
// server restarts with accessLogEncoding JSON and a format of our own, and the running proxies
// switch to it (REQ_WITHOUT_QUERY included, through its formatter extension).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePorts, startLocalMesh } from '../../samples/local-mesh.js';
import { get } from '../helpers/http.js';
import { eventually } from '../helpers/proc.js';

const lines = (file: string): string[] => (existsSync(file) ? readFileSync(file, 'utf8').split('\n').filter((l) => l !== '') : []);

test('accessLogFile: both sidecars log each request in the Go mesh format; a JSON format applies to running proxies', { timeout: 120_000 }, async (t) => {
  const stateDir = mkdtempSync(join(tmpdir(), 'mesh-access-log-'));
  const mesh = await startLocalMesh({ stateDir, secure: true, client: true, ports: await freePorts(), output: 'pipe', accessLog: true });
  t.after(() => mesh.stop());
  const file = mesh.accessLogFile!;
  const p = mesh.ports;
  const host = 'httpbin.default.svc.cluster.local';
  await eventually(async () => assert.equal((await get(false, p.service, '/headers', { host })).status, 200), 30_000);
  const r = await get(false, p.service, '/status/418?probe=1', { host, 'user-agent': 'access-log-test', 'x-request-id': 'rid-418' });
  assert.equal(r.status, 418);

  await eventually(() => assert.equal(lines(file).filter((l) => l.includes('rid-418')).length, 2, `both sidecars logged the request:\n${lines(file).join('\n')}`), 15_000);
  const [a, b] = lines(file).filter((l) => l.includes('rid-418'));
  const outbound = [a, b].find((l) => l!.includes(' outbound|'))!;
  const inbound = [a, b].find((l) => l!.includes(' inbound|'))!;
  // [time] "METHOD PATH PROTOCOL" CODE FLAGS DETAILS TERMINATION "TRANSPORT" RX TX DURATION UPSTREAM-TIME "XFF" "UA" "ID" "AUTHORITY" "UPSTREAM" CLUSTER ...
  const go = (cluster: string) =>
    new RegExp(`^\\[\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\d\\.\\d{3}Z\\] "GET /status/418\\?probe=1 HTTP/1\\.1" 418 - via_upstream - "-" 0 \\d+ \\d+ \\d+ "[^"]+" "access-log-test" "rid-418" "${host.replaceAll('.', '\\.')}" "127\\.0\\.0\\.1:\\d+" ${cluster.replaceAll('|', '\\|').replaceAll('.', '\\.')} `);
  assert.match(outbound, go(`outbound|${p.service}||${host}`), 'the sleep sidecar: to the service cluster');
  assert.match(inbound, go(`inbound|${p.inbound}||`), "the httpbin sidecar: to the app's inbound cluster");
  assert.match(inbound, new RegExp(`"127\\.0\\.0\\.1:${p.app}" inbound`), 'the upstream host of the inbound line is the app');
  assert.match(inbound, / outbound_\.\d+_\._\.httpbin\.default\.svc\.cluster\.local /, 'the inbound line names the SNI the client sent (mesh mTLS)');

  // Another format: the discovery server restarts on a new mesh config; the proxies keep serving and take it.
  const meshFile = join(stateDir, 'mesh.yaml');
  const format = JSON.stringify({ code: '%RESPONSE_CODE%', path: '%REQ_WITHOUT_QUERY(:PATH)%', cluster: '%UPSTREAM_CLUSTER_RAW%', flags: '%RESPONSE_FLAGS%', id: '%REQ(X-REQUEST-ID)%' });
  await mesh.stopDiscovery();
  writeFileSync(meshFile, `accessLogFile: ${JSON.stringify(file)}\naccessLogEncoding: JSON\naccessLogFormat: '${format}'\n`);
  await mesh.startDiscovery();
  await eventually(async () => {
    await get(false, p.service, '/status/204?x=y', { host, 'x-request-id': 'rid-json' });
    // Until httpbin's agent has reported its health to the restarted server, its entry is no
    // endpoint (the server keeps no health across restarts): those requests are 503 UH, not these.
    const json = lines(file).filter((l) => l.includes('rid-json') && l.startsWith('{') && !l.includes('"code":503'));
    assert.ok(json.length >= 2, `JSON lines from both sidecars:\n${lines(file).slice(-6).join('\n')}`);
    const parsed = json.map((l) => JSON.parse(l) as { code: number; path: string; cluster: string; flags: string | null; id: string });
    assert.deepEqual(parsed[0], { ...parsed[0]!, code: 204, path: '/status/204', flags: '-', id: 'rid-json' }, 'typed code, the path without its query');
    assert.ok(parsed.some((x) => x.cluster.startsWith('inbound|')) && parsed.some((x) => x.cluster.startsWith('outbound|')));
  }, 45_000);
});
