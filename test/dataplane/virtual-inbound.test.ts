// issue 11: the virtualInbound listener the discovery server builds for a sidecar without inbound
// ports is accepted by the proxy's own listener compiler (before, it had no chain: "at least one
// filter chain is required"), and its chains select as the Go mesh's do: a declared port's chain,
// 15006 itself to the black hole, anything else through to its original destination.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { compileListener } from '../../src/dataplane/listener/compiler.js';
import { StatsStore } from '../../src/dataplane/stats.js';
import { buildVirtualInbound } from '../../src/networking/listener.js';
import { StaticClusterManager } from './static-cluster-manager.js';

const deps = () => ({ clusters: new StaticClusterManager(), routes: () => undefined, stats: new StatsStore() });
const facts = (destinationIp: string, destinationPort: number) => ({
  destinationIp,
  destinationPort,
  sourceIp: '10.0.0.9',
  sourcePort: 40000,
  serverName: '',
  transportProtocol: 'raw_buffer',
  applicationProtocols: [],
});

test('virtualInbound without inbound ports compiles; its connections pass through, 15006 goes nowhere', () => {
  const l = compileListener(buildVirtualInbound([]), deps());
  try {
    assert.equal(l.select(facts('10.0.0.1', 9999))?.name, 'virtualInbound-ipv4-passthrough');
    assert.equal(l.select(facts('fd00::1', 9999))?.name, 'virtualInbound-ipv6-passthrough');
    assert.equal(l.select(facts('10.0.0.1', 15006))?.name, 'virtualInbound-blackhole');
  } finally {
    for (const c of l.allChains()) c.dispose();
  }
});

test('a declared port keeps its own chain beside the passthrough', () => {
  const l = compileListener(buildVirtualInbound([{ port: 8080, protocol: 'TCP', target: { address: '127.0.0.1', port: 8080 } }]), deps());
  try {
    assert.equal(l.select(facts('10.0.0.1', 8080))?.name, '0.0.0.0_8080');
    assert.equal(l.select(facts('10.0.0.1', 8081))?.name, 'virtualInbound-ipv4-passthrough');
  } finally {
    for (const c of l.allChains()) c.dispose();
  }
});
