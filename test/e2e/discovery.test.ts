// The real pilot-discovery process in local mode, seen by a proxy over real gRPC: config files
// become Envoy listeners whose inbound chain carries the jwt_authn and rbac filters of the policies
// selecting the workload, with the issuer's keys inlined; editing a policy file pushes new filters;
// a broken save keeps the last good config; the debug endpoints explain the decision.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { copyFileSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AdsClient } from '../../src/envoy/ads-client.js';
import { TypeUrl, unpack } from '../../src/envoy/types.js';
import type { Listener } from '../../src/gen/envoy/config/listener/v3/listener_pb.js';
import { HttpConnectionManagerSchema } from '../../src/gen/envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager_pb.js';
import { JwtAuthenticationSchema } from '../../src/gen/envoy/extensions/filters/http/jwt_authn/v3/config_pb.js';
import { RBACSchema } from '../../src/gen/envoy/extensions/filters/http/rbac/v3/rbac_pb.js';
import { startIssuer } from '../../samples/apps/issuer.js';
import { discoveryArgs, eventually, REPO_ROOT, Running, start } from '../helpers/proc.js';

function policies(issuer: string, principal: string): string {
  return `apiVersion: security.mesh.io/v1beta1
kind: RequestAuthentication
metadata: { name: httpbin-jwt, namespace: default }
spec:
  selector: { matchLabels: { app: httpbin } }
  jwtRules:
  - issuer: ${issuer}
    jwksUri: ${issuer}/.well-known/jwks.json
---
apiVersion: security.mesh.io/v1beta1
kind: AuthorizationPolicy
metadata: { name: httpbin-allow, namespace: default }
spec:
  selector: { matchLabels: { app: httpbin } }
  action: ALLOW
  rules:
  - from: [{ source: { requestPrincipals: ["${principal}"] } }]
    when: [{ key: "request.auth.claims[groups]", values: ["admins"] }]
`;
}

/** The security filters of the inbound listener on the Sidecar ingress port 15080. */
function inboundFilters(listeners: Iterable<Listener>) {
  const listener = [...listeners].find((l) => l.address?.address.case === 'socketAddress' && l.address.address.value.portSpecifier.value === 15080);
  assert.ok(listener, 'an inbound listener on the Sidecar ingress port 15080');
  const hcmAny = listener.filterChains[0]!.filters[0]!.configType;
  assert.equal(hcmAny.case, 'typedConfig');
  const hcm = unpack(hcmAny.value!, HttpConnectionManagerSchema);
  return hcm.httpFilters;
}

test('discovery turns policy files into jwt_authn and rbac filters, follows edits, keeps the last good config', async () => {
  const issuerState = join(mkdtempSync(join(tmpdir(), 'issuer-')), 'key.json');
  const issuer = await startIssuer(issuerState, 0);
  const dir = mkdtempSync(join(tmpdir(), 'mesh-e2e-'));
  copyFileSync(join(REPO_ROOT, 'samples', 'config', 'workloads.yaml'), join(dir, 'workloads.yaml'));
  const policyFile = join(dir, 'policies.yaml');
  writeFileSync(policyFile, policies(issuer.issuer, `${issuer.issuer}/alice`));
  const d = new Running(start('pilot-discovery', discoveryArgs(dir)));
  let ads: AdsClient | undefined;
  try {
    const grpc = (await d.waitFor(/gRPC xDS server listening on (\S+)/))[1]!;
    const http = (await d.waitFor(/http server listening on (\S+)/))[1]!;
    await d.waitFor(/discovery server ready/);
    const proxyId = 'sidecar~127.0.0.1~httpbin-1.default~default.svc.cluster.local';
    ads = new AdsClient({
      address: grpc,
      node: { id: proxyId, metadata: { NAMESPACE: 'default', LABELS: { app: 'httpbin' }, INTERCEPTION_MODE: 'NONE', SERVICE_ACCOUNT: 'httpbin' } },
      onUpdate: () => undefined,
    });
    ads.start();

    const filtersNow = () => inboundFilters([...ads!.resources(TypeUrl.Listener).values()].map((r) => r.message as Listener));
    const filters = await eventually(() => {
      const f = filtersNow();
      assert.deepEqual(f.map((x) => x.name), ['mesh.metadata_exchange', 'envoy.filters.http.jwt_authn', 'envoy.filters.http.rbac', 'mesh.stats', 'envoy.filters.http.router'], 'the metadata exchange, jwt_authn, rbac, the standard metrics, router');
      const jwt = unpack(f[1]!.configType.value as never, JwtAuthenticationSchema);
      const provider = Object.values(jwt.providers)[0]!;
      assert.equal(provider.issuer, issuer.issuer);
      assert.match(provider.jwksSourceSpecifier.case === 'localJwks' ? String(provider.jwksSourceSpecifier.value.specifier.value) : '', /"kid":"sample-/, 'the issuer keys are inlined');
      return f;
    }, 10_000);
    const rbac = unpack(filters[2]!.configType.value as never, RBACSchema);
    assert.equal(rbac.rules?.action, 0, 'ALLOW');
    assert.match(JSON.stringify(rbac.rules?.policies, (_k, v) => (typeof v === 'bigint' ? String(v) : v)), /alice/);

    // Edit the policy in place: a new principal reaches the proxy without a restart.
    writeFileSync(policyFile, policies(issuer.issuer, `${issuer.issuer}/bob`));
    await eventually(() => {
      const r = unpack(filtersNow()[2]!.configType.value as never, RBACSchema);
      assert.match(JSON.stringify(r.rules?.policies, (_k, v) => (typeof v === 'bigint' ? String(v) : v)), /bob/, 'the edited principal arrived');
    }, 10_000);
    const version = ads.version(TypeUrl.Listener);

    // A broken save: the error names the file, the proxy keeps the last good filters.
    writeFileSync(policyFile, 'apiVersion: security.mesh.io/v1beta1\nkind: AuthorizationPolicy\nmetadata: { name: httpbin-allow, namespace: default }\nspec:\n  action: PERMIT\n');
    await d.waitFor(/policies\.yaml.*AuthorizationPolicy\/default\/httpbin-allow.*spec\.action/);
    const configz = (await (await fetch(`http://${http}/debug/configz`)).json()) as Array<{ kind: string; spec: { action?: string } }>;
    assert.equal(configz.find((r) => r.kind === 'AuthorizationPolicy')?.spec.action, 'ALLOW', 'the last good policy is kept');
    assert.equal(ads.version(TypeUrl.Listener), version, 'no new listener version for a broken file');

    // The debug endpoints: what the proxy acked, its config dump, and an explained decision.
    await eventually(async () => {
      const syncz = (await (await fetch(`http://${http}/debug/syncz`)).json()) as Array<{ proxyId: string; types: Record<string, { state: string }> }>;
      assert.equal(syncz.find((s) => s.proxyId === proxyId)?.types.lds?.state, 'SYNCED', 'lds acked');
    });
    const dump = (await (await fetch(`http://${http}/debug/config_dump?proxyID=${encodeURIComponent(proxyId)}`)).json()) as Record<string, unknown[]>;
    assert.ok(Array.isArray(dump.Listener) && dump.Listener.length > 0, 'config_dump lists listeners');
    const explainBody = (token?: string) => JSON.stringify({ proxyID: proxyId, method: 'GET', path: '/headers', ...(token ? { token } : {}) });
    const explainOf = async (token?: string) => (await (await fetch(`http://${http}/debug/authz_explain`, { method: 'POST', body: explainBody(token) })).json()) as { status: number; policy?: string };
    const mint = async (q: string) => (await (await fetch(`http://127.0.0.1:${issuer.address.port}/token?${q}`)).text()).trim();
    assert.equal((await explainOf(await mint('sub=bob&groups=admins'))).status, 200);
    assert.equal((await explainOf(await mint('sub=bob&groups=dev'))).status, 403);
    assert.equal((await explainOf()).status, 403, 'no token under an ALLOW policy');
    assert.equal((await explainOf(await mint('sub=bob&groups=admins&exp=-1h'))).status, 401, 'an expired token');
    const bad = await fetch(`http://${http}/debug/authz_explain`, { method: 'POST', body: '{not json' });
    assert.equal(bad.status, 400);
    assert.match(await bad.text(), /not valid JSON/);
  } finally {
    ads?.close();
    assert.equal(await d.stop(), 0);
    issuer.server.close();
  }
});
