// Benchmark of the whole discovery server: the real pipeline (file config store -> ServiceEntry
// registry -> PushContext -> JWKS/security filters -> generators with the XDS cache -> XdsServer,
// debounced pushes), SERVICES ServiceEntries with a WorkloadEntry per proxy, PROXIES streams from a
// child process (ads-clients.ts) that subscribe like Envoy (CDS, EDS for every cluster, LDS, RDS)
// and ACK everything: first SotW streams, then (the SotW ones closed) Delta streams, through the
// same steps. Times are end to end: from the file write to the moment the last proxy has received
// the new version. A step then waits until the server has read every proxy's reply (a SotW EDS
// ACK names every cluster, 45 KB here): that time is the next column, the server CPU is counted up
// to it, and the next step starts only then, not behind this one's replies. For each step, the
// server's own pilot_proxy_convergence_time and pilot_proxy_queue_time p50/p99 over that step.
// Prints a table.
//
//   npm run bench -- xds          # SERVICES=1000 PROXIES=2000 NAMESPACES=10 PROTOCOLS=sotw,delta by default
//   PROFILE_DIR=/tmp/p npm run bench -- xds   # also a CPU profile of the server per step (<dir>/<n>-<step>.cpuprofile);
//                                             # node dist/bench/profile-summary.js <file> prints its top functions
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DiscoveryServer } from '../../src/cli/discovery-server.js';
import { loadSettings, setting } from '../../src/common/env.js';
import { setScopeLevel } from '../../src/common/log.js';
import { TypeUrl } from '../../src/envoy/types.js';
import { localDiscoveryOptions } from '../../test/security/fixtures.js';
import { cpuMs, printTable, PeakRss, SimulatedProxies } from './clients.js';
import { quantileMs, snapshot } from './metrics.js';
import { StepProfiler } from '../profiler.js';

const SERVICES = Number(process.env.SERVICES ?? 1000);
const PROXIES = Number(process.env.PROXIES ?? 2000);
const NAMESPACES = Number(process.env.NAMESPACES ?? 10);
const PROTOCOLS = (process.env.PROTOCOLS ?? 'sotw,delta').split(',') as Array<'sotw' | 'delta'>;
const profiler = process.env.PROFILE_DIR ? await StepProfiler.start(process.env.PROFILE_DIR) : undefined;
const DOMAIN = 'cluster.local';

loadSettings('discovery', process.env);
for (const s of ['ads', 'model', 'default', 'source']) setScopeLevel(s, 'warn');

const ns = (i: number): string => `ns-${i % NAMESPACES}`;
const host = (i: number): string => `svc-${i}.${ns(i)}.svc.${DOMAIN}`;
/** Proxy j runs a workload of service j % SERVICES at 10.<j>. */
const ipOf = (j: number): string => `10.${(j >> 16) & 255}.${(j >> 8) & 255}.${j & 255}`;

function serviceEntry(i: number): string {
  return `apiVersion: networking.mesh.io/v1
kind: ServiceEntry
metadata: {name: svc-${i}, namespace: ${ns(i)}}
spec:
  hosts: [${host(i)}]
  addresses: [240.240.${(i >> 8) & 255}.${i & 255}]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{number: 80, name: http, protocol: HTTP, targetPort: 8080}]
  workloadSelector: {labels: {app: svc-${i}}}`;
}

function workloadEntry(j: number, i = j % SERVICES, address = ipOf(j)): string {
  return `apiVersion: networking.mesh.io/v1
kind: WorkloadEntry
metadata: {name: svc-${i}-${j}, namespace: ${ns(i)}}
spec:
  address: ${address}
  labels: {app: svc-${i}}
  serviceAccount: svc-${i}`;
}

function rootPolicy(paths: string[]): string {
  return `apiVersion: security.mesh.io/v1
kind: AuthorizationPolicy
metadata: {name: mesh-wide, namespace: mesh-system}
spec:
  action: ALLOW
  rules:
  - from: [{source: {namespaces: [${[...Array(NAMESPACES).keys()].map((n) => `ns-${n}`).join(', ')}]}}]
    to: [{operation: {paths: [${paths.map((p) => JSON.stringify(p)).join(', ')}]}}]`;
}

const dir = mkdtempSync(join(tmpdir(), 'mesh-bench-xds-'));
for (let n = 0; n < NAMESPACES; n++) {
  const docs: string[] = [];
  for (let i = n; i < SERVICES; i += NAMESPACES) docs.push(serviceEntry(i));
  for (let j = 0; j < PROXIES; j++) if (j % SERVICES % NAMESPACES === n) docs.push(workloadEntry(j));
  writeFileSync(join(dir, `ns-${n}.yaml`), docs.join('\n---\n'));
}
writeFileSync(join(dir, 'mesh-system.yaml'), rootPolicy(['/api/*']));

// The flags of a local `pilot-discovery discovery --configDir` on ephemeral ports.
const server = new DiscoveryServer({ ...localDiscoveryOptions(dir), domain: DOMAIN });
const rss = new PeakRss();
let peakRss = 0;
const cpuStart = process.cpuUsage();
await server.start();
const rows: string[][] = [
  ['step', 'all proxies have it (ms)', 'replies read (ms)', 'server CPU (ms)', "proxies' CPU (ms)", 'server peak RSS (MB)', 'proxies read (MB)', 'convergence p50/p99 (ms)', 'queue p50/p99 (ms)', 'responses received'],
];
const mb = (b: number): string => (b / 1e6).toFixed(0);
const fmt = (counts: Record<string, number>): string =>
  Object.entries(counts)
    .map(([t, n]) => `${t.slice(t.lastIndexOf('.') + 1)}=${n}`)
    .join(' ');

const nodes = Array.from({ length: PROXIES }, (_, j) => {
  const i = j % SERVICES;
  return {
    id: `sidecar~${ipOf(j)}~svc-${i}-${j}.${ns(i)}~${ns(i)}.svc.${DOMAIN}`,
    metadata: { NAMESPACE: ns(i), LABELS: { app: `svc-${i}` }, INSTANCE_IPS: ipOf(j), SERVICE_ACCOUNT: `svc-${i}` },
  };
});
const eds = Array.from({ length: SERVICES }, (_, i) => `outbound|80||${host(i)}`);

function percentiles(before: Map<number, number>, after: Map<number, number>): string {
  const lastBoundMs = Math.max(...[...after.keys()].filter(Number.isFinite)) * 1000;
  const ms = (n: number | undefined): string => (n === undefined ? '-' : n === Infinity ? `>${lastBoundMs}` : n.toFixed(0));
  return `${ms(quantileMs(before, after, 0.5))}/${ms(quantileMs(before, after, 0.99))}`;
}

/** Resolves once the server has read and applied every reply to what it sent. */
async function repliesRead(): Promise<void> {
  while (server.xds.awaitsReplies()) await new Promise((r) => setTimeout(r, 10));
}

/** What a step's change resolves to: the responses the proxies counted, their own CPU time and the bytes they read. */
type Arrival = { received?: Record<string, number>; cpuMs: number; bytes: number };

async function step(clients: SimulatedProxies, label: string, expect: Record<string, number> | undefined, change: () => Promise<Arrival> | void): Promise<void> {
  rss.reset();
  const [convergence, queue] = [await snapshot('pilot_proxy_convergence_time'), await snapshot('pilot_proxy_queue_time')];
  const cpu = process.cpuUsage();
  const start = performance.now();
  await profiler?.begin();
  const done = expect ? clients.expect(expect) : undefined;
  const changed = await change();
  const arrival = done ? await done : changed;
  const elapsed = performance.now() - start;
  await repliesRead();
  const settled = performance.now() - start;
  const used = cpuMs(process.cpuUsage(cpu));
  await profiler?.end(label);
  const peak = rss.peak();
  peakRss = Math.max(peakRss, peak);
  rows.push([
    label,
    elapsed.toFixed(0),
    settled.toFixed(0),
    used.toFixed(0),
    arrival ? arrival.cpuMs.toFixed(0) : '-',
    mb(peak),
    arrival ? mb(arrival.bytes) : '-',
    percentiles(convergence, await snapshot('pilot_proxy_convergence_time')),
    percentiles(queue, await snapshot('pilot_proxy_queue_time')),
    fmt(arrival?.received ?? {}),
  ]);
}

// Each protocol's steps change the config anew: its own policy path, endpoint and service.
for (const [round, protocol] of PROTOCOLS.entries()) {
  const clients = new SimulatedProxies(server.addresses.grpc!, PROXIES, protocol);
  await step(clients, `${protocol}: ${PROXIES} proxies connect, initial CDS+EDS+LDS+RDS`, undefined, () => clients.connect({ nodes, eds, rds: ['80'] }));
  await step(clients, `${protocol}: AuthorizationPolicy edit in mesh-system (LDS)`, { [TypeUrl.Listener]: PROXIES }, () =>
    writeFileSync(join(dir, 'mesh-system.yaml'), rootPolicy(['/api/*', `/health-${round}`])),
  );
  await step(clients, `${protocol}: new WorkloadEntry of one service (EDS)`, { [TypeUrl.ClusterLoadAssignment]: PROXIES }, () =>
    writeFileSync(join(dir, `extra-endpoint-${round}.yaml`), workloadEntry(PROXIES + round, 0, `10.255.255.${round + 1}`)),
  );
  await step(clients, `${protocol}: new ServiceEntry (CDS+RDS)`, { [TypeUrl.Cluster]: PROXIES, [TypeUrl.RouteConfiguration]: PROXIES }, () =>
    writeFileSync(join(dir, `extra-service-${round}.yaml`), serviceEntry(SERVICES + round)),
  );
  clients.close();
}

const total = cpuMs(process.cpuUsage(cpuStart));
printTable(
  `discovery server, ${SERVICES} ServiceEntry services in ${NAMESPACES} namespaces, ${PROXIES} proxies (${PROXIES} WorkloadEntries), ` +
    `XDS cache ${setting('PILOT_ENABLE_XDS_CACHE') ? `on (size ${setting('PILOT_XDS_CACHE_SIZE')})` : 'off'}, Node ${process.version}`,
  rows,
);
const memory = process.memoryUsage();
console.log(`server total: ${total.toFixed(0)} ms CPU over ${(process.uptime() * 1000).toFixed(0)} ms, peak RSS ${mb(peakRss)} MB, heap used ${mb(memory.heapUsed)} MB, external ${mb(memory.external)} MB`);
await profiler?.stop();
await server.stop();
rmSync(dir, { recursive: true, force: true });
