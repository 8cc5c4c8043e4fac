// Decides which resources' status to write, and hands them to the writer: the distribution
// progress (./distribution.ts) once proxy ACKs and disconnects settle, and the analysis messages
// each time an analysis result is published. Only what changed since the last hand-over is queued.
import type { ResourceKey, Kind } from '../api/types.js';
import type { AnalysisMessage } from '../model/analysis/types.js';
import type { DesiredStatus } from './content.js';
import { keyString } from '../config/store.js';
import type { DistributionTracker } from './distribution.js';

/** ACKs arriving within this window make one pass. */
const SETTLE_MS = 100;

export interface StatusSink {
  enqueue(key: ResourceKey, desired: DesiredStatus): void;
}

export interface StatusReporterOptions {
  readonly sink: StatusSink;
  /** PILOT_ENABLE_CONFIG_DISTRIBUTION_TRACKING: the tracker whose progress is written. */
  readonly tracker?: DistributionTracker;
  /** Whether a resource's status currently holds validationMessages (written by an earlier run, say). */
  readonly hasMessages?: (key: string) => boolean;
  /** Every resource key the config holds, to clear messages of an earlier run. */
  readonly keys?: () => Iterable<string>;
}

export class StatusReporter {
  private readonly written = new Map<string, string>();
  private readonly messages = new Map<string, string>();
  /** The last analysis result, to queue again for a new leader. */
  private lastAnalysis: readonly AnalysisMessage[] | undefined;
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly options: StatusReporterOptions) {}

  /** Distribution changed (a snapshot, an ACK, a proxy gone): report once changes settle. */
  changed(): void {
    if (!this.options.tracker || this.timer) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.report();
    }, SETTLE_MS);
  }

  /** Queues every tracked resource whose progress differs from what was last queued. */
  report(): void {
    for (const p of this.options.tracker?.progress() ?? []) {
      // As the Go mesh: nothing to say while no proxy is connected.
      if (p.total === 0) continue;
      const k = keyString(p.resource);
      const said = `${p.resource.generation}:${p.acked}/${p.total}`;
      if (this.written.get(k) === said) continue;
      this.written.set(k, said);
      const { kind, namespace, name, generation } = p.resource;
      this.options.sink.enqueue({ kind, namespace, name }, { distribution: { generation, acked: p.acked, total: p.total } });
    }
  }

  /** An analysis result: each resource's messages, and an empty list where messages went away. */
  analysis(messages: readonly AnalysisMessage[]): void {
    this.lastAnalysis = messages;
    const byResource = new Map<string, { key: ResourceKey; messages: AnalysisMessage[] }>();
    for (const m of messages) {
      const k = keyString(m.resource);
      const entry = byResource.get(k) ?? { key: m.resource, messages: [] as AnalysisMessage[] };
      entry.messages.push(m);
      byResource.set(k, entry);
    }
    for (const [k, { key, messages: list }] of byResource) {
      const text = JSON.stringify(list);
      if (this.messages.get(k) === text) continue;
      this.messages.set(k, text);
      this.options.sink.enqueue(key, { messages: list });
    }
    const stale = new Set([...this.messages.keys()].filter((k) => !byResource.has(k)));
    for (const k of this.options.keys?.() ?? []) if (!byResource.has(k) && this.options.hasMessages?.(k)) stale.add(k);
    for (const k of stale) {
      this.messages.delete(k);
      const [kind, namespace, name] = k.split('/') as [Kind, string, string];
      this.options.sink.enqueue({ kind, namespace, name }, { messages: [] });
    }
  }

  /**
   * Queues everything again, as if nothing had been queued before: the writer starts writing (this
   * replica became leader), and what it dropped while another replica led must be written now.
   */
  resend(): void {
    this.written.clear();
    this.messages.clear();
    this.report();
    if (this.lastAnalysis) this.analysis(this.lastAnalysis);
  }

  close(): void {
    clearTimeout(this.timer);
  }
}
