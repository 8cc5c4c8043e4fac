// pilot-discovery reading a stand-in orchestrator (--orchconfig, --registries Orchestrator) and a
// config directory: with the spec's defaults a Service's selector selects WorkloadEntries
// (PILOT_ENABLE_ORCH_SELECT_WORKLOAD_ENTRIES), a ServiceEntry's workloadSelector selects ready Pods
// (PILOT_ENABLE_SERVICEENTRY_SELECT_PODS), both seen in /debug/endpointz, and a captured proxy gets
// an outbound listener per Pod of a headless Service's TCP port (PILOT_ENABLE_HEADLESS_SERVICE_POD_LISTENERS),
// seen over a real xDS stream. Set to false, none of the three happens. The headless Service's name
// and its Pods' own names are in the proxy's DNS name table, following scaling either way.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AdsClient } from '../../src/envoy/ads-client.js';
import { TypeUrl, unpack } from '../../src/envoy/types.js';
import { NameTableSchema, type NameTable } from '../../src/gen/mesh/v1/dns_pb.js';
import type { RouteConfiguration } from '../../src/gen/envoy/config/route/v3/route_pb.js';
import { discoveryArgs, eventually, Running, start } from '../helpers/proc.js';
import { adsClient, sotw } from '../xds/harness.js';
import { endpointSlice, namespace, node, pod, service, standIn } from '../registry/orch-fixtures.js';
import type { FakeApiServer, StoredObject } from '../config/fake-apiserver.js';

const CONFIG = `apiVersion: networking.mesh.io/v1
kind: WorkloadEntry
metadata: { name: vm-1, namespace: ns }
spec: { address: 10.1.0.5, labels: { app: vm }, ports: { web: 8080 }, serviceAccount: vm-sa }
---
apiVersion: networking.mesh.io/v1
kind: WorkloadEntry
metadata: { name: vm-elsewhere, namespace: other }
spec: { address: 10.1.0.6, labels: { app: vm } }
---
apiVersion: networking.mesh.io/v1
kind: ServiceEntry
metadata: { name: db, namespace: ns }
spec:
  hosts: [db.example.com]
  addresses: [240.0.0.9]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{ number: 5432, name: tcp-db, protocol: TCP }, { number: 9090, name: metrics, protocol: HTTP, targetPort: 19090 }]
  workloadSelector: { labels: { app: db } }
`;

/** A Pod with a named container port, ready or not. */
function dbPod(name: string, ip: string, ready: boolean, ns = 'ns'): StoredObject {
  const p = pod(name, ns, ip, { app: 'db' }, { serviceAccount: 'db-sa' });
  const spec = p.spec as { containers: Array<Record<string, unknown>> };
  spec.containers[0]!.ports = [{ name: 'tcp-db', containerPort: 15432 }];
  (p.status as Record<string, unknown>).conditions = [{ type: 'Ready', status: ready ? 'True' : 'False' }];
  return p;
}

interface Endpointz {
  hostname: string;
  instances: Array<{ address: string; endpointPort: number; servicePort: { port: number }; serviceAccount: string; locality: { region: string } }>;
}

async function instancesOf(http: string, hostname: string): Promise<string[]> {
  const all = (await (await fetch(`http://${http}/debug/endpointz`)).json()) as Endpointz[];
  return (all.find((s) => s.hostname === hostname)?.instances ?? []).map((i) => `${i.servicePort.port}->${i.address}:${i.endpointPort} ${i.serviceAccount} ${i.locality.region}`).sort();
}

const HEADLESS_PORTS = [{ name: 'tcp', port: 5432 }, { name: 'http-web', port: 8080 }];
/** The headless service's slice: 10.0.3.<n> is Pod dbh-<n>. */
const headlessSlice = (ips: string[]) => endpointSlice('dbh', 'ns', HEADLESS_PORTS, ips.map((ip) => ({ ip, pod: `dbh-${ip.split('.').at(-1)}` })));

interface Discovery {
  readonly http: string;
  readonly grpc: string;
  readonly api: FakeApiServer;
}

const HEADLESS_PROXY = { id: 'sidecar~10.0.3.1~dbh-1.ns~ns.svc.cluster.local', metadata: { NAMESPACE: 'ns', INTERCEPTION_MODE: 'REDIRECT', DNS_CAPTURE: 'true' } };

/** A captured proxy (DNS capture on) of the headless service's first Pod. */
function headlessProxy(t: { after(fn: () => void): void }, grpc: string): AdsClient {
  const ads = new AdsClient({ address: grpc, node: HEADLESS_PROXY, onUpdate: () => undefined });
  ads.start();
  t.after(() => ads.close());
  return ads;
}

/** Its listener names for the headless service's ports (the ServiceEntry's own 240.0.0.9_5432 is not the headless service's). */
function headlessListeners(ads: AdsClient): () => string[] {
  return () => [...ads.resources(TypeUrl.Listener).keys()].filter((n) => (n.endsWith('_5432') || n.endsWith('_80')) && !n.startsWith('240.')).sort();
}

/**
 * Its DNS name table's entries under the headless service (`host -> ips`), from the latest table on
 * a stream of its own that subscribes and ACKs the table as the agent does.
 */
function headlessNames(t: { after(fn: () => void): void }, grpc: string): () => string[] {
  const client = adsClient(grpc);
  const stream = sotw(client);
  let table: NameTable | undefined;
  stream.send({ node: HEADLESS_PROXY, typeUrl: TypeUrl.NameTable });
  void (async () => {
    for (;;) {
      const r = await stream.next().catch(() => undefined);
      if (!r) return;
      table = r.resources[0] ? unpack(r.resources[0], NameTableSchema) : undefined;
      stream.send({ typeUrl: TypeUrl.NameTable, versionInfo: r.versionInfo, responseNonce: r.nonce });
    }
  })();
  t.after(() => {
    stream.close();
    client.close();
  });
  return () => Object.entries(table?.table ?? {}).filter(([h]) => h.endsWith('dbh.ns.svc.cluster.local')).map(([h, i]) => `${h} -> ${i.ips.join(',')}`).sort();
}

/** A Pod of the headless service named under it, as a StatefulSet's are (`spec.subdomain`; the hostname defaults to the Pod's name). */
function statefulPod(name: string, ip: string): StoredObject {
  const p = pod(name, 'ns', ip, { app: 'dbh' });
  (p.spec as Record<string, unknown>).subdomain = 'dbh';
  return p;
}

async function discovery(t: { after(fn: () => Promise<void> | void): void }, env: Record<string, string>): Promise<Discovery> {
  const dir = mkdtempSync(join(tmpdir(), 'orch-select-'));
  const { api, kubeconfig } = await standIn(dir);
  t.after(() => api.close());
  for (const o of [
    namespace('ns'),
    namespace('other'),
    node('node-1', 'eu', 'eu-1a'),
    service('vm', 'ns', [{ name: 'http', port: 80, targetPort: 'web' }, { name: 'tcp', port: 9000, targetPort: 9001 }, { name: 'grpc', port: 7000, targetPort: 'unnamed' }], { selector: { app: 'vm' } }),
    dbPod('db-1', '10.0.2.1', true),
    dbPod('db-2', '10.0.2.2', false),
    dbPod('db-other', '10.0.2.3', true, 'other'),
    service('dbh', 'ns', [{ name: 'tcp', port: 5432 }, { name: 'http-web', port: 80, targetPort: 8080 }], { clusterIP: 'None' }),
    statefulPod('dbh-1', '10.0.3.1'),
    statefulPod('dbh-2', '10.0.3.2'),
    headlessSlice(['10.0.3.1', '10.0.3.2']),
  ]) {
    api.put(o);
  }
  const configDir = mkdtempSync(join(tmpdir(), 'orch-select-config-'));
  writeFileSync(join(configDir, 'workloads.yaml'), CONFIG);
  const d = new Running(start('pilot-discovery', discoveryArgs(configDir, { orchconfig: kubeconfig, registries: 'Orchestrator' }), { env: { PILOT_USE_ENDPOINT_SLICE: 'true', ...env } }));
  t.after(() => d.stop().then(() => undefined));
  const grpc = (await d.waitFor(/gRPC xDS server listening on (\S+)/, 20_000))[1]!;
  const http = (await d.waitFor(/http server listening on (\S+)/, 20_000))[1]!;
  await d.waitFor(/discovery server ready/, 20_000);
  return { http, grpc, api };
}

test('spec defaults: a Service selects the WorkloadEntries of its namespace, a ServiceEntry selects the ready Pods of its namespace', { timeout: 60_000 }, async (t) => {
  const { http } = await discovery(t, {});
  await eventually(async () => {
    // Named targetPort `web` from the entry's ports; numeric 9001 as is; `unnamed` is not in its ports: left out.
    assert.deepEqual(await instancesOf(http, 'vm.ns.svc.cluster.local'), ['80->10.1.0.5:8080 vm-sa ', '9000->10.1.0.5:9001 vm-sa ']);
    // The container's port named like the entry's port; else targetPort; the Node's locality; not the unready Pod.
    assert.deepEqual(await instancesOf(http, 'db.example.com'), ['5432->10.0.2.1:15432 db-sa eu', '9090->10.0.2.1:19090 db-sa eu']);
  }, 15_000);
});

test('PILOT_ENABLE_ORCH_SELECT_WORKLOAD_ENTRIES, PILOT_ENABLE_SERVICEENTRY_SELECT_PODS and PILOT_ENABLE_HEADLESS_SERVICE_POD_LISTENERS false: none of it happens', { timeout: 60_000 }, async (t) => {
  const { http, grpc } = await discovery(t, { PILOT_ENABLE_ORCH_SELECT_WORKLOAD_ENTRIES: 'false', PILOT_ENABLE_SERVICEENTRY_SELECT_PODS: 'false', PILOT_ENABLE_HEADLESS_SERVICE_POD_LISTENERS: 'false' });
  // Both services are there (so the registries are read) but select nothing.
  await eventually(async () => {
    const all = (await (await fetch(`http://${http}/debug/endpointz`)).json()) as Endpointz[];
    assert.deepEqual(all.map((s) => s.hostname).filter((h) => h === 'vm.ns.svc.cluster.local' || h === 'db.example.com').sort(), ['db.example.com', 'vm.ns.svc.cluster.local']);
  }, 15_000);
  assert.deepEqual(await instancesOf(http, 'vm.ns.svc.cluster.local'), []);
  assert.deepEqual(await instancesOf(http, 'db.example.com'), []);
  const listeners = headlessListeners(headlessProxy(t, grpc));
  // One wildcard listener for the headless TCP port, as for any service without an address.
  await eventually(() => assert.deepEqual(listeners(), ['0.0.0.0_5432', '0.0.0.0_80']), 15_000);
});

test('spec default: a captured proxy gets a listener per Pod of a headless Service\'s TCP port (not its own), and follows scaling; so do its DNS names and routes', { timeout: 60_000 }, async (t) => {
  const { grpc, api } = await discovery(t, {});
  const ads = headlessProxy(t, grpc);
  const listeners = headlessListeners(ads);
  const names = headlessNames(t, grpc);
  // HTTP stays on the wildcard (told apart by Host); the proxy's own Pod 10.0.3.1 has no outbound listener.
  await eventually(() => assert.deepEqual(listeners(), ['0.0.0.0_80', '10.0.3.2_5432']), 15_000);
  // The service's name resolves to its Pods, each Pod's own name to it.
  await eventually(() => assert.deepEqual(names(), ['dbh-1.dbh.ns.svc.cluster.local -> 10.0.3.1', 'dbh-2.dbh.ns.svc.cluster.local -> 10.0.3.2', 'dbh.ns.svc.cluster.local -> 10.0.3.1,10.0.3.2']), 15_000);
  // An HTTP request for a Pod's name finds the service's virtual host (`*.dbh...`), not the catch-all.
  // RDS follows LDS on the stream: the route may land after the listeners and names.
  await eventually(() => {
    const routes = ads.resources(TypeUrl.RouteConfiguration).get('80')?.message as RouteConfiguration | undefined;
    const vhost = routes?.virtualHosts.find((v) => v.name === 'dbh.ns.svc.cluster.local:80');
    assert.deepEqual(vhost?.domains.filter((d) => d.startsWith('*')), ['*.dbh.ns.svc.cluster.local', '*.dbh.ns.svc', '*.dbh.ns', '*.dbh']);
  }, 15_000);
  api.put(statefulPod('dbh-3', '10.0.3.3'));
  api.put(headlessSlice(['10.0.3.1', '10.0.3.2', '10.0.3.3']));
  await eventually(() => assert.deepEqual(listeners(), ['0.0.0.0_80', '10.0.3.2_5432', '10.0.3.3_5432']), 15_000);
  await eventually(() => assert.ok(names().includes('dbh-3.dbh.ns.svc.cluster.local -> 10.0.3.3'), `no dbh-3 in ${names().join('; ')}`), 15_000);
  api.put(headlessSlice(['10.0.3.1', '10.0.3.3']));
  await eventually(() => assert.deepEqual(listeners(), ['0.0.0.0_80', '10.0.3.3_5432']), 15_000);
  await eventually(() => assert.deepEqual(names(), ['dbh-1.dbh.ns.svc.cluster.local -> 10.0.3.1', 'dbh-3.dbh.ns.svc.cluster.local -> 10.0.3.3', 'dbh.ns.svc.cluster.local -> 10.0.3.1,10.0.3.3']), 15_000);
});

test('PILOT_ENABLE_HEADLESS_SERVICE_POD_LISTENERS false: a headless Service\'s DNS names still follow its Pods (an endpoint push with the name table)', { timeout: 60_000 }, async (t) => {
  const { grpc, api } = await discovery(t, { PILOT_ENABLE_HEADLESS_SERVICE_POD_LISTENERS: 'false' });
  const ads = headlessProxy(t, grpc);
  const names = headlessNames(t, grpc);
  await eventually(() => assert.notEqual(ads.version(TypeUrl.Listener), ''), 15_000);
  await eventually(() => assert.deepEqual(names(), ['dbh-1.dbh.ns.svc.cluster.local -> 10.0.3.1', 'dbh-2.dbh.ns.svc.cluster.local -> 10.0.3.2', 'dbh.ns.svc.cluster.local -> 10.0.3.1,10.0.3.2']), 15_000);
  const listenersVersion = ads.version(TypeUrl.Listener);
  api.put(headlessSlice(['10.0.3.2']));
  await eventually(() => assert.deepEqual(names(), ['dbh-2.dbh.ns.svc.cluster.local -> 10.0.3.2', 'dbh.ns.svc.cluster.local -> 10.0.3.2']), 15_000);
  assert.equal(ads.version(TypeUrl.Listener), listenersVersion, 'no listener push for it');
});
