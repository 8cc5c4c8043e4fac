// The status writer against the stand-in API server: the token bucket holds writes past the burst
// until time passes, and the stand-in behaves as the real server for the status subresource.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { OrchestratorClient } from '../../src/config/informer.js';
import type { Clock } from '../../src/config/pacing.js';
import { StatusWriter } from '../../src/status/writer.js';
import type { FakeApiServer, StoredObject } from '../config/fake-apiserver.js';
import { standIn } from '../registry/orch-fixtures.js';
import { eventually } from '../helpers/proc.js';

/** Time moves only when the test says; sleepers wait for it. */
function manualClock(): Clock & { advance(ms: number): void; sleepers(): number } {
  let t = 0;
  let waiting: Array<{ until: number; resolve: () => void }> = [];
  return {
    now: () => t,
    sleep: (ms) => new Promise<void>((resolve) => waiting.push({ until: t + ms, resolve })),
    advance(ms) {
      t += ms;
      const due = waiting.filter((w) => w.until <= t);
      waiting = waiting.filter((w) => w.until > t);
      for (const w of due) w.resolve();
    },
    sleepers: () => waiting.length,
  };
}

const sidecar = (name: string): StoredObject => ({ apiVersion: 'networking.mesh.io/v1', kind: 'Sidecar', metadata: { name, namespace: 'default' }, spec: {} });

describe('StatusWriter', () => {
  let api: FakeApiServer;
  let client: OrchestratorClient;

  before(async () => {
    const started = await standIn(mkdtempSync(join(tmpdir(), 'status-writer-')));
    api = started.api;
    client = OrchestratorClient.connect(started.kubeconfig);
  });
  after(() => api.close());

  it('holds writes past the burst until the rate allows them (PILOT_STATUS_QPS / _BURST)', async () => {
    for (const n of ['a', 'b', 'c']) api.put(sidecar(n));
    const clock = manualClock();
    // Each write is two requests (read, update): a burst of 4 lets two writes through, then one request a second.
    const writer = new StatusWriter({ client, qps: 1, burst: 4, workers: 1, clock });
    const message = { code: 'MSH0127', name: 'NoMatchingWorkloadsFound', level: 'Warning' as const, message: 'no workload', path: 'spec.workloadSelector' };
    for (const n of ['a', 'b', 'c']) writer.enqueue({ kind: 'Sidecar', namespace: 'default', name: n }, { messages: [{ ...message, resource: { kind: 'Sidecar', namespace: 'default', name: n } }] });
    await eventually(() => assert.deepEqual([writer.written, clock.sleepers()], [2, 1]));
    assert.equal(api.updates.length, 2, 'the third write is held');
    clock.advance(1000);
    await eventually(() => assert.equal(clock.sleepers(), 1, 'the read went, the update waits'));
    assert.equal(writer.written, 2);
    clock.advance(1000);
    await eventually(() => assert.equal(writer.written, 3));
    assert.equal(((api.get(sidecar('c'))!.status as { validationMessages: unknown[] }).validationMessages).length, 1);
    await writer.close();
  });

  it('the stand-in changes status only through /status, and refuses stale or missing resourceVersions', async () => {
    api.put(sidecar('d'));
    const path = '/apis/networking.mesh.io/v1/namespaces/default/sidecars/d';
    const current = api.get(sidecar('d'))!;
    await client.request('PUT', path, { ...current, spec: { outboundTrafficPolicy: { mode: 'REGISTRY_ONLY' } }, status: { ignored: true } });
    const updated = api.get(sidecar('d'))!;
    assert.deepEqual([updated.status, updated.metadata['generation']], [undefined, 2], 'the object path ignores status; a spec change moves the generation');
    await client.request('PUT', `${path}/status`, { ...updated, spec: {}, status: { observedGeneration: 2 } });
    const written = api.get(sidecar('d'))!;
    assert.deepEqual([written.status, written.spec, written.metadata['generation']], [{ observedGeneration: 2 }, updated.spec, 2], '/status changes status only');
    await assert.rejects(client.request('PUT', `${path}/status`, { ...updated, status: {} }), /409 Operation cannot be fulfilled on sidecars "d": the object has been modified/);
    await assert.rejects(client.request('PUT', `${path}/status`, { ...written, metadata: { ...written.metadata, resourceVersion: undefined } }), /422 .*must be specified for an update/);
    await client.request('PATCH', `${path}/status`, { status: { observedGeneration: null, note: 'merged' } }, 'application/merge-patch+json');
    assert.deepEqual(api.get(sidecar('d'))!.status, { note: 'merged' });
    await assert.rejects(client.request('PATCH', `${path}/status`, { status: {} }, 'application/strategic-merge-patch+json'), /415/);
  });
});
