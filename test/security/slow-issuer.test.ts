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
import type { Listener } from '../../src/gen/envoy/config/listener/v3/listener_pb.js';
import { JwtAuthenticationSchema } from '../../src/gen/envoy/extensions/filters/http/jwt_authn/v3/config_pb.js';
import { RBACSchema } from '../../src/gen/envoy/extensions/filters/http/rbac/v3/rbac_pb.js';
import { HttpConnectionManagerSchema } from '../../src/gen/envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager_pb.js';
import { FAIL_CLOSED_JWKS } from '../../src/security/authn/jwks.js';
import { AdsClient } from '../../src/xds/adsc.js';
import { TypeUrl, unpack } from '../../src/xds/types.js';
import { eventually, REPO_ROOT } from '../helpers/proc.js';
import { localDiscoveryOptions } from './fixtures.js';

for (const s of ['default', 'ads', 'model', 'authn', 'source', 'validationServer']) setScopeLevel(s, 'error');

/** A second workload beside the sample httpbin: `other` on 127.0.0.2, inbound port 15081. */
const OTHER_WORKLOAD = `apiVersion: networking.mesh.io/v1
kind: WorkloadEntry
metadata: { name: other-1, namespace: default }
spec: { address: 127.0.0.2, ports: { http: 8001 }, labels: { app: other }, serviceAccount: other }
---
apiVersion: networking.mesh.io/v1
kind: ServiceEntry
metadata: { name: other, namespace: default }
spec:
  hosts: ["other.default.svc.cluster.local"]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{ number: 8001, name: http, protocol: HTTP }]
  workloadSelector: { labels: { app: other } }
---
apiVersion: networking.mesh.io/v1
kind: Sidecar
metadata: { name: other, namespace: default }
spec:
  workloadSelector: { labels: { app: other } }
  ingress: [{ port: { number: 15081, protocol: HTTP, name: http }, defaultEndpoint: 127.0.0.1:8001, captureMode: NONE }]
`;

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

function proxy(address: string, app: string, port: number) {
  const ads = new AdsClient({
    address,
    node: { id: `sidecar~127.0.0.${port === 15080 ? 1 : 2}~${app}-1.default~default.svc.cluster.local`, metadata: { NAMESPACE: 'default', LABELS: { app }, INTERCEPTION_MODE: 'NONE', SERVICE_ACCOUNT: app } },
    onUpdate: () => undefined,
  });
  ads.start();
  /** The inbound HTTP filters on the Sidecar ingress port, as the proxy holds them now. */
  const filters = () => {
    const listener = [...ads.resources(TypeUrl.Listener).values()]
      .map((r) => r.message as Listener)
      .find((l) => l.address?.address.case === 'socketAddress' && l.address.address.value.portSpecifier.value === port);
    assert.ok(listener, `an inbound listener on ${port}`);
    const hcm = listener.filterChains[0]!.filters[0]!.configType;
    assert.equal(hcm.case, 'typedConfig');
    return unpack(hcm.value!, HttpConnectionManagerSchema).httpFilters;
  };
  /** The key set of the jwt_authn provider, or undefined when there is no jwt_authn filter. */
  const keys = () => {
    const jwt = filters().find((f) => f.name === 'envoy.filters.http.jwt_authn');
    if (!jwt) return undefined;
    const provider = Object.values(unpack(jwt.configType.value as never, JwtAuthenticationSchema).providers)[0]!;
    return provider.jwksSourceSpecifier.case === 'localJwks' ? String(provider.jwksSourceSpecifier.value.specifier.value) : undefined;
  };
  return { ads, filters, keys };
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
