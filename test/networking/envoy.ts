// Assertions on generated Envoy messages, shared by the networking tests.
import assert from 'node:assert/strict';
import type { Address } from '../../src/gen/envoy/config/core/v3/address_pb.js';
import type { Listener } from '../../src/gen/envoy/config/listener/v3/listener_pb.js';
import type { FilterChain } from '../../src/gen/envoy/config/listener/v3/listener_components_pb.js';
import { TcpProxySchema } from '../../src/gen/envoy/extensions/filters/network/tcp_proxy/v3/tcp_proxy_pb.js';
import {
  HttpConnectionManagerSchema,
  type HttpConnectionManager,
} from '../../src/gen/envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager_pb.js';
import type { Service } from '../../src/model/service.js';
import { unpack } from '../../src/envoy/types.js';

export function svc(init: Partial<Service> & Pick<Service, 'hostname' | 'ports'>): Service {
  return { namespace: 'foo', addresses: [], resolution: 'STATIC', exportTo: [], external: false, registry: 'Mock', labels: {}, ...init };
}

export function addr(a: Address | undefined): string {
  assert.equal(a?.address.case, 'socketAddress');
  const sa = a.address.value;
  assert.equal(sa.portSpecifier.case, 'portValue');
  return `${sa.address}:${sa.portSpecifier.value}`;
}

export function hcmOf(chain: FilterChain): HttpConnectionManager {
  assert.equal(chain.filters.length, 1);
  const f = chain.filters[0]!;
  assert.equal(f.name, 'envoy.filters.network.http_connection_manager');
  assert.equal(f.configType.case, 'typedConfig');
  return unpack(f.configType.value, HttpConnectionManagerSchema);
}

/** The cluster of the chain's tcp_proxy, its last filter (network rbac filters may come before it). */
export function tcpClusterOf(chain: FilterChain): string {
  const f = chain.filters.at(-1)!;
  assert.equal(f.name, 'envoy.filters.network.tcp_proxy');
  assert.equal(f.configType.case, 'typedConfig');
  const tcp = unpack(f.configType.value, TcpProxySchema);
  assert.equal(tcp.clusterSpecifier.case, 'cluster');
  return tcp.clusterSpecifier.value;
}

export function listenerByName(ls: readonly Listener[], name: string): Listener {
  const l = ls.find((x) => x.name === name);
  assert.ok(l, `listener ${name} in ${ls.map((x) => x.name).join(', ')}`);
  return l;
}
