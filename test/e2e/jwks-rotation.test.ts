// Key rotation at the issuer against real processes (the local mesh: pilot-discovery, pilot-agent
// with its mesh-proxy, httpbin, the sample issuer). A token signed with the brand-new key is 401
// once (the proxy has no key for its kid), the proxy reports the kid over JwksService through the
// agent, the discovery server refetches and pushes, and the next requests are 200, with no restart.
// A flood of forged kids costs the issuer at most one JWKS fetch.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { generateKeyPair, SignJWT } from 'jose';
import { freePorts, startLocalMesh, type LocalMesh } from '../../samples/local-mesh.js';
import { eventually, statValue } from '../helpers/proc.js';

const kidOf = (token: string) => (JSON.parse(Buffer.from(token.split('.')[0]!, 'base64url').toString()) as { kid: string }).kid;

test('a key rotation at the issuer costs one 401, and a forged kid flood at most one JWKS fetch', { timeout: 180_000 }, async () => {
  const state = mkdtempSync(join(tmpdir(), 'mesh-rotation-'));
  const mesh: LocalMesh = await startLocalMesh({ stateDir: state, issuer: true, ports: await freePorts(), output: 'pipe' });
  const issuer = mesh.issuerUrl!;
  const inbound = `http://127.0.0.1:${mesh.ports.inbound}/headers`;
  const call = async (token: string) => {
    const res = await fetch(inbound, { headers: { authorization: `Bearer ${token}` } });
    return { status: res.status, body: await res.text() };
  };
  const mint = async (q = 'sub=alice') => (await (await fetch(`${issuer}/token?${q}`)).text()).trim();
  const jwksFetches = async () => ((await (await fetch(`${issuer}/stats`)).json()) as { jwksRequests: number }).jwksRequests;
  const proxyStat = async (name: string) => statValue(await (await fetch(`http://127.0.0.1:${mesh.ports.admin}/stats`)).text(), name);
  try {
    const before = await mint();
    await eventually(async () => assert.equal((await call(before)).status, 200, 'the proxy has the issuer\'s keys'), 20_000);

    // Rotation: the issuer signs with a new key the proxy has never been given.
    const rotate = await fetch(`${issuer}/rotate`, { method: 'POST' });
    assert.equal(rotate.status, 200);
    const newKid = (await rotate.text()).trim();
    const after = await mint();
    assert.equal(kidOf(after), newKid);
    assert.notEqual(kidOf(before), newKid);
    const fetchesBefore = await jwksFetches();

    const first = await call(after);
    assert.deepEqual(first, { status: 401, body: "Jwks doesn't have key to match kid or alg from Jwt" }, 'the first request with the new kid: no key yet');
    await eventually(async () => assert.equal((await call(after)).status, 200, 'the refetched keys were pushed'), 30_000);
    assert.equal((await call(await mint('sub=bob'))).status, 200, 'later tokens of the new key');
    assert.equal((await call(before)).status, 200, 'tokens of the previous key, still published, still verify');
    assert.ok((await jwksFetches()) > fetchesBefore, 'the discovery server refetched the JWKS');
    assert.ok((await proxyStat('jwks_refresh.accepted')) >= 1, 'the proxy\'s report was accepted');
    assert.equal(mesh.agent.exitCode, null, 'nothing was restarted');

    // A flood of forged kids (any key, any kid) for the trusted issuer.
    const fetchesBeforeFlood = await jwksFetches();
    const info = (await (await fetch(`http://127.0.0.1:${mesh.ports.admin}/server_info`)).json()) as { command_line_options: { concurrency: number } };
    const concurrency = info.command_line_options.concurrency;
    const requestedBeforeFlood = await proxyStat('jwks_refresh.requested');
    const { privateKey } = await generateKeyPair('RS256');
    const forged = await Promise.all(
      Array.from({ length: 200 }, (_, i) => new SignJWT({}).setProtectedHeader({ alg: 'RS256', kid: `forged-${i}` }).setIssuer(issuer).setSubject('mallory').setExpirationTime('1h').sign(privateKey)),
    );
    const statuses = await Promise.all(forged.map(async (t) => (await call(t)).status));
    assert.deepEqual(new Set(statuses), new Set([401]), 'forged kids never verify');
    // Every report the proxy sent has been answered (by the agent's or the discovery server's cooldown).
    await eventually(async () => {
      const [requested, accepted, refused, failed] = await Promise.all(['requested', 'accepted', 'refused', 'failed'].map((s) => proxyStat(`jwks_refresh.${s}`)));
      assert.ok(requested > requestedBeforeFlood, 'the flood was reported');
      assert.ok(requested - requestedBeforeFlood <= 64 * concurrency, `each worker's filter reports at most 64 kids per config (${concurrency} workers)`);
      assert.equal(accepted + refused + failed, requested, 'every report answered');
    }, 20_000);
    assert.ok((await jwksFetches()) - fetchesBeforeFlood <= 1, `the flood cost the issuer at most one fetch (${(await jwksFetches()) - fetchesBeforeFlood})`);
    const metrics = await (await fetch(`http://127.0.0.1:${mesh.ports.monitoring}/metrics`)).text();
    assert.match(metrics, /^pilot_jwks_resolver_network_fetch_success_total \d+$/m);
    assert.equal((await call(after)).status, 200, 'the real key still verifies after the flood');
  } catch (e) {
    (e as Error).message += `\n--- mesh output ---\n${mesh.output().slice(-6000)}`;
    throw e;
  } finally {
    await mesh.stop();
  }
});
