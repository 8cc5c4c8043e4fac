// VirtualService `mirror` through the local mesh's real sidecars with STRICT mTLS: the sleep
// sidecar's shadow copy goes through the mirror cluster like any request, inside mesh mTLS, so
// httpbin's sidecar (which refuses plaintext) takes both the request and its shadow.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePorts, startLocalMesh } from '../../samples/local-mesh.js';
import { get } from '../helpers/http.js';
import { eventually, statValue } from '../helpers/proc.js';

const STRICT = 'apiVersion: security.mesh.io/v1\nkind: PeerAuthentication\nmetadata: {namespace: default, name: strict}\nspec: {mtls: {mode: STRICT}}\n';
const MIRROR = `apiVersion: networking.mesh.io/v1
kind: VirtualService
metadata: {namespace: default, name: httpbin}
spec:
  hosts: [httpbin]
  http:
  - mirror: {host: httpbin}
    route:
    - destination: {host: httpbin}
    headers: {request: {set: {x-mirrored: "yes"}}}
`;

test('mirror under STRICT mTLS: the shadow copy reaches the mirror over mesh mTLS', { timeout: 90_000 }, async (t) => {
  const mesh = await startLocalMesh({ stateDir: mkdtempSync(join(tmpdir(), 'mesh-mirror-')), secure: true, client: true, ports: await freePorts(), output: 'pipe' });
  t.after(() => mesh.stop());
  const call = () => get(false, mesh.ports.service, '/headers', { host: 'httpbin.default.svc.cluster.local' });
  const inboundRequests = async () => statValue(await (await fetch(`http://127.0.0.1:${mesh.ports.admin}/stats`)).text(), `http.inbound_0.0.0.0_${mesh.ports.inbound}.downstream_rq_total`);
  await eventually(async () => assert.equal((await call()).status, 200), 30_000);

  writeFileSync(join(mesh.configDir, 'strict.yaml'), STRICT);
  writeFileSync(join(mesh.configDir, 'httpbin-vs.yaml'), MIRROR);
  await eventually(async () => {
    const r = await call();
    assert.equal(r.status, 200);
    assert.equal((JSON.parse(r.body) as { headers: Record<string, string> }).headers['X-Mirrored'], 'yes', `the VirtualService is not in effect yet\n${mesh.output().slice(-2000)}`);
  }, 30_000);
  // Each request from now on is counted twice at httpbin's sidecar: its own and its shadow's.
  const before = await inboundRequests();
  for (let i = 0; i < 5; i++) assert.equal((await call()).status, 200);
  await eventually(async () => assert.equal((await inboundRequests()) - before, 10, 'httpbin\'s sidecar did not take every shadow copy'), 10_000);
});
