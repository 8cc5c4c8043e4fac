// JwksService plumbing: the server side every hop installs, the client, and the per-issuer cooldown.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Server, ServerCredentials } from '@grpc/grpc-js';
import { serveJwksService } from '../../src/envoy/jwks-grpc.js';
import { IssuerCooldown, JwksRefreshClient, type RequestRefreshRequest } from '../../src/envoy/jwks-service.js';

async function serve(handler: Parameters<typeof serveJwksService>[1]): Promise<{ server: Server; address: string }> {
  const server = new Server();
  serveJwksService(server, handler);
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', ServerCredentials.createInsecure(), (e, p) => (e ? reject(e) : resolve(p))),
  );
  return { server, address: `127.0.0.1:${port}` };
}

test('IssuerCooldown lets one request per issuer through per window, and stays bounded', () => {
  let now = 1_000;
  const c = new IssuerCooldown(5_000, () => now, 2);
  assert.equal(c.take('a'), true);
  assert.equal(c.take('a'), false, 'same issuer within the window');
  assert.equal(c.take('b'), true, 'issuers are independent');
  assert.equal(c.take('c'), false, 'full of live entries: refused rather than grown');
  now += 4_999;
  assert.equal(c.take('a'), false);
  now += 1;
  assert.equal(c.take('c'), true, 'expired entries are pruned to make room');
  assert.equal(c.take('a'), true, 'the next window');
  assert.equal(c.take('a'), false);
});

test('the client gets the handler\'s verdict; malformed requests and handler errors are gRPC errors', async (t) => {
  const seen: RequestRefreshRequest[] = [];
  const { server, address } = await serve((req) => {
    seen.push(req);
    if (req.kid === 'boom') throw new Error('handler failed');
    return { accepted: req.kid === 'new', reason: req.kid === 'new' ? 'refetch started' : 'known kid' };
  });
  const client = new JwksRefreshClient(address);
  t.after(() => {
    client.close();
    server.forceShutdown();
  });
  assert.deepEqual(await client.requestRefresh('https://issuer', 'new'), { accepted: true, reason: 'refetch started' });
  assert.deepEqual(await client.requestRefresh('https://issuer', 'old'), { accepted: false, reason: 'known kid' });
  assert.deepEqual(
    seen.map((r) => [r.issuer, r.kid]),
    [
      ['https://issuer', 'new'],
      ['https://issuer', 'old'],
    ],
  );
  await assert.rejects(client.requestRefresh('', 'k'), /3 issuer: required/);
  await assert.rejects(client.requestRefresh('https://issuer', 'x'.repeat(2000)), /3 kid: required, at most 1024/);
  await assert.rejects(client.requestRefresh('https://issuer', 'boom'), /13 handler failed/);
  assert.equal(seen.length, 3, 'malformed requests never reach the handler');
});

test('an unreachable server is a rejection within the deadline', async () => {
  const { server, address } = await serve(() => ({ accepted: true, reason: '' }));
  server.forceShutdown();
  const client = new JwksRefreshClient(address);
  try {
    await assert.rejects(client.requestRefresh('https://issuer', 'k', 2_000), /JwksService at 127\.0\.0\.1:\d+: (14|4) /);
  } finally {
    client.close();
  }
});
