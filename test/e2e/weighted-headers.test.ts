// A VirtualService's weighted destinations with their own `headers`, through the local mesh's real
// discovery server and sidecars: each request httpbin gets carries the header of the destination
// the sleep sidecar picked, the route's header beside it, and the response carries that
// destination's response header (as the Go mesh's weighted clusters do with Envoy).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePorts, startLocalMesh } from '../../samples/local-mesh.js';
import { get } from '../helpers/http.js';
import { eventually } from '../helpers/proc.js';

const VIRTUAL_SERVICE = `apiVersion: networking.mesh.io/v1
kind: VirtualService
metadata: {namespace: default, name: httpbin}
spec:
  hosts: [httpbin]
  http:
  - headers:
      request: {set: {x-route: weighted}}
    route:
    - destination: {host: httpbin}
      weight: 50
      headers:
        request: {set: {x-version: stable}}
        response: {set: {x-picked: stable}}
    - destination: {host: httpbin}
      weight: 50
      headers:
        request: {set: {x-version: canary}}
        response: {set: {x-picked: canary}}
`;

test('weighted destinations: each request carries its destination\'s headers, both ways', { timeout: 90_000 }, async (t) => {
  const mesh = await startLocalMesh({ stateDir: mkdtempSync(join(tmpdir(), 'mesh-weighted-')), client: true, ports: await freePorts(), output: 'pipe' });
  t.after(() => mesh.stop());
  const call = () => get(false, mesh.ports.service, '/headers', { host: 'httpbin.default.svc.cluster.local' });
  await eventually(async () => assert.equal((await call()).status, 200), 30_000);

  writeFileSync(join(mesh.configDir, 'httpbin-vs.yaml'), VIRTUAL_SERVICE);
  await eventually(async () => assert.ok((await call()).headers['x-picked'], `no x-picked yet\n${mesh.output()}`), 20_000);
  const picked = { stable: 0, canary: 0 };
  for (let i = 0; i < 30; i++) {
    const r = await call();
    const headers = Object.fromEntries(Object.entries((JSON.parse(r.body) as { headers: Record<string, string> }).headers).map(([k, v]) => [k.toLowerCase(), v]));
    const version = headers['x-version'] as 'stable' | 'canary';
    assert.equal(r.headers['x-picked'], version, 'the response header is the same destination\'s as the request header');
    assert.equal(headers['x-route'], 'weighted');
    picked[version]++;
  }
  assert.ok(picked.stable > 0 && picked.canary > 0, `both destinations picked: ${JSON.stringify(picked)}`);
});
