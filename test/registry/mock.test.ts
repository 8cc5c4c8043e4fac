import { test } from 'node:test';
import assert from 'node:assert/strict';
import { AggregateRegistry } from '../../src/registry/aggregate.js';
import { MockRegistry } from '../../src/registry/mock.js';
import type { RegistryEvent } from '../../src/registry/types.js';

const HOST = 'echo.foo.svc.cluster.local';
const ports = [
  { name: 'http', port: 80, protocol: 'HTTP' as const },
  { name: 'grpc', port: 7070, protocol: 'GRPC' as const },
];

test('the Mock registry emits an event for every change and serves what tests put in', () => {
  const mock = new MockRegistry();
  const events: RegistryEvent[] = [];
  mock.onEvent((e) => events.push(e));
  const svc = mock.addService({ hostname: HOST, namespace: 'foo', ports });
  assert.equal(svc.registry, 'Mock');
  assert.equal(svc.resolution, 'STATIC');
  mock.setEndpoints(HOST, 'foo', [{ address: '10.0.0.1' }, { address: '10.0.0.2', servicePort: 'grpc', endpointPort: 9000, weight: 5 }]);
  mock.addEndpoint(HOST, 'foo', { address: '10.0.0.3', servicePort: 80 });
  mock.removeEndpoint(HOST, 'foo', '10.0.0.1');
  mock.addService({ hostname: HOST, namespace: 'foo', ports: ports.slice(0, 1) });
  mock.removeService(HOST, 'foo');
  mock.removeService(HOST, 'foo');
  assert.deepEqual(
    events.map((e) => `${e.kind}:${e.event}:${e.namespace}/${e.hostname}:${e.registry}`),
    [
      `service:add:foo/${HOST}:Mock`,
      `endpoints:update:foo/${HOST}:Mock`,
      `endpoints:update:foo/${HOST}:Mock`,
      `endpoints:update:foo/${HOST}:Mock`,
      `service:update:foo/${HOST}:Mock`,
      `service:delete:foo/${HOST}:Mock`,
    ],
    'removing an absent service is silent',
  );
  assert.deepEqual(mock.services(), []);
});

test('Mock instances: every port unless one is named, defaults filled', () => {
  const mock = new MockRegistry('cl-9');
  mock.addService({ hostname: HOST, namespace: 'foo', ports });
  mock.setEndpoints(HOST, 'foo', [{ address: '10.0.0.1' }, { address: '10.0.0.2', servicePort: 'grpc', endpointPort: 9000, weight: 5 }]);
  const inst = mock.instances({ hostname: HOST, namespace: 'foo' });
  assert.deepEqual(inst.map((i) => [i.address, i.servicePort.port, i.endpointPort, i.weight, i.clusterId]), [
    ['10.0.0.1', 80, 80, 1, 'cl-9'],
    ['10.0.0.1', 7070, 7070, 1, 'cl-9'],
    ['10.0.0.2', 7070, 9000, 5, 'cl-9'],
  ]);
  assert.throws(() => mock.setEndpoints('nope', 'foo', []), /no service foo\/nope/);
  assert.throws(() => mock.addEndpoint(HOST, 'foo', { address: '1.1.1.1', servicePort: 'tcp' }), /has no port tcp/);
});

test('the aggregate: first registry wins a service, instances are merged, events forwarded', () => {
  const a = new MockRegistry('a');
  const b = new MockRegistry('b');
  const agg = new AggregateRegistry([a]);
  const events: string[] = [];
  agg.onEvent((e) => events.push(`${e.kind}:${e.hostname}`));
  agg.add(b);
  a.addService({ hostname: HOST, namespace: 'foo', ports, labels: { from: 'a' } });
  b.addService({ hostname: HOST, namespace: 'foo', ports, labels: { from: 'b' } });
  b.addService({ hostname: 'other.example.com', ports, labels: { from: 'b' } });
  a.setEndpoints(HOST, 'foo', [{ address: '10.0.0.1', servicePort: 80 }]);
  b.setEndpoints(HOST, 'foo', [{ address: '10.1.0.1', servicePort: 80 }]);
  assert.deepEqual(agg.services().map((s) => [s.hostname, s.labels['from'] ?? '']), [
    [HOST, 'a'],
    ['other.example.com', 'b'],
  ]);
  assert.deepEqual(agg.instances({ hostname: HOST, namespace: 'foo' }).map((i) => `${i.address}@${i.clusterId}`), ['10.0.0.1@a', '10.1.0.1@b']);
  assert.deepEqual(events, [`service:${HOST}`, `service:${HOST}`, 'service:other.example.com', `endpoints:${HOST}`, `endpoints:${HOST}`]);
  assert.equal(agg.hasSynced(), true);
});
