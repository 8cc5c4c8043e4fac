// Benchmark of the ADS server alone (protocol, versioning, encoding, sending), with fixed
// resources in place of the mesh's generators: SERVICES clusters and listeners, PROXIES SotW
// streams from a child process (ads-clients.ts). Prints a table of push times, CPU and RSS.
//
//   npx tsx bench/xds/ads-server.ts            # SERVICES=1000 PROXIES=2000 by default
import { fork } from 'node:child_process';
import { extname } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ClusterSchema, Cluster_DiscoveryType } from '../../src/gen/envoy/config/cluster/v3/cluster_pb.js';
import { ListenerSchema } from '../../src/gen/envoy/config/listener/v3/listener_pb.js';
import { setScopeLevel } from '../../src/common/log.js';
import type { ResourceGenerator, XdsResource } from '../../src/xds/generator.js';
import { XdsServer } from '../../src/xds/server.js';
import { pack, TypeUrl } from '../../src/xds/types.js';

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

// The sibling script with this module's extension: .ts under tsx, .js once built to dist/.
const ext = extname(fileURLToPath(import.meta.url));
const clients = fork(fileURLToPath(new URL(`./ads-clients${ext}`, import.meta.url)), [address, String(PROXIES)], {
  execArgv: ext === '.ts' ? ['--import', 'tsx'] : [],
});
const nextMessage = (): Promise<{ ready?: boolean; received?: number }> => new Promise((resolve) => clients.once('message', resolve));

const rows: string[][] = [['step', 'all proxies have it (ms)', 'server CPU (ms)', 'server RSS (MB)']];
const rss = (): string => (process.memoryUsage().rss / 1e6).toFixed(0);

let cpu = process.cpuUsage();
let start = performance.now();
await nextMessage();
rows.push([`connect + initial CDS and LDS (${SERVICES} each)`, (performance.now() - start).toFixed(0), (cpuMs(process.cpuUsage(cpu))).toFixed(0), rss()]);

for (const [label, types] of [
  ['one cluster changed: CDS push', [TypeUrl.Cluster]],
  ['one cluster and one listener changed: CDS+LDS push', [TypeUrl.Cluster, TypeUrl.Listener]],
] as const) {
  const tag = String(performance.now());
  resources.get(TypeUrl.Cluster)![0] = cluster(0, tag);
  if (types.length > 1) resources.get(TypeUrl.Listener)![0] = listener(0, tag);
  clients.send({ expect: PROXIES * types.length });
  const done = nextMessage();
  cpu = process.cpuUsage();
  start = performance.now();
  await server.pushAll({ reason: 'bench', types: new Set(types) });
  const serverCpu = cpuMs(process.cpuUsage(cpu));
  const { received } = await done;
  rows.push([label, received!.toFixed(0), serverCpu.toFixed(0), rss()]);
}

function cpuMs(u: NodeJS.CpuUsage): number {
  return (u.user + u.system) / 1000;
}

const widths = rows[0]!.map((_, c) => Math.max(...rows.map((r) => r[c]!.length)));
console.log(`ADS server, ${PROXIES} SotW streams, ${SERVICES} clusters and listeners`);
for (const r of rows) console.log(r.map((cell, c) => cell.padEnd(widths[c]!)).join('  '));
clients.kill();
server.close();
