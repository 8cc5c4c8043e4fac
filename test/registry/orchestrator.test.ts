// The Orchestrator registry against the stand-in API server: Services with their EndpointSlices (or
// Endpoints), Pods and Nodes become services and instances, and follow scale up and down; headless
// and ExternalName services; not-ready endpoints and endpoints whose Pod is missing are counted.
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, afterEach, before, describe, it } from 'node:test';
import { counter, gauge } from '../../src/common/metrics.js';
import { OrchestratorRegistry, type OrchestratorRegistryOptions } from '../../src/registry/orchestrator/controller.js';
import type { RegistryEvent } from '../../src/registry/types.js';
import type { FakeApiServer, StoredObject } from '../config/fake-apiserver.js';
import { eventually } from '../helpers/proc.js';
import { metricValue } from '../helpers/metrics.js';
import { endpoints, endpointSlice, namespace, node, pod, service, standIn } from './orch-fixtures.js';

const HOST = 'echo.ns.svc.cluster.local';
const PORTS = [
  { name: 'http-web', port: 80, targetPort: 'web' },
  { name: 'grpc', port: 9000, targetPort: 9000 },
  { name: 'db', port: 5432, appProtocol: 'mysql' },
  { name: 'dns', port: 53, protocol: 'UDP' },
];
const SLICE_PORTS = [
  { name: 'http-web', port: 8080 },
  { name: 'grpc', port: 9000 },
];

describe('OrchestratorRegistry against a stand-in API server', () => {
  let dir: string;
  let api: FakeApiServer;
  let registry: OrchestratorRegistry | undefined;
  let events: RegistryEvent[];

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'orch-registry-'));
  });
  after(() => rm(dir, { recursive: true, force: true }));
  afterEach(async () => {
    await registry?.close();
    registry = undefined;
    await api.close();
  });

  async function open(seed: StoredObject[], options: Partial<OrchestratorRegistryOptions> = {}): Promise<OrchestratorRegistry> {
    const started = await standIn(dir);
    api = started.api;
    for (const object of seed) api.put(object);
    registry = new OrchestratorRegistry({ kubeconfig: started.kubeconfig, domain: 'cluster.local', clusterId: 'c1', useEndpointSlices: true, edsForHeadless: false, backoff: { initialMs: 10, maxMs: 50 }, ...options });
    events = [];
    registry.onEvent((e) => events.push(e));
    await registry.start();
    return registry;
  }

  const addresses = (host = HOST, port = 80) =>
    registry!
      .instances({ hostname: host, namespace: 'ns' })
      .filter((i) => i.servicePort.port === port)
      .map((i) => `${i.address}:${i.endpointPort}`)
      .sort();

  it('turns a Service, its EndpointSlices, Pods and Nodes into a service and its instances', async () => {
    const r = await open([
      namespace('ns'),
      node('node-1', 'eu', 'eu-1a'),
      service('echo', 'ns', PORTS),
      pod('echo-1', 'ns', '10.0.0.1', { app: 'echo', version: 'v1' }, { serviceAccount: 'echo-sa' }),
      endpointSlice('echo', 'ns', SLICE_PORTS, [{ ip: '10.0.0.1', pod: 'echo-1' }]),
    ]);
    assert.equal(r.hasSynced(), true);
    const [svc] = r.services();
    assert.deepEqual(
      { hostname: svc!.hostname, addresses: svc!.addresses, resolution: svc!.resolution, registry: svc!.registry },
      { hostname: HOST, addresses: ['10.96.0.10'], resolution: 'STATIC', registry: 'Orchestrator' },
    );
    assert.deepEqual(
      svc!.ports.map((p) => `${p.name}/${p.port}/${p.protocol}`),
      ['http-web/80/HTTP', 'grpc/9000/GRPC', 'db/5432/MYSQL', 'dns/53/UDP'],
    );
    const [instance] = r.instances(svc!);
    assert.deepEqual(
      { address: instance!.address, endpointPort: instance!.endpointPort, labels: instance!.labels, sa: instance!.serviceAccount, locality: instance!.locality, cluster: instance!.clusterId },
      { address: '10.0.0.1', endpointPort: 8080, labels: { app: 'echo', version: 'v1' }, sa: 'echo-sa', locality: { region: 'eu', zone: 'eu-1a', subZone: '' }, cluster: 'c1' },
    );
    assert.deepEqual(addresses(HOST, 9000), ['10.0.0.1:9000']);
    assert.deepEqual(addresses(HOST, 5432), [], 'a service port the slice does not carry has no instances');
    assert.deepEqual(r.namespaceLabels('ns'), {});
  });

  it('follows scale up and down, with endpoint events for instance-only changes', async () => {
    await open([service('echo', 'ns', PORTS), pod('echo-1', 'ns', '10.0.0.1', { app: 'echo' }), endpointSlice('echo', 'ns', SLICE_PORTS, [{ ip: '10.0.0.1', pod: 'echo-1' }])]);
    const regEvents = await metricValue(counter('pilot_orch_reg_events'), { type: 'EndpointSlice', event: 'update' });
    api.put(pod('echo-2', 'ns', '10.0.0.2', { app: 'echo' }));
    api.put(endpointSlice('echo', 'ns', SLICE_PORTS, [{ ip: '10.0.0.1', pod: 'echo-1' }, { ip: '10.0.0.2', pod: 'echo-2' }]));
    await eventually(() => assert.deepEqual(addresses(), ['10.0.0.1:8080', '10.0.0.2:8080']));
    assert.ok(events.some((e) => e.kind === 'endpoints' && e.hostname === HOST), 'an EDS-only event');
    api.put(endpointSlice('echo', 'ns', SLICE_PORTS, [{ ip: '10.0.0.2', pod: 'echo-2' }]));
    await eventually(() => assert.deepEqual(addresses(), ['10.0.0.2:8080']));
    assert.equal(await metricValue(counter('pilot_orch_reg_events'), { type: 'EndpointSlice', event: 'update' }), regEvents + 2);
    api.remove(service('echo', 'ns', PORTS));
    await eventually(() => assert.deepEqual(registry!.services(), []));
    assert.ok(events.some((e) => e.kind === 'service' && e.event === 'delete'));
  });

  it('leaves out not-ready endpoints and those whose Pod is not read yet, and counts them', async () => {
    const withNoPods = await metricValue(counter('pilot_orch_endpoints_with_no_pods'));
    await open([
      service('echo', 'ns', PORTS),
      pod('echo-1', 'ns', '10.0.0.1', { app: 'echo' }),
      endpointSlice('echo', 'ns', SLICE_PORTS, [
        { ip: '10.0.0.1', pod: 'echo-1' },
        { ip: '10.0.0.3', pod: 'echo-3', ready: false },
        { ip: '10.0.0.4', pod: 'echo-4' },
        { ip: '192.168.1.1' },
      ]),
    ]);
    assert.deepEqual(addresses(), ['10.0.0.1:8080', '192.168.1.1:8080']);
    assert.equal(await metricValue(gauge('pilot_endpoint_not_ready')), 1);
    assert.equal(await metricValue(gauge('pilot_orch_endpoints_pending_pod')), 1);
    assert.equal(await metricValue(gauge('endpoint_no_pod')), 1, 'the endpoint without targetRef nor Pod at its IP');
    assert.equal(await metricValue(counter('pilot_orch_endpoints_with_no_pods')), withNoPods + 1);
    const noPod = registry!.instances({ hostname: HOST, namespace: 'ns' }).find((i) => i.address === '192.168.1.1');
    assert.deepEqual(noPod!.labels, {}, 'an endpoint without a Pod has no labels');
    api.put(pod('echo-4', 'ns', '10.0.0.4', { app: 'echo' }));
    await eventually(() => assert.deepEqual(addresses(), ['10.0.0.1:8080', '10.0.0.4:8080', '192.168.1.1:8080'], 'the Pod arrived'));
    assert.equal(await metricValue(gauge('pilot_orch_endpoints_pending_pod')), 0);
  });

  it('reads Endpoints without PILOT_USE_ENDPOINT_SLICE', async () => {
    await open(
      [service('echo', 'ns', PORTS), pod('echo-1', 'ns', '10.0.0.1', { app: 'echo' }), endpoints('echo', 'ns', SLICE_PORTS, [{ ip: '10.0.0.1', pod: 'echo-1' }, { ip: '10.0.0.9', ready: false }])],
      { useEndpointSlices: false },
    );
    assert.deepEqual(addresses(), ['10.0.0.1:8080']);
    assert.ok(api.requests.some((q) => q.path === '/api/v1/endpoints'));
    assert.ok(!api.requests.some((q) => q.path.includes('endpointslices')));
  });

  it('headless services resolve to the original destination, or EDS with PILOT_ENABLE_EDS_FOR_HEADLESS_SERVICES', async () => {
    const headless = service('db', 'ns', [{ name: 'tcp-db', port: 5432 }], { clusterIP: 'None' });
    const seed = [headless, pod('db-0', 'ns', '10.0.1.1', { app: 'db' }), endpointSlice('db', 'ns', [{ name: 'tcp-db', port: 5432 }], [{ ip: '10.0.1.1', pod: 'db-0' }])];
    await open(seed);
    assert.deepEqual(registry!.services().map((s) => [s.resolution, s.addresses]), [['NONE', []]]);
    assert.deepEqual(addresses('db.ns.svc.cluster.local', 5432), ['10.0.1.1:5432'], 'its Pods are still its instances');
    await registry!.close();
    await api.close();
    await open(seed, { edsForHeadless: true });
    assert.deepEqual(registry!.services().map((s) => s.resolution), ['STATIC']);
  });

  it('an ExternalName service is an external DNS service at its external name', async () => {
    await open([service('ext', 'ns', [{ name: 'https', port: 443 }], { type: 'ExternalName', externalName: 'api.example.com', clusterIP: '' })]);
    const [svc] = registry!.services();
    assert.deepEqual({ resolution: svc!.resolution, external: svc!.external, addresses: svc!.addresses }, { resolution: 'DNS', external: true, addresses: [] });
    assert.deepEqual(addresses('ext.ns.svc.cluster.local', 443), ['api.example.com:443']);
  });

  it('restricts Services, endpoints and Pods to --appNamespace', async () => {
    await open([service('echo', 'ns', PORTS), service('other', 'team-b', PORTS)], { namespaces: ['ns'] });
    assert.deepEqual(registry!.services().map((s) => s.hostname), [HOST]);
    const paths = new Set(api.requests.map((q) => q.path));
    assert.ok(paths.has('/api/v1/namespaces/ns/services') && paths.has('/api/v1/namespaces/ns/pods') && paths.has('/apis/discovery.k8s.io/v1/namespaces/ns/endpointslices'));
    assert.ok(paths.has('/api/v1/nodes') && paths.has('/api/v1/namespaces'), 'Nodes and Namespaces are cluster-wide');
  });

  it('finds a proxy\'s Pod by name, else by IP, and counts proxies without one', async () => {
    await open([pod('echo-1', 'ns', '10.0.0.1', { app: 'echo' }, { serviceAccount: 'echo-sa' })]);
    assert.equal(registry!.podFor('a', 'echo-1', 'ns', [])?.serviceAccount, 'echo-sa');
    assert.deepEqual(registry!.podFor('b', 'renamed', 'ns', ['10.0.0.1'])?.labels, { app: 'echo' });
    assert.equal(registry!.podFor('c', 'echo-1', 'other-ns', ['10.0.0.1']), undefined, 'a Pod of another namespace is not the proxy\'s');
    assert.equal(await metricValue(gauge('pilot_no_ip')), 1);
  });

  it('relists after 410 Gone and reconciles endpoints removed meanwhile', async () => {
    await open([service('echo', 'ns', PORTS), pod('echo-1', 'ns', '10.0.0.1', { app: 'echo' }), endpointSlice('echo', 'ns', SLICE_PORTS, [{ ip: '10.0.0.1', pod: 'echo-1' }])]);
    await eventually(() => assert.equal(api.openWatches(), 5));
    api.remove(endpointSlice('echo', 'ns', SLICE_PORTS, []), true);
    api.compact();
    api.dropWatches();
    await eventually(() => assert.deepEqual(addresses(), []));
  });
});
