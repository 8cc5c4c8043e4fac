// Leader election against the stand-in API server over real HTTPS: who holds the Lease or ConfigMap
// is what the API server stores, as `kubectl get lease -o yaml` would show it. Timings are short
// (tests only); nothing asserts how long anything took.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { OrchestratorClient } from '../../src/config/informer.js';
import { LeaderElection, type Election, type ElectionTimings } from '../../src/registry/orchestrator/leader-election.js';
import { CONFIG_MAP_RECORD_ANNOTATION } from '../../src/registry/orchestrator/leader-lock.js';
import type { FakeApiServer, StoredObject } from '../config/fake-apiserver.js';
import { eventually } from '../helpers/proc.js';
import { standIn } from './orch-fixtures.js';

// Short, yet long enough that a loaded machine's slow requests do not cost a term.
const TIMINGS: ElectionTimings = { leaseDurationMs: 4_000, renewDeadlineMs: 2_000, retryPeriodMs: 100 };
const LEASE: Election = { id: 'mesh-status-leader', lock: 'Lease', perRevision: true };
const CONFIG_MAP: Election = { id: 'mesh-leader', lock: 'ConfigMap', perRevision: false };
const until = <T>(check: () => T | Promise<T>) => eventually(check, 15_000);

interface LeaseSpec {
  holderIdentity?: string;
  leaseTransitions?: number;
  renewTime?: string;
  leaseDurationSeconds?: number;
}

const leaseRef = (name: string) => ({ apiVersion: 'coordination.k8s.io/v1', kind: 'Lease', metadata: { name, namespace: 'mesh-system' } });
const configMapRef = (name: string) => ({ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name, namespace: 'mesh-system' } });

interface ReplicaOptions {
  identity: string;
  election?: Election;
  revision?: string;
  timings?: ElectionTimings;
  /** Who leads now, and the most that ever led at once. */
  watch?: { leaders: Set<string>; most: number };
}

/** A replica's campaign, and what its run function saw: leadership terms begun and ended. */
class Replica {
  readonly election: LeaderElection;
  started = 0;
  ended = 0;

  constructor(kubeconfig: string, { identity, election = LEASE, revision = '', timings = TIMINGS, watch }: ReplicaOptions) {
    this.election = new LeaderElection({ client: OrchestratorClient.connect(kubeconfig), namespace: 'mesh-system', election, identity, revision, timings });
    this.election.addRunFunction((leading) => {
      this.started += 1;
      watch?.leaders.add(identity);
      if (watch) watch.most = Math.max(watch.most, watch.leaders.size);
      leading.addEventListener('abort', () => {
        this.ended += 1;
        watch?.leaders.delete(identity);
      });
    });
  }
}

describe('leader election', () => {
  let api: FakeApiServer;
  let kubeconfig: string;
  const replicas: Replica[] = [];
  const replica = (options: ReplicaOptions) => {
    const r = new Replica(kubeconfig, options);
    replicas.push(r);
    r.election.start();
    return r;
  };

  before(async () => {
    ({ api, kubeconfig } = await standIn(mkdtempSync(join(tmpdir(), 'leader-'))));
  });
  after(async () => {
    await Promise.all(replicas.map((r) => r.election.close()));
    await api.close();
  });

  const lease = (name: string) => api.get(leaseRef(name))?.['spec'] as LeaseSpec | undefined;

  it('elects one of two replicas, names it in the Lease, and hands over when it leaves', async () => {
    const watch = { leaders: new Set<string>(), most: 0 };
    const a = replica({ identity: 'meshd-a', watch });
    const b = replica({ identity: 'meshd-b', watch });
    const [leader, other] = await until(() => {
      const leading = [a, b].filter((r) => r.election.isLeader());
      assert.equal(leading.length, 1);
      return a.election.isLeader() ? [a, b] : [b, a];
    });
    // Per revision: the lock carries the revision (none given: default).
    const held = lease('mesh-status-leader-default');
    assert.equal(held?.holderIdentity, leader === a ? 'meshd-a' : 'meshd-b');
    assert.equal(held?.leaseDurationSeconds, 4);
    // Renewed while the other keeps trying: it stays the only leader.
    const renewed = held?.renewTime;
    await until(() => assert.notEqual(lease('mesh-status-leader-default')?.renewTime, renewed));
    await until(() => assert.ok(api.requests.filter((r) => r.method === 'GET' && r.path.endsWith('/leases/mesh-status-leader-default')).length > 20, 'the other replica keeps reading the Lease'));
    assert.equal(other.election.isLeader(), false);
    assert.equal(other.started, 0);

    await leader.election.close();
    assert.equal(leader.ended, leader.started, 'its writers were told to stop');
    await until(() => assert.equal(other.election.isLeader(), true));
    const taken = lease('mesh-status-leader-default');
    assert.equal(taken?.holderIdentity, other === a ? 'meshd-a' : 'meshd-b');
    assert.equal(taken?.leaseTransitions, 1);
    assert.equal(watch.most, 1, 'never two leaders at once');
    await other.election.close();
    assert.equal(lease('mesh-status-leader-default')?.holderIdentity, '', 'released on close');
  });

  it('takes a lock whose unknown holder stopped renewing once it expires, and only then', async () => {
    const now = new Date().toISOString();
    api.put({ ...leaseRef('mesh-status-leader-canary'), spec: { holderIdentity: 'meshd-gone', leaseDurationSeconds: 30, acquireTime: now, renewTime: now, leaseTransitions: 4 } } as StoredObject);
    // A longer lease here: the test renews for the holder in between the replica's attempts.
    const r = replica({ identity: 'meshd-new', revision: 'canary', timings: { ...TIMINGS, leaseDurationMs: 6_000, renewDeadlineMs: 3_000 } });
    // While the holder keeps renewing (its record changes), the lock stays its own.
    for (let i = 0; i < 5; i++) {
      const seen = api.requests.filter((q) => q.path.endsWith('/leases/mesh-status-leader-canary')).length;
      await until(() => assert.ok(api.requests.filter((q) => q.path.endsWith('/leases/mesh-status-leader-canary')).length > seen + 2, 'more requests for the canary Lease'));
      const renewTime = new Date().toISOString();
      api.put({ ...leaseRef('mesh-status-leader-canary'), spec: { holderIdentity: 'meshd-gone', leaseDurationSeconds: 30, acquireTime: now, renewTime, leaseTransitions: 4 } } as StoredObject);
    }
    assert.equal(lease('mesh-status-leader-canary')?.holderIdentity, 'meshd-gone');
    // It stops renewing: the lock expires by the new replica's own clock and is taken.
    await until(() => assert.equal(r.election.isLeader(), true));
    assert.equal(r.started, 1);
    assert.equal(lease('mesh-status-leader-canary')?.holderIdentity, 'meshd-new');
    assert.equal(lease('mesh-status-leader-canary')?.leaseTransitions, 5);
    await r.election.close();
  });

  it('retries a renewal that meets a 409 Conflict and stays leader', async () => {
    const r = replica({ identity: 'meshd-c', election: { ...LEASE, id: 'mesh-conflict' } });
    await until(() => assert.equal(r.election.isLeader(), true));
    // Someone else writes the Lease between our read and our update (an annotation, not the record).
    api.interleave(() => {
      const current = api.get(leaseRef('mesh-conflict-default'))!;
      api.put({ ...current, metadata: { ...current.metadata, annotations: { touched: 'yes' } } });
    }, '/leases/mesh-conflict-default');
    await until(() => assert.ok(api.updates.some((u) => u.path.endsWith('/leases/mesh-conflict-default') && u.status === 409), 'a renewal met 409'));
    const conflict = api.updates.findIndex((u) => u.path.endsWith('/leases/mesh-conflict-default') && u.status === 409);
    await until(() => assert.ok(api.updates.slice(conflict + 1).some((u) => u.path.endsWith('/leases/mesh-conflict-default') && u.status === 200), 'a renewal succeeded after the 409'));
    assert.equal(r.election.isLeader(), true);
    assert.equal(r.started, 1);
    assert.equal(r.ended, 0, 'the conflict did not end its term');
    await r.election.close();
  });

  it('stops leading when it cannot renew (fail safe), and leads again once it can', async () => {
    const r = replica({ identity: 'meshd-d', election: CONFIG_MAP });
    await until(() => assert.equal(r.election.isLeader(), true));
    const record = JSON.parse(String((api.get(configMapRef('mesh-leader'))?.metadata['annotations'] as Record<string, string>)[CONFIG_MAP_RECORD_ANNOTATION]));
    assert.equal(record.holderIdentity, 'meshd-d');
    assert.equal(record.holderKey, 'default');
    // More requests fail than a renew deadline has attempts (one per retry period).
    api.failNext(...Array<number>(40).fill(503));
    await until(() => assert.equal(r.ended, 1));
    assert.equal(r.election.isLeader(), false);
    await until(() => assert.equal(r.started, 2));
    assert.equal(r.election.isLeader(), true);
    await r.election.close();
  });

  it('stops leading at once when it finds the lock held by another replica, not at its renew deadline', async () => {
    // Deadlines longer than the test waits: only finding the other holder can end the term.
    const r = replica({ identity: 'meshd-f', election: { ...LEASE, id: 'mesh-intruded' }, timings: { leaseDurationMs: 120_000, renewDeadlineMs: 60_000, retryPeriodMs: 50 } });
    await until(() => assert.equal(r.election.isLeader(), true));
    const intrude = (holderIdentity: string) => {
      const current = api.get(leaseRef('mesh-intruded-default'))!;
      const now = new Date().toISOString();
      api.put({ ...current, spec: { ...(current['spec'] as object), holderIdentity, renewTime: now, acquireTime: now } });
    };
    intrude('meshd-intruder');
    await until(() => assert.equal(r.ended, 1));
    assert.equal(lease('mesh-intruded-default')?.holderIdentity, 'meshd-intruder', 'a lock another replica renews is left alone');
    // The other releases it: taken again at the next attempt.
    intrude('');
    await until(() => assert.equal(r.started, 2));
    assert.equal(lease('mesh-intruded-default')?.holderIdentity, 'meshd-f');
    await r.election.close();
  });

  it('takes a ConfigMap lock whose record cannot be read as one nobody holds', async () => {
    api.put({ ...configMapRef('mesh-garbled'), metadata: { ...configMapRef('mesh-garbled').metadata, annotations: { [CONFIG_MAP_RECORD_ANNOTATION]: '{not json' } } } as StoredObject);
    const r = replica({ identity: 'meshd-e', election: { ...CONFIG_MAP, id: 'mesh-garbled' } });
    await until(() => assert.equal(r.election.isLeader(), true));
    const annotations = api.get(configMapRef('mesh-garbled'))?.metadata['annotations'] as Record<string, string>;
    assert.equal(JSON.parse(annotations[CONFIG_MAP_RECORD_ANNOTATION]!).holderIdentity, 'meshd-e');
    await r.election.close();
  });
});
