// A VirtualService host that names no service, through the local mesh's real sidecar: the sleep
// workload's outbound listener of httpbin's port routes `Host: httpbin.example.org` by the
// VirtualService that lists it beside httpbin, as the Go mesh's sidecars do; a host no
// VirtualService lists still falls to the catch-all.
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
  hosts: [httpbin, httpbin.example.org]
  http:
  - headers:
      request:
        set: {x-routed-by: virtual-service}
    route:
    - destination: {host: httpbin}
`;

/** The request headers httpbin echoed, names lower-cased. */
function echoed(body: string): Record<string, string> {
  return Object.fromEntries(Object.entries((JSON.parse(body) as { headers: Record<string, string> }).headers).map(([k, v]) => [k.toLowerCase(), v]));
}

test('a VirtualService host without a service: the client sidecar routes it by that VirtualService', { timeout: 60_000 }, async (t) => {
  const mesh = await startLocalMesh({ stateDir: mkdtempSync(join(tmpdir(), 'mesh-vs-hosts-')), client: true, ports: await freePorts(), output: 'pipe' });
  t.after(() => mesh.stop());
  const call = (host: string) => get(false, mesh.ports.service, '/headers', { host });
  await eventually(async () => assert.equal((await call('httpbin.default.svc.cluster.local')).status, 200), 30_000);
  const before = await call('httpbin.example.org');
  assert.notEqual(before.status, 200, `without the VirtualService the host is nobody's: ${before.body}`);

  writeFileSync(join(mesh.configDir, 'httpbin-vs.yaml'), VIRTUAL_SERVICE);
  const routed = await eventually(async () => {
    const r = await call('httpbin.example.org');
    assert.equal(r.status, 200, `${r.status} ${r.body}\n${mesh.output()}`);
    return r;
  }, 20_000);
  assert.equal(echoed(routed.body)['x-routed-by'], 'virtual-service');
  assert.equal(echoed(routed.body)['host'], 'httpbin.example.org');
  // The service's own names take the same routes; a host no VirtualService lists does not.
  assert.equal(echoed((await call('httpbin.default.svc.cluster.local')).body)['x-routed-by'], 'virtual-service');
  assert.notEqual((await call('other.example.org')).status, 200);
});
