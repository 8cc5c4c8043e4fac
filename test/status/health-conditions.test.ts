// A WorkloadEntry's Healthy condition in its orchestrator status, against the stand-in API server:
// what the agent reported is written, replaced and removed, the other conditions are kept, and an
// entry the orchestrator does not hold (an auto-registered one) is not written. A discovery server
// that starts later reads the condition back, until its own reports replace it.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { WorkloadEntry } from '../../src/api/types.js';
import { setScopeLevel } from '../../src/common/log.js';
import { OrchestratorClient } from '../../src/config/informer.js';
import { MemoryStore } from '../../src/config/memory.js';
import { OrchestratorConfigSource } from '../../src/config/orchestrator.js';
import { HEALTH_CHECKS_ANNOTATION, healthConditionFrom, WorkloadHealth } from '../../src/registry/workload-health.js';
import { healthConditionWriter } from '../../src/status/health-conditions.js';
import type { StatusWriter } from '../../src/status/writer.js';
import type { FakeApiServer, StoredObject } from '../config/fake-apiserver.js';
import { standIn } from '../registry/orch-fixtures.js';
import { until } from './fixtures.js';

setScopeLevel('wle', 'error');

const entry = (name: string): WorkloadEntry => ({
  apiVersion: 'networking.mesh.io/v1',
  kind: 'WorkloadEntry',
  metadata: { name, namespace: 'default', annotations: { [HEALTH_CHECKS_ANNOTATION]: 'true' } },
  spec: { address: '10.0.0.1', labels: { app: 'vm' } },
});

interface Conditions {
  conditions?: Array<{ type: string; status: string; message?: string; lastTransitionTime?: string }>;
}

describe('Healthy conditions written to the orchestrator', () => {
  let api: FakeApiServer;
  let kubeconfig: string;
  let writer: StatusWriter;
  const store = new MemoryStore();
  const health = new WorkloadHealth(true);
  const conditionsOf = (name: string) => ((api.get(entry(name) as StoredObject)?.status ?? {}) as Conditions).conditions ?? [];

  before(async () => {
    const started = await standIn(mkdtempSync(join(tmpdir(), 'health-status-')));
    api = started.api;
    kubeconfig = started.kubeconfig;
    writer = healthConditionWriter(health, store, OrchestratorClient.connect(started.kubeconfig), { qps: 100, burst: 100, workers: 2 });
  });
  after(async () => {
    await writer.close();
    api.close();
  });

  it('writes the report, keeps other conditions, removes it when the health is forgotten', async () => {
    const vm = entry('vm-1');
    api.put({ ...(vm as StoredObject), status: { conditions: [{ type: 'Reconciled', status: 'True', message: '1/1 proxies up to date.' }] } });
    store.apply(vm);

    health.report(vm, false, 'GET http://10.0.0.1:8080/ready: 503');
    await until(() => assert.deepEqual(conditionsOf('vm-1').map((c) => [c.type, c.status, c.message]), [
      ['Reconciled', 'True', '1/1 proxies up to date.'],
      ['Healthy', 'False', 'GET http://10.0.0.1:8080/ready: 503'],
    ]));
    health.report(vm, true);
    await until(() => assert.deepEqual(conditionsOf('vm-1').map((c) => [c.type, c.status, c.message]), [
      ['Reconciled', 'True', '1/1 proxies up to date.'],
      ['Healthy', 'True', undefined],
    ]));
    assert.ok(conditionsOf('vm-1')[1]!.lastTransitionTime, 'the transition time is written');
    health.clear(vm);
    await until(() => assert.deepEqual(conditionsOf('vm-1').map((c) => c.type), ['Reconciled']));
  });

  it('an entry the orchestrator does not hold (auto-registered, in memory) is not written', async () => {
    const auto = entry('vm-auto');
    const before = api.updates.length;
    health.report(auto, true);
    await new Promise((r) => setTimeout(r, 200));
    assert.equal(api.updates.length, before);
  });

  it('a server started later reads the written condition back: the entry stays an endpoint until a report or a clear here says otherwise', async () => {
    const vm = entry('vm-2');
    api.put(vm as StoredObject);
    store.apply(vm);
    health.report(vm, true);
    await until(() => assert.deepEqual(conditionsOf('vm-2').map((c) => c.status), ['True']));

    const source = new OrchestratorConfigSource({ kubeconfig, kinds: ['WorkloadEntry'], validate: true, backoff: { initialMs: 10, maxMs: 50 } });
    await source.start();
    try {
      const key = { kind: 'WorkloadEntry' as const, namespace: 'default', name: 'vm-2' };
      const restarted = new WorkloadHealth(true, { persisted: () => healthConditionFrom(source.entryCondition(key, 'Healthy')) });
      const seen = source.get(key)!;
      assert.equal(restarted.isEndpoint(seen), true, 'healthy as the status says, before any report reached this server');
      assert.equal(restarted.condition(seen)?.lastTransitionTime, conditionsOf('vm-2')[0]!.lastTransitionTime);
      restarted.report(seen, false, 'connect 10.0.0.1:9000: ECONNREFUSED');
      assert.equal(restarted.isEndpoint(seen), false, 'its own report wins');
      restarted.report(seen, true);
      restarted.clear(seen);
      assert.equal(restarted.isEndpoint(seen), false, 'forgotten here: the status it read no longer counts');
      assert.equal(healthConditionFrom({ type: 'Healthy', status: 'maybe' }), undefined, 'a malformed condition is none');
    } finally {
      await source.close();
    }
  });
});
