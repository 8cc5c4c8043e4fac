// Filter chain selection: the most specific match per level, in Envoy's order, no backtracking.
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { create, type MessageInitShape } from '@bufbuild/protobuf';
import { FilterChainMatch_ConnectionSourceType, FilterChainMatchSchema } from '../../src/gen/envoy/config/listener/v3/listener_components_pb.js';
import { compileChainMatch, selectChain, type ConnectionFacts } from '../../src/dataplane/filter-chain-match.js';

type MatchInit = MessageInitShape<typeof FilterChainMatchSchema>;

function chains(specs: Record<string, MatchInit>) {
  return Object.entries(specs).map(([name, m]) => ({ name, match: compileChainMatch(create(FilterChainMatchSchema, m), name) }));
}

const facts = (f: Partial<ConnectionFacts> = {}): ConnectionFacts => ({
  destinationIp: '10.0.0.1', destinationPort: 8080, sourceIp: '10.1.2.3', sourcePort: 50000, serverName: '', transportProtocol: 'raw_buffer', applicationProtocols: [], ...f,
});
const pick = (cs: ReturnType<typeof chains>, f: Partial<ConnectionFacts> = {}) => selectChain(cs, facts(f))?.name;

describe('filter chain match', () => {
  it('prefers the exact destination port, then falls back to the chain without one', () => {
    const cs = chains({ any: {}, p8080: { destinationPort: 8080 }, p9090: { destinationPort: 9090 } });
    assert.equal(pick(cs), 'p8080');
    assert.equal(pick(cs, { destinationPort: 9090 }), 'p9090');
    assert.equal(pick(cs, { destinationPort: 1 }), 'any');
  });

  it('takes the longest destination prefix and does not backtrack to a less specific level', () => {
    const cs = chains({
      wide: { prefixRanges: [{ addressPrefix: '10.0.0.0', prefixLen: 8 }] },
      narrow: { prefixRanges: [{ addressPrefix: '10.0.0.0', prefixLen: 24 }], sourcePorts: [1] },
      none: {},
    });
    assert.equal(pick(cs, { destinationIp: '10.9.9.9' }), 'wide');
    // The /24 wins the IP level; its source port then fails: no chain (Envoy does not backtrack).
    assert.equal(pick(cs), undefined);
    assert.equal(pick(cs, { sourcePort: 1 }), 'narrow');
    assert.equal(pick(cs, { destinationIp: '192.168.0.1' }), 'none');
  });

  it('matches transport and application protocols as detected by the listener filters', () => {
    const cs = chains({ http: { applicationProtocols: ['http/1.0', 'http/1.1', 'h2c'] }, tcp: {}, tls: { transportProtocol: 'tls' } });
    assert.equal(pick(cs, { applicationProtocols: ['http/1.1'] }), 'http');
    assert.equal(pick(cs), 'tcp');
    assert.equal(pick(cs, { transportProtocol: 'tls' }), 'tls');
  });

  it('matches server names exactly before wildcards; without SNI only chains without names', () => {
    const cs = chains({ exact: { serverNames: ['a.example.com'] }, wild: { serverNames: ['*.example.com'] }, plain: {} });
    assert.equal(pick(cs, { serverName: 'a.example.com' }), 'exact');
    assert.equal(pick(cs, { serverName: 'b.example.com' }), 'wild');
    assert.equal(pick(cs), 'plain');
  });

  it('matches source type, source prefixes and ports', () => {
    const cs = chains({
      local: { sourceType: FilterChainMatch_ConnectionSourceType.SAME_IP_OR_LOOPBACK },
      external: { sourceType: FilterChainMatch_ConnectionSourceType.EXTERNAL, sourcePrefixRanges: [{ addressPrefix: '10.1.0.0', prefixLen: 16 }] },
    });
    assert.equal(pick(cs, { sourceIp: '127.0.0.1' }), 'local');
    assert.equal(pick(cs, { sourceIp: '10.0.0.1' }), 'local');
    assert.equal(pick(cs), 'external');
    assert.equal(pick(cs, { sourceIp: '172.16.0.1' }), undefined);
  });

  it('gives chains with the same criteria the same key (the listener refuses them)', () => {
    const [a, b] = chains({ a: { destinationPort: 80, applicationProtocols: ['h2c', 'http/1.1'] }, b: { applicationProtocols: ['http/1.1', 'h2c'], destinationPort: 80 } });
    assert.equal(a!.match.key, b!.match.key);
  });
});
