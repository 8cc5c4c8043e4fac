// issue 11, as a user sees it on a real `mesh-proxy` process: what the proxy reports (the ACK, its
// /config_dump) is what every worker enforces, and an LDS update with a listener that cannot bind
// still applies the others (Envoy's per-listener LDS) and NACKs naming the bad one.
// (run `npx tsc -p tsconfig.json` first: bin/ runs dist/)
import assert from 'node:assert/strict';
import { createServer as createTcpServer } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { freePort } from '../../samples/local-mesh.js';
import { TypeUrl } from '../../src/envoy/types.js';
import { rawGet } from '../helpers/http.js';
import { eventually, Running, start } from '../helpers/proc.js';
import { appBehindAds, FixtureAds, hcmChain, listener, writeBootstrap, type HcmOptions } from './xds-fixtures.js';


/**
 * An ALLOW policy named `name` that admits only paths starting with `prefix`, and `filler`
 * policies that match nothing: a config of about a megabyte (a mesh with many policies), which
 * reaches a worker in several reads, the last one together with the next connection.
 */
function onlyPath(name: string, prefix: string, filler = 0): HcmOptions['policies'] {
  const policies: NonNullable<HcmOptions['policies']> = {};
  for (let i = 0; i < filler; i++) {
    policies[`filler-${i}`] = {
      permissions: [{ rule: { case: 'header', value: { name: `x-filler-${i}`, headerMatchSpecifier: { case: 'stringMatch', value: { matchPattern: { case: 'exact', value: `never-${i}-`.padEnd(300, 'x') } } } } } }],
      principals: [{ identifier: { case: 'any', value: true } }],
    };
  }
  return {
    ...policies,
    [name]: {
      permissions: [{ rule: { case: 'urlPath', value: { rule: { case: 'path', value: { matchPattern: { case: 'prefix', value: prefix } } } } } }],
      principals: [{ identifier: { case: 'any', value: true } }],
    },
  };
}

interface ListenerDump {
  name: string;
  active_state?: { listener: { filter_chains: unknown[] } };
  error_state?: { details: string };
}

async function listenerDump(adminPort: number): Promise<{ text: string; listeners: ListenerDump[] }> {
  const text = (await rawGet(adminPort, '/config_dump')).body;
  const dump = JSON.parse(text) as { configs: Array<{ dynamic_listeners?: ListenerDump[] }> };
  return { text, listeners: dump.configs.flatMap((c) => c.dynamic_listeners ?? []) };
}

describe('updates as reported are enforced (issue 11)', () => {
  let dir: string;
  let ads: FixtureAds;
  let close: () => void;

  before(async () => {
    ({ dir, ads, close } = await appBehindAds('mesh-proxy-consistency-', (req, res) => res.end(`app saw ${req.url}`)));
  });

  after(() => close());

  it('--concurrency 3: once /config_dump shows a policy, every new connection is decided on it', async () => {
    const [adminPort, port] = await Promise.all([freePort(), freePort()]);
    const policyListener = (round: number) => listener('inbound', port, [hcmChain({ cluster: 'app', policies: onlyPath(`round-${round}`, `/r${round}/`, 3000) })]);
    ads.set(TypeUrl.Listener, [policyListener(0)]);
    await ads.push(TypeUrl.Listener);
    const proxy = new Running(start('mesh-proxy', ['-c', writeBootstrap(dir, ads.port, adminPort), '--concurrency', '3', '--drain-time-s', '1']));
    try {
      await eventually(async () => assert.equal((await rawGet(adminPort, '/ready')).status, 200, 'the proxy turns ready'), 30_000);
      assert.equal((await rawGet(port, '/r0/x')).status, 200);
      for (let round = 1; round <= 20; round++) {
        ads.set(TypeUrl.Listener, [policyListener(round)]);
        await ads.push(TypeUrl.Listener);
        // As soon as the dump shows the new policy (polled back to back, no pause)...
        const deadline = Date.now() + 30_000;
        while (!(await listenerDump(adminPort)).text.includes(`"round-${round}"`)) assert.ok(Date.now() < deadline, `round ${round}: the policy shows in config_dump`);
        // ...three fresh connections (one per worker, round robin) are all decided on it.
        for (let i = 0; i < 3; i++) {
          const r = await rawGet(port, `/r${round}/c${i}`);
          assert.equal(r.status, 200, `round ${round}, connection ${i}: allowed by the policy config_dump shows, got ${r.status} ${r.body}`);
        }
      }
    } finally {
      await proxy.stop('SIGKILL');
    }
  });

  it('a listener that cannot bind does not hold back a policy change on another listener of the same update', async () => {
    const [adminPort, port, takenPort] = await Promise.all([freePort(), freePort(), freePort()]);
    // Another process holds the port the new listener wants.
    const squatter = createTcpServer();
    await new Promise<void>((r) => squatter.listen(takenPort, '127.0.0.1', r));
    ads.set(TypeUrl.Listener, [listener('inbound', port, [hcmChain({ cluster: 'app', policies: onlyPath('old', '/old/') })])]);
    await ads.push(TypeUrl.Listener);
    const proxy = new Running(start('mesh-proxy', ['-c', writeBootstrap(dir, ads.port, adminPort), '--concurrency', '2', '--drain-time-s', '1']));
    try {
      await eventually(async () => assert.equal((await rawGet(adminPort, '/ready')).status, 200, 'the proxy turns ready'), 30_000);
      assert.equal((await rawGet(port, '/new/a')).status, 403, 'the old policy');
      ads.set(TypeUrl.Listener, [
        listener('inbound', port, [hcmChain({ cluster: 'app', policies: onlyPath('new', '/new/') })]),
        listener('clash', takenPort, [hcmChain({ cluster: 'app' })]),
      ]);
      await ads.push(TypeUrl.Listener);
      const dump = await eventually(async () => {
        const d = await listenerDump(adminPort);
        const clash = d.listeners.find((l) => l.name === 'clash');
        assert.ok(clash?.error_state, `the clash listener is rejected: ${d.text}`);
        return { d, clash };
      }, 10_000);
      assert.match(dump.clash.error_state!.details, new RegExp(`127\\.0\\.0\\.1:${takenPort}: EADDRINUSE`), 'the NACK names the address that could not be bound');
      assert.doesNotMatch(dump.clash.error_state!.details, /listener inbound/, 'and only the bad listener');
      // The policy change applied, on every worker (two fresh connections, one per process).
      await eventually(async () => assert.equal((await rawGet(port, '/new/a')).status, 200, 'the new policy applies'), 10_000);
      assert.equal((await rawGet(port, '/new/b')).status, 200);
      assert.equal((await rawGet(port, '/old/a')).status, 403);
      assert.equal((await rawGet(port, '/old/b')).status, 403);
      assert.ok(!dump.d.listeners.find((l) => l.name === 'clash')?.active_state, 'the clash listener is not active');

      // Once the port is free, the next update (a changed one: the server does not resend what was
      // NACKed) applies whole.
      await new Promise<void>((r) => squatter.close(() => r()));
      ads.set(TypeUrl.Listener, [
        listener('inbound', port, [hcmChain({ cluster: 'app', policies: onlyPath('new', '/new/') })]),
        listener('clash', takenPort, [hcmChain({ cluster: 'app', serverName: 'retried' })]),
      ]);
      await ads.push(TypeUrl.Listener);
      await eventually(async () => {
        const r = await rawGet(takenPort, '/x');
        assert.deepEqual([r.status, r.body], [200, 'app saw /x']);
      }, 10_000);
      const after = await listenerDump(adminPort);
      assert.ok(after.listeners.every((l) => !l.error_state), `no error left: ${after.text}`);
    } finally {
      squatter.close();
      await proxy.stop('SIGKILL');
    }
  });
});
