// Access logs of `node bin/mesh-proxy.js` as a real process (run `npx tsc -p tsconfig.json` first:
// bin/ runs dist/): the stdout logger's lines on the process's stdout, and one file that the main
// process and its workers (--concurrency) all append whole lines to.
import assert from 'node:assert/strict';
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
});
