import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { ServiceEntry, WorkloadEntry } from '../../src/api/types.js';
import { gauge } from '../../src/common/metrics.js';
import { convertServiceEntries, ServiceEntryRegistry } from '../../src/registry/serviceentry.js';
import type { RegistryEvent } from '../../src/registry/types.js';
import { MESH, serviceEntry, storeOf, workloadEntry } from '../networking/fixtures.js';

const ses = MESH.filter((r): r is ServiceEntry => r.kind === 'ServiceEntry');
const wes = MESH.filter((r): r is WorkloadEntry => r.kind === 'WorkloadEntry');

test('a ServiceEntry becomes a service per host with its ports, addresses, resolution and exportTo', () => {
  const state = convertServiceEntries(ses, wes, 'c1');
  assert.deepEqual(state.services.map((s) => `${s.namespace}/${s.hostname}`), ['bar/api.example.com', 'foo/db.foo.svc.cluster.local', 'foo/echo.foo.svc.cluster.local']);
  const echo = state.services.find((s) => s.hostname === 'echo.foo.svc.cluster.local')!;
  assert.deepEqual(echo.ports, [
    { name: 'http', port: 80, protocol: 'HTTP' },
    { name: 'grpc', port: 7070, protocol: 'GRPC' },
  ]);
  assert.deepEqual(echo.addresses, ['10.96.0.10']);
  assert.equal(echo.resolution, 'STATIC');
  assert.equal(echo.external, false);
  assert.equal(echo.source, 'ServiceEntry/foo/echo');
  const ext = state.services.find((s) => s.hostname === 'api.example.com')!;
  assert.equal(ext.external, true);
  assert.equal(ext.resolution, 'DNS');
});

test('workloadSelector selects WorkloadEntries by labels in the same namespace only', () => {
  const state = convertServiceEntries(ses, wes, 'c1');
  const echo = state.instances.get('foo/echo.foo.svc.cluster.local')!;
  assert.deepEqual([...new Set(echo.map((i) => i.address))], ['10.0.0.1', '10.0.0.2']);
  const http1 = echo.find((i) => i.address === '10.0.0.1' && i.servicePort.port === 80)!;
  assert.equal(http1.endpointPort, 8080, 'targetPort of the ServiceEntry port');
  assert.equal(http1.weight, 3);
  assert.equal(http1.serviceAccount, 'echo');
  assert.deepEqual(http1.locality, { region: 'us-east', zone: 'zone-a', subZone: 'rack-1' });
  assert.deepEqual(http1.labels, { app: 'echo', version: 'v1' });
  assert.equal(http1.clusterId, 'c1');
  const grpc2 = echo.find((i) => i.address === '10.0.0.2' && i.servicePort.port === 7070)!;
  assert.equal(grpc2.endpointPort, 17070, 'WorkloadEntry ports map by port name');
  assert.equal(grpc2.weight, 1, 'weight defaults to 1');
  const grpc1 = echo.find((i) => i.address === '10.0.0.1' && i.servicePort.port === 7070)!;
  assert.equal(grpc1.endpointPort, 7070);
});

test('inline endpoints; a DNS service without endpoints resolves its own host', () => {
  const state = convertServiceEntries(ses, wes, 'c1');
  assert.deepEqual(state.instances.get('foo/db.foo.svc.cluster.local')!.map((i) => [i.address, i.endpointPort]), [['10.0.0.5', 5432]]);
  assert.deepEqual(state.instances.get('bar/api.example.com')!.map((i) => [i.address, i.endpointPort]), [['api.example.com', 443]]);
});

test('a host declared twice in a namespace: the first ServiceEntry wins, the duplicate is counted', async () => {
  const dup = serviceEntry('foo', 'zz-echo-again', { hosts: ['echo.foo.svc.cluster.local'], ports: [{ number: 9, name: 'tcp' }] });
  const store = storeOf([...MESH, dup]);
  const reg = new ServiceEntryRegistry(store, 'c1');
  assert.equal(reg.services().find((s) => s.hostname === 'echo.foo.svc.cluster.local')!.ports.length, 2);
  assert.equal((await gauge('pilot_duplicate_envoy_clusters').get()).values[0]!.value, 1);
});

test('the registry follows the store: events for added, changed endpoints, changed and deleted services', async () => {
  // Changes are applied in a microtask (one recomputation per burst).
  const settled = () => new Promise<void>((r) => setImmediate(r));
  const store = storeOf(MESH);
  const reg = new ServiceEntryRegistry(store, 'c1');
  assert.equal(reg.hasSynced(), true);
  const events: RegistryEvent[] = [];
  reg.onEvent((e) => events.push(e));

  store.apply(workloadEntry('foo', 'echo-3', { address: '10.0.0.3', labels: { app: 'echo' } }));
  await settled();
  assert.deepEqual(events.splice(0), [{ kind: 'endpoints', event: 'update', hostname: 'echo.foo.svc.cluster.local', namespace: 'foo', registry: 'ServiceEntry' }]);
  assert.ok(reg.instances({ hostname: 'echo.foo.svc.cluster.local', namespace: 'foo' }).some((i) => i.address === '10.0.0.3'));

  store.apply(workloadEntry('foo', 'unrelated', { address: '10.0.0.4', labels: { app: 'other' } }));
  await settled();
  assert.deepEqual(events.splice(0), [], 'a WorkloadEntry no ServiceEntry selects changes nothing');

  store.apply(serviceEntry('foo', 'new', { hosts: ['new.example.com'], ports: [{ number: 80, name: 'http' }] }));
  await settled();
  assert.deepEqual(events.splice(0).map((e) => `${e.kind}:${e.event}:${e.hostname}`), ['service:add:new.example.com']);

  store.apply(serviceEntry('foo', 'new', { hosts: ['new.example.com'], ports: [{ number: 81, name: 'http' }] }));
  await settled();
  assert.deepEqual(events.splice(0).map((e) => `${e.kind}:${e.event}:${e.hostname}`), ['service:update:new.example.com']);

  store.delete({ kind: 'ServiceEntry', namespace: 'foo', name: 'new' });
  await settled();
  assert.deepEqual(events.splice(0).map((e) => `${e.kind}:${e.event}:${e.hostname}`), ['service:delete:new.example.com']);
  reg.close();
});

test('a burst of changes is one recomputation, and a read right after a change sees it', async () => {
  const store = storeOf(MESH);
  const reg = new ServiceEntryRegistry(store, 'c1');
  const events: RegistryEvent[] = [];
  reg.onEvent((e) => events.push(e));
  for (let i = 3; i < 20; i++) store.apply(workloadEntry('foo', `echo-${i}`, { address: `10.0.0.${i}`, labels: { app: 'echo' } }));
  assert.equal(reg.instances({ hostname: 'echo.foo.svc.cluster.local', namespace: 'foo' }).filter((i) => i.servicePort.port === 80).length, 19, 'a read recomputes first');
  await new Promise<void>((r) => setImmediate(r));
  assert.deepEqual(events.map((e) => `${e.kind}:${e.hostname}`), ['endpoints:echo.foo.svc.cluster.local'], 'one event for the whole burst');
  reg.close();
});

test('a recomputation keeps the objects of the services and instance lists it did not change', async () => {
  const store = storeOf(MESH);
  const reg = new ServiceEntryRegistry(store, 'c1');
  const echo = { hostname: 'echo.foo.svc.cluster.local', namespace: 'foo' };
  const db = { hostname: 'db.foo.svc.cluster.local', namespace: 'foo' };
  const before = { services: reg.services(), echo: reg.instances(echo), db: reg.instances(db) };
  const events: RegistryEvent[] = [];
  reg.onEvent((e) => events.push(e));

  store.apply(serviceEntry('foo', 'new', { hosts: ['new.example.com'], ports: [{ number: 80, name: 'http' }] }));
  const after = reg.services();
  assert.equal(after.length, before.services.length + 1);
  for (const s of before.services) assert.equal(after.find((x) => x.hostname === s.hostname && x.namespace === s.namespace), s, `${s.hostname}: the same object`);
  assert.equal(reg.instances(echo), before.echo, 'the same instance list');
  assert.equal(reg.instances(db), before.db);

  // A changed instance list is a new list (its service stays the same object), and it is reported.
  store.apply(workloadEntry('foo', 'echo-3', { address: '10.0.0.3', labels: { app: 'echo' } }));
  assert.notEqual(reg.instances(echo), before.echo);
  assert.ok(reg.instances(echo).some((i) => i.address === '10.0.0.3'));
  assert.equal(reg.services().find((s) => s.hostname === echo.hostname), before.services.find((s) => s.hostname === echo.hostname));
  assert.equal(reg.instances(db), before.db);

  // A changed service is a new object with its new definition.
  store.apply(serviceEntry('foo', 'db', { hosts: ['db.foo.svc.cluster.local'], addresses: ['10.96.0.21'], location: 'MESH_INTERNAL', resolution: 'STATIC', ports: [{ number: 5432, name: 'tcp-pg', protocol: 'TCP' }], endpoints: [{ address: '10.0.0.5' }] }));
  const changed = reg.services().find((s) => s.hostname === db.hostname)!;
  assert.notEqual(changed, before.services.find((s) => s.hostname === db.hostname));
  assert.deepEqual(changed.addresses, ['10.96.0.21']);
  await new Promise<void>((r) => setImmediate(r));
  assert.deepEqual(events.map((e) => `${e.kind}:${e.event}:${e.hostname}`), ['service:add:new.example.com', 'endpoints:update:echo.foo.svc.cluster.local', 'service:update:db.foo.svc.cluster.local']);
  reg.close();
});

test('a selector of several labels selects the workloads carrying all of them, in their order; an empty one selects the whole namespace', () => {
  const se = (name: string, labels: Record<string, string>): ServiceEntry =>
    serviceEntry('foo', name, { hosts: [`${name}.example.com`], resolution: 'STATIC', ports: [{ number: 80, name: 'http' }], workloadSelector: { labels } }) as ServiceEntry;
  const we = (name: string, address: string, labels: Record<string, string>, namespace = 'foo'): WorkloadEntry => workloadEntry(namespace, name, { address, labels }) as WorkloadEntry;
  const state = convertServiceEntries(
    [se('v1', { app: 'a', version: 'v1' }), se('any', {}), se('none', { app: 'a', version: 'v3' })],
    [we('w1', '10.1.0.1', { version: 'v1', app: 'a' }), we('w2', '10.1.0.2', { app: 'a', version: 'v2' }), we('w3', '10.1.0.3', { app: 'a', version: 'v1', extra: 'x' }), we('w4', '10.1.0.4', { app: 'a', version: 'v1' }, 'bar'), we('w5', '10.1.0.5', {})],
    'c1',
  );
  const addresses = (host: string): string[] => state.instances.get(`foo/${host}`)!.map((i) => i.address);
  assert.deepEqual(addresses('v1.example.com'), ['10.1.0.1', '10.1.0.3']);
  assert.deepEqual(addresses('any.example.com'), ['10.1.0.1', '10.1.0.2', '10.1.0.3', '10.1.0.5']);
  assert.deepEqual(addresses('none.example.com'), []);
});
