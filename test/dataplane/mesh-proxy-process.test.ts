// `node bin/mesh-proxy.js -c bootstrap.json` as a real process (run `npx tsc -p tsconfig.json`
// first: bin/ runs dist/): a bad bootstrap is an error naming the field; a good one serves traffic
// from ADS, answers the admin API, and exits 0 on SIGTERM and on /quitquitquit.
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, request, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { after, before, describe, it } from 'node:test';
import { freePort } from '../../samples/local-mesh.js';
import { TypeUrl } from '../../src/envoy/types.js';
import { eventually, run, Running, start, statValue } from '../helpers/proc.js';
import { ISSUER, jwks, meshJwtAuthn, meshProvider, mint, testKey } from './fixtures.js';
import { bootstrapJson, FixtureAds, hcmChain, listener, staticCluster, writeBootstrap } from './xds-fixtures.js';

function get(port: number, path: string, method = 'GET', headers: Record<string, string> = {}): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path, method, headers, agent: false }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

/** The pids of a process's children (Linux /proc). */
function childPids(pid: number): number[] {
  return readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').split(' ').filter(Boolean).map(Number);
}

describe('mesh-proxy process', () => {
  let dir: string;
  let ads: FixtureAds;
  let app: Server;
  let appPort: number;
  /** Responses of /hold requests, answered when the test says. */
  const held: ServerResponse[] = [];

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'mesh-proxy-proc-'));
    app = createServer((req, res) => (req.url === '/hold' ? held.push(res) : res.end(`app saw ${req.url}`)));
    await new Promise<void>((r) => app.listen(0, '127.0.0.1', r));
    appPort = (app.address() as AddressInfo).port;
    ads = await new FixtureAds().listen();
    ads.set(TypeUrl.Cluster, [staticCluster('app', [appPort])]);
  });

  after(() => {
    ads.close();
    app.close();
    rmSync(dir, { recursive: true, force: true });
  });

  /** mesh-proxy with --concurrency 3 and an inbound listener to the app; `stat` reads its /stats, `workerStat(i)` process i's connections. */
  async function threeProcesses(...args: string[]) {
    const [adminPort, listenerPort] = await Promise.all([freePort(), freePort()]);
    ads.set(TypeUrl.Listener, [listener('inbound', listenerPort, [hcmChain({ cluster: 'app' })])]);
    await ads.push(TypeUrl.Listener);
    const proxy = new Running(start('mesh-proxy', ['-c', writeBootstrap(dir, ads.port, adminPort), '--concurrency', '3', ...args]));
    const stat = async (name: string) => statValue((await get(adminPort, '/stats')).body, name);
    const workerStat = (i: number) => stat(`listener.127.0.0.1_${listenerPort}.worker_${i}.downstream_cx_total`);
    return { proxy, adminPort, listenerPort, stat, workerStat };
  }

  it('refuses a bootstrap without an ADS cluster, naming the field', async () => {
    const b = bootstrapJson(ads.port, 0) as { static_resources: { clusters: unknown[] } };
    b.static_resources.clusters = [];
    const file = join(dir, 'bad.json');
    writeFileSync(file, JSON.stringify(b));
    const r = await run('mesh-proxy', ['-c', file]);
    assert.equal(r.code, 1, r.stderr);
    assert.match(r.stderr, /bootstrap .*bad\.json: dynamic_resources\.ads_config\.grpc_services\[0\]\.envoy_grpc\.cluster_name: "xds-grpc" is not a cluster of static_resources\.clusters/);
  });

  it('refuses an unknown bootstrap field, naming it', async () => {
    const file = join(dir, 'unknown.yaml');
    writeFileSync(file, 'node: {id: x}\nadmin_port: 3\n');
    const r = await run('mesh-proxy', ['-c', file]);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /unknown\.yaml: .*admin_port/);
  });

  it('--concurrency 3: connections go round robin to this process and two worker processes, which are replaced when they die', async () => {
    const { proxy, adminPort, listenerPort, stat, workerStat } = await threeProcesses('--drain-time-s', '2');
    try {
      await eventually(async () => assert.equal((await get(adminPort, '/ready')).status, 200, 'the proxy turns ready'), 15_000);
      const workers = childPids(proxy.child.pid!);
      assert.equal(workers.length, 2, `two worker processes: ${proxy.output}`);
      // The workers run with the proxy's Node flags (small young generation, slow old-generation growth: less RSS per process).
      for (const w of workers) for (const flag of ['--max-semi-space-size=2', '--heap-growing-percent=20']) assert.ok(readFileSync(`/proc/${w}/cmdline`, 'utf8').split('\0').includes(flag), `worker ${w} runs with ${flag}`);
      // ... and two malloc arenas (glibc reads MALLOC_ARENA_MAX from the environment it starts with).
      for (const w of workers) assert.ok(readFileSync(`/proc/${w}/environ`, 'utf8').split('\0').includes('MALLOC_ARENA_MAX=2'), `worker ${w} runs with MALLOC_ARENA_MAX=2`);
      assert.deepEqual((JSON.parse((await get(adminPort, '/server_info')).body) as { command_line_options: unknown }).command_line_options, { concurrency: 3 });
      // Each request on a new connection (agent: false): six connections, two per worker.
      for (let i = 0; i < 6; i++) assert.deepEqual(await get(listenerPort, `/r${i}`), { status: 200, body: `app saw /r${i}` });
      assert.equal(await stat(`listener.127.0.0.1_${listenerPort}.downstream_cx_total`), 6, 'the workers\' counters are merged into /stats');
      assert.deepEqual(await Promise.all([0, 1, 2].map(workerStat)), [2, 2, 2]);
      assert.equal(await stat('cluster.app.upstream_rq_total'), 6);

      process.kill(workers[0]!, 'SIGKILL');
      const replaced = await eventually(() => {
        const now = childPids(proxy.child.pid!);
        assert.ok(now.length === 2 && !now.includes(workers[0]!), `a new worker replaces the killed one: ${now.join(',')}`);
        return now;
      }, 10_000);
      // The new worker got the config before any connection: every request is answered.
      for (let i = 0; i < 6; i++) assert.equal((await get(listenerPort, `/after${i}`)).status, 200);

      // The listener removed, then back on the same address: each worker serves it once again.
      ads.set(TypeUrl.Listener, []);
      await ads.push(TypeUrl.Listener);
      await eventually(async () => assert.equal(await stat('listener_manager.total_listeners_active'), 0, 'the listener is removed'), 10_000);
      ads.set(TypeUrl.Listener, [listener('inbound', listenerPort, [hcmChain({ cluster: 'app' })])]);
      await ads.push(TypeUrl.Listener);
      await eventually(async () => assert.equal((await get(listenerPort, '/back')).status, 200, 'the listener is back'), 10_000);
      for (let i = 0; i < 6; i++) assert.deepEqual(await get(listenerPort, `/again${i}`), { status: 200, body: `app saw /again${i}` });

      proxy.child.kill('SIGTERM');
      assert.equal(await proxy.wait(), 0, proxy.output);
      for (const pid of replaced) assert.ok(!existsSync(`/proc/${pid}`), `worker ${pid} exited with the proxy`);
    } finally {
      await proxy.stop('SIGKILL');
    }
  });

  it('--concurrency 3: a gauge on /stats is the sum over the processes (upstream_rq_active with a request in flight on each)', async () => {
    const { proxy, adminPort, listenerPort, stat, workerStat } = await threeProcesses();
    try {
      await eventually(async () => assert.equal((await get(adminPort, '/ready')).status, 200, 'the proxy turns ready'), 15_000);
      // Three connections, one per process (round robin), each with a request the app holds.
      const responses = [0, 1, 2].map(() => get(listenerPort, '/hold'));
      await eventually(() => assert.equal(held.length, 3, 'the app has the three requests'));
      assert.deepEqual(await Promise.all([0, 1, 2].map(workerStat)), [1, 1, 1], 'one connection in each process');
      await eventually(async () => assert.equal(await stat('cluster.app.upstream_rq_active'), 3));
      for (const r of held.splice(0)) r.end('released');
      assert.deepEqual((await Promise.all(responses)).map((r) => r.body), ['released', 'released', 'released']);
      await eventually(async () => assert.equal(await stat('cluster.app.upstream_rq_active'), 0));
    } finally {
      for (const r of held.splice(0)) r.end();
      await proxy.stop('SIGKILL');
    }
  });

  it('loads neither grpc-js nor jose in its main process or its workers, verifying JWTs (issue 17, RSS)', async () => {
    // Every process of the proxy (NODE_OPTIONS reaches the workers) appends each module URL it
    // resolves, with its pid, to a file before the import proceeds.
    const seen = join(dir, 'resolved');
    const hook = join(dir, 'resolve-hook.mjs');
    writeFileSync(
      hook,
      `import { appendFileSync } from 'node:fs';
      export async function resolve(specifier, context, next) { const r = await next(specifier, context); appendFileSync(${JSON.stringify(seen)}, process.pid + ' ' + r.url + '\\n'); return r; }`,
    );
    const register = join(dir, 'register-hook.mjs');
    writeFileSync(register, `import { register } from 'node:module'; register(${JSON.stringify(pathToFileURL(hook).href)});`);
    const [adminPort, listenerPort] = await Promise.all([freePort(), freePort()]);
    const key = await testKey('RS256', 'k1');
    const jwt = meshJwtAuthn({ origins: meshProvider(ISSUER, jwks(key)) });
    ads.set(TypeUrl.Listener, [listener('inbound', listenerPort, [hcmChain({ cluster: 'app', jwt })])]);
    await ads.push(TypeUrl.Listener);
    const file = writeBootstrap(dir, ads.port, adminPort);
    const proxy = new Running(start('mesh-proxy', ['-c', file, '--concurrency', '2'], { env: { NODE_OPTIONS: `--import ${register}` } }));
    try {
      await eventually(async () => assert.equal((await get(adminPort, '/ready')).status, 200, 'the proxy turns ready'), 15_000);
      // Four connections, two per process: each process checks a signature, and refuses a bad one.
      const token = await mint(key);
      for (let i = 0; i < 4; i++) {
        assert.equal((await get(listenerPort, `/r${i}`, 'GET', { authorization: `Bearer ${token}` })).status, 200);
        assert.equal((await get(listenerPort, `/r${i}`, 'GET', { authorization: `Bearer ${token.slice(0, -4)}AAAA` })).status, 401);
      }
      assert.equal(await statValue((await get(adminPort, '/stats')).body, 'http.inbound_test.jwt_authn.allowed'), 4, 'every process verified tokens');
      const byPid = new Map<string, string[]>();
      for (const line of readFileSync(seen, 'utf8').split('\n').filter(Boolean)) {
        const [pid, url] = line.split(' ') as [string, string];
        byPid.set(pid, [...(byPid.get(pid) ?? []), url]);
      }
      const [worker] = childPids(proxy.child.pid!);
      for (const pid of [String(proxy.child.pid), String(worker)]) {
        const urls = byPid.get(pid) ?? [];
        assert.ok(urls.some((u) => u.endsWith('/src/envoy/grpc-call.js')), `process ${pid} loaded the proxy's gRPC calls (the hook saw it)`);
        assert.deepEqual(urls.filter((u) => u.includes('/@grpc/') || u.includes('/node_modules/jose/')), [], `process ${pid} resolved neither grpc-js nor jose`);
      }
    } finally {
      await proxy.stop('SIGKILL');
    }
  });

  for (const how of ['SIGTERM', '/quitquitquit'] as const) {
    it(`serves LDS/CDS from ADS, answers admin, and exits 0 on ${how}`, async () => {
      const [adminPort, listenerPort] = await Promise.all([freePort(), freePort()]);
      ads.set(TypeUrl.Listener, [listener('inbound', listenerPort, [hcmChain({ cluster: 'app' })])]);
      await ads.push(TypeUrl.Listener);
      const file = writeBootstrap(dir, ads.port, adminPort);
      const proxy = new Running(start('mesh-proxy', ['-c', file, '--drain-time-s', '5', '--log-level', 'info', '--service-cluster', 'app.default']));
      try {
        await eventually(async () => assert.equal((await get(adminPort, '/ready')).status, 200, 'the proxy turns ready'), 15_000);
        const r = await get(listenerPort, '/through');
        assert.equal(r.status, 200);
        assert.equal(r.body, 'app saw /through');
        const info = JSON.parse((await get(adminPort, '/server_info')).body) as { node: { cluster: string } };
        assert.equal(info.node.cluster, 'app.default');
        if (how === 'SIGTERM') proxy.child.kill('SIGTERM');
        else assert.equal((await get(adminPort, '/quitquitquit', 'POST')).status, 200);
        assert.equal(await proxy.wait(), 0, proxy.output);
      } finally {
        await proxy.stop('SIGKILL');
      }
    });
  }
});
