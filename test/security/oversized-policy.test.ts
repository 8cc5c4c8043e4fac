// The 10,000-rule policy that made every LDS response of its workload larger than the proxies'
// 4 MiB gRPC limit: it is now rejected when read, naming its size, so a DENY written meanwhile
// reaches the proxy over its real ADS stream, which is never cut.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { copyFileSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { DiscoveryServer } from '../../src/cli/discovery-server.js';
import { setScopeLevel } from '../../src/common/log.js';
import { FileConfigStore } from '../../src/config/file.js';
import { RBACSchema } from '../../src/gen/envoy/extensions/filters/http/rbac/v3/rbac_pb.js';
import { unpack } from '../../src/envoy/types.js';
import { eventually, REPO_ROOT } from '../helpers/proc.js';
import { localDiscoveryOptions } from './fixtures.js';
import { proxy } from './proxy-view.js';

for (const s of ['default', 'ads', 'model', 'authn', 'source', 'validationServer']) setScopeLevel(s, 'error');

function allowMany(rules: number): string {
  return stringify({
    apiVersion: 'security.mesh.io/v1beta1',
    kind: 'AuthorizationPolicy',
    metadata: { name: 'many', namespace: 'default' },
    spec: {
      selector: { matchLabels: { app: 'httpbin' } },
      rules: Array.from({ length: rules }, (_, i) => ({ from: [{ source: { principals: [`cluster.local/ns/default/sa/client-${i}`] } }], to: [{ operation: { paths: [`/api/v1/items/${i}`], methods: ['GET'] } }] })),
    },
  });
}

const DENY = `apiVersion: security.mesh.io/v1beta1
kind: AuthorizationPolicy
metadata: { name: deny-admin, namespace: default }
spec:
  selector: { matchLabels: { app: httpbin } }
  action: DENY
  rules: [{ to: [{ operation: { paths: ["/admin"] } }] }]
`;

test('a 10,000-rule policy is rejected naming its size; a DENY written meanwhile reaches the proxy', { timeout: 60_000 }, async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'pipeline-oversized-'));
  copyFileSync(join(REPO_ROOT, 'samples', 'config', 'workloads.yaml'), join(dir, 'workloads.yaml'));
  const d = new DiscoveryServer(localDiscoveryOptions(dir));
  t.after(() => d.stop());
  await d.start();
  const httpbin = proxy(d.addresses.grpc!, 'httpbin', 15080);
  const ended: string[] = [];
  httpbin.ads.on('disconnected', (error) => ended.push(error));
  t.after(() => httpbin.ads.close());
  await eventually(() => assert.deepEqual(httpbin.filters().map((f) => f.name), ['envoy.filters.http.router']), 10_000);

  writeFileSync(join(dir, 'many.yaml'), allowMany(10_000));
  writeFileSync(join(dir, 'deny.yaml'), DENY);
  await eventually(() => assert.deepEqual(httpbin.filters().map((f) => f.name), ['envoy.filters.http.rbac', 'envoy.filters.http.router'], 'the DENY arrived'), 20_000);
  const rbac = unpack(httpbin.filters()[0]!.configType.value as never, RBACSchema);
  assert.equal(rbac.rules?.action, 1, 'DENY');
  assert.ok(d.store instanceof FileConfigStore);
  const problems = d.store.problems();
  assert.match(problems['many.yaml']?.[0] ?? '', /many\.yaml: document 1 \(line 1\): AuthorizationPolicy\/default\/many: spec: \d+ bytes encoded as JSON; at most 524288/);
  const oversized = await (await fetch(`http://${d.addresses.http}/debug/oversized`)).json();
  assert.deepEqual(oversized, [], 'nothing held back');
  assert.deepEqual(ended, [], 'the stream was never cut');
});
