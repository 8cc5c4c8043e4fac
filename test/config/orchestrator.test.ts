import assert from 'node:assert/strict';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, afterEach, before, describe, it } from 'node:test';
import { pluralOf } from '../../src/api/crds.js';
import { isKind, type Kind } from '../../src/api/types.js';
import { counter, gauge } from '../../src/common/metrics.js';
import { OrchestratorConfigSource, type OrchestratorSourceOptions } from '../../src/config/orchestrator.js';
import type { ConfigEvent } from '../../src/config/store.js';
import { FakeApiServer, type StoredObject } from './fake-apiserver.js';
import { eventually } from '../helpers/proc.js';
import { metricValue } from '../helpers/metrics.js';

const AP_PATH = '/apis/security.mesh.io/v1/authorizationpolicies';

function policy(name: string, namespace = 'ns', when: { key: string; values: string[] }[] = []): StoredObject {
  return { apiVersion: 'security.mesh.io/v1', kind: 'AuthorizationPolicy', metadata: { name, namespace }, spec: { action: 'ALLOW', rules: [{ when }] } };
}

const INVALID = policy('bad', 'ns', [{ key: 'request.auth.claim[groups]', values: ['a'] }]);

describe('OrchestratorConfigSource against a stand-in API server', () => {
  let dir: string;
  let api: FakeApiServer;
  let source: OrchestratorConfigSource | undefined;
  let events: ConfigEvent[];

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'orch-'));
  });
  after(() => rm(dir, { recursive: true, force: true }));
  afterEach(async () => {
    await source?.close();
    source = undefined;
    await api.close();
  });

  async function open(options: Partial<OrchestratorSourceOptions> = {}, seed: StoredObject[] = []): Promise<OrchestratorConfigSource> {
    api = new FakeApiServer((kind) => (isKind(kind) ? pluralOf(kind) : `${kind.toLowerCase()}s`));
    await api.start();
    for (const object of seed) api.put(object);
    const kubeconfig = join(dir, `kubeconfig-${Math.random().toString(36).slice(2)}`);
    await writeFile(kubeconfig, api.kubeconfig());
    const opened = new OrchestratorConfigSource({ kubeconfig, kinds: ['AuthorizationPolicy', 'ServiceEntry'] as Kind[], validate: true, backoff: { initialMs: 10, maxMs: 50 }, ...options });
    source = opened;
    events = [];
    opened.onEvent((e) => events.push(e));
    await opened.start();
    return opened;
  }

  const has = (name: string, namespace = 'ns') => source!.get({ kind: 'AuthorizationPolicy', namespace, name }) !== undefined;
  const apRequests = (watch: boolean) => api.requests.filter((r) => r.path === AP_PATH && r.watch === watch);

  it('lists, then watches from the list version with bookmarks, and applies add/update/delete', async () => {
    const errorsBefore = await metricValue(counter('pilot_total_orch_object_errors'), { kind: 'AuthorizationPolicy' });
    const eventsBefore = await metricValue(counter('pilot_orch_cfg_events'), { type: 'AuthorizationPolicy', event: 'add' });
    const store = await open({}, [policy('p1'), INVALID]);
    assert.equal(store.hasSynced(), true);
    assert.deepEqual(store.list('AuthorizationPolicy').map((r) => r.metadata.name), ['p1']);
    assert.equal(await metricValue(counter('pilot_total_orch_object_errors'), { kind: 'AuthorizationPolicy' }), errorsBefore + 1);
    assert.equal(await metricValue(gauge('pilot_orch_object_errors'), { kind: 'AuthorizationPolicy' }), 1);
    await eventually(() => assert.ok(apRequests(true).length > 0, 'the first watch'));
    const [list] = apRequests(false);
    const [watch] = apRequests(true);
    assert.equal(list!.resourceVersion, null);
    assert.equal(watch!.resourceVersion, '102');
    assert.equal(watch!.allowWatchBookmarks, 'true');

    api.put(policy('p2'));
    await eventually(() => assert.ok(has('p2'), 'p2 added'));
    api.put(policy('p1', 'ns', [{ key: 'source.namespace', values: ['x'] }]));
    await eventually(() => assert.ok(store.get({ kind: 'AuthorizationPolicy', namespace: 'ns', name: 'p1' })?.spec.rules?.[0]?.when?.length === 1, 'p1 updated'));
    api.remove(policy('p1'));
    await eventually(() => assert.ok(!has('p1'), 'p1 deleted'));
    assert.deepEqual(events.map((e) => `${e.type} ${(e.new ?? e.old).metadata.name}`), ['add p1', 'add p2', 'update p1', 'delete p1']);
    assert.equal(events[2]!.new!.metadata.resourceVersion !== events[2]!.old!.metadata.resourceVersion, true);
    assert.equal(await metricValue(counter('pilot_orch_cfg_events'), { type: 'AuthorizationPolicy', event: 'add' }), eventsBefore + 2);
  });

  it('fixing an invalid object applies it and clears its error gauge', async () => {
    const store = await open({}, [INVALID]);
    assert.equal(store.list('AuthorizationPolicy').length, 0);
    api.put(policy('bad', 'ns', [{ key: 'request.auth.claims[groups]', values: ['a'] }]));
    await eventually(() => assert.ok(has('bad'), 'fixed object applied'));
    assert.equal(await metricValue(gauge('pilot_orch_object_errors'), { kind: 'AuthorizationPolicy' }), 0);
  });

  it('resumes from the last bookmark after a dropped connection, without relisting', async () => {
    await open({}, [policy('p1')]);
    await eventually(() => assert.ok(api.openWatches() === 2, 'both watches open'));
    const version = api.bookmark();
    const watchesBefore = apRequests(true).length;
    api.dropWatches();
    await eventually(() => assert.ok(apRequests(true).length > watchesBefore, 'a new watch'));
    assert.equal(apRequests(true).at(-1)!.resourceVersion, version);
    assert.equal(apRequests(false).length, 1);
  });

  it('relists on 410 Gone and reconciles what changed meanwhile', async () => {
    await open({}, [policy('p1'), policy('p2')]);
    await eventually(() => assert.ok(api.openWatches() === 2, 'both watches open'));
    api.remove(policy('p2'), true);
    api.put(policy('p3'), true);
    api.compact();
    api.dropWatches();
    await eventually(() => assert.ok(has('p3') && !has('p2'), 'reconciled after relist'));
    assert.equal(apRequests(false).length, 2);
    assert.deepEqual(events.slice(2).map((e) => `${e.type} ${(e.new ?? e.old).metadata.name}`), ['add p3', 'delete p2']);
    assert.ok(has('p1'));
  });

  it('reconnects with backoff after failed requests', async () => {
    await open({}, [policy('p1')]);
    await eventually(() => assert.ok(api.openWatches() === 2, 'both watches open'));
    const before = api.requests.length;
    api.failNext(500, 503, 500);
    api.dropWatches();
    api.put(policy('p4'));
    await eventually(() => assert.ok(has('p4'), 'p4 after reconnecting'));
    assert.ok(api.requests.length >= before + 4, 'the failed attempts were retried');
  });

  it('restricts the namespaces watched to --appNamespace plus the root namespace', async () => {
    const store = await open({ namespaces: ['team-a'], kinds: ['AuthorizationPolicy'] }, [policy('a', 'team-a'), policy('b', 'team-b'), policy('root', 'mesh-system')]);
    assert.deepEqual(store.list('AuthorizationPolicy').map((r) => `${r.metadata.namespace}/${r.metadata.name}`), ['mesh-system/root', 'team-a/a']);
    assert.deepEqual([...new Set(api.requests.map((r) => r.path))].sort(), [
      '/apis/security.mesh.io/v1/namespaces/mesh-system/authorizationpolicies',
      '/apis/security.mesh.io/v1/namespaces/team-a/authorizationpolicies',
    ]);
  });

  it('without PILOT_ENABLE_CRD_VALIDATION only converts, still rejecting unusable objects', async () => {
    const errorsBefore = await metricValue(counter('pilot_total_orch_object_errors'), { kind: 'AuthorizationPolicy' });
    const broken: StoredObject = { apiVersion: 'security.mesh.io/v1', kind: 'AuthorizationPolicy', metadata: { name: 'broken', namespace: 'ns' }, spec: 'nonsense' };
    const store = await open({ validate: false }, [INVALID, broken]);
    assert.deepEqual(store.list('AuthorizationPolicy').map((r) => r.metadata.name), ['bad']);
    assert.equal(await metricValue(counter('pilot_total_orch_object_errors'), { kind: 'AuthorizationPolicy' }), errorsBefore + 1);
  });

  it('--resync relists periodically and repairs a missed event', async () => {
    await open({ resyncMs: 50 }, [policy('p1')]);
    api.put(policy('p5'), true);
    await eventually(() => assert.ok(has('p5'), 'p5 through a resync'));
  });

  it('paces list and watch requests with the --orchestratorApiQPS/--orchestratorApiBurst token bucket', async () => {
    const sleeps: number[] = [];
    let now = 0;
    // Time moves only when the source sleeps, so every wait it takes is recorded exactly.
    const clock = {
      now: () => now,
      sleep: async (ms: number) => {
        sleeps.push(Math.round(ms));
        now += ms;
      },
    };
    await open({ qps: 5, burst: 1, clock }, [policy('p1')]);
    await eventually(() => assert.equal(api.openWatches(), 2));
    assert.deepEqual(sleeps, [200, 200, 200]);
  });

  it('does not wait for a kind whose CRD is not installed', async () => {
    api = new FakeApiServer((kind) => (isKind(kind) ? pluralOf(kind) : kind));
    await api.start();
    api.unserve('serviceentries');
    const kubeconfig = join(dir, 'kubeconfig-404');
    await writeFile(kubeconfig, api.kubeconfig());
    source = new OrchestratorConfigSource({ kubeconfig, kinds: ['AuthorizationPolicy', 'ServiceEntry'], validate: true, backoff: { initialMs: 10, maxMs: 50 } });
    await source.start();
    assert.equal(source.hasSynced(), true);
  });

  it('without --orchconfig outside a cluster, says so instead of retrying forever', async (t) => {
    api = new FakeApiServer((kind) => kind);
    const saved = [process.env['KUBERNETES_SERVICE_HOST'], process.env['KUBERNETES_SERVICE_PORT']];
    delete process.env['KUBERNETES_SERVICE_HOST'];
    t.after(() => {
      if (saved[0] !== undefined) process.env['KUBERNETES_SERVICE_HOST'] = saved[0];
      if (saved[1] !== undefined) process.env['KUBERNETES_SERVICE_PORT'] = saved[1];
    });
    await assert.rejects(new OrchestratorConfigSource({}).start(), /in-cluster configuration: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set .*--orchconfig/);
  });

  it('names --orchconfig when the kubeconfig cannot be read', async () => {
    api = new FakeApiServer((kind) => kind);
    await assert.rejects(new OrchestratorConfigSource({ kubeconfig: join(dir, 'missing') }).start(), /--orchconfig .*missing/);
  });
});
