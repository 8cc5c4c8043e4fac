// The agent's xDS proxy also serves JwksService on the proxy's xDS address and relays it to the
// discovery server, at most one request per issuer per cooldown.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Server, ServerCredentials } from '@grpc/grpc-js';
import { XdsProxy } from '../../src/agent/xds-proxy.js';
import { setScopeLevel } from '../../src/common/log.js';
import { serveJwksService } from '../../src/envoy/jwks-grpc.js';
import { JwksRefreshClient, type RequestRefreshRequest } from '../../src/envoy/jwks-service.js';

setScopeLevel('xdsproxy', 'error');

/** A stand-in for the discovery server's JwksService that records what reached it. */
async function upstream(): Promise<{ server: Server; address: string; seen: RequestRefreshRequest[] }> {
  const seen: RequestRefreshRequest[] = [];
  const server = new Server();
  serveJwksService(server, (req) => {
    seen.push(req);
    return { accepted: true, reason: `refetch of ${req.issuer} started` };
  });
  const port = await new Promise<number>((resolve, reject) => server.bindAsync('127.0.0.1:0', ServerCredentials.createInsecure(), (e, p) => (e ? reject(e) : resolve(p))));
  return { server, address: `127.0.0.1:${port}`, seen };
}

async function agent(upstreamAddress: string, jwksRefreshCooldownMs?: number) {
  const xds = new XdsProxy({ upstreamAddress, listenAddress: '127.0.0.1:0', ...(jwksRefreshCooldownMs !== undefined ? { jwksRefreshCooldownMs } : {}) });
  const port = await xds.start();
  const client = new JwksRefreshClient(`127.0.0.1:${port}`);
  return { client, close: () => (client.close(), xds.close()) };
}

test('relays a refresh request upstream and answers with the discovery server\'s verdict, once per issuer per cooldown', async (t) => {
  const up = await upstream();
  t.after(() => up.server.forceShutdown());
  const a = await agent(up.address);
  t.after(() => a.close());
  assert.deepEqual(await a.client.requestRefresh('https://a.example', 'k2'), { accepted: true, reason: 'refetch of https://a.example started' });
  const again = await a.client.requestRefresh('https://a.example', 'forged');
  assert.equal(again.accepted, false);
  assert.match(again.reason, /the agent relayed a request for this issuer less than 5000ms ago/);
  const flood = await Promise.all(Array.from({ length: 50 }, (_, i) => a.client.requestRefresh('https://a.example', `forged-${i}`)));
  assert.equal(flood.filter((v) => v.accepted).length, 0);
  assert.equal((await a.client.requestRefresh('https://b.example', 'k1')).accepted, true, 'another issuer has its own cooldown');
  assert.deepEqual(
    up.seen.map((r) => [r.issuer, r.kid]),
    [
      ['https://a.example', 'k2'],
      ['https://b.example', 'k1'],
    ],
    'only the first request per issuer reached the discovery server',
  );
});

test('without a cooldown every request is relayed; an unreachable discovery server is an error for the caller', async (t) => {
  const up = await upstream();
  const a = await agent(up.address, 0);
  t.after(() => a.close());
  await a.client.requestRefresh('https://a.example', 'k1');
  await a.client.requestRefresh('https://a.example', 'k2');
  assert.equal(up.seen.length, 2);
  up.server.forceShutdown();
  await assert.rejects(a.client.requestRefresh('https://a.example', 'k3'), /JwksService at 127\.0\.0\.1:\d+: 14 /);
});
