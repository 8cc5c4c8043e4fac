// The DNS name table and address auto-allocation: fixture services in, the table a proxy receives
// out; the listeners of a DNS_AUTO_ALLOCATE proxy bind where its table says the host is.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { create, type JsonObject } from '@bufbuild/protobuf';
import { NodeSchema } from '../../src/gen/envoy/config/core/v3/base_pb.js';
import { ListenerSchema } from '../../src/gen/envoy/config/listener/v3/listener_pb.js';
import { NameTableSchema, type NameTable } from '../../src/gen/mesh/v1/dns_pb.js';
import { allocateAddresses, allocatedFor } from '../../src/model/auto-allocate.js';
import { ProxyParseError } from '../../src/model/proxy.js';
import { EMPTY_LOCALITY, type Service, type ServiceInstance } from '../../src/model/service.js';
import { buildNameTable } from '../../src/networking/name-table.js';
import type { ProxyInfo } from '../../src/xds/generator.js';
import { createMeshGenerators } from '../../src/xds/generators/index.js';
import { TypeUrl, unpack } from '../../src/envoy/types.js';
import { MockRegistry } from '../../src/registry/mock.js';
import { MESH, pushOf, serviceEntry, sidecarProxy } from './fixtures.js';
import { addr, svc } from './envoy.js';

const HTTP = [{ name: 'http', port: 80, protocol: 'HTTP' as const }];
const TCP = [{ name: 'tcp', port: 9000, protocol: 'TCP' as const }];

function entries(t: NameTable): Record<string, { ips: string[]; shortname: string; namespace: string; registry: string }> {
  return Object.fromEntries(Object.entries(t.table).map(([k, v]) => [k, { ips: v.ips, shortname: v.shortname, namespace: v.namespace, registry: v.registry }]));
}

test('auto-allocation: addresses in 240.240.0.0/16, one per host, none for hosts with addresses, wildcards or resolution NONE', () => {
  const services = [
    svc({ hostname: 'a.example.com', ports: HTTP, resolution: 'DNS' }),
    svc({ hostname: 'a.example.com', namespace: 'bar', ports: HTTP, resolution: 'DNS' }),
    svc({ hostname: 'b.example.com', ports: HTTP, resolution: 'STATIC' }),
    svc({ hostname: 'vip.example.com', ports: HTTP, addresses: ['10.1.1.1'] }),
    svc({ hostname: '*.wild.example.com', ports: HTTP, resolution: 'DNS' }),
    svc({ hostname: 'passthrough.example.com', ports: HTTP, resolution: 'NONE' }),
  ];
  const allocated = allocateAddresses(services);
  assert.deepEqual([...allocated.keys()].sort(), ['a.example.com', 'b.example.com']);
  for (const a of allocated.values()) assert.match(a, /^240\.240\.\d{1,3}\.\d{1,3}$/);
  assert.notEqual(allocated.get('a.example.com'), allocated.get('b.example.com'));
});

test('auto-allocation: a host keeps its address when other hosts come and go', () => {
  const base = svc({ hostname: 'stable.example.com', ports: HTTP, resolution: 'DNS' });
  const before = allocateAddresses([base]).get('stable.example.com');
  const others = Array.from({ length: 200 }, (_, i) => svc({ hostname: `other-${i}.example.com`, ports: HTTP, resolution: 'DNS' }));
  assert.equal(allocateAddresses([...others, base]).get('stable.example.com'), before);
  assert.equal(allocateAddresses([...others.slice(50), base]).get('stable.example.com'), before);
});

test('auto-allocation: two hosts that hash to the same address both get one, the first in name order keeps it', () => {
  // Find two names whose addresses collide when allocated alone.
  const alone = new Map<string, string>();
  let pair: [string, string] | undefined;
  for (let i = 0; !pair; i++) {
    const host = `c-${i}.example.com`;
    const a = allocateAddresses([svc({ hostname: host, ports: HTTP, resolution: 'DNS' })]).get(host)!;
    const earlier = [...alone].find(([, b]) => b === a);
    if (earlier) pair = [earlier[0], host].sort() as [string, string];
    alone.set(host, a);
  }
  const both = allocateAddresses(pair.map((hostname) => svc({ hostname, ports: HTTP, resolution: 'DNS' })));
  assert.equal(both.get(pair[0]), alone.get(pair[0]));
  assert.notEqual(both.get(pair[1]), both.get(pair[0]));
  assert.match(both.get(pair[1])!, /^240\.240\./);
});

test('auto-allocation: collision-free over many hosts, and never an address a user wrote in the range', () => {
  const written = allocateAddresses([svc({ hostname: 'h-0.example.com', ports: HTTP, resolution: 'DNS' })]).get('h-0.example.com')!;
  const services = [
    svc({ hostname: 'taken.example.com', ports: HTTP, addresses: [written] }),
    ...Array.from({ length: 5000 }, (_, i) => svc({ hostname: `h-${i}.example.com`, ports: HTTP, resolution: 'DNS' })),
  ];
  const allocated = allocateAddresses(services);
  assert.equal(allocated.size, 5000);
  const addresses = new Set(allocated.values());
  assert.equal(addresses.size, 5000, 'two hosts share an address');
  assert.ok(!addresses.has(written), `${written} was written by a user and allocated again`);
  for (const a of addresses) {
    const last = Number(a.split('.')[3]);
    assert.ok(last >= 1 && last <= 254, `${a}: last octet 0 or 255`);
  }
  // The same input gives the same allocation, whatever the order of the services.
  assert.deepEqual(new Map([...allocateAddresses([...services].reverse())].sort()), new Map([...allocated].sort()));
});

test('name table: ServiceEntry hosts with their addresses; hosts without one only with auto-allocation', () => {
  const push = pushOf(MESH);
  const proxy = sidecarProxy('10.0.0.1', 'echo-1', 'foo');
  const services = push.sidecarScope(proxy).services;
  const plain = buildNameTable({ services, instances: (x) => push.instances(x), allocated: allocatedFor(push), autoAllocate: false, domain: 'cluster.local', clusterId: '' });
  assert.deepEqual(entries(plain), {
    'db.foo.svc.cluster.local': { ips: ['10.96.0.20'], shortname: '', namespace: '', registry: 'ServiceEntry' },
    'echo.foo.svc.cluster.local': { ips: ['10.96.0.10'], shortname: '', namespace: '', registry: 'ServiceEntry' },
  });
  const auto = buildNameTable({ services, instances: (x) => push.instances(x), allocated: allocatedFor(push), autoAllocate: true, domain: 'cluster.local', clusterId: '' });
  assert.deepEqual(auto.table['api.example.com']?.ips, [allocatedFor(push).get('api.example.com')]);
  assert.match(auto.table['api.example.com']!.ips[0]!, /^240\.240\./);
});

test('name table: registry services carry short-name information, merged hosts, CIDRs left out', () => {
  const table = buildNameTable({
    services: [
      svc({ hostname: 'echo.foo.svc.cluster.local', ports: HTTP, addresses: ['10.96.1.1'], registry: 'Mock' }),
      svc({ hostname: 'echo.foo.svc.cluster.local', ports: HTTP, addresses: ['10.96.9.9'], registry: 'ServiceEntry' }),
      svc({ hostname: 'multi.example.com', ports: HTTP, addresses: ['10.2.0.1'], registry: 'ServiceEntry' }),
      svc({ hostname: 'multi.example.com', namespace: 'bar', ports: TCP, addresses: ['10.2.0.2', '2001:db8::2'], registry: 'ServiceEntry' }),
      svc({ hostname: 'range.example.com', ports: TCP, addresses: ['10.3.0.0/16'], registry: 'ServiceEntry' }),
      svc({ hostname: 'deep.name.foo.svc.cluster.local', ports: HTTP, addresses: ['10.96.1.2'], registry: 'Mock' }),
      svc({ hostname: 'other.foo.svc.example.org', ports: HTTP, addresses: ['10.96.1.3'], registry: 'Mock' }),
    ],
    instances: () => [],
    allocated: new Map(),
    autoAllocate: false,
    domain: 'cluster.local',
    clusterId: '',
  });
  assert.deepEqual(entries(table), {
    'echo.foo.svc.cluster.local': { ips: ['10.96.1.1'], shortname: 'echo', namespace: 'foo', registry: 'Mock' },
    'multi.example.com': { ips: ['10.2.0.1', '10.2.0.2', '2001:db8::2'], shortname: '', namespace: '', registry: 'ServiceEntry' },
    'deep.name.foo.svc.cluster.local': { ips: ['10.96.1.2'], shortname: '', namespace: '', registry: 'Mock' },
    'other.foo.svc.example.org': { ips: ['10.96.1.3'], shortname: '', namespace: '', registry: 'Mock' },
  });
});

/** Instances of a headless service on two ports, some Pods with a subdomain, one in another cluster. */
function headlessInstances(s: Service): ServiceInstance[] {
  const at = (address: string, clusterId: string, pod?: string): ServiceInstance[] =>
    s.ports.map((servicePort) => ({
      hostname: s.hostname, namespace: s.namespace, servicePort, address, endpointPort: servicePort.port, labels: {}, serviceAccount: '',
      locality: EMPTY_LOCALITY, weight: 1, network: '', clusterId, ...(pod ? { podDns: { hostname: pod, subdomain: 'db' } } : {}),
    }));
  if (s.hostname === 'db.foo.svc.cluster.local') {
    return [...at('10.4.0.1', 'c1', 'db-0'), ...at('10.4.0.2', 'c1', 'db-1'), ...at('10.4.0.3', 'c1'), ...at('10.9.0.1', 'c2', 'db-1'), ...at('10.9.0.2', 'c2', 'db-2')];
  }
  if (s.hostname === 'vms.example.com') return [...at('10.5.0.1', 'c1'), ...at('vm.example.com', 'c1'), ...at('2001:db8::5', 'c1')];
  return at('10.6.0.1', 'c1', 'x-0');
}

test('name table: a headless service resolves to its instances\' addresses, a Pod with a subdomain to its own (its cluster\'s first)', () => {
  const db = svc({ hostname: 'db.foo.svc.cluster.local', ports: [...HTTP, ...TCP], resolution: 'NONE', registry: 'Orchestrator' });
  const table = buildNameTable({
    services: [
      db,
      svc({ hostname: 'vms.example.com', ports: TCP, resolution: 'NONE', registry: 'ServiceEntry' }),
      // Resolution NONE with an address, or another resolution: not headless, their instances are not looked at.
      svc({ hostname: 'vip.foo.svc.cluster.local', ports: TCP, resolution: 'NONE', addresses: ['10.96.7.7'], registry: 'Orchestrator' }),
      svc({ hostname: 'static.example.com', ports: TCP, resolution: 'STATIC', registry: 'ServiceEntry' }),
      // A ServiceEntry host that a Pod name takes over.
      svc({ hostname: 'db-0.db.foo.svc.cluster.local', ports: TCP, addresses: ['10.96.8.8'], registry: 'ServiceEntry' }),
    ],
    instances: headlessInstances,
    allocated: new Map(),
    autoAllocate: false,
    domain: 'cluster.local',
    clusterId: 'c1',
  });
  assert.deepEqual(entries(table), {
    // Every address once though each is an instance on both ports; other clusters' Pods too.
    'db.foo.svc.cluster.local': { ips: ['10.4.0.1', '10.4.0.2', '10.4.0.3', '10.9.0.1', '10.9.0.2'], shortname: 'db', namespace: 'foo', registry: 'Orchestrator' },
    'db-0.db.foo.svc.cluster.local': { ips: ['10.4.0.1'], shortname: 'db-0.db', namespace: 'foo', registry: 'Orchestrator' },
    // db-1 in both clusters: the proxy's own cluster's Pod; db-2 only in the other one.
    'db-1.db.foo.svc.cluster.local': { ips: ['10.4.0.2'], shortname: 'db-1.db', namespace: 'foo', registry: 'Orchestrator' },
    'db-2.db.foo.svc.cluster.local': { ips: ['10.9.0.2'], shortname: 'db-2.db', namespace: 'foo', registry: 'Orchestrator' },
    // A ServiceEntry without addresses: its endpoints' IP addresses, not a DNS name.
    'vms.example.com': { ips: ['10.5.0.1', '2001:db8::5'], shortname: '', namespace: '', registry: 'ServiceEntry' },
    'vip.foo.svc.cluster.local': { ips: ['10.96.7.7'], shortname: 'vip', namespace: 'foo', registry: 'Orchestrator' },
  });
  // The proxy of the other cluster gets that cluster's db-1.
  const other = buildNameTable({ services: [db], instances: headlessInstances, allocated: new Map(), autoAllocate: false, domain: 'cluster.local', clusterId: 'c2' });
  assert.deepEqual(other.table['db-1.db.foo.svc.cluster.local']?.ips, ['10.9.0.1']);
});

function info(namespace: string, meta: JsonObject): ProxyInfo {
  const id = `sidecar~10.0.0.7~app-1.${namespace}~${namespace}.svc.cluster.local`;
  return { id, metadata: { NAMESPACE: namespace, ...meta }, node: create(NodeSchema, { id }), connectionId: `${id}-${Math.random()}`, peer: 'ipv4:127.0.0.1:1' };
}

test('NDS generator: a table only for DNS_CAPTURE proxies; a malformed DNS_CAPTURE refuses the proxy', async () => {
  const mock = new MockRegistry('c1');
  mock.addService({ hostname: 'reviews.foo.svc.cluster.local', namespace: 'foo', ports: HTTP, addresses: ['10.96.3.3'] });
  const push = pushOf(MESH, [mock]);
  const nds = createMeshGenerators({ pushContext: () => push }).get(TypeUrl.NameTable)!;
  const wildcard = { wildcard: true, names: new Set<string>() };
  assert.deepEqual(await nds.generate({ proxy: info('foo', {}), typeUrl: TypeUrl.NameTable, subscription: wildcard }), []);
  assert.deepEqual(await nds.generate({ proxy: info('foo', { DNS_CAPTURE: 'false' }), typeUrl: TypeUrl.NameTable, subscription: wildcard }), []);
  const [r] = await nds.generate({ proxy: info('foo', { DNS_CAPTURE: 'true' }), typeUrl: TypeUrl.NameTable, subscription: wildcard });
  assert.equal(r?.resource.typeUrl, 'type.googleapis.com/mesh.v1.dns.NameTable');
  const table = unpack(r.resource, NameTableSchema);
  assert.deepEqual(table.table['reviews.foo.svc.cluster.local']?.ips, ['10.96.3.3']);
  assert.equal(table.table['reviews.foo.svc.cluster.local']?.shortname, 'reviews');
  assert.equal(table.table['api.example.com'], undefined, 'no address without DNS_AUTO_ALLOCATE');
  await assert.rejects(
    async () => nds.generate({ proxy: info('foo', { DNS_CAPTURE: 'yes' }), typeUrl: TypeUrl.NameTable, subscription: wildcard }),
    /node\.metadata\.DNS_CAPTURE: expected "true" or "false", got "yes"/,
  );
  assert.throws(() => sidecarProxy('10.0.0.1', 'a', 'foo', { DNS_AUTO_ALLOCATE: 'on' }), ProxyParseError);
});

test('listeners: a TCP port of a host without address binds at its allocated address for DNS_AUTO_ALLOCATE proxies only', async () => {
  const push = pushOf([
    serviceEntry('foo', 'ext', { hosts: ['tcp.example.com'], location: 'MESH_EXTERNAL', resolution: 'DNS', ports: [{ number: 9000, name: 'tcp', protocol: 'TCP' }] }),
  ]);
  const lds = createMeshGenerators({ pushContext: () => push }).get(TypeUrl.Listener)!;
  const wildcard = { wildcard: true, names: new Set<string>() };
  const addresses = async (meta: JsonObject) =>
    (await lds.generate({ proxy: info('foo', meta), typeUrl: TypeUrl.Listener, subscription: wildcard }))
      .map((r) => unpack(r.resource, ListenerSchema))
      .filter((l) => l.name.endsWith('_9000'))
      .map((l) => addr(l.address));
  const allocated = allocatedFor(push).get('tcp.example.com')!;
  const nds = createMeshGenerators({ pushContext: () => push }).get(TypeUrl.NameTable)!;
  const [r] = await nds.generate({ proxy: info('foo', { DNS_CAPTURE: 'true', DNS_AUTO_ALLOCATE: 'true' }), typeUrl: TypeUrl.NameTable, subscription: wildcard });
  assert.deepEqual(unpack(r!.resource, NameTableSchema).table['tcp.example.com']?.ips, [allocated]);
  assert.deepEqual(await addresses({ DNS_CAPTURE: 'true', DNS_AUTO_ALLOCATE: 'true' }), [`${allocated}:9000`]);
  assert.deepEqual(await addresses({ DNS_CAPTURE: 'true' }), ['0.0.0.0:9000']);
  assert.deepEqual(await addresses({ DNS_AUTO_ALLOCATE: 'true' }), ['0.0.0.0:9000']);
});
