// What one mesh-proxy's memory is made of under load (issue 17): the local mesh with one proxy
// worker and the dataplane bench's policy (the sample JWT + RBAC, or none), then ROUNDS times
// `wrk -t1 -c20` for --seconds through the inbound listener, after each: wrk's req/s, the proxy's
// CPU per request (steadier than req/s on a shared box), its VmRSS, anonymous and file-backed
// resident pages (/proc), and inside it (memory-hook.ts, on
// SIGUSR2) V8's heap, Node's external memory and the code space. Compare builds or flags by
// alternating runs; MESH_BENCH_V8_FLAGS tries V8 flags in the proxy alone.
//   npm run bench -- memory [--seconds N] [--rounds N] [--no-policy]   (needs `npm run build`)
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePorts, startLocalMesh } from '../../samples/local-mesh.js';
import type { ProxyMemory } from './memory-hook.js';
import { adminToken, applyJwtRbac, until } from './mesh-policy.js';
import { numberOption } from './options.js';
import { childPid, cpuSeconds, residentMiB, rssMiB } from './procstat.js';
import { wrk } from './wrk.js';

const seconds = numberOption('--seconds', 5);
const rounds = numberOption('--rounds', 3);
const policy = !process.argv.includes('--no-policy');

const hook = join(process.cwd(), 'dist', 'bench', 'dataplane', 'memory-hook.js');
if (!existsSync(hook)) throw new Error(`${hook} is missing: run npm run build first`);
const reports = mkdtempSync(join(tmpdir(), 'bench-memory-'));
process.env.MESH_BENCH_MEMORY_DIR = reports;
process.env.NODE_OPTIONS = `${process.env.NODE_OPTIONS ?? ''} --import ${hook}`.trim();

/** The proxy's own account of its memory: it writes it on SIGUSR2. */
async function inside(pid: number): Promise<ProxyMemory> {
  const file = join(reports, `${pid}.json`);
  execFileSync('rm', ['-f', file]);
  process.kill(pid, 'SIGUSR2');
  await until(async () => existsSync(file), 'the proxy\'s memory report');
  await new Promise((r) => setTimeout(r, 50)); // written in one call; let it finish
  return JSON.parse(readFileSync(file, 'utf8')) as ProxyMemory;
}

const mib = (bytes: number) => (bytes / 1024 / 1024).toFixed(1);
const ports = await freePorts();
const mesh = await startLocalMesh({ stateDir: mkdtempSync(join(tmpdir(), 'bench-memory-mesh-')), issuer: true, ports, output: 'pipe', proxyConcurrency: 1 });
try {
  const inbound = `http://127.0.0.1:${ports.inbound}/ip`;
  const headers: Record<string, string> = {};
  if (policy) {
    await applyJwtRbac(mesh.configDir, mesh.issuerUrl!, inbound);
    headers.authorization = `Bearer ${await adminToken(mesh.issuerUrl!)}`;
  } else {
    // The launcher's RequestAuthentication goes; a bad token then passes.
    execFileSync('rm', ['-f', join(mesh.configDir, '01-require-jwt.yaml')]);
    await until(async () => (await fetch(inbound, { headers: { authorization: 'Bearer x' } })).status === 200, 'the policy-free config');
  }
  const proxy = childPid(mesh.agent.pid!, 'mesh-proxy');
  const lines = [
    `bench/dataplane memory: mesh-proxy --concurrency 1, ${policy ? 'JWT + RBAC' : 'no policy'}, wrk -t1 -c20 ${seconds} s per round; MESH_BENCH_V8_FLAGS=${process.env.MESH_BENCH_V8_FLAGS ?? ''}; MiB`,
    '| round | req/s | µs CPU per request | VmRSS | anonymous | file-backed | heap total | heap used | code space | external | array buffers |',
    '|---|---|---|---|---|---|---|---|---|---|---|',
  ];
  const idle = await inside(proxy);
  const r0 = residentMiB(proxy);
  lines.push(`| idle | - | - | ${rssMiB(proxy).toFixed(1)} | ${r0.anonymous.toFixed(1)} | ${r0.file.toFixed(1)} | ${mib(idle.usage.heapTotal)} | ${mib(idle.usage.heapUsed)} | ${mib(idle.spaces.code_space ?? NaN)} | ${mib(idle.usage.external)} | ${mib(idle.usage.arrayBuffers)} |`);
  await wrk(inbound, 1, headers); // warm-up: JIT, connection pools
  for (let i = 1; i <= rounds; i++) {
    const cpu = cpuSeconds(proxy);
    const load = await wrk(inbound, seconds, headers);
    const perRequest = ((cpuSeconds(proxy) - cpu) * 1e6) / (load.rps * seconds);
    if (load.errors || load.non2xx) throw new Error(`round ${i}: ${load.errors} socket errors, ${load.non2xx} non-2xx responses`);
    const r = residentMiB(proxy);
    const rss = rssMiB(proxy);
    const m = await inside(proxy);
    lines.push(`| ${i} | ${load.rps.toFixed(0)} | ${perRequest.toFixed(1)} | ${rss.toFixed(1)} | ${r.anonymous.toFixed(1)} | ${r.file.toFixed(1)} | ${mib(m.usage.heapTotal)} | ${mib(m.usage.heapUsed)} | ${mib(m.spaces.code_space ?? NaN)} | ${mib(m.usage.external)} | ${mib(m.usage.arrayBuffers)} |`);
  }
  process.stdout.write(`${lines.join('\n')}\n`);
} finally {
  await mesh.stop();
}
