// PILOT_ENABLE_STATUS in the discovery server: the tracker the xDS server reports deliveries to,
// the reporter deciding what to write, the writer writing it. Built only with an orchestrator to
// write to; the discovery server calls `snapshot` for every PushContext it builds. Writes go out only
// while this replica leads the status election (../cli/discovery-elections.ts calls writeWhile).
import { KINDS } from '../api/types.js';
import { scope } from '../common/log.js';
import type { OrchestratorClient } from '../config/informer.js';
import { keyString, type ConfigStore } from '../config/store.js';
import type { ConfigAnalysis } from '../debug/analysis.js';
import type { DeliveryObserver } from '../xds/generator.js';
import { DistributionTracker } from './distribution.js';
import { StatusReporter } from './reporter.js';
import { StatusWriter } from './writer.js';

const log = scope('status');

export interface StatusSettings {
  readonly qps: number;
  readonly burst: number;
  readonly workers: number;
  /** PILOT_ENABLE_CONFIG_DISTRIBUTION_TRACKING. */
  readonly distribution: boolean;
  readonly retentionMs: number;
}

export interface StatusSources {
  readonly client: Pick<OrchestratorClient, 'request'>;
  readonly store: Pick<ConfigStore, 'list'>;
  /** Whether a resource's status holds validationMessages (the orchestrator source knows). */
  readonly hasMessages: (key: string) => boolean;
}

export class StatusReporting {
  readonly writer: StatusWriter;
  /** What the xDS server reports to; undefined without distribution tracking. */
  readonly deliveries: DeliveryObserver | undefined;
  private readonly tracker: DistributionTracker | undefined;
  private readonly reporter: StatusReporter;

  constructor(
    private readonly sources: StatusSources,
    settings: StatusSettings,
  ) {
    this.writer = new StatusWriter({ client: sources.client, qps: settings.qps, burst: settings.burst, workers: settings.workers, elected: true });
    this.tracker = settings.distribution ? new DistributionTracker(settings.retentionMs) : undefined;
    const keys = () => KINDS.flatMap((kind) => sources.store.list(kind).map((r) => keyString({ kind, namespace: r.metadata.namespace, name: r.metadata.name })));
    this.reporter = new StatusReporter({ sink: this.writer, ...(this.tracker ? { tracker: this.tracker } : {}), hasMessages: sources.hasMessages, keys });
    const tracker = this.tracker;
    this.deliveries = tracker && {
      stamp: () => tracker.stamp(),
      generated: (c, t, s, v) => tracker.generated(c, t, s, v),
      sent: (c, t, n, v) => {
        tracker.sent(c, t, n, v);
        this.reporter.changed();
      },
      acked: (c, t, n) => {
        tracker.acked(c, t, n);
        this.reporter.changed();
      },
    };
    log.info(`writing status (PILOT_ENABLE_STATUS): ${settings.distribution ? 'Reconciled condition' : 'no distribution (PILOT_ENABLE_CONFIG_DISTRIBUTION_TRACKING=false)'}, analysis messages when PILOT_ENABLE_ANALYSIS; ${settings.qps} QPS, burst ${settings.burst}, ${settings.workers} workers; written only by the replica elected status leader`);
  }

  /** Writes while `leading` holds (the status election): what is known now is queued at once. */
  writeWhile(leading: AbortSignal): void {
    this.writer.writeWhile(leading);
    this.reporter.resend();
  }

  /** A PushContext was built from the store's current config, pushed for `types` (undefined: all). */
  snapshot(types?: ReadonlySet<string>): void {
    if (!this.tracker) return;
    const resources = KINDS.flatMap((kind) =>
      this.sources.store.list(kind).map((r) => ({ kind, namespace: r.metadata.namespace, name: r.metadata.name, generation: r.metadata.generation ?? 0 })),
    );
    this.tracker.snapshot(resources, types);
    this.reporter.changed();
  }

  disconnected(connectionId: string): void {
    this.tracker?.disconnected(connectionId);
    this.reporter.changed();
  }

  /** Analysis results go to the resources' validationMessages. */
  follow(analysis: ConfigAnalysis): void {
    analysis.onResult((messages) => this.reporter.analysis(messages));
  }

  async close(): Promise<void> {
    this.reporter.close();
    await this.writer.close();
  }
}
