// Two discovery server replicas (PILOT_ENABLE_STATUS, PILOT_ENABLE_ANALYSIS) on one stand-in API
// server: only the replica holding the mesh-status-leader Lease writes status; when it leaves the
// other takes over; when no replica can renew, nobody writes. Short lease timings, tests only.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { DiscoveryServer } from '../../src/cli/discovery-server.js';
import type { ElectionTimings } from '../../src/registry/orchestrator/leader-election.js';
import type { FakeApiServer } from '../config/fake-apiserver.js';
import { standIn } from '../registry/orch-fixtures.js';
import { discovery, dr, statusOf, toSubset, until } from './fixtures.js';

const TIMINGS: ElectionTimings = { leaseDurationMs: 4_000, renewDeadlineMs: 2_000, retryPeriodMs: 100 };
const LEASE = { apiVersion: 'coordination.k8s.io/v1', kind: 'Lease', metadata: { name: 'mesh-status-leader-default', namespace: 'mesh-system' } };
const ENV = { PILOT_ENABLE_STATUS: 'true', PILOT_ENABLE_ANALYSIS: 'true' };

describe('status written by the elected replica only', () => {
  let api: FakeApiServer;
  const replicas = new Map<string, DiscoveryServer>();
  const holder = () => (api.get(LEASE)?.['spec'] as { holderIdentity?: string } | undefined)?.holderIdentity;
  const written = (name: string) => replicas.get(name)!.status!.writer.written;
  const statusWrites = () => api.updates.filter((u) => u.path.endsWith('/virtualservices/reviews/status') && u.status === 200).length;

  before(async () => {
    let kubeconfig: string;
    ({ api, kubeconfig } = await standIn(mkdtempSync(join(tmpdir(), 'status-leader-'))));
    api.put(toSubset('v2'));
    replicas.set('meshd-a', await discovery(kubeconfig, { ...ENV, POD_NAME: 'meshd-a' }, { leaderElection: TIMINGS }));
    replicas.set('meshd-b', await discovery(kubeconfig, { ...ENV, POD_NAME: 'meshd-b' }, { leaderElection: TIMINGS }));
  });

  after(async () => {
    await Promise.all([...replicas.values()].map((d) => d.stop()));
    await api.close();
  });

  it('one replica holds the Lease and writes; the other writes nothing', async () => {
    await until(() => assert.equal(statusOf(api).validationMessages?.length, 1));
    const leader = holder()!;
    const other = leader === 'meshd-a' ? 'meshd-b' : 'meshd-a';
    assert.ok(replicas.has(leader), `the Lease names a replica (${leader})`);
    // The API server stores a write before it answers; the writer counts it once answered.
    await until(() => assert.ok(written(leader) > 0, 'the leader wrote status'));
    api.put(dr);
    await until(() => assert.equal(statusOf(api).validationMessages, undefined));
    // Both replicas analysed the change; only the leader wrote.
    await until(() => assert.equal(replicas.get(other)!.analysis!.current().messages.length, 0));
    assert.equal(written(other), 0);
    assert.equal(holder(), leader);
  });

  it('when the leader leaves, the other replica takes the Lease and writes', async () => {
    const leader = holder()!;
    const other = leader === 'meshd-a' ? 'meshd-b' : 'meshd-a';
    await replicas.get(leader)!.stop();
    replicas.delete(leader);
    await until(() => assert.equal(holder(), other));
    api.remove(dr);
    await until(() => assert.equal(statusOf(api).validationMessages?.length, 1));
    await until(() => assert.ok(written(other) > 0, 'the new leader wrote status'));
  });

  it('when the Lease cannot be renewed, the leader stops writing', async () => {
    const [name, d] = [...replicas][0]!;
    const election = d.elections.elections[0]!;
    await until(() => assert.equal(election.isLeader(), true));
    api.unserve('leases');
    await until(() => assert.equal(election.isLeader(), false));
    const before = statusWrites();
    api.put(dr);
    await until(() => assert.equal(d.analysis!.current().messages.length, 0));
    assert.ok(d.status!.writer.idle(), `${name} queued nothing`);
    assert.equal(statusWrites(), before);
    assert.equal(statusOf(api).validationMessages?.length, 1, 'the status stays as the last leader wrote it');
  });
});
