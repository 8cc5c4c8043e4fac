// bench/dataplane: the app reached directly vs through mesh-proxy (no policy) vs through mesh-proxy
// with JWT + RBAC, over HTTP/1.1 keep-alive; each through one sidecar (the inbound listener) and
// through two, as a call between two workloads goes: the client's outbound listener, then the
// server's inbound listener (here both are the local mesh's one proxy). For each: the maximum requests/s, latency percentiles
// at a fixed 1000 requests/s, the proxy's CPU per 1000 requests/s and its RSS. The load generator
// (autocannon) runs in its own process; the proxy's CPU and memory (its worker processes
// included) are read from /proc.
//   npm run bench -- dataplane [--seconds N] [--concurrency N]   (the proxy's workers, default 1)
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseAllDocuments } from 'yaml';
import { freePorts, startLocalMesh } from '../../samples/local-mesh.js';

interface LoadResult {
  rps: number;
  p50: number;
  p90: number;
  p99: number;
  errors: number;
  non2xx: number;
}

const AUTOCANNON = join(process.cwd(), 'node_modules', '.bin', 'autocannon');

/** One autocannon run in a child process; `rate` fixes the request rate, else as fast as it goes. */
async function load(url: string, seconds: number, headers: Record<string, string>, rate?: number): Promise<LoadResult> {
  const args = ['--json', '-c', '20', '-d', String(seconds), ...Object.entries(headers).flatMap(([k, v]) => ['-H', `${k}=${v}`]), ...(rate ? ['-R', String(rate)] : []), url];
  const child = spawn(AUTOCANNON, args, { stdio: ['ignore', 'pipe', 'ignore'] });
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  await new Promise((r) => child.on('close', r));
  const r = JSON.parse(out) as { requests: { average: number }; latency: Record<string, number>; errors: number; non2xx: number };
  return { rps: r.requests.average, p50: r.latency.p50!, p90: r.latency.p90!, p99: r.latency.p99!, errors: r.errors, non2xx: r.non2xx };
}

/** The mesh-proxy process the agent started (a child of the agent). */
function proxyPid(agentPid: number): number {
  for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (ppid === agentPid && readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('mesh-proxy')) return Number(pid);
    } catch {
      // The process ended while we looked.
    }
  }
  throw new Error(`no mesh-proxy child of the agent (pid ${agentPid})`);
}

/** The proxy and its worker processes. */
function withWorkers(pid: number): number[] {
  return [pid, ...readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').split(' ').filter(Boolean).map(Number)];
}

const CLOCK_TICKS = Number(execFileSync('getconf', ['CLK_TCK']).toString().trim());

/** CPU seconds (user + system) the proxy and its workers have used. */
function cpuSeconds(pid: number): number {
  return withWorkers(pid).reduce((sum, p) => {
    const stat = readFileSync(`/proc/${p}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return sum + (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS;
  }, 0);
}

function rssMiB(pid: number): number {
  return withWorkers(pid).reduce((sum, p) => {
    const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${p}/status`, 'utf8'));
    return sum + (m ? Number(m[1]) / 1024 : NaN);
  }, 0);
}

/** The service's endpoint becomes the proxy's inbound listener, so outbound calls take both hops. */
async function throughInbound(configDir: string, inboundPort: number): Promise<void> {
  const file = join(configDir, 'workloads.yaml');
  const docs = parseAllDocuments(readFileSync(file, 'utf8'));
  for (const doc of docs) if (doc.get('kind') === 'WorkloadEntry') doc.setIn(['spec', 'ports', 'http'], inboundPort);
  writeFileSync(file, docs.map((d) => d.toString()).join('---\n'));
}

async function until(check: () => Promise<boolean>, what: string): Promise<void> {
  const deadline = Date.now() + 30_000;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

async function main(): Promise<void> {
  const option = (name: string, dflt: number) => (process.argv.includes(name) ? Number(process.argv[process.argv.indexOf(name) + 1]) : dflt);
  const seconds = option('--seconds', 10);
  const concurrency = option('--concurrency', 1);
  const ports = await freePorts();
  const mesh = await startLocalMesh({ stateDir: mkdtempSync(join(tmpdir(), 'bench-mesh-')), issuer: true, ports, output: 'pipe', proxyConcurrency: concurrency });
  const rows: Array<{ name: string; max: LoadResult; fixed: LoadResult; cpuPer1k?: number; rss?: number }> = [];
  try {
    const app = `http://127.0.0.1:${ports.app}/ip`;
    const inbound = `http://127.0.0.1:${ports.inbound}/ip`;
    const outbound = `http://127.0.0.1:${ports.service}/ip`;
    const service = { host: 'httpbin.default.svc.cluster.local' };
    await throughInbound(mesh.configDir, ports.inbound);
    await until(async () => (await (await fetch(`http://127.0.0.1:${ports.admin}/clusters`)).text()).includes(`127.0.0.1:${ports.inbound}`), 'the service endpoint at the inbound listener');
    const token = (await (await fetch(`${mesh.issuerUrl}/token?sub=bench&groups=admins&exp=1h`)).text()).trim();
    const pid = proxyPid(mesh.agent.pid!);
    const measure = async (name: string, url: string, headers: Record<string, string>, proxied: boolean) => {
      const max = await load(url, seconds, headers);
      const before = proxied ? cpuSeconds(pid) : 0;
      const fixed = await load(url, seconds, headers, 1000);
      const cpuPer1k = proxied ? ((cpuSeconds(pid) - before) / seconds) * (1000 / Math.max(fixed.rps, 1)) : undefined;
      rows.push({ name, max, fixed, ...(proxied ? { cpuPer1k, rss: rssMiB(pid) } : {}) });
    };
    await measure('direct to the app', app, {}, false);
    // No policy: the RequestAuthentication the launcher wrote is removed first.
    execFileSync('rm', ['-f', join(mesh.configDir, '01-require-jwt.yaml')]);
    await until(async () => (await fetch(inbound, { headers: { authorization: 'Bearer x' } })).status === 200, 'the policy-free config');
    await measure('mesh-proxy, no policy', inbound, {}, true);
    await measure('two sidecar hops, no policy', outbound, service, true);
    const ra = readFileSync(join(process.cwd(), 'samples', 'policies', '01-require-jwt.yaml'), 'utf8').replaceAll('http://127.0.0.1:8899', mesh.issuerUrl!);
    writeFileSync(join(mesh.configDir, '01-require-jwt.yaml'), ra);
    writeFileSync(join(mesh.configDir, '03-allow-admins.yaml'), readFileSync(join(process.cwd(), 'samples', 'policies', '03-allow-admins.yaml'), 'utf8'));
    await until(async () => (await fetch(inbound)).status === 403, 'the JWT + RBAC config');
    await measure('mesh-proxy, JWT + RBAC', inbound, { authorization: `Bearer ${token}` }, true);
    await measure('two sidecar hops, JWT + RBAC', outbound, { ...service, authorization: `Bearer ${token}` }, true);
  } finally {
    await mesh.stop();
  }
  const f = (n: number | undefined, d = 1) => (n === undefined ? '-' : n.toFixed(d));
  const header = '| path | max req/s | p50 ms @1000/s | p90 ms @1000/s | p99 ms @1000/s | proxy vCPU per 1000 req/s | proxy RSS MiB | errors/non-2xx |';
  const lines = [header, '|---|---|---|---|---|---|---|---|'];
  for (const r of rows) {
    lines.push(`| ${r.name} | ${f(r.max.rps, 0)} | ${f(r.fixed.p50)} | ${f(r.fixed.p90)} | ${f(r.fixed.p99)} | ${f(r.cpuPer1k, 3)} | ${f(r.rss, 0)} | ${r.max.errors + r.fixed.errors}/${r.max.non2xx + r.fixed.non2xx} |`);
  }
  process.stdout.write(`\nbench/dataplane: ${seconds} s per run, 20 connections, HTTP/1.1 keep-alive, proxy --concurrency ${concurrency}, this machine\n${lines.join('\n')}\n`);
}

main().catch((e: unknown) => {
  process.stderr.write(`bench failed: ${(e as Error).message}\n`);
  process.exit(1);
});
