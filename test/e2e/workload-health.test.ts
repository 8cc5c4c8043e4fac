// WorkloadEntry health checks end to end, with the real programs: a VM-style workload's agent
// auto-registers into a WorkloadGroup and probes its application with its ProxyConfig's
// readinessProbe; a client sidecar sees the workload among its endpoints only while the probe
// passes. The application's readiness is flipped here, and the client proxy's own /clusters says
// what it would load-balance to. With an orchestrator (the stand-in API server), the user's
// WorkloadEntry that the agent names (WORKLOAD_ENTRY) gets the Healthy condition in its status.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../../samples/local-mesh.js';
import { adminPortOf, meshAgent } from '../helpers/mesh-agents.js';
import { caFixture, sampleIssuer, startCaDiscovery } from '../helpers/mesh-ca.js';
import { standIn } from '../registry/orch-fixtures.js';
import { parseAllDocuments } from 'yaml';
import type { StoredObject } from '../config/fake-apiserver.js';
import { listen, close } from '../helpers/http.js';
import { discoveryArgs, eventually } from '../helpers/proc.js';

const HOST = 'vm.default.svc.cluster.local';

/** Ports of the one loopback the proxies share: the app's, the vm's inbound, the service's, and the vm's own outbound listeners'. */
interface Ports {
  readonly app: number;
  readonly inbound: number;
  readonly service: number;
  readonly unused: number;
}

function config(p: Ports): string {
  return `apiVersion: networking.mesh.io/v1
kind: ServiceEntry
metadata: {name: vm, namespace: default}
spec:
  hosts: [${HOST}]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{number: ${p.service}, name: http, protocol: HTTP}]
  workloadSelector: {labels: {app: vm}}
---
apiVersion: networking.mesh.io/v1
kind: WorkloadGroup
metadata: {name: vm, namespace: default}
spec:
  template: {labels: {app: vm}, serviceAccount: vm, ports: {http: ${p.inbound}}}
  probe: {httpGet: {port: ${p.app}, path: /ready}, periodSeconds: 1}
---
apiVersion: networking.mesh.io/v1
kind: Sidecar
metadata: {namespace: default, name: vm}
spec:
  workloadSelector: {labels: {app: vm}}
  ingress: [{port: {number: ${p.inbound}, protocol: HTTP, name: http}, defaultEndpoint: "127.0.0.1:${p.app}", captureMode: NONE}]
  egress: [{port: {number: ${p.unused}, protocol: HTTP, name: http}, hosts: ["./*"]}]
`;
}

/** The application: `/ready` answers 503 until the test sets `ready`, everything else 200. */
async function readinessApp(t: { after(fn: () => Promise<void>): void }) {
  const state = { ready: false, port: 0 };
  const server = createServer((req, res) => {
    res.statusCode = req.url === '/ready' && !state.ready ? 503 : 200;
    res.end();
  });
  state.port = await listen(server);
  t.after(() => close(server));
  return state;
}

test('a probing workload is an endpoint of its service only while its readiness probe passes', { timeout: 180_000 }, async (t) => {
  const app = await readinessApp(t);
  const appPort = app.port;
  const configDir = mkdtempSync(join(tmpdir(), 'mesh-health-'));
  const ports: Ports = { app: appPort, inbound: await freePort(), service: await freePort(), unused: await freePort() };
  writeFileSync(join(configDir, 'vm.yaml'), config(ports));
  const { issuer, d } = await caFixture(t, { MESHD_CUSTOM_HOST: 'localhost', PILOT_DEBOUNCE_AFTER: '10ms' }, discoveryArgs(configDir));
  const [, http] = await d.proc.waitFor(/http server listening on (\S+)/);

  const client = await meshAgent(t, d, await issuer.token('default', 'client'), 'client', '127.0.0.2');
  const vm = await meshAgent(t, d, await issuer.token('default', 'vm'), 'vm', '127.0.0.3', {
    proxyConfig: { readinessProbe: { httpGet: { port: appPort, path: '/ready', host: '127.0.0.1' }, periodSeconds: 1 } },
    env: { MESH_META_AUTO_REGISTER_GROUP: 'vm' },
  });
  const endpoints = async (): Promise<string[]> => {
    const text = await (await fetch(`http://127.0.0.1:${adminPortOf(client)}/clusters`)).text();
    return text.split('\n').filter((l) => l.startsWith(`outbound|${ports.service}||${HOST}::`) && l.includes('::health_flags::')).map((l) => l.split('::')[1]!);
  };
  const entry = async () => {
    const all = (await (await fetch(`http://${http}/debug/workloadentryz`)).json()) as Array<{ metadata: { name: string }; endpoint: boolean; status: { conditions: Array<{ status: string; message?: string }> } }>;
    return all.map((we) => ({ name: we.metadata.name, endpoint: we.endpoint, conditions: we.status.conditions.map((c) => `${c.status}${c.message ? `: ${c.message}` : ''}`) }));
  };
  const explain = async (e: Error) => new Error(`${e.message}\n--- vm agent\n${vm.output}\n--- discovery\n${d.proc.output.slice(-4000)}`);

  await eventually(async () => assert.match((await entry())[0]?.conditions[0] ?? '', /^False: .*503/), 20_000).catch(async (e: Error) => {
    throw await explain(e);
  });
  assert.deepEqual(await endpoints(), [], 'registered, but its probe fails: no endpoint');
  assert.deepEqual(await entry(), [{ name: 'vm-127-0-0-3', endpoint: false, conditions: [`False: GET http://127.0.0.1:${appPort}/ready: 503`] }]);

  app.ready = true;
  await eventually(async () => assert.deepEqual(await endpoints(), [`127.0.0.3:${ports.inbound}`]), 20_000).catch(async (e: Error) => {
    throw await explain(e);
  });
  assert.deepEqual(await entry(), [{ name: 'vm-127-0-0-3', endpoint: true, conditions: ['True'] }]);

  app.ready = false;
  await eventually(async () => assert.deepEqual(await endpoints(), []), 20_000).catch(async (e: Error) => {
    throw await explain(e);
  });
});

test('with an orchestrator, the entry its agent names gets the Healthy condition in its status', { timeout: 180_000 }, async (t) => {
  const app = await readinessApp(t);
  const appPort = app.port;
  const ports: Ports = { app: appPort, inbound: await freePort(), service: await freePort(), unused: await freePort() };
  const { api, kubeconfig } = await standIn(mkdtempSync(join(tmpdir(), 'mesh-health-orch-')));
  t.after(() => api.close());
  const entry: StoredObject = {
    apiVersion: 'networking.mesh.io/v1',
    kind: 'WorkloadEntry',
    metadata: { name: 'vm-1', namespace: 'default', annotations: { 'proxy.mesh.io/health-checks-enabled': 'true' } },
    spec: { address: '127.0.0.3', labels: { app: 'vm' }, serviceAccount: 'vm', ports: { http: ports.inbound } },
  };
  const docs = parseAllDocuments(config(ports)).map((d) => d.toJSON() as StoredObject).filter((o) => o.kind !== 'WorkloadGroup');
  for (const o of [...docs, entry]) api.put(o);
  const issuer = await sampleIssuer();
  t.after(() => issuer.server.close());
  const args = ['discovery', '--orchconfig', kubeconfig, '--registries', 'Orchestrator', '--grpcAddr', '127.0.0.1:0', '--secureGRPCAddr', '127.0.0.1:0', '--httpAddr', '127.0.0.1:0', '--httpsAddr', '127.0.0.1:0', '--monitoringAddr', '127.0.0.1:0', '--ctrlz_address', '127.0.0.1', '--ctrlz_port', '0'];
  const d = await startCaDiscovery({ TOKEN_ISSUER: issuer.url, MESHD_CUSTOM_HOST: 'localhost' }, undefined, args);
  t.after(() => d.proc.stop());
  const vm = await meshAgent(t, d, await issuer.token('default', 'vm'), 'vm', '127.0.0.3', {
    proxyConfig: { readinessProbe: { httpGet: { port: appPort, path: '/ready', host: '127.0.0.1' }, periodSeconds: 1 } },
    env: { MESH_META_WORKLOAD_ENTRY: 'vm-1' },
  });
  const healthy = () => ((api.get(entry)?.status as { conditions?: Array<{ type: string; status: string; message?: string }> } | undefined)?.conditions ?? []).filter((c) => c.type === 'Healthy').map((c) => `${c.status}${c.message ? `: ${c.message}` : ''}`);
  const explain = (e: Error) => new Error(`${e.message}\n--- vm agent\n${vm.output}\n--- discovery\n${d.proc.output.slice(-4000)}`);
  await eventually(() => assert.deepEqual(healthy(), [`False: GET http://127.0.0.1:${appPort}/ready: 503`]), 20_000).catch((e: Error) => {
    throw explain(e);
  });
  app.ready = true;
  await eventually(() => assert.deepEqual(healthy(), ['True']), 20_000).catch((e: Error) => {
    throw explain(e);
  });
});

