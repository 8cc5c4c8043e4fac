// A WorkloadEntry's `Healthy` condition in its status in the orchestrator, as the Go mesh's
// WorkloadEntry controller writes it, so that `get workloadentry -o yaml` shows what the agent
// reported. Only the orchestrator's entries: auto-registered ones live in the discovery server's
// memory (/debug/workloadentryz shows them). Written by the replica the proxy reports to, not
// only by the status leader: the report arrived there, and the next one may go to another.
import type { WorkloadEntry } from '../api/types.js';
import type { OrchestratorClient } from '../config/informer.js';
import type { OrchestratorConfigSource } from '../config/orchestrator.js';
import type { ConfigStore } from '../config/store.js';
import { healthConditionFrom, type HealthCondition, type WorkloadHealth } from '../registry/workload-health.js';
import { StatusWriter } from './writer.js';

/** Queues a status write for every condition change of an entry `inStore` says the orchestrator holds; returns the unsubscriber. */
export function writeHealthConditions(health: WorkloadHealth, writer: Pick<StatusWriter, 'enqueue'>, inStore: (we: WorkloadEntry) => boolean): () => void {
  return health.onCondition((we, condition) => {
    if (!inStore(we)) return;
    writer.enqueue({ kind: 'WorkloadEntry', namespace: we.metadata.namespace, name: we.metadata.name }, { healthy: condition ? { ...condition } : null });
  });
}

/** The writer of the orchestrator's entries' conditions, paced by the status settings; close it on shutdown. */
export function healthConditionWriter(health: WorkloadHealth, store: Pick<ConfigStore, 'get'>, client: Pick<OrchestratorClient, 'request'>, pacing: { qps: number; burst: number; workers: number }): StatusWriter {
  const writer = new StatusWriter({ client, ...pacing });
  writeHealthConditions(health, writer, (we) => store.get({ kind: 'WorkloadEntry', namespace: we.metadata.namespace, name: we.metadata.name }) !== undefined);
  return writer;
}

/** The condition an entry's status holds as last read (a discovery server wrote it, before a restart or on another replica). */
export function writtenCondition(source: Pick<OrchestratorConfigSource, 'entryCondition'>): (we: Pick<WorkloadEntry, 'metadata'>) => HealthCondition | undefined {
  return (we) => healthConditionFrom(source.entryCondition({ kind: 'WorkloadEntry', namespace: we.metadata.namespace, name: we.metadata.name }, 'Healthy'));
}
