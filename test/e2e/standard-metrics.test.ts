// The standard metrics through the local mesh's real programs (pilot-discovery, two agents with
// their mesh-proxies, mesh mTLS between them): with no Telemetry at all, both sidecars of a request
// from sleep to httpbin record istio_requests_total with the other's workload, the service and the
// principals, httpbin's on its agent's merged Prometheus endpoint; then samples/telemetry/metrics-tags.yaml,
// copied into the config directory, adds request_method and removes response_flags on both, and a
// Telemetry turning httpbin's side off leaves its series where they were; pilot-discovery names
// what it cannot apply.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { copyFileSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePorts, startLocalMesh } from '../../samples/local-mesh.js';
import { get } from '../helpers/http.js';
import { eventually } from '../helpers/proc.js';

const HOST = 'httpbin.default.svc.cluster.local';

/** The istio_requests_total samples of a scrape: their labels and value. */
function requests(text: string): { labels: Record<string, string>; value: number }[] {
  return text
    .split('\n')
    .filter((l) => l.startsWith('istio_requests_total{'))
    .map((l) => ({
      labels: Object.fromEntries([...l.slice(0, l.lastIndexOf('}')).matchAll(/([a-zA-Z_]+)="((?:[^"\\]|\\.)*)"/g)].map((m) => [m[1]!, m[2]!])),
      value: Number(l.slice(l.lastIndexOf(' ') + 1)),
    }));
}

test('standard metrics: both sidecars of the local mesh record each request; a Telemetry changes their labels on the running proxies', { timeout: 150_000 }, async (t) => {
  const stateDir = mkdtempSync(join(tmpdir(), 'mesh-metrics-'));
  const mesh = await startLocalMesh({ stateDir, secure: true, client: true, ports: await freePorts(), output: 'pipe' });
  t.after(() => mesh.stop());
  const scrape = async (url: string) => requests(await (await fetch(url)).text());
  const httpbin = `http://127.0.0.1:${mesh.ports.metrics}/stats/prometheus`;
  const sleep = `http://127.0.0.1:${mesh.ports.clientAdmin}/stats/prometheus`;
  const call = async (path: string) => assert.equal((await get(false, mesh.ports.service, path, { host: HOST })).status, Number(path.split('/').pop()));

  await call('/status/200');
  await call('/status/418');
  await eventually(async () => {
    const server = (await scrape(httpbin)).filter((s) => s.labels['source_workload'] === 'sleep');
    const ok = server.find((s) => s.labels['response_code'] === '200');
    assert.ok(ok, `httpbin's agent serves the series: ${JSON.stringify(server)}`);
    assert.equal(ok.value, 1);
    assert.deepEqual(
      [ok.labels['reporter'], ok.labels['source_workload_namespace'], ok.labels['source_principal'], ok.labels['destination_workload'], ok.labels['destination_principal'], ok.labels['destination_service'], ok.labels['destination_service_name'], ok.labels['connection_security_policy'], ok.labels['source_version']],
      // The Sidecar's ingress port (15080) is no target port of httpbin's service (8000): as in the
      // Go mesh (findOrCreateService), its inbound cluster names no service, so the canonical one stands in.
      ['destination', 'sleep', 'spiffe://cluster.local/ns/sleep/sa/sleep', 'httpbin', 'spiffe://cluster.local/ns/default/sa/httpbin', 'httpbin', 'httpbin', 'mutual_tls', 'v1'],
    );
    assert.equal(server.find((s) => s.labels['response_code'] === '418')?.value, 1);
    const client = (await scrape(sleep)).find((s) => s.labels['destination_workload'] === 'httpbin' && s.labels['response_code'] === '200');
    assert.ok(client, "sleep's sidecar reports its side");
    assert.deepEqual([client.labels['reporter'], client.labels['source_workload'], client.labels['destination_service'], client.labels['destination_principal'], client.labels['connection_security_policy']], ['source', 'sleep', HOST, 'spiffe://cluster.local/ns/default/sa/httpbin', 'unknown']);
  }, 20_000);

  copyFileSync('samples/telemetry/metrics-tags.yaml', join(mesh.configDir, 'metrics-tags.yaml'));
  await eventually(async () => {
    await call('/status/200');
    const both = [...(await scrape(httpbin)), ...(await scrape(sleep))].filter((s) => s.labels['request_method'] === 'GET');
    assert.deepEqual(both.map((s) => s.labels['reporter']).sort(), ['destination', 'source'], 'the new label, on both sides');
    // The family keeps earlier series that have the label: an exposition gives each series every
    // label name of its family, "" where it has none, which Prometheus reads as no label.
    assert.ok(both.every((s) => (s.labels['response_flags'] ?? '') === ''), 'response_flags removed');
  }, 40_000);

  // What mesh-proxy cannot evaluate, pilot-discovery names when it reads the resource.
  writeFileSync(join(mesh.configDir, 'metrics-cel.yaml'), `apiVersion: telemetry.mesh.io/v1\nkind: Telemetry\nmetadata: { name: cel, namespace: other }\nspec:\n  metrics:\n  - overrides:\n    - tagOverrides:\n        long_path: { value: "size(request.path) > 10" }\n`);
  await eventually(() => assert.match(mesh.output(), /Telemetry\/other\/cel: spec\.metrics\[0\]\.overrides\[0\]\.tagOverrides\.long_path\.value: mesh-proxy cannot evaluate "size\(request\.path\) > 10" \(.+\): the tag is recorded as "unknown"/), 15_000);

  // httpbin's side off: its counts stop moving, sleep's go on.
  writeFileSync(join(mesh.configDir, 'metrics-off.yaml'), `apiVersion: telemetry.mesh.io/v1\nkind: Telemetry\nmetadata: { name: off, namespace: default }\nspec:\n  metrics:\n  - overrides:\n    - match: { mode: SERVER }\n      disabled: true\n`);
  const total = async (url: string) => (await scrape(url)).reduce((n, s) => n + s.value, 0);
  await eventually(async () => {
    const before = await total(httpbin);
    const clientBefore = await total(sleep);
    await call('/status/200');
    await eventually(async () => assert.equal(await total(sleep), clientBefore + 1), 5_000);
    assert.equal(await total(httpbin), before, "httpbin's stats filter is gone");
  }, 40_000);
});
