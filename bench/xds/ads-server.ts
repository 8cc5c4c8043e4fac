// Benchmark of the ADS server alone (protocol, versioning, encoding, sending), with fixed
// resources in place of the mesh's generators: SERVICES clusters and listeners, PROXIES SotW
// streams from a child process (ads-clients.ts). Prints a table of push times, CPU and RSS.
//
//   npx tsx bench/xds/ads-server.ts            # SERVICES=1000 PROXIES=2000 by default
import { ClusterSchema, Cluster_DiscoveryType } from '../../src/gen/envoy/config/cluster/v3/cluster_pb.js';
import { ListenerSchema } from '../../src/gen/envoy/config/listener/v3/listener_pb.js';
import { setScopeLevel } from '../../src/common/log.js';
import type { ResourceGenerator, XdsResource } from '../../src/xds/generator.js';
import { XdsServer } from '../../src/xds/server.js';
import { pack, TypeUrl } from '../../src/envoy/types.js';
import { cpuMs, printTable, SimulatedProxies } from './clients.js';

const SERVICES = Number(process.env.SERVICES ?? 1000);
const PROXIES = Number(process.env.PROXIES ?? 2000);
setScopeLevel('ads', 'warn');

function cluster(i: number, tag = ''): XdsResource {
  const name = `outbound|80||svc-${i}.ns.svc.cluster.local`;
  return {
    name,
    resource: pack(ClusterSchema, {
      name,
      altStatName: tag,
      clusterDiscoveryType: { case: 'type', value: Cluster_DiscoveryType.EDS },
      edsClusterConfig: { edsConfig: { configSourceSpecifier: { case: 'ads', value: {} } } },
    }),
  };
}

function listener(i: number, tag = ''): XdsResource {
  const name = `0.0.0.0_${10000 + i}`;
  return {
    name,
    resource: pack(ListenerSchema, {
      name,
      statPrefix: tag,
      address: { address: { case: 'socketAddress', value: { address: '0.0.0.0', portSpecifier: { case: 'portValue', value: 10000 + i } } } },
    }),
  };
}

// Shared arrays of shared objects, as a generator with a cache would hand out.
const resources = new Map<string, XdsResource[]>([
  [TypeUrl.Cluster, Array.from({ length: SERVICES }, (_, i) => cluster(i))],
  [TypeUrl.Listener, Array.from({ length: SERVICES }, (_, i) => listener(i))],
]);
const generator = (typeUrl: string): ResourceGenerator => ({ generate: () => resources.get(typeUrl)! });
const server = new XdsServer({ generators: new Map([...resources.keys()].map((t) => [t, generator(t)])) });
const address = `127.0.0.1:${await server.listen('127.0.0.1:0')}`;

const clients = new SimulatedProxies(address, PROXIES);

const rows: string[][] = [['step', 'all proxies have it (ms)', 'server CPU (ms)', "proxies' CPU (ms)", 'server RSS (MB)']];
const rss = (): string => (process.memoryUsage().rss / 1e6).toFixed(0);

let cpu = process.cpuUsage();
let start = performance.now();
const connected = await clients.connect({ nodes: Array.from({ length: PROXIES }, (_, i) => ({ id: `sidecar~10.1.${i >> 8}.${i & 255}~p-${i}.ns~ns.svc.cluster.local`, metadata: { NAMESPACE: 'ns' } })) });
rows.push([`connect + initial CDS and LDS (${SERVICES} each)`, (performance.now() - start).toFixed(0), cpuMs(process.cpuUsage(cpu)).toFixed(0), connected.cpuMs.toFixed(0), rss()]);

for (const [label, types] of [
  ['one cluster changed: CDS push', [TypeUrl.Cluster]],
  ['one cluster and one listener changed: CDS+LDS push', [TypeUrl.Cluster, TypeUrl.Listener]],
] as const) {
  const tag = String(performance.now());
  resources.get(TypeUrl.Cluster)![0] = cluster(0, tag);
  if (types.length > 1) resources.get(TypeUrl.Listener)![0] = listener(0, tag);
  const done = clients.expect(Object.fromEntries(types.map((t) => [t, PROXIES])));
  cpu = process.cpuUsage();
  start = performance.now();
  await server.pushAll({ reason: 'bench', types: new Set(types) });
  const serverCpu = cpuMs(process.cpuUsage(cpu));
  const arrived = await done;
  rows.push([label, (performance.now() - start).toFixed(0), serverCpu.toFixed(0), arrived.cpuMs.toFixed(0), rss()]);
}

printTable(`ADS server, ${PROXIES} SotW streams, ${SERVICES} clusters and listeners`, rows);
clients.close();
server.close();
