// WorkloadGroup auto-registration: the controller against in-memory stores and the ServiceEntry
// registry, then the whole discovery server over real gRPC (connect -> endpoint -> push ->
// disconnect -> grace period -> endpoint gone).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { status } from '@grpc/grpc-js';
import type { AnyResource, WorkloadGroup } from '../../src/api/types.js';
import { setScopeLevel } from '../../src/common/log.js';
import { MemoryStore } from '../../src/config/memory.js';
import { parseProxy } from '../../src/model/proxy.js';
import {
  AUTO_REGISTRATION_GROUP_ANNOTATION,
  AutoRegistration,
  AutoRegistrationError,
  autoEntryName,
  DISCONNECTED_AT_ANNOTATION,
  peerIp,
} from '../../src/registry/autoregister.js';
import { ServiceEntryRegistry } from '../../src/registry/serviceentry.js';
import type { RegistryEvent } from '../../src/registry/types.js';
import { ClusterSchema } from '../../src/gen/envoy/config/cluster/v3/cluster_pb.js';
import { ListenerSchema } from '../../src/gen/envoy/config/listener/v3/listener_pb.js';
import type { DiscoveryResponse } from '../../src/gen/envoy/service/discovery/v3/discovery_pb.js';
import { TypeUrl, unpack } from '../../src/envoy/types.js';
import { eventually } from '../helpers/proc.js';
import { hcmOf } from '../networking/envoy.js';
import { counterValue, sotw } from '../xds/harness.js';
import { ECHO, nextEds, withDiscovery } from './echo-discovery.js';

setScopeLevel('model', 'error');
setScopeLevel('wle', 'error');
setScopeLevel('ads', 'error');
setScopeLevel('default', 'error');
setScopeLevel('source', 'error');


const group: WorkloadGroup = {
  apiVersion: 'networking.mesh.io/v1',
  kind: 'WorkloadGroup',
  metadata: { name: 'echo', namespace: 'foo' },
  spec: {
    metadata: { labels: { team: 'a' } },
    template: { labels: { app: 'echo', version: 'v1' }, serviceAccount: 'echo-sa', ports: { http: 8080 } },
  },
};

const echoEntry: AnyResource = {
  apiVersion: 'networking.mesh.io/v1',
  kind: 'ServiceEntry',
  metadata: { name: 'echo', namespace: 'foo' },
  spec: {
    hosts: [ECHO],
    location: 'MESH_INTERNAL',
    resolution: 'STATIC',
    ports: [{ number: 80, name: 'http', protocol: 'HTTP' }],
    workloadSelector: { labels: { app: 'echo' } },
  },
};

function proxyAt(ip: string, meta: Record<string, string | Record<string, string>> = {}) {
  return parseProxy(`sidecar~${ip}~echo-${ip}.foo~foo.svc.cluster.local`, { NAMESPACE: 'foo', AUTO_REGISTER_GROUP: 'echo', SERVICE_ACCOUNT: 'echo-sa', ...meta });
}

function setup(gracePeriodMs = 20, enabled = true) {
  const config = new MemoryStore();
  config.apply(group);
  config.apply(echoEntry);
  const entries = new MemoryStore();
  const registry = new ServiceEntryRegistry(config, 'c1', entries);
  const events: RegistryEvent[] = [];
  registry.onEvent((e) => events.push(e));
  const auto = new AutoRegistration({ config, entries, gracePeriodMs, enabled });
  const addresses = () => registry.instances({ hostname: ECHO, namespace: 'foo' }).map((i) => `${i.address}:${i.endpointPort}`);
  return { config, entries, registry, auto, events, addresses };
}

test('peer IPs and entry names', () => {
  assert.equal(peerIp('127.0.0.1:5000'), '127.0.0.1');
  assert.equal(peerIp('ipv4:10.1.2.3:5000'), '10.1.2.3');
  assert.equal(peerIp('[::1]:5000'), '::1');
  assert.equal(peerIp('::ffff:10.0.0.7:5000'), '10.0.0.7');
  assert.equal(peerIp('fd00::1:5000'), 'fd00::1');
  assert.equal(peerIp('unix:/tmp/sock'), undefined);
  assert.equal(autoEntryName('echo', '10.0.0.1'), 'echo-10-0-0-1');
  assert.equal(autoEntryName('echo', 'fd00::1'), 'echo-fd00--1');
});

test('a connecting proxy gets a WorkloadEntry from its group: address, merged labels, service account; it becomes an endpoint', async () => {
  const { entries, auto, events, addresses } = setup();
  const before = await counterValue('auto_registration_success_total');
  const reg = auto.register({ verified: true, proxy: proxyAt('10.0.0.1', { INSTANCE_IPS: '10.0.0.9,10.0.0.1', LABELS: { version: 'v2', zone: 'z' } }), connectionId: 'c1', peer: '127.0.0.1:1' });
  assert.ok(reg?.changed);
  const we = entries.get({ kind: 'WorkloadEntry', namespace: 'foo', name: 'echo-10-0-0-9' });
  assert.ok(we, 'entry named after the group and the first INSTANCE_IPS address');
  assert.equal(we.spec.address, '10.0.0.9');
  assert.deepEqual(we.spec.labels, { app: 'echo', version: 'v2', zone: 'z' });
  assert.equal(we.spec.serviceAccount, 'echo-sa');
  assert.deepEqual(we.spec.ports, { http: 8080 });
  assert.equal(we.metadata.labels?.['team'], 'a');
  assert.equal(we.metadata.annotations?.[AUTO_REGISTRATION_GROUP_ANNOTATION], 'echo');
  assert.deepEqual(addresses(), ['10.0.0.9:8080']);
  assert.deepEqual(events.map((e) => [e.kind, e.hostname]), [['endpoints', ECHO]]);
  assert.equal(await counterValue('auto_registration_success_total'), before + 1);
  auto.close();
});

test('without INSTANCE_IPS the gRPC peer IP is the address; the proxy service account is used when the template has none', () => {
  const { config, entries, auto } = setup();
  config.apply({ ...group, spec: { template: { labels: { app: 'echo' } } } });
  auto.register({ verified: true, proxy: proxyAt('10.0.0.1', { SERVICE_ACCOUNT: 'own-sa' }), connectionId: 'c1', peer: '192.168.1.5:40000' });
  const we = entries.get({ kind: 'WorkloadEntry', namespace: 'foo', name: 'echo-192-168-1-5' });
  assert.equal(we?.spec.address, '192.168.1.5');
  assert.equal(we?.spec.serviceAccount, 'own-sa');
  auto.close();
});

test('kept while any stream is connected, deleted a grace period after the last one; a reconnect within it keeps the entry', async () => {
  const { entries, auto, addresses } = setup(30);
  const a = proxyAt('10.0.0.1', { INSTANCE_IPS: '10.0.0.1' });
  const b = proxyAt('10.0.0.2', { INSTANCE_IPS: '10.0.0.2' });
  const counts = async () => ({
    updates: await counterValue('auto_registration_updates_total'),
    unregister: await counterValue('auto_registration_unregister_total'),
    deletes: await counterValue('auto_registration_deletes_total'),
  });
  const start = await counts();
  auto.register({ verified: true, proxy: a, connectionId: 'a1', peer: '' });
  const second = auto.register({ verified: true, proxy: a, connectionId: 'a2', peer: '' });
  assert.equal(second?.changed, false, 'a second stream of the same workload changes nothing in the model');
  auto.register({ verified: true, proxy: b, connectionId: 'b1', peer: '' });
  assert.deepEqual(addresses(), ['10.0.0.1:8080', '10.0.0.2:8080']);
  assert.equal((await counts()).updates, start.updates + 1);

  auto.unregister('a1');
  assert.deepEqual(auto.registered().find((r) => r.key === 'foo/echo-10-0-0-1'), { key: 'foo/echo-10-0-0-1', connections: 1 });
  auto.unregister('a2');
  assert.ok(entries.get({ kind: 'WorkloadEntry', namespace: 'foo', name: 'echo-10-0-0-1' })?.metadata.annotations?.[DISCONNECTED_AT_ANNOTATION]);
  // Reconnect within the grace period: the same entry, its cleanup cancelled.
  const back = auto.register({ verified: true, proxy: a, connectionId: 'a3', peer: '' });
  assert.equal(back?.entry.metadata.name, 'echo-10-0-0-1');
  assert.equal(back?.entry.metadata.annotations?.[DISCONNECTED_AT_ANNOTATION], undefined);
  // b's cleanup is scheduled after a's cancelled one: once b is gone, a's would have fired too.
  auto.unregister('b1');
  await eventually(() => assert.deepEqual(addresses(), ['10.0.0.1:8080'], 'b deleted after the grace period'));
  assert.ok(entries.get({ kind: 'WorkloadEntry', namespace: 'foo', name: 'echo-10-0-0-1' }), 'a reconnected in time and keeps its entry');
  const end = await counts();
  assert.equal(end.unregister, start.unregister + 2);
  assert.equal(end.deletes, start.deletes + 1);
  auto.close();
});

test('no group, auto-registration off, unknown group, a user entry of that name, an unverified proxy or another account', async () => {
  const { config, entries, auto } = setup();
  assert.equal(auto.register({ verified: true, proxy: proxyAt('10.0.0.1', { AUTO_REGISTER_GROUP: '' }), connectionId: 'x', peer: '' }), undefined);
  const off = setup(20, false);
  assert.equal(off.auto.register({ verified: true, proxy: proxyAt('10.0.0.1'), connectionId: 'x', peer: '10.0.0.1:1' }), undefined);
  assert.deepEqual(off.entries.list('WorkloadEntry'), []);

  const errors = await counterValue('auto_registration_errors_total');
  assert.throws(() => auto.register({ verified: true, proxy: proxyAt('10.0.0.1', { AUTO_REGISTER_GROUP: 'nope' }), connectionId: 'y', peer: '10.0.0.1:1' }), (e: Error) => {
    assert.ok(e instanceof AutoRegistrationError);
    assert.match(e.message, /no WorkloadGroup "nope" in namespace "foo"/);
    return true;
  });
  config.apply({ apiVersion: 'networking.mesh.io/v1', kind: 'WorkloadEntry', metadata: { name: 'echo-10-0-0-1', namespace: 'foo' }, spec: { address: '10.0.0.1' } });
  assert.throws(() => auto.register({ verified: true, proxy: proxyAt('10.0.0.1'), connectionId: 'z', peer: '10.0.0.1:1' }), /declared in the configuration/);
  assert.throws(() => auto.register({ proxy: proxyAt('10.0.0.2'), connectionId: 'u', peer: '10.0.0.2:1' }), /registration into WorkloadGroup foo\/echo needs a verified identity/);
  assert.throws(() => auto.register({ verified: true, proxy: proxyAt('10.0.0.2', { SERVICE_ACCOUNT: 'other-sa' }), connectionId: 'v', peer: '10.0.0.2:1' }), /is service account other-sa; WorkloadGroup foo\/echo registers echo-sa only/);
  assert.equal(await counterValue('auto_registration_errors_total'), errors + 4);
  assert.deepEqual(entries.list('WorkloadEntry'), []);
  auto.close();
});

test('discovery server: a proxy with AUTO_REGISTER_GROUP becomes an endpoint others see, and is removed after the grace period', async () => {
  await withDiscovery(async ({ server, sotwAs }) => {
    const observer = await sotwAs('observer');
    observer.send({ node: { id: 'sidecar~10.9.9.9~obs.foo~foo.svc.cluster.local', metadata: { NAMESPACE: 'foo' } }, typeUrl: TypeUrl.ClusterLoadAssignment, resourceNames: [`outbound|80||${ECHO}`] });
    assert.deepEqual(await nextEds(observer), []);

    const workload = await sotwAs('workload');
    workload.send({
      node: { id: 'sidecar~10.0.0.5~echo-1.foo~foo.svc.cluster.local', metadata: { NAMESPACE: 'foo', AUTO_REGISTER_GROUP: 'echo' } },
      typeUrl: TypeUrl.ClusterLoadAssignment,
      resourceNames: [`outbound|80||${ECHO}`],
    });
    // The workload's first answer already comes from a snapshot with its own entry (peer IP 127.0.0.1).
    assert.deepEqual(await nextEds(workload), ['127.0.0.1:8080']);
    assert.deepEqual(await nextEds(observer), ['127.0.0.1:8080'], 'the registration is pushed to the others');
    assert.equal(server.autoEntries.list('WorkloadEntry').length, 1);

    workload.close();
    assert.deepEqual(await nextEds(observer), [], 'the entry goes after the grace period, and the others are told');
    assert.deepEqual(server.autoEntries.list('WorkloadEntry'), []);

    const stranger = await sotwAs('stranger');
    stranger.send({
      node: { id: 'sidecar~10.0.0.6~x-1.foo~foo.svc.cluster.local', metadata: { NAMESPACE: 'foo', AUTO_REGISTER_GROUP: 'missing' } },
      typeUrl: TypeUrl.ClusterLoadAssignment,
      resourceNames: [`outbound|80||${ECHO}`],
    });
    const st = await stranger.status();
    assert.equal(st.code, status.FAILED_PRECONDITION);
    assert.match(st.details, /no WorkloadGroup "missing" in namespace "foo"/);
  });
});

/**
 * The names of virtualInbound's per-port filter chains in an LDS response; the catch-all chains it
 * always has (blackhole, passthrough: `virtualInbound-*`) are left out.
 */
function inboundChains(r: DiscoveryResponse): string[] {
  assert.equal(r.typeUrl, TypeUrl.Listener);
  const vin = r.resources.map((a) => unpack(a, ListenerSchema)).find((l) => l.name === 'virtualInbound');
  return (vin?.filterChains.map((c) => c.name) ?? []).filter((name) => !name.startsWith('virtualInbound-'));
}

test('discovery server: a WorkloadEntry at a connected proxy\'s address gives that proxy its inbound listener; a policy edit reaches its listeners', async () => {
  await withDiscovery(async ({ dir, sotwAs }) => {
    const workload = await sotwAs('workload');
    workload.send({ node: { id: 'sidecar~10.0.0.7~echo-7.foo~foo.svc.cluster.local', metadata: { NAMESPACE: 'foo' } }, typeUrl: TypeUrl.Listener });
    let r = await workload.next();
    assert.deepEqual(inboundChains(r), [], 'no instance at 10.0.0.7 yet');
    const ack = (x: DiscoveryResponse) => workload.send({ typeUrl: x.typeUrl, versionInfo: x.versionInfo, responseNonce: x.nonce });
    ack(r);
    workload.send({ typeUrl: TypeUrl.Cluster });
    const cds = await workload.next();
    assert.equal(cds.typeUrl, TypeUrl.Cluster);
    ack(cds);

    writeFileSync(
      join(dir, 'we.yaml'),
      `apiVersion: networking.mesh.io/v1\nkind: WorkloadEntry\nmetadata: {name: echo-7, namespace: foo}\nspec:\n  address: 10.0.0.7\n  labels: {app: echo}\n  ports: {http: 8080}`,
    );
    // Its own listeners and clusters change (an EDS-only push would leave them stale).
    const got = new Map<string, DiscoveryResponse>();
    while (!got.has(TypeUrl.Listener) || !got.has(TypeUrl.Cluster)) {
      r = await workload.next();
      got.set(r.typeUrl, r);
      ack(r);
    }
    assert.deepEqual(inboundChains(got.get(TypeUrl.Listener)!), ['0.0.0.0_8080']);
    assert.ok(got.get(TypeUrl.Cluster)!.resources.some((a) => unpack(a, ClusterSchema).name === 'inbound|8080||'), 'inbound cluster for 8080');

    writeFileSync(
      join(dir, 'policy.yaml'),
      `apiVersion: security.mesh.io/v1\nkind: AuthorizationPolicy\nmetadata: {name: deny-all, namespace: mesh-system}\nspec: {}`,
    );
    r = await workload.next();
    assert.equal(r.typeUrl, TypeUrl.Listener, 'a policy edit reaches the listeners');
    ack(r);
    const vin = r.resources.map((a) => unpack(a, ListenerSchema)).find((l) => l.name === 'virtualInbound')!;
    assert.ok(hcmOf(vin.filterChains[0]!).httpFilters.some((f) => f.name === 'envoy.filters.http.rbac'), 'the inbound chain has the rbac filter');
  });
});

test('discovery server: an unauthenticated plaintext stream cannot register (as the Go mesh: a verified identity is needed)', async () => {
  await withDiscovery(
    async ({ client }) => {
      const stranger = sotw(client());
      stranger.send({ node: { id: 'sidecar~10.0.0.8~echo-8.foo~foo.svc.cluster.local', metadata: { NAMESPACE: 'foo', AUTO_REGISTER_GROUP: 'echo' } }, typeUrl: TypeUrl.ClusterLoadAssignment, resourceNames: [`outbound|80||${ECHO}`] });
      const st = await stranger.status();
      assert.equal(st.code, status.FAILED_PRECONDITION);
      assert.match(st.details, /needs a verified identity/);
    },
    { XDS_AUTH_PLAINTEXT: 'false' },
  );
});

