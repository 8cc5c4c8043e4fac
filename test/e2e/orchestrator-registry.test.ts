// Two pilot-discovery processes reading the same stand-in orchestrator API (--orchconfig,
// --registries Orchestrator), seen by proxies over real xDS streams: a Service with its
// EndpointSlice and Pods becomes a cluster and endpoints, follows scale up and down, and both
// replicas serve the same config; a proxy's labels come from its Pod, not from what it claims.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { toBinary } from '@bufbuild/protobuf';
import { ClusterLoadAssignmentSchema, type ClusterLoadAssignment } from '../../src/gen/envoy/config/endpoint/v3/endpoint_pb.js';
import { AdsClient } from '../../src/envoy/ads-client.js';
import { TypeUrl } from '../../src/envoy/types.js';
import { discoveryArgs, eventually, Running, start } from '../helpers/proc.js';
import { endpointSlice, namespace, node, pod, service, standIn } from '../registry/orch-fixtures.js';

const CLUSTER = 'outbound|80||echo.ns.svc.cluster.local';
const SLICE_PORTS = [{ name: 'http', port: 8080 }];

function endpointsOf(ads: AdsClient): string[] {
  const cla = ads.resources(TypeUrl.ClusterLoadAssignment).get(CLUSTER)?.message as ClusterLoadAssignment | undefined;
  return (cla?.endpoints ?? [])
    .flatMap((l) => l.lbEndpoints)
    .map((e) => (e.hostIdentifier.case === 'endpoint' && e.hostIdentifier.value.address?.address.case === 'socketAddress' ? e.hostIdentifier.value.address.address.value : undefined))
    .map((a) => `${a?.address}:${a?.portSpecifier.value}`)
    .sort();
}

/** Whether any listener of the proxy carries an rbac filter (a policy selected its workload). */
function hasRbac(ads: AdsClient): boolean {
  return [...ads.resources(TypeUrl.Listener).values()].some((r) => Buffer.from(r.any.value).includes('envoy.filters.http.rbac'));
}

test('two discovery replicas serve a Service, its EndpointSlice and Pods as the same clusters and endpoints', { timeout: 60_000 }, async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'orch-e2e-'));
  const { api, kubeconfig } = await standIn(dir);
  t.after(() => api.close());
  for (const o of [
    namespace('ns'),
    node('node-1', 'eu', 'eu-1a'),
    service('echo', 'ns', [{ name: 'http', port: 80, targetPort: 8080 }]),
    pod('echo-1', 'ns', '10.0.0.1', { app: 'echo' }, { serviceAccount: 'echo' }),
    endpointSlice('echo', 'ns', SLICE_PORTS, [{ ip: '10.0.0.1', pod: 'echo-1' }]),
  ]) {
    api.put(o);
  }
  const configDir = mkdtempSync(join(tmpdir(), 'orch-e2e-config-'));
  // A policy selecting app=echo: its rbac filter shows whose labels a proxy got.
  writeFileSync(
    join(configDir, 'deny.yaml'),
    'apiVersion: security.mesh.io/v1\nkind: AuthorizationPolicy\nmetadata: { name: deny-evil, namespace: ns }\nspec:\n  selector: { matchLabels: { app: echo } }\n  action: DENY\n  rules: [{ to: [{ operation: { paths: ["/evil"] } }] }]\n',
  );
  const args = discoveryArgs(configDir, { orchconfig: kubeconfig, registries: 'Orchestrator' });
  const replicas = [0, 1].map(() => new Running(start('pilot-discovery', args, { env: { PILOT_USE_ENDPOINT_SLICE: 'true', PILOT_ENABLE_CRD_VALIDATION: 'true' } })));
  const clients: AdsClient[] = [];
  t.after(async () => {
    clients.forEach((c) => c.close());
    await Promise.all(replicas.map((r) => r.stop()));
  });
  for (const replica of replicas) {
    const grpc = (await replica.waitFor(/gRPC xDS server listening on (\S+)/, 20_000))[1]!;
    await replica.waitFor(/discovery server ready/);
    // The proxy claims app=other; its Pod says app=echo.
    const ads = new AdsClient({
      address: grpc,
      node: { id: 'sidecar~10.0.0.1~echo-1.ns~ns.svc.cluster.local', metadata: { NAMESPACE: 'ns', LABELS: { app: 'other' }, INTERCEPTION_MODE: 'REDIRECT' } },
      onUpdate: () => undefined,
    });
    ads.start();
    clients.push(ads);
  }
  for (const ads of clients) {
    await eventually(() => assert.deepEqual(endpointsOf(ads), ['10.0.0.1:8080']), 15_000);
    assert.ok(ads.resources(TypeUrl.Cluster).has(CLUSTER));
    // LDS may land after EDS on the stream.
    await eventually(() => assert.ok(hasRbac(ads), 'the proxy got the policy selecting its Pod\'s labels'), 15_000);
  }

  // Scale up, then down: both replicas follow.
  api.put(pod('echo-2', 'ns', '10.0.0.2', { app: 'echo' }));
  api.put(endpointSlice('echo', 'ns', SLICE_PORTS, [{ ip: '10.0.0.1', pod: 'echo-1' }, { ip: '10.0.0.2', pod: 'echo-2' }]));
  for (const ads of clients) await eventually(() => assert.deepEqual(endpointsOf(ads), ['10.0.0.1:8080', '10.0.0.2:8080']), 15_000);
  api.put(endpointSlice('echo', 'ns', SLICE_PORTS, [{ ip: '10.0.0.2', pod: 'echo-2' }]));
  for (const ads of clients) await eventually(() => assert.deepEqual(endpointsOf(ads), ['10.0.0.2:8080']), 15_000);

  // The same config from both: every cluster and endpoint set byte for byte.
  const serialized = (ads: AdsClient, type: string) =>
    [...ads.resources(type).values()].map((r) => `${r.name}=${Buffer.from(type === TypeUrl.ClusterLoadAssignment ? toBinary(ClusterLoadAssignmentSchema, r.message as ClusterLoadAssignment) : r.any.value).toString('base64')}`).sort();
  for (const type of [TypeUrl.Cluster, TypeUrl.ClusterLoadAssignment]) assert.deepEqual(serialized(clients[0]!, type), serialized(clients[1]!, type), type);

  // A proxy whose Pod does not exist keeps what it claims: no policy selects app=other.
  const stranger = new AdsClient({
    address: (await replicas[0]!.waitFor(/gRPC xDS server listening on (\S+)/))[1]!,
    node: { id: 'sidecar~10.0.9.9~ghost-1.ns~ns.svc.cluster.local', metadata: { NAMESPACE: 'ns', LABELS: { app: 'other' }, INTERCEPTION_MODE: 'REDIRECT' } },
    onUpdate: () => undefined,
  });
  stranger.start();
  clients.push(stranger);
  await eventually(() => assert.ok(stranger.resources(TypeUrl.Listener).size > 0, 'listeners arrived'), 15_000);
  assert.equal(hasRbac(stranger), false);
});
