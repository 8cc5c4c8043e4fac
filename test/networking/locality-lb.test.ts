// Locality failover's priorities, as the Go mesh's localityLbSetting assigns them.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { distributedWeights, effectiveLocalityLb, failoverApplies, failoverPriorities, localityMatches, localityPriority, localityWeighted, type LocalityDistribute } from '../../src/networking/locality-lb.js';
import { parseLocality } from '../../src/model/service.js';

const at = (locality: string, labels: Record<string, string> = {}) => ({ locality: parseLocality(locality), labels });

describe('locality failover', () => {
  it('orders by locality: same subzone, same zone, same region, another region', () => {
    const client = parseLocality('r1/z1/s1');
    assert.deepEqual(['r1/z1/s1', 'r1/z1/s2', 'r1/z2', 'r2/z1/s1'].map((l) => localityPriority(client, parseLocality(l))), [0, 1, 2, 3]);
  });

  it('priorities run from 0 without gaps; a failover region comes before the other regions', () => {
    const client = at('us-east/a/1');
    const eps = [at('eu/a'), at('us-west/b'), at('us-east/b'), at('us-east/b')];
    assert.deepEqual(failoverPriorities(client, eps, {}), [1, 1, 0, 0], 'no nearer endpoint: the same region is P=0');
    assert.deepEqual(failoverPriorities(client, eps, { failover: [{ from: 'us-east', to: 'us-west' }] }), [2, 1, 0, 0]);
    // A rule for another region changes nothing for this client.
    assert.deepEqual(failoverPriorities(client, eps, { failover: [{ from: 'eu', to: 'us-east' }] }), [1, 1, 0, 0]);
  });

  it('failoverPriority: by the first label an endpoint does not share with the client; label=value stands for the client', () => {
    const client = at('r1/z1', { 'topology.istio.io/network': 'n1', env: 'prod' });
    const eps = [at('r1/z1', { 'topology.istio.io/network': 'n1', env: 'prod' }), at('r1/z1', { 'topology.istio.io/network': 'n1', env: 'dev' }), at('r1/z1', { 'topology.istio.io/network': 'n2', env: 'prod' })];
    assert.deepEqual(failoverPriorities(client, eps, { failoverPriority: ['topology.istio.io/network', 'env'] }), [0, 1, 2]);
    assert.deepEqual(failoverPriorities(client, eps, { failoverPriority: ['topology.istio.io/network', 'env=dev'] }), [1, 0, 2]);
    // Labels first, then locality within each label level, when failover is given too.
    const mixed = [at('r2/z1', { env: 'prod' }), at('r1/z1', { env: 'prod' }), at('r1/z1', { env: 'dev' })];
    assert.deepEqual(failoverPriorities(at('r1/z1', { env: 'prod' }), mixed, { failoverPriority: ['env'], failover: [{ from: 'r1', to: 'r2' }] }), [1, 0, 2]);
    // Without labels on the client, no label priorities (and, without failover, none by locality).
    assert.deepEqual(failoverPriorities(at('r1/z1'), mixed, { failoverPriority: ['env'] }), [0, 0, 0]);
  });

  it("the rule's setting wins unless it turns locality balancing off; failover needs outlier detection and no distribute", () => {
    const mesh = { enabled: true };
    assert.equal(effectiveLocalityLb(mesh, undefined), mesh);
    assert.equal(effectiveLocalityLb(mesh, { enabled: false }), undefined);
    assert.equal(effectiveLocalityLb({ enabled: false }, undefined), undefined);
    const rule = { failover: [{ from: 'a', to: 'b' }] };
    assert.equal(effectiveLocalityLb({ enabled: false }, rule), rule);
    assert.equal(failoverApplies(mesh, {}), true);
    assert.equal(failoverApplies(mesh, undefined), false);
    assert.equal(failoverApplies({ distribute: [{ from: 'a/*', to: { 'a/*': 100 } }] }, {}), false);
  });
});

describe('locality distribute', () => {
  it('localityMatches: the region must match, a missing or * zone and subzone match anything', () => {
    const l = parseLocality('us-east/a/1');
    assert.deepEqual(['us-east', 'us-east/*', 'us-east/a', 'us-east/a/1', '*', 'us-east/b', 'us-west/*', 'us-east/a/2'].map((r) => localityMatches(l, r)), [true, true, true, true, true, false, false, false]);
  });

  it("the first entry for the client's locality sets the weights; a `to` over several localities splits by their weights, rounded up; the rest get 0", () => {
    const groups = [{ locality: parseLocality('us-east/a'), weight: 1 }, { locality: parseLocality('us-east/b'), weight: 3 }, { locality: parseLocality('us-west/c'), weight: 2 }, { locality: parseLocality('eu/d'), weight: 1 }];
    const distribute: LocalityDistribute[] = [
      { from: 'eu/*', to: { 'eu/*': 100 } },
      { from: 'us-east/*', to: { 'us-east/*': 75, 'us-west/*': 25 } },
    ];
    assert.deepEqual(distributedWeights(parseLocality('us-east/a'), groups, distribute), [19, 57, 25, 0]);
    assert.deepEqual(distributedWeights(parseLocality('eu/x'), groups, distribute), [0, 0, 0, 100]);
    assert.equal(distributedWeights(parseLocality('ap/x'), groups, distribute), undefined, 'no entry for this client: weights unchanged');
  });

  it('clusters balance by locality weight for distribute, or for failover given as a list with outlier detection (as the Go mesh sets locality_weighted_lb_config)', () => {
    assert.equal(localityWeighted({ distribute: [{ from: 'a', to: { a: 100 } }] }, undefined), true);
    assert.equal(localityWeighted({ failover: [{ from: 'a', to: 'b' }] }, {}), true);
    assert.equal(localityWeighted({ failoverPriority: ['x'] }, {}), true);
    assert.equal(localityWeighted({ failover: [{ from: 'a', to: 'b' }] }, undefined), false);
    assert.equal(localityWeighted({ enabled: true }, {}), false, 'the default failover by locality: priorities only');
  });
});
