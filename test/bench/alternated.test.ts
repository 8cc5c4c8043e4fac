// The dataplane bench's alternated rounds (bench/dataplane/alternated.ts): each round measures the
// three proxies back to back starting from a different one, a failed pass fails the bench, and the
// table's last line is the median of the per-round ratios with their range.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { alternate, alternatedTable, median, type Contender } from '../../bench/dataplane/alternated.js';

const nginx: Contender = { name: 'nginx', url: 'http://nginx/', headers: {} };
const floor: Contender = { name: 'Node floor', url: 'http://floor/', headers: {} };
const proxy: Contender = { name: 'mesh-proxy, JWT + RBAC', url: 'http://proxy/', headers: { authorization: 'Bearer t' } };

describe('alternated rounds', () => {
  it('rotates which proxy goes first, and passes each its own headers', async () => {
    const calls: string[] = [];
    const rps: Record<string, number[]> = { 'http://nginx/': [100, 200, 300], 'http://floor/': [80, 150, 240], 'http://proxy/': [60, 100, 270] };
    const a = await alternate(nginx, floor, proxy, 3, 5, async (url, seconds, headers) => {
      assert.equal(seconds, 5);
      assert.deepEqual(headers, url === proxy.url ? proxy.headers : {});
      calls.push(new URL(url).host);
      return { rps: rps[url]!.shift()!, errors: 0, non2xx: 0 };
    });
    assert.deepEqual(calls, ['nginx', 'floor', 'proxy', 'floor', 'proxy', 'nginx', 'proxy', 'nginx', 'floor']);
    assert.deepEqual(a.rounds, [
      { nginx: 100, floor: 80, proxy: 60 },
      { nginx: 200, floor: 150, proxy: 100 },
      { nginx: 300, floor: 240, proxy: 270 },
    ]);
    const table = alternatedTable(a, 5).trim().split('\n');
    // Ratios 0.60 / 0.50 / 0.90 to nginx, 0.75 / 0.67 / 1.13 to the floor: the medians with their ranges.
    assert.equal(table.at(-1), '| median | 200 | 150 | 100 | 0.60 (0.50-0.90) | 0.75 (0.67-1.13) | 0.80 (0.75-0.80) |');
    assert.match(table[0]!, /^alternated rounds, mesh-proxy, JWT \+ RBAC: 3 rounds of 5 s/);
  });

  it('a pass with socket errors or non-2xx responses fails the measurement, naming it', async () => {
    const failing = alternate(nginx, floor, proxy, 1, 1, async (url) => ({ rps: 10, errors: 0, non2xx: url === proxy.url ? 3 : 0 }));
    await assert.rejects(failing, /alternated round 1, mesh-proxy, JWT \+ RBAC: 0 socket errors, 3 non-2xx responses/);
  });

  it('median of an odd and an even count', () => {
    assert.equal(median([3, 1, 2]), 2);
    assert.equal(median([4, 1, 3, 2]), 2.5);
  });
});
