// DestinationRule connectionPool.http.h2UpgradePolicy through the local mesh's real sidecars: the
// sleep sidecar takes an HTTP/1.1 request for httpbin and, once the rule says UPGRADE, carries it
// to httpbin's sidecar over HTTP/2 inside mesh mTLS (that sidecar counts an HTTP/2 connection),
// which still speaks HTTP/1.1 to the application; the answer is the same either way.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePorts, startLocalMesh } from '../../samples/local-mesh.js';
import { get } from '../helpers/http.js';
import { eventually, statValue } from '../helpers/proc.js';

const UPGRADE = `apiVersion: networking.mesh.io/v1
kind: DestinationRule
metadata: {namespace: default, name: httpbin}
spec:
  host: httpbin
  trafficPolicy:
    connectionPool:
      http: {h2UpgradePolicy: UPGRADE}
`;

test('h2UpgradePolicy UPGRADE: sidecar to sidecar over HTTP/2, the application still gets HTTP/1.1', { timeout: 90_000 }, async (t) => {
  const mesh = await startLocalMesh({ stateDir: mkdtempSync(join(tmpdir(), 'mesh-h2-upgrade-')), secure: true, client: true, ports: await freePorts(), output: 'pipe' });
  t.after(() => mesh.stop());
  const call = () => get(false, mesh.ports.service, '/headers', { host: 'httpbin.default.svc.cluster.local' });
  const serverStat = async (codec: 'http1' | 'http2') => statValue(await (await fetch(`http://127.0.0.1:${mesh.ports.admin}/stats`)).text(), `http.inbound_0.0.0.0_${mesh.ports.inbound}.downstream_cx_${codec}_total`);
  await eventually(async () => assert.equal((await call()).status, 200), 30_000);
  assert.equal(await serverStat('http2'), 0, 'HTTP/1.1 between the sidecars without the rule');
  assert.ok((await serverStat('http1')) >= 1, 'the first request came over HTTP/1.1');

  writeFileSync(join(mesh.configDir, 'httpbin-dr.yaml'), UPGRADE);
  await eventually(async () => {
    const r = await call();
    assert.equal(r.status, 200, `${r.status} ${r.body}\n${mesh.output().slice(-2000)}`);
    assert.ok((await serverStat('http2')) >= 1, 'no HTTP/2 connection at httpbin\'s sidecar yet');
  }, 30_000);
  const r = await call();
  assert.equal(r.status, 200);
  // httpbin is a plain HTTP/1.1 server: it answered, and still saw the client workload's mTLS identity.
  assert.match((JSON.parse(r.body) as { headers: Record<string, string> }).headers['X-Forwarded-Client-Cert'] ?? '', /URI=spiffe:\/\/cluster\.local\/ns\/sleep\/sa\/sleep/);
});
