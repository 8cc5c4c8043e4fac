// bench/dataplane: the app reached directly, through nginx (one worker, the C proxy every table is
// compared with), through the Node floor (node-floor.mjs: about the least a one-thread Node proxy
// does per request, so the nearest to nginx any one-worker Node proxy comes on this machine), and
// through mesh-proxy without policy and with JWT + RBAC, over HTTP/1.1 keep-alive; mesh-proxy
// through one sidecar (the app's, its inbound listener) and through two, as a call between two
// workloads goes: the client workload's (`sleep`) sidecar, its outbound listener, then the app's
// sidecar's inbound listener, two proxy processes as in a cluster; two hops through a route table
// of 20 VirtualService routes where the request matches the last; and the same two hops over mesh
// mTLS (the secured local mesh: auto mTLS between the two sidecars). For each path: the maximum
// requests/s with wrk (a C load generator, one thread, 20 connections), latency at a fixed 1000
// requests/s with an open-loop client (open-loop.ts, microsecond HDR histogram, its own process,
// after a warm-up at that rate), and from /proc the proxies' CPU per 1000 requests/s (both
// sidecars' together for two hops) and each proxy's RSS (worker processes included).
// After each policy's one-hop row, alternated rounds (alternated.ts) give that row's ratios to nginx
// and to the floor as a median over short back-to-back passes.
//   npm run bench -- dataplane [--seconds N] [--concurrency N] [--rounds N] [--round-seconds N]
//   (--concurrency: the proxy's workers, default 1; --rounds: alternated rounds, default 5, 0 for none)
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { get as httpGet, request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort, freePorts, startLocalMesh } from '../../samples/local-mesh.js';
import { startNginx } from './nginx.js';
import { startChildServer } from './child-server.js';
import type { OpenLoopResult } from './open-loop.js';
import { adminToken, applyJwtRbac, until } from './mesh-policy.js';
import { alternate, alternatedTable, type Alternated, type Contender } from './alternated.js';
import { numberOption } from './options.js';
import { childPid, cpuSeconds, rssMiB } from './procstat.js';
import { wrk, type WrkResult } from './wrk.js';
import { siblingScript } from '../sibling.js';

const RATE = 1000;
/** Seconds at the fixed rate before the recorded ones (open-loop.ts: the steady state is measured). */
const WARM_UP_SECONDS = 2;

/** The open-loop client in its own process (so that it never shares an event loop with what it measures). */
async function fixedRate(url: string, seconds: number, headers: Record<string, string>): Promise<OpenLoopResult> {
  const script = siblingScript(import.meta.url, './open-loop');
  const child = spawn(process.execPath, [...script.execArgv, script.path, url, String(RATE), String(seconds), JSON.stringify(headers), String(WARM_UP_SECONDS)], { stdio: ['ignore', 'pipe', 'inherit'] });
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  const code = await new Promise((r) => child.on('close', r));
  if (code !== 0) throw new Error(`the open-loop client failed (exit ${String(code)})`);
  return JSON.parse(out) as OpenLoopResult;
}

/** The x-forwarded-client-cert the app saw for a call to the service's outbound port ('' if none). */
function callerSeen(port: number, host: string): Promise<string> {
  return new Promise((resolve) => {
    const req = request({ host: '127.0.0.1', port, path: '/headers', headers: { host } }, (res) => {
      let body = '';
      res.on('data', (d: Buffer) => (body += d.toString()));
      res.on('end', () => {
        const headers = res.statusCode === 200 ? (JSON.parse(body) as { headers: Record<string, string> }).headers : {};
        resolve(Object.entries(headers).find(([k]) => k.toLowerCase() === 'x-forwarded-client-cert')?.[1] ?? '');
      });
    });
    req.on('error', () => resolve(''));
    req.end();
  });
}

/**
 * A VirtualService of 20 routes on `/ip`, each matching its own `x-bench-route` value; the last one
 * marks its responses and splits them 50/50 between two subsets of httpbin (a DestinationRule whose
 * label-less subsets both hold the service's endpoints), so the measured request walks the whole
 * table and takes a weighted_clusters pick.
 */
function twentyRoutes(): string {
  const split = [
    { destination: { host: 'httpbin', subset: 'a' }, weight: 50 },
    { destination: { host: 'httpbin', subset: 'b' }, weight: 50 },
  ];
  const route = (i: number) => ({
    name: `r${i}`,
    match: [{ uri: { prefix: '/ip' }, headers: { 'x-bench-route': { exact: `r${i}` } } }],
    route: i === 20 ? split : [{ destination: { host: 'httpbin' } }],
    ...(i === 20 ? { headers: { response: { set: { 'x-bench-matched': 'r20' } } } } : {}),
  });
  const vs = { apiVersion: 'networking.mesh.io/v1', kind: 'VirtualService', metadata: { namespace: 'default', name: 'bench-twenty-routes' }, spec: { hosts: ['httpbin'], http: Array.from({ length: 20 }, (_, i) => route(i + 1)) } };
  const dr = { apiVersion: 'networking.mesh.io/v1', kind: 'DestinationRule', metadata: { namespace: 'default', name: 'bench-split-subsets' }, spec: { host: 'httpbin', subsets: [{ name: 'a' }, { name: 'b' }] } };
  return `${JSON.stringify(dr)}\n---\n${JSON.stringify(vs)}\n`;
}

/** The upstream_rq_total of the outbound subset clusters `a` and `b` of the service (admin /stats). */
async function subsetRequests(adminPort: number): Promise<{ a: number; b: number }> {
  const text = await (await fetch(`http://127.0.0.1:${adminPort}/stats?filter=upstream_rq_total`)).text();
  const count = (subset: string) => Number(new RegExp(`^cluster\\.outbound\\|\\d+\\|${subset}\\|httpbin\\.default\\.svc\\.cluster\\.local\\.upstream_rq_total: (\\d+)$`, 'm').exec(text)?.[1] ?? 0);
  return { a: count('a'), b: count('b') };
}

/** The x-bench-matched response header; node:http, as fetch drops the Host header the route needs. */
function matchedRoute(url: string, headers: Record<string, string>): Promise<string | undefined> {
  return new Promise((resolve) => {
    const req = httpGet(url, { headers }, (res) => {
      res.resume();
      resolve(res.headers['x-bench-matched'] as string | undefined);
    });
    req.on('error', () => resolve('unreachable'));
  });
}

interface Row {
  name: string;
  max: WrkResult;
  fixed: OpenLoopResult;
  cpuPer1k?: number;
  /** Each measured proxy's RSS, in the order of its pids (the client's sidecar first). */
  rss?: number[];
}

async function main(): Promise<void> {
  const seconds = numberOption('--seconds', 10);
  const concurrency = numberOption('--concurrency', 1);
  const rounds = numberOption('--rounds', 5);
  const roundSeconds = numberOption('--round-seconds', 5);
  const ports = await freePorts();
  const mesh = await startLocalMesh({ stateDir: mkdtempSync(join(tmpdir(), 'bench-mesh-')), issuer: true, client: true, ports, output: 'pipe', proxyConcurrency: concurrency });
  const nginxPort = await freePort();
  const nginx = await startNginx(nginxPort, ports.app);
  const floorPort = await freePort();
  const floor = await startChildServer({
    name: 'the Node floor',
    command: process.execPath,
    args: [join(process.cwd(), 'bench', 'dataplane', 'node-floor.mjs'), String(floorPort), String(ports.app)],
    ready: `http://127.0.0.1:${floorPort}/ip`,
    stopSignal: 'SIGTERM',
  });
  const rows: Row[] = [];
  const alternations: Alternated[] = [];
  const nginxContender: Contender = { name: 'nginx', url: `http://127.0.0.1:${nginxPort}/ip`, headers: {} };
  const floorContender: Contender = { name: 'Node floor', url: `http://127.0.0.1:${floorPort}/ip`, headers: {} };
  const alternateWith = async (proxy: Contender) => {
    if (rounds > 0) alternations.push(await alternate(nginxContender, floorContender, proxy, rounds, roundSeconds));
  };
  try {
    const inbound = `http://127.0.0.1:${ports.inbound}/ip`;
    const outbound = `http://127.0.0.1:${ports.service}/ip`;
    const service = { host: 'httpbin.default.svc.cluster.local' };
    const token = await adminToken(mesh.issuerUrl!);
    const proxy = childPid(mesh.agent.pid!, 'mesh-proxy');
    const pair = [childPid(mesh.clientAgent!.pid!, 'mesh-proxy'), proxy];
    const measure = async (name: string, url: string, headers: Record<string, string>, pids: number[], warmUp = 1) => {
      await wrk(url, warmUp, headers); // warm-up: JIT, connection pools
      const max = await wrk(url, seconds, headers);
      const cpu = () => pids.reduce((sum, pid) => sum + cpuSeconds(pid), 0);
      const before = cpu();
      const fixed = await fixedRate(url, seconds, headers);
      const row: Row = { name, max, fixed };
      if (pids.length) {
        row.cpuPer1k = ((cpu() - before) / seconds) * (1000 / RATE) * (fixed.sent / Math.max(fixed.completed, 1));
        row.rss = pids.map(rssMiB);
      }
      rows.push(row);
    };
    await measure('direct to the app', `http://127.0.0.1:${ports.app}/ip`, {}, []);
    await measure('nginx, 1 worker', `http://127.0.0.1:${nginxPort}/ip`, {}, [nginx.pid]);
    await measure('Node floor (bare forwarder, 1 thread)', `http://127.0.0.1:${floorPort}/ip`, {}, [floor.pid]);
    // No policy: the RequestAuthentication the launcher wrote is removed first.
    execFileSync('rm', ['-f', join(mesh.configDir, '01-require-jwt.yaml')]);
    await until(async () => (await fetch(inbound, { headers: { authorization: 'Bearer x' } })).status === 200, 'the policy-free config');
    await measure('mesh-proxy, no policy', inbound, {}, [proxy]);
    await alternateWith({ name: 'mesh-proxy, no policy', url: inbound, headers: {} });
    await measure('two sidecar hops, no policy', outbound, service, pair);
    // 20 VirtualService routes for the service, the request matching only the last one.
    writeFileSync(join(mesh.configDir, '04-twenty-routes.yaml'), twentyRoutes());
    const routed = { ...service, 'x-bench-route': 'r20' };
    await until(async () => (await matchedRoute(outbound, routed)) === 'r20', 'the 20-route VirtualService');
    await measure('two sidecar hops, 20 routes', outbound, routed, pair);
    // The split was taken: both subset clusters (the client's sidecar's) served a fair share of the measured requests.
    const split = await subsetRequests(ports.clientAdmin);
    if (Math.min(split.a, split.b) < 0.4 * (split.a + split.b)) throw new Error(`the 20th route's 50/50 split was not exercised: subset a ${split.a}, b ${split.b} requests`);
    execFileSync('rm', ['-f', join(mesh.configDir, '04-twenty-routes.yaml')]);
    await until(async () => (await matchedRoute(outbound, routed)) === undefined, 'the route table without the VirtualService');
    await applyJwtRbac(mesh.configDir, mesh.issuerUrl!, inbound);
    await measure('mesh-proxy, JWT + RBAC', inbound, { authorization: `Bearer ${token}` }, [proxy]);
    await alternateWith({ name: 'mesh-proxy, JWT + RBAC', url: inbound, headers: { authorization: `Bearer ${token}` } });
    await measure('two sidecar hops, JWT + RBAC', outbound, { ...service, authorization: `Bearer ${token}` }, pair);
    await mesh.stop();
    const secured = await startLocalMesh({ stateDir: mkdtempSync(join(tmpdir(), 'bench-mesh-mtls-')), secure: true, client: true, ports: await freePorts(), output: 'pipe', proxyConcurrency: concurrency });
    try {
      const securedOutbound = `http://127.0.0.1:${secured.ports.service}/ip`;
      await until(async () => (await callerSeen(secured.ports.service, service.host)).includes('URI=spiffe://cluster.local/ns/sleep/sa/sleep'), 'the mTLS hop from the sleep sidecar');
      const pids = [childPid(secured.clientAgent!.pid!, 'mesh-proxy'), childPid(secured.agent.pid!, 'mesh-proxy')];
      // Fresh proxies, whose TLS path has not run yet (the rows above share two warmed ones).
      await measure('two sidecars over mTLS, no policy', securedOutbound, service, pids, seconds);
    } finally {
      await secured.stop();
    }
  } finally {
    await floor.stop();
    await nginx.stop();
    await mesh.stop();
  }
  process.stdout.write(table(rows, seconds, concurrency));
  for (const a of alternations) process.stdout.write(alternatedTable(a, roundSeconds));
}

function table(rows: Row[], seconds: number, concurrency: number): string {
  const f = (n: number | undefined, d = 0) => (n === undefined ? '-' : n.toFixed(d));
  const direct = rows[0]!;
  const nginx = rows[1]!;
  const floor = rows[2]!;
  const lines = [
    '| path | max req/s (wrk) | × nginx | × Node floor | p50 µs | p90 µs | p99 µs | p99.9 µs | added p90 µs | vCPU per 1000 req/s | RSS MiB (client + app sidecar) | errors/non-2xx |',
    '|---|---|---|---|---|---|---|---|---|---|---|---|',
  ];
  for (const r of rows) {
    const errors = r.max.errors + r.fixed.errors + (r.fixed.sent - r.fixed.completed - r.fixed.errors);
    lines.push(
      `| ${r.name} | ${f(r.max.rps)} | ${f(r.max.rps / nginx.max.rps, 2)} | ${f(r.max.rps / floor.max.rps, 2)} | ${r.fixed.p50} | ${r.fixed.p90} | ${r.fixed.p99} | ${r.fixed.p999} | ${r === direct ? '-' : r.fixed.p90 - direct.fixed.p90} | ${f(r.cpuPer1k, 3)} | ${r.rss ? r.rss.map((m) => f(m)).join(' + ') : '-'} | ${errors}/${r.max.non2xx + r.fixed.non2xx} |`,
    );
  }
  const head = `bench/dataplane: ${seconds} s per run; throughput: wrk -t1 -c20, HTTP/1.1 keep-alive; latency: open-loop ${RATE} req/s over 20 connections after ${WARM_UP_SECONDS} s at that rate; mesh-proxy --concurrency ${concurrency}; nginx 1 worker; the Node floor 1 thread; this machine`;
  return `\n${head}\n${lines.join('\n')}\n`;
}

main().catch((e: unknown) => {
  process.stderr.write(`bench failed: ${(e as Error).message}\n`);
  process.exit(1);
});
