// Access logs of `node bin/mesh-proxy.js` as a real process (run `npx tsc -p tsconfig.json` first:
// bin/ runs dist/): the stdout logger's lines on the process's stdout, and one file that the main
// process and its workers (--concurrency) all append whole lines to.
import assert from 'node:assert/strict';
import { existsSync, readFileSync, renameSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { freePort } from '../../samples/local-mesh.js';
import { TypeUrl } from '../../src/envoy/types.js';
import { rawGet } from '../helpers/http.js';
import { eventually, Running, start } from '../helpers/proc.js';
import { fileLog, logLines, stdoutLog } from './access-log-fixtures.js';
import { appBehindAds, hcmChain, listener, writeBootstrap } from './xds-fixtures.js';

describe('mesh-proxy process access logs', { timeout: 60_000 }, () => {
  let ground: Awaited<ReturnType<typeof appBehindAds>>;

  before(async () => {
    ground = await appBehindAds('access-log-proc-', (_req, res) => res.end('ok'));
  });

  after(() => ground.close());

  it('the stdout logger writes to the process stdout; with --concurrency 2 both processes append whole lines to one file', async () => {
    const [adminPort, port] = await Promise.all([freePort(), freePort()]);
    const { dir, ads } = ground;
    const shared = join(dir, 'shared.log');
    const format = { text: 'ALOG %REQ(:PATH)% %RESPONSE_CODE% %UPSTREAM_CLUSTER%\n' };
    ads.set(TypeUrl.Listener, [listener('inbound', port, [hcmChain({ cluster: 'app', accessLog: [stdoutLog(format), fileLog(shared, format)] })])]);
    await ads.push(TypeUrl.Listener);
    const proxy = new Running(start('mesh-proxy', ['-c', writeBootstrap(dir, ads.port, adminPort), '--concurrency', '2']));
    try {
      await eventually(async () => assert.equal((await rawGet(port, '/ready')).status, 200), 20_000);
      // Each on its own connection, so both processes take some.
      for (let i = 0; i < 6; i++) assert.equal((await rawGet(port, `/r${i}`)).status, 200);
      await proxy.waitFor(/ALOG \/r5 200 app\n/);
      const lines = await logLines(shared, 7);
      for (let i = 0; i < 6; i++) assert.ok(lines.includes(`ALOG /r${i} 200 app`), lines.join('\n'));
      assert.ok(lines.every((l) => /^ALOG \/\w+ 200 app$/.test(l)), lines.join('\n'));
    } finally {
      assert.equal(await proxy.stop(), 0);
    }
  });

  it('after a rotation, /reopen_logs and SIGUSR1 send every process\'s lines to the new file; the old one keeps what came before', async () => {
    const { dir, ads } = ground;
    const [adminPort, port] = await Promise.all([freePort(), freePort()]);
    const path = join(dir, 'rotated.log');
    ads.set(TypeUrl.Listener, [listener('inbound', port, [hcmChain({ cluster: 'app', accessLog: [fileLog(path, { text: 'RLOG %REQ(:PATH)%\n' })] })])]);
    await ads.push(TypeUrl.Listener);
    const proxy = new Running(start('mesh-proxy', ['-c', writeBootstrap(dir, ads.port, adminPort), '--concurrency', '2']));
    const lines = (file: string) => (existsSync(file) ? readFileSync(file, 'utf8').split('\n').filter((l) => l.startsWith('RLOG /')) : []);
    let batch = 0;
    /** Batches of six requests, each on its own connection (both processes take some), until one is all in `file`: its paths. */
    const untilLoggedIn = async (file: string): Promise<string[]> => {
      return eventually(async () => {
        const paths = Array.from({ length: 6 }, (_, i) => `/b${batch}-${i}`);
        batch++;
        for (const p of paths) assert.equal((await rawGet(port, p)).status, 200);
        await new Promise((r) => setTimeout(r, 1_200)); // the loggers' flush interval
        const got = lines(file);
        assert.ok(paths.every((p) => got.includes(`RLOG ${p}`)), `${file}: ${got.join(', ')}`);
        return paths;
      }, 15_000);
    };
    try {
      await eventually(async () => assert.equal((await rawGet(port, '/ready')).status, 200), 20_000);
      const before = await untilLoggedIn(path);
      renameSync(path, `${path}.1`);
      assert.equal((await fetch(`http://127.0.0.1:${adminPort}/reopen_logs`, { method: 'POST' })).status, 200);
      const afterAdmin = await untilLoggedIn(path);
      assert.ok(before.every((p) => lines(`${path}.1`).includes(`RLOG ${p}`)), 'the rotated file keeps the earlier lines');
      assert.ok(!afterAdmin.some((p) => lines(`${path}.1`).includes(`RLOG ${p}`)), 'and gets none of the later ones');
      renameSync(path, `${path}.2`);
      proxy.child.kill('SIGUSR1');
      const afterSignal = await untilLoggedIn(path);
      assert.ok(!afterSignal.some((p) => lines(`${path}.2`).includes(`RLOG ${p}`)));
      assert.equal(proxy.child.exitCode, null, 'SIGUSR1 does not stop the proxy');
    } finally {
      assert.equal(await proxy.stop(), 0);
    }
  });
});
