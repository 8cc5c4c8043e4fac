// One issuer that never answers its JWKS request, against the real discovery server over real
// gRPC: pushes to every other proxy still arrive, a restarted server becomes ready, the proxy the
// policy selects gets the fail-closed key set once the wait bound has passed, and the real keys as
// soon as the issuer answers. The issuer's fetch timeout (60 s) is far beyond every wait here, so
// nothing below can pass by the fetch giving up.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { copyFileSync, mkdtempSync, writeFileSync } from 'node:fs';
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { exportJWK, generateKeyPair } from 'jose';
import { DiscoveryServer } from '../../src/cli/discovery-server.js';
import { setScopeLevel } from '../../src/common/log.js';
import { RBACSchema } from '../../src/gen/envoy/extensions/filters/http/rbac/v3/rbac_pb.js';
import { FAIL_CLOSED_JWKS } from '../../src/envoy/jwks.js';
import { unpack } from '../../src/envoy/types.js';
import { eventually, REPO_ROOT } from '../helpers/proc.js';
import { localDiscoveryOptions } from './fixtures.js';
import { OTHER_WORKLOAD, proxy } from './proxy-view.js';

for (const s of ['default', 'ads', 'model', 'authn', 'source', 'validationServer']) setScopeLevel(s, 'error');

function requestAuthentication(jwksUri: string): string {
  return `apiVersion: security.mesh.io/v1beta1
kind: RequestAuthentication
metadata: { name: slow, namespace: default }
spec:
  selector: { matchLabels: { app: httpbin } }
  jwtRules: [{ issuer: "https://slow.test", jwksUri: "${jwksUri}", timeout: 60s }]
`;
}

function otherPolicy(principal: string): string {
  return `apiVersion: security.mesh.io/v1beta1
kind: AuthorizationPolicy
metadata: { name: other-allow, namespace: default }
spec:
  selector: { matchLabels: { app: other } }
  rules: [{ from: [{ source: { principals: ["${principal}"] } }] }]
`;
}

test('an issuer that never answers delays no other proxy, nor readiness; its proxy fails closed, then gets the keys', { timeout: 60_000 }, async (t) => {
  // The issuer: holds every request until the test releases it.
  const held: ServerResponse[] = [];
  let answer: string | undefined;
  const issuer = createServer((_req, res) => (answer !== undefined ? res.end(answer) : held.push(res)));
  await new Promise<void>((r) => issuer.listen(0, '127.0.0.1', r));
  t.after(() => {
    issuer.closeAllConnections();
    issuer.close();
  });
  const jwksUri = `http://127.0.0.1:${(issuer.address() as AddressInfo).port}/jwks`;

  const dir = mkdtempSync(join(tmpdir(), 'pipeline-slow-issuer-'));
  copyFileSync(join(REPO_ROOT, 'samples', 'config', 'workloads.yaml'), join(dir, 'workloads.yaml'));
  writeFileSync(join(dir, 'other.yaml'), OTHER_WORKLOAD);
  let d = new DiscoveryServer(localDiscoveryOptions(dir));
  t.after(() => d.stop());
  await d.start();
  let httpbin = proxy(d.addresses.grpc!, 'httpbin', 15080);
  const other = proxy(d.addresses.grpc!, 'other', 15081);
  t.after(() => {
    httpbin.ads.close();
    other.ads.close();
  });
  await eventually(() => assert.equal(httpbin.keys(), undefined, 'httpbin starts without jwt_authn'), 10_000);
  await eventually(() => assert.deepEqual(other.filters().map((f) => f.name), ['envoy.filters.http.router']), 10_000);

  // The hanging issuer's policy, then a policy edit for the other workload.
  writeFileSync(join(dir, 'slow.yaml'), requestAuthentication(jwksUri));
  await eventually(() => assert.equal(held.length, 1, 'the issuer got the JWKS request'), 10_000);
  writeFileSync(join(dir, 'other-policy.yaml'), otherPolicy('cluster.local/ns/default/sa/a'));
  await eventually(() => assert.deepEqual(other.filters().map((f) => f.name), ['envoy.filters.http.rbac', 'envoy.filters.http.router'], 'the other proxy got its policy'), 10_000);
  writeFileSync(join(dir, 'other-policy.yaml'), otherPolicy('cluster.local/ns/default/sa/b'));
  const rbac = () => JSON.stringify(unpack(other.filters()[0]!.configType.value as never, RBACSchema).rules?.policies);
  await eventually(() => assert.match(rbac(), /sa\/b/, 'and its edit'), 10_000);
  assert.equal(answer, undefined, 'all while the issuer had not answered');

  // The selected proxy: the fail-closed key set once the wait bound passed; the issuer still silent.
  await eventually(() => assert.equal(httpbin.keys(), FAIL_CLOSED_JWKS, 'httpbin fails closed'), 10_000);
  assert.equal(answer, undefined);

  // A restart while the issuer hangs: ready without it.
  httpbin.ads.close();
  await d.stop();
  const heldBefore = held.length;
  d = new DiscoveryServer(localDiscoveryOptions(dir));
  await d.start();
  const ready = await fetch(`http://${d.addresses.http}/ready`);
  assert.equal(ready.status, 200, 'ready while the issuer hangs');
  await eventually(() => assert.equal(held.length, heldBefore + 1, 'the restarted server asked the issuer'), 10_000);
  httpbin = proxy(d.addresses.grpc!, 'httpbin', 15080);
  await eventually(() => assert.equal(httpbin.keys(), FAIL_CLOSED_JWKS, 'fail closed after the restart'), 10_000);

  // The issuer answers: the real keys reach the proxy.
  answer = JSON.stringify({ keys: [{ ...(await exportJWK((await generateKeyPair('ES256')).publicKey)), kid: 'slow-1', alg: 'ES256' }] });
  for (const res of held.splice(0)) if (!res.destroyed) res.end(answer);
  await eventually(() => assert.match(httpbin.keys() ?? '', /"kid":"slow-1"/, 'the issuer keys arrived'), 10_000);
});
