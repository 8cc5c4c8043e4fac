import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import type { JsonValue } from '@bufbuild/protobuf';
import { ListenerSchema, type Listener } from '../../src/gen/envoy/config/listener/v3/listener_pb.js';
import { fromEnvoyJson } from '../../src/envoy/types.js';
import { ConfigError } from '../../src/envoy/config-error.js';
import { compileListener, type ActiveListener } from '../../src/dataplane/listener/compiler.js';
import { HttpChain } from '../../src/dataplane/listener/http-hosting.js';
import { StatsStore } from '../../src/dataplane/stats.js';
import { StaticClusterManager } from './static-cluster-manager.js';

const fixture = JSON.parse(readFileSync(new URL('../../../test/dataplane/fixtures/listener-inbound.json', import.meta.url), 'utf8')) as Record<string, JsonValue>;

function listener(edit: (json: Record<string, JsonValue>) => void = () => undefined): Listener {
  const json = structuredClone(fixture);
  edit(json);
  return fromEnvoyJson(ListenerSchema, json);
}

function compile(l: Listener): ActiveListener {
  return compileListener(l, { clusters: new StaticClusterManager(), routes: () => undefined, stats: new StatsStore() });
}

function dispose(l: ActiveListener): void {
  for (const c of l.allChains()) c.dispose();
}

test('an Envoy JSON listener compiles into its chains, inspection and hand-off settings', () => {
  const l = compile(listener());
  try {
    assert.equal(l.name, 'virtualInbound');
    assert.deepEqual(l.address, { host: '0.0.0.0', port: 15006 });
    assert.equal(l.bind, true);
    assert.equal(l.inbound, true);
    assert.equal(l.message.useOriginalDst, true);
    assert.deepEqual(l.inspection, { http: true, tls: false, timeoutMs: 250, continueOnTimeout: false });
    assert.deepEqual(l.chains.map((c) => c.name), ['inbound|8080|http', 'inbound|9000|tcp', 'inbound|8443|tls']);
    assert.ok(l.chains[0] instanceof HttpChain, 'the HCM chain is hosted on node:http/http2');
    assert.equal(l.chains[1]!.constructor.name, 'TcpChain');
    assert.ok(l.chains[2]!.transport, 'the TLS chain terminates TLS');
    assert.deepEqual(l.secretRefs().map((r) => r.name), ['default', 'ROOTCA'], 'listener warming waits for its SDS secrets');
    assert.equal(l.chains[0]!.transport, undefined);
    assert.equal(l.defaultChain, undefined);
    const facts = { destinationIp: '10.0.0.1', sourceIp: '10.0.0.2', sourcePort: 5000, serverName: '', transportProtocol: 'raw_buffer' };
    assert.equal(l.select({ ...facts, destinationPort: 8080, applicationProtocols: ['http/1.1'] })?.name, 'inbound|8080|http');
    assert.equal(l.select({ ...facts, destinationPort: 9000, applicationProtocols: [] })?.name, 'inbound|9000|tcp');
    assert.equal(l.select({ ...facts, destinationPort: 7000, applicationProtocols: [] }), undefined);
  } finally {
    dispose(l);
  }
});

test('bind_to_port false and no inspector: not bound, no sniffing', () => {
  const l = compile(
    listener((j) => {
      j.bind_to_port = false;
      j.listener_filters = [];
      j.filter_chains = [(j.filter_chains as JsonValue[])[1]!];
    }),
  );
  assert.equal(l.bind, false);
  assert.deepEqual(l.inspection, { http: false, tls: false, timeoutMs: 250, continueOnTimeout: false });
});

function rejects(edit: (json: Record<string, JsonValue>) => void, field: string, detail: RegExp): void {
  assert.throws(
    () => compile(listener(edit)),
    (e: unknown) => e instanceof ConfigError && e.field === field && detail.test(e.detail),
    `${field} ${detail}`,
  );
}

test('what the compiler cannot honour is a ConfigError naming the field', () => {
  rejects(
    (j) => ((j.listener_filters as JsonValue[])[0] = { name: 'x', typed_config: { '@type': 'type.googleapis.com/envoy.extensions.filters.http.router.v3.Router' } }),
    'listener_filters[0].typed_config',
    /listener filter type envoy.extensions.filters.http.router.v3.Router is not supported/,
  );
  rejects(
    (j) => {
      const chain = (j.filter_chains as { filters: JsonValue[] }[])[1]!;
      chain.filters = [chain.filters[0]!, chain.filters[0]!];
    },
    'filter_chains[1].filters[0]',
    /envoy.filters.network.tcp_proxy is a terminal filter and must be the last one/,
  );
  rejects(
    (j) => ((j.filter_chains as { filters: JsonValue[] }[])[1]!.filters = [{ name: 'n', typed_config: { '@type': 'type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC' } }]),
    'filter_chains[1].filters[0].typed_config',
    /network filter type envoy.extensions.filters.http.rbac.v3.RBAC is not supported/,
  );
  rejects((j) => ((j.filter_chains as { filters: JsonValue[] }[])[1]!.filters = []), 'filter_chains[1].filters', /at least one network filter is required/);
  rejects(
    (j) => ((j.filter_chains as { filter_chain_match: JsonValue }[])[1]!.filter_chain_match = { destination_port: 8080, application_protocols: ['http/1.1', 'h2c'] }),
    'filter_chains[1].filter_chain_match',
    /matches the same connections as filter_chains\[0\]/,
  );
  rejects(
    (j) => (((j.filter_chains as { filters: { typed_config: Record<string, JsonValue> }[] }[])[1]!.filters[0]!.typed_config).cluster = null),
    'filter_chains[1].filters[0].typed_config.filters[0].typed_config.cluster_specifier',
    /cluster or weighted_clusters is required/,
  );
  rejects((j) => (j.filter_chains = []), 'filter_chains', /at least one filter chain/);
});
