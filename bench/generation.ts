// The discovery server's generators alone (no gRPC, no server): the CPU each change costs them for
// every proxy, with SotW subscriptions (CDS/LDS wildcard, RDS `80`, EDS every outbound cluster).
// Same mesh as `xds` (SERVICES ServiceEntries in NAMESPACES namespaces, one WorkloadEntry per
// proxy); the security filters are one shared RBAC filter per snapshot, as the security builders
// share them. `npm run bench -- xds-generation`; PROFILE_DIR writes a CPU profile per step.
import { create } from '@bufbuild/protobuf';
import { anyPack } from '@bufbuild/protobuf/wkt';
import type { AnyResource } from '../src/api/types.js';
import { setScopeLevel } from '../src/common/log.js';
import { MemoryStore } from '../src/config/memory.js';
import { NodeSchema } from '../src/gen/envoy/config/core/v3/base_pb.js';
import { HttpFilterSchema, type HttpFilter } from '../src/gen/envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager_pb.js';
import { RBACSchema } from '../src/gen/envoy/extensions/filters/http/rbac/v3/rbac_pb.js';
import { TypeUrl } from '../src/envoy/types.js';
import { PushContext } from '../src/model/push-context.js';
import { AggregateRegistry } from '../src/registry/aggregate.js';
import { ServiceEntryRegistry } from '../src/registry/serviceentry.js';
import type { ProxyInfo, Subscription } from '../src/xds/generator.js';
import { createMeshGenerators } from '../src/xds/generators/index.js';
import { StepProfiler } from './profiler.js';

const SERVICES = Number(process.env.SERVICES ?? 1000);
const PROXIES = Number(process.env.PROXIES ?? 2000);
const NAMESPACES = Number(process.env.NAMESPACES ?? 10);
const profiler = process.env.PROFILE_DIR ? await StepProfiler.start(process.env.PROFILE_DIR) : undefined;
setScopeLevel('model', 'error');

const NET = 'networking.mesh.io/v1';
const ns = (i: number): string => `ns-${i % NAMESPACES}`;
const ipOf = (j: number): string => `10.${(j >> 16) & 255}.${(j >> 8) & 255}.${j & 255}`;
const serviceEntry = (i: number): AnyResource => ({
  apiVersion: NET,
  kind: 'ServiceEntry',
  metadata: { namespace: ns(i), name: `svc-${i}` },
  spec: {
    hosts: [`svc-${i}.${ns(i)}.svc.cluster.local`],
    addresses: [`240.240.${(i >> 8) & 255}.${i & 255}`],
    location: 'MESH_INTERNAL',
    resolution: 'STATIC',
    ports: [{ number: 80, name: 'http', protocol: 'HTTP', targetPort: 8080 }],
    workloadSelector: { labels: { app: `svc-${i}` } },
  },
});
const workloadEntry = (j: number, i = j % SERVICES, address = ipOf(j)): AnyResource => ({
  apiVersion: NET,
  kind: 'WorkloadEntry',
  metadata: { namespace: ns(i), name: `svc-${i}-${j}` },
  spec: { address, labels: { app: `svc-${i}` }, serviceAccount: `svc-${i}` },
});

const store = new MemoryStore();
for (let i = 0; i < SERVICES; i++) store.apply(serviceEntry(i));
for (let j = 0; j < PROXIES; j++) store.apply(workloadEntry(j));
store.markSynced();
const registry = new AggregateRegistry([new ServiceEntryRegistry(store, 'c1')]);
const settle = (): Promise<void> => new Promise((r) => setTimeout(r, 20));
await settle();

let push = PushContext.build({ config: store, registry, domain: 'cluster.local', clusterId: 'c1' });
let policyVersion = 0;
// One filter list per policy version: the security builders hand the same objects to every proxy
// the same policies select, across snapshots while the policies are unchanged.
const filters = new Map<number, HttpFilter[]>();
const rbacFilters = (): HttpFilter[] => {
  let f = filters.get(policyVersion);
  if (!f) {
    const rbac = create(RBACSchema, { rules: { policies: { [`policy-${policyVersion}`]: {} } } });
    filters.set(policyVersion, (f = [create(HttpFilterSchema, { name: 'envoy.filters.http.rbac', configType: { case: 'typedConfig', value: anyPack(RBACSchema, rbac) } })]));
  }
  return f;
};
const generators = createMeshGenerators({ pushContext: () => push, inboundHttpFilters: rbacFilters });

const proxies: ProxyInfo[] = Array.from({ length: PROXIES }, (_, j) => {
  const i = j % SERVICES;
  const id = `sidecar~${ipOf(j)}~svc-${i}-${j}.${ns(i)}~${ns(i)}.svc.cluster.local`;
  return { id, metadata: { NAMESPACE: ns(i), LABELS: { app: `svc-${i}` }, SERVICE_ACCOUNT: `svc-${i}` }, node: create(NodeSchema, { id }), connectionId: `c${j}`, peer: 'ipv4:127.0.0.1:1' };
});
const wildcard: Subscription = { wildcard: true, names: new Set() };
const byName = (names: Iterable<string>): Subscription => ({ wildcard: false, names: new Set(names) });
const routes = byName(['80']);
let endpoints = byName([]);
const subscriptionOf = (typeUrl: string): Subscription => (typeUrl === TypeUrl.RouteConfiguration ? routes : typeUrl === TypeUrl.ClusterLoadAssignment ? endpoints : wildcard);

async function generateAll(types: readonly string[]): Promise<void> {
  for (const proxy of proxies) for (const typeUrl of types) await generators.get(typeUrl)!.generate({ proxy, typeUrl, subscription: subscriptionOf(typeUrl) });
}

const ALL = [TypeUrl.Cluster, TypeUrl.ClusterLoadAssignment, TypeUrl.Listener, TypeUrl.RouteConfiguration];
console.log(`generators alone, ${SERVICES} ServiceEntry services in ${NAMESPACES} namespaces, ${PROXIES} sidecars, Node ${process.version}`);
console.log(`${'step'.padEnd(44)}generation CPU (ms)  wall (ms)`);
async function step(label: string, change: () => unknown, types: readonly string[]): Promise<void> {
  await change();
  await settle();
  await profiler?.begin();
  const cpu = process.cpuUsage();
  const start = performance.now();
  push = PushContext.build({ config: store, registry, domain: 'cluster.local', clusterId: 'c1' });
  await generateAll(types);
  const used = process.cpuUsage(cpu);
  const wall = performance.now() - start;
  await profiler?.end(label);
  console.log(`${label.padEnd(44)}${String(Math.round((used.user + used.system) / 1000)).padEnd(21)}${Math.round(wall)}`);
}

await step(
  'initial CDS+EDS+LDS+RDS',
  async () => {
    const clusters = await generators.get(TypeUrl.Cluster)!.generate({ proxy: proxies[0]!, typeUrl: TypeUrl.Cluster, subscription: wildcard });
    endpoints = byName(clusters.map((c) => c.name).filter((n) => n.startsWith('outbound|')));
  },
  ALL,
);
await step('AuthorizationPolicy edit (LDS)', () => policyVersion++, [TypeUrl.Listener]);
await step('new WorkloadEntry of one service (EDS)', () => store.apply(workloadEntry(PROXIES, 7, '10.200.0.1')), [TypeUrl.ClusterLoadAssignment]);
await step('new ServiceEntry (CDS+EDS+LDS+RDS)', () => store.apply(serviceEntry(SERVICES)), ALL);
await step('another ServiceEntry (CDS+EDS+LDS+RDS)', () => store.apply(serviceEntry(SERVICES + 1)), ALL);
