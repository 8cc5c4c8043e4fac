// The discovery server's writers to the orchestrator that run on one replica only, each under its
// leader election (../registry/orchestrator/leader-election.ts), as the Go mesh runs them. See
// docs/orchestrator.md, "Leader election".
import { setting } from '../common/env.js';
import { OrchestratorClient } from '../config/informer.js';
import { LeaderElection, type Election, type ElectionTimings } from '../registry/orchestrator/leader-election.js';
import type { IngressController } from '../registry/orchestrator/ingress.js';
import type { StatusReporting } from '../status/setup.js';

export const ELECTIONS = {
  /** Ingress status: the Go mesh's `istio-leader` (its legacy name), a ConfigMap, one leader whatever the revision. */
  ingress: { id: 'mesh-leader', lock: 'ConfigMap', perRevision: false },
  /** Config status (Reconciled, validationMessages): a Lease, one leader per revision, since each revision reads its own config. */
  status: { id: 'mesh-status-leader', lock: 'Lease', perRevision: true },
} as const satisfies Record<string, Election>;

export interface ElectionsOptions {
  /** --orchconfig; absent: the in-cluster configuration. */
  readonly kubeconfig: string | undefined;
  /** --namespace: where the locks live. */
  readonly namespace: string;
  readonly revision: string;
  readonly status: StatusReporting | undefined;
  readonly ingress: IngressController | undefined;
  /** Shorter than the Go mesh's, for tests only. */
  readonly timings?: ElectionTimings | undefined;
}

export class DiscoveryElections {
  readonly elections: LeaderElection[] = [];

  constructor(options: ElectionsOptions) {
    const { status, ingress } = options;
    if (!status && !ingress) return;
    const client = OrchestratorClient.connect(options.kubeconfig);
    const elect = (election: Election) => {
      const e = new LeaderElection({ client, namespace: options.namespace, election, identity: setting('POD_NAME'), revision: options.revision, ...(options.timings ? { timings: options.timings } : {}) });
      this.elections.push(e);
      return e;
    };
    if (status) elect(ELECTIONS.status).addRunFunction((leading) => status.writeWhile(leading));
    if (ingress) elect(ELECTIONS.ingress).addRunFunction((leading) => ingress.writeStatusWhile(leading));
  }

  /** Campaigns once the writers have what to write (after the config and Ingresses are read). */
  start(): void {
    this.elections.forEach((e) => e.start());
  }

  async close(): Promise<void> {
    await Promise.all(this.elections.map((e) => e.close()));
  }
}
