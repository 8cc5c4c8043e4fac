// The proxy's onUnknownKid: a JwksService request to the ADS server, fire and forget, counted.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Server, ServerCredentials } from '@grpc/grpc-js';
import { setScopeLevel } from '../../src/common/log.js';
import { JwksRefresher } from '../../src/dataplane/jwks-refresh.js';
import { StatsStore } from '../../src/dataplane/stats.js';
import { serveJwksService } from '../../src/envoy/jwks-grpc.js';
import { eventually } from '../helpers/proc.js';

setScopeLevel('jwt', 'error');

const counts = (stats: StatsStore) => Object.fromEntries(stats.samples().filter((s) => s.name.startsWith('jwks_refresh.')).map((s) => [s.name.slice('jwks_refresh.'.length), s.value]));

test('reports go to the server; refusals and an unreachable server are counted, never thrown', async (t) => {
  const seen: string[] = [];
  const server = new Server();
  serveJwksService(server, (req) => {
    seen.push(`${req.issuer} ${req.kid}`);
    return { accepted: req.kid === 'k2', reason: req.kid === 'k2' ? 'refetch started' : 'cooldown' };
  });
  const port = await new Promise<number>((resolve, reject) => server.bindAsync('127.0.0.1:0', ServerCredentials.createInsecure(), (e, p) => (e ? reject(e) : resolve(p))));
  const stats = new StatsStore();
  const refresher = new JwksRefresher(`127.0.0.1:${port}`, stats);
  t.after(() => refresher.close());
  assert.deepEqual(counts(stats), { accepted: 0, failed: 0, refused: 0, requested: 0 }, 'the counters exist from the start');
  refresher.onUnknownKid('https://issuer', 'k2');
  refresher.onUnknownKid('https://issuer', 'forged');
  await eventually(() => assert.deepEqual(counts(stats), { accepted: 1, failed: 0, refused: 1, requested: 2 }), 10_000);
  assert.deepEqual(seen.sort(), ['https://issuer forged', 'https://issuer k2']);
  server.forceShutdown();
  assert.doesNotThrow(() => refresher.onUnknownKid('https://issuer', 'k3'));
  await eventually(() => assert.deepEqual(counts(stats), { accepted: 1, failed: 1, refused: 1, requested: 3 }), 10_000);
});
