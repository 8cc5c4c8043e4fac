// WorkloadEntry health checks (PILOT_ENABLE_WORKLOAD_ENTRY_HEALTHCHECKS), as the Go mesh has them:
// an entry whose proxy probes is an endpoint only once its agent reports it healthy. First the
// health state and its store views against in-memory stores and the ServiceEntry registry, then
// the whole discovery server over real gRPC (HealthInformation requests on SotW and Delta streams).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { WorkloadEntry, WorkloadGroup } from '../../src/api/types.js';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { configureLogging } from '../../src/common/log.js';
import { MemoryStore } from '../../src/config/memory.js';
import { HEALTH_INFO_TYPE_URL, TypeUrl } from '../../src/envoy/types.js';
import { parseProxy } from '../../src/model/proxy.js';
import { AutoRegistration, AutoRegistrationError } from '../../src/registry/autoregister.js';
import { ServiceEntryRegistry } from '../../src/registry/serviceentry.js';
import { HEALTH_CHECKS_ANNOTATION, WorkloadHealth } from '../../src/registry/workload-health.js';
import type { RegistryEvent } from '../../src/registry/types.js';
import { eventually } from '../helpers/proc.js';
import { ECHO, ECHO_CLUSTER, nextEds, withDiscovery } from './echo-discovery.js';

// What a user reads in pilot-discovery's log: the wle scope's warnings, to a file.
const logFile = join(mkdtempSync(join(tmpdir(), 'workload-health-')), 'out.log');
configureLogging({ asJson: false, caller: [], outputLevel: 'default:error,wle:warn', stacktraceLevel: 'default:none', targets: [logFile] });
const warnings = (about: string) => readFileSync(logFile, 'utf8').split('\n').filter((l) => l.includes('\twarn\t') && l.includes(about)).map((l) => l.split('\t').pop());

const PROBE = { readinessProbe: { httpGet: { port: 8080, path: '/ready' } } };

const group: WorkloadGroup = {
  apiVersion: 'networking.mesh.io/v1',
  kind: 'WorkloadGroup',
  metadata: { name: 'echo', namespace: 'foo' },
  spec: { template: { labels: { app: 'echo' }, serviceAccount: 'echo-sa', ports: { http: 8080 } }, probe: { httpGet: { port: 8080, path: '/ready' } } },
};

function userEntry(name: string, address: string, annotation?: string): WorkloadEntry {
  return {
    apiVersion: 'networking.mesh.io/v1',
    kind: 'WorkloadEntry',
    metadata: { name, namespace: 'foo', ...(annotation !== undefined ? { annotations: { [HEALTH_CHECKS_ANNOTATION]: annotation } } : {}) },
    spec: { address, labels: { app: 'echo' }, serviceAccount: 'echo-sa', ports: { http: 8080 } },
  };
}

function setup(opts: { enabled?: boolean; gracePeriodMs?: number } = {}) {
  const config = new MemoryStore();
  config.apply(group);
  config.apply({
    apiVersion: 'networking.mesh.io/v1',
    kind: 'ServiceEntry',
    metadata: { name: 'echo', namespace: 'foo' },
    spec: { hosts: [ECHO], location: 'MESH_INTERNAL', resolution: 'STATIC', ports: [{ number: 80, name: 'http', protocol: 'HTTP' }], workloadSelector: { labels: { app: 'echo' } } },
  });
  const entries = new MemoryStore();
  const health = new WorkloadHealth(opts.enabled ?? true);
  const registry = new ServiceEntryRegistry(health.view(config), 'c1', health.view(entries));
  const events: RegistryEvent[] = [];
  registry.onEvent((e) => events.push(e));
  const auto = new AutoRegistration({ config, entries, health, gracePeriodMs: opts.gracePeriodMs ?? 20 });
  const addresses = () => registry.instances({ hostname: ECHO, namespace: 'foo' }).map((i) => i.address);
  return { config, entries, health, registry, events, auto, addresses };
}

function vm(ip: string, meta: Record<string, unknown> = {}) {
  return parseProxy(`sidecar~${ip}~vm-${ip}.foo~foo.svc.cluster.local`, { NAMESPACE: 'foo', INSTANCE_IPS: ip, SERVICE_ACCOUNT: 'echo-sa', ...meta } as never);
}

test('an auto-registered entry of a probing proxy is no endpoint until its agent reports healthy; unhealthy takes it out again', () => {
  const { entries, health, events, auto, addresses } = setup();
  auto.register({ verified: true, proxy: vm('10.0.0.1', { AUTO_REGISTER_GROUP: 'echo', PROXY_CONFIG: PROBE }), connectionId: 'c1', peer: '' });
  const we = entries.list('WorkloadEntry')[0]!;
  assert.equal(we.metadata.annotations?.[HEALTH_CHECKS_ANNOTATION], 'true', 'the entry says it is health-checked');
  assert.deepEqual(addresses(), [], 'a new entry is unhealthy until proven healthy');

  events.length = 0;
  auto.reportHealth('c1', { healthy: true });
  assert.deepEqual(addresses(), ['10.0.0.1']);
  assert.deepEqual(events.map((e) => [e.kind, e.hostname]), [['endpoints', ECHO]], 'the registry is told, so the change is pushed');
  assert.equal(health.condition(we)?.status, 'True');

  auto.reportHealth('c1', { healthy: false, message: 'GET http://10.0.0.1:8080/ready: 503' });
  assert.deepEqual(addresses(), []);
  const [described] = health.describe([we]);
  assert.equal(described?.endpoint, false);
  assert.deepEqual(described?.status.conditions.map((c) => [c.type, c.status, c.message]), [['Healthy', 'False', 'GET http://10.0.0.1:8080/ready: 503']]);

  events.length = 0;
  auto.reportHealth('c1', { healthy: false, message: 'still 503' });
  assert.deepEqual(events, [], 'a report that changes nothing about the endpoint pushes nothing');
  auto.close();
});

test('a proxy without a readinessProbe: its entry is an endpoint at once and its reports are not taken, both logged', () => {
  const { entries, auto, addresses } = setup();
  auto.register({ verified: true, proxy: vm('10.0.0.2', { AUTO_REGISTER_GROUP: 'echo' }), connectionId: 'c2', peer: '' });
  assert.deepEqual(warnings('10.0.0.2'), [
    'WorkloadGroup foo/echo has spec.probe, but the ProxyConfig of sidecar~10.0.0.2~vm-10.0.0.2.foo~foo.svc.cluster.local has no readinessProbe: its agent does not probe, so WorkloadEntry foo/echo-10-0-0-2 is not health-checked (set the agent\'s readinessProbe to the group\'s probe)',
  ]);
  assert.equal(entries.list('WorkloadEntry')[0]!.metadata.annotations?.[HEALTH_CHECKS_ANNOTATION], undefined);
  assert.deepEqual(addresses(), ['10.0.0.2']);
  auto.reportHealth('c2', { healthy: false, message: 'down' });
  assert.deepEqual(addresses(), ['10.0.0.2'], 'an entry that is not health-checked is not taken out by a report');
  auto.reportHealth('c2', { healthy: false, message: 'down again' });
  auto.reportHealth('nobody', { healthy: false, message: 'down' });
  assert.deepEqual(warnings('are not taken'), [
    "health reports of c2 are not taken: WorkloadEntry foo/echo-10-0-0-2 is not health-checked (its proxy's ProxyConfig had no readinessProbe when it registered)",
    'health reports of nobody are not taken: the proxy names no WorkloadGroup (AUTO_REGISTER_GROUP) and no health-checked WorkloadEntry (WORKLOAD_ENTRY)',
  ], 'once per stream');
  auto.close();
});

test('PILOT_ENABLE_WORKLOAD_ENTRY_HEALTHCHECKS=false: health-checked entries are endpoints and reports change nothing', () => {
  const { auto, addresses } = setup({ enabled: false });
  auto.register({ verified: true, proxy: vm('10.0.0.3', { AUTO_REGISTER_GROUP: 'echo', PROXY_CONFIG: PROBE }), connectionId: 'c3', peer: '' });
  assert.deepEqual(addresses(), ['10.0.0.3']);
  auto.reportHealth('c3', { healthy: false, message: 'down' });
  assert.deepEqual(addresses(), ['10.0.0.3']);
  auto.close();
});

test('a reconnect within the grace period keeps the health; an entry registered again after cleanup starts unproven', async () => {
  const { entries, auto, addresses } = setup({ gracePeriodMs: 30 });
  const proxy = vm('10.0.0.4', { AUTO_REGISTER_GROUP: 'echo', PROXY_CONFIG: PROBE });
  auto.register({ verified: true, proxy, connectionId: 'a', peer: '' });
  auto.reportHealth('a', { healthy: true });
  auto.unregister('a');
  auto.register({ verified: true, proxy, connectionId: 'b', peer: '' });
  assert.deepEqual(addresses(), ['10.0.0.4'], 'still healthy after a reconnect');
  auto.unregister('b');
  await eventually(() => assert.deepEqual(entries.list('WorkloadEntry'), []));
  auto.register({ verified: true, proxy, connectionId: 'c', peer: '' });
  assert.deepEqual(addresses(), [], 'the old report does not carry over to a new entry');
  auto.close();
});

test('WORKLOAD_ENTRY: a verified proxy reports the health of the user\'s entry; forgotten a grace period after it leaves', async () => {
  const { config, auto, addresses } = setup({ gracePeriodMs: 30 });
  config.apply(userEntry('vm-1', '10.0.1.1', 'true'));
  config.apply(userEntry('vm-2', '10.0.1.2'));
  assert.deepEqual(addresses(), ['10.0.1.2'], 'the health-checked entry waits for its first report');

  const named = (name: string, verified: boolean, sa = 'echo-sa') => ({ proxy: vm('10.0.1.1', { WORKLOAD_ENTRY: name, SERVICE_ACCOUNT: sa }), connectionId: `${name}-${sa}`, peer: '', verified });
  assert.throws(() => auto.register(named('vm-9', true)), (e: Error) => e instanceof AutoRegistrationError && /no WorkloadEntry "vm-9" in namespace "foo"/.test(e.message));
  assert.throws(() => auto.register(named('vm-1', false)), /takes health reports only from a proxy whose identity is verified/);
  assert.throws(() => auto.register(named('vm-1', true, 'other-sa')), /runs as service account echo-sa; proxy .* is other-sa/);
  assert.equal(auto.register(named('vm-2', true)), undefined, 'an entry without the annotation takes no reports');

  auto.register(named('vm-1', true));
  auto.reportHealth('vm-1-echo-sa', { healthy: true });
  assert.deepEqual(addresses().sort(), ['10.0.1.1', '10.0.1.2']);
  auto.unregister('vm-1-echo-sa');
  assert.deepEqual(addresses().sort(), ['10.0.1.1', '10.0.1.2'], 'kept through the grace period');
  await eventually(() => assert.deepEqual(addresses(), ['10.0.1.2'], 'health unknown once the proxy stayed away'));
  assert.deepEqual(config.list('WorkloadEntry').map((we) => we.metadata.name), ['vm-1', 'vm-2'], 'the user\'s entry itself is never deleted');
  auto.close();
});

test('an annotation that is not true: reports are recorded, the entry stays an endpoint (as the Go mesh)', () => {
  const { config, health, auto, addresses } = setup();
  const we = userEntry('vm-3', '10.0.2.1', 'false');
  config.apply(we);
  auto.register({ proxy: vm('10.0.2.1', { WORKLOAD_ENTRY: 'vm-3' }), connectionId: 'v3', peer: '', verified: true });
  auto.reportHealth('v3', { healthy: false, message: 'down' });
  assert.equal(health.condition(we)?.status, 'False');
  assert.deepEqual(addresses(), ['10.0.2.1']);
  auto.close();
});

const probingNode = (ip: string) => ({ id: `sidecar~${ip}~vm-1.foo~foo.svc.cluster.local`, metadata: { NAMESPACE: 'foo', AUTO_REGISTER_GROUP: 'echo', PROXY_CONFIG: PROBE } });

test('discovery server: HealthInformation requests move a probing workload in and out of the endpoints others get', async () => {
  await withDiscovery(async ({ server, sotwAs }) => {
    const observer = await sotwAs('observer');
    observer.send({ node: { id: 'sidecar~10.9.9.9~obs.foo~foo.svc.cluster.local', metadata: { NAMESPACE: 'foo' } }, typeUrl: TypeUrl.ClusterLoadAssignment, resourceNames: [ECHO_CLUSTER] });
    assert.deepEqual(await nextEds(observer), []);

    const workload = await sotwAs('workload');
    workload.send({ node: probingNode('10.0.0.5'), typeUrl: TypeUrl.ClusterLoadAssignment, resourceNames: [ECHO_CLUSTER] });
    assert.deepEqual(await nextEds(workload), [], 'registered, but not proven healthy yet');
    workload.send({ typeUrl: HEALTH_INFO_TYPE_URL });
    assert.deepEqual(await nextEds(observer), ['127.0.0.1:8080'], 'healthy: an endpoint, pushed to the others');

    workload.send({ typeUrl: HEALTH_INFO_TYPE_URL, errorDetail: { code: 13, message: 'GET http://127.0.0.1:8080/ready: 503' } });
    assert.deepEqual(await nextEds(observer), [], 'unhealthy: gone from the endpoints');

    const debug = (await (await fetch(`http://${server.addresses.http}/debug/workloadentryz`)).json()) as Array<{ metadata: { name: string }; endpoint: boolean; status: { conditions: Array<{ status: string; message?: string }> } }>;
    assert.deepEqual(
      debug.map((we) => [we.metadata.name, we.endpoint, we.status.conditions.map((c) => `${c.status}: ${c.message}`)]),
      [['echo-127-0-0-1', false, ['False: GET http://127.0.0.1:8080/ready: 503']]],
      'the user sees the condition and why',
    );
  });
});

test('discovery server: a Delta stream reports health too; with health checks off the entry is an endpoint at once', async () => {
  await withDiscovery(async ({ sotwAs, deltaAs }) => {
    const observer = await sotwAs('observer');
    observer.send({ node: { id: 'sidecar~10.9.9.9~obs.foo~foo.svc.cluster.local', metadata: { NAMESPACE: 'foo' } }, typeUrl: TypeUrl.ClusterLoadAssignment, resourceNames: [ECHO_CLUSTER] });
    assert.deepEqual(await nextEds(observer), []);
    const workload = await deltaAs('workload');
    workload.send({ node: probingNode('10.0.0.6'), typeUrl: TypeUrl.Cluster });
    await workload.next();
    workload.send({ typeUrl: HEALTH_INFO_TYPE_URL });
    assert.deepEqual(await nextEds(observer), ['127.0.0.1:8080']);
  });
  await withDiscovery(
    async ({ sotwAs }) => {
      const workload = await sotwAs('workload');
      workload.send({ node: probingNode('10.0.0.7'), typeUrl: TypeUrl.ClusterLoadAssignment, resourceNames: [ECHO_CLUSTER] });
      assert.deepEqual(await nextEds(workload), ['127.0.0.1:8080']);
    },
    { PILOT_ENABLE_WORKLOAD_ENTRY_HEALTHCHECKS: 'false' },
  );
});
