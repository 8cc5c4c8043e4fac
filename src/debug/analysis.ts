// PILOT_ENABLE_ANALYSIS: the discovery server analyses the config it holds after changes settle
// (a quiesce timer, bounded by a maximum delay, as the Go mesh's analysis strategy does), serves the
// result at /debug/analyze, logs the messages once per change of the result (never on every
// push), and records the validator_runtime_* / validator_source_* metrics. Each result also goes
// to the listeners (the status reporter writes the messages into the resources' status).
import { KINDS, GROUP_OF_KIND, type AnyResource, type Kind, type ResourceOf } from '../api/types.js';
import { scope } from '../common/log.js';
import { counter, gauge, histogram } from '../common/metrics.js';
import { analyze } from '../model/analysis/index.js';
import type { AnalysisInput, AnalysisMessage } from '../model/analysis/types.js';
import type { WorkloadRef } from '../model/selection.js';
import { sendJson, type Mux } from './http.js';

const log = scope('analysis');

export interface AnalysisSources {
  list<K extends Kind>(kind: K): ResourceOf<K>[];
  workloads(): WorkloadRef[];
  gateways(): WorkloadRef[];
  readonly rootNamespace: string;
  readonly domain: string;
}

export interface AnalysisTiming {
  /** Analyse once changes stop for this long... */
  readonly quiesceMs: number;
  /** ...or at the latest this long after the first unanalysed change. */
  readonly maxDelayMs: number;
}

export interface AnalysisResult {
  readonly enabled: boolean;
  readonly analyzedAt?: string;
  readonly messages: readonly AnalysisMessage[];
  readonly reason?: string;
}

const isStringMap = (v: unknown) => v === undefined || (typeof v === 'object' && v !== null && !Array.isArray(v) && Object.values(v).every((x) => typeof x === 'string'));

/** Whether the analyzers can read a resource: names, and selectors as label maps. */
function convertible(r: AnyResource): boolean {
  const spec = r.spec as { selector?: unknown; workloadSelector?: { labels?: unknown } };
  const selector = r.kind === 'Gateway' ? spec.selector : (spec.selector as { matchLabels?: unknown } | undefined)?.matchLabels;
  return typeof r.metadata?.name === 'string' && typeof r.metadata.namespace === 'string' && isStringMap(selector) && isStringMap(spec.workloadSelector?.labels);
}

export class ConfigAnalysis {
  private result: AnalysisResult = { enabled: true, messages: [] };
  private lastLogged = '';
  private pendingEvents = 0;
  private lastEventAt: number | undefined;
  private snapshotAt: number | undefined;
  private quiesce: NodeJS.Timeout | undefined;
  private deadline: NodeJS.Timeout | undefined;
  private readonly listeners: Array<(messages: readonly AnalysisMessage[]) => void> = [];

  constructor(
    private readonly sources: AnalysisSources,
    private readonly timing: AnalysisTiming = { quiesceMs: 100, maxDelayMs: 1000 },
  ) {}

  /** Called with every result published from now on. */
  onResult(listener: (messages: readonly AnalysisMessage[]) => void): void {
    this.listeners.push(listener);
  }

  /** A change of config or workloads: analyse once things settle. */
  onChange(): void {
    const now = Date.now();
    counter('validator_runtime_strategy_on_change_total').inc();
    counter('validator_runtime_processor_events_processed_total').inc();
    if (this.lastEventAt !== undefined) histogram('validator_runtime_processor_event_span_duration_milliseconds').observe(now - this.lastEventAt);
    this.lastEventAt = now;
    this.pendingEvents++;
    if (this.quiesce) {
      counter('validator_runtime_strategy_timer_resets_total').inc();
      clearTimeout(this.quiesce);
    }
    this.quiesce = setTimeout(() => {
      counter('validator_runtime_strategy_timer_quiesce_reached_total').inc();
      this.publish();
    }, this.timing.quiesceMs);
    this.deadline ??= setTimeout(() => {
      counter('validator_runtime_strategy_timer_max_time_reached_total').inc();
      this.publish();
    }, this.timing.maxDelayMs);
  }

  /** The snapshot the analyzers read; resources they cannot read are left out and counted. */
  private snapshot(): AnalysisInput {
    const byKind = new Map<Kind, AnyResource[]>();
    for (const kind of KINDS) {
      const ok: AnyResource[] = [];
      for (const r of this.sources.list(kind) as AnyResource[]) {
        if (convertible(r)) {
          ok.push(r);
          counter('validator_source_orch_dynamic_converter_success_total').inc();
        } else {
          counter('validator_source_orch_dynamic_converter_failure_total').inc();
          log.warn(`${kind} ${r.metadata?.namespace}/${r.metadata?.name} left out of the analysis: its name or selector is not readable`);
        }
      }
      byKind.set(kind, ok);
      gauge('validator_runtime_state_type_instances_total').set({ collection: `${GROUP_OF_KIND[kind]}/${kind}` }, ok.length);
    }
    return {
      list: <K extends Kind>(kind: K) => (byKind.get(kind) ?? []) as ResourceOf<K>[],
      workloads: this.sources.workloads(),
      gateways: this.sources.gateways(),
      rootNamespace: this.sources.rootNamespace,
      domain: this.sources.domain,
    };
  }

  /** Analyses now; a failing analysis keeps the last result. */
  publish(): void {
    clearTimeout(this.quiesce);
    clearTimeout(this.deadline);
    this.quiesce = this.deadline = undefined;
    const events = this.pendingEvents;
    this.pendingEvents = 0;
    let messages: AnalysisMessage[];
    try {
      messages = analyze(this.snapshot());
    } catch (e) {
      counter('validator_source_orch_event_error_total').inc(events);
      log.error(`config analysis failed, keeping the last result: ${(e as Error).message}`);
      return;
    }
    counter('validator_source_orch_event_success_total').inc(events);
    const now = Date.now();
    counter('validator_runtime_processor_snapshots_published_total').inc();
    histogram('validator_runtime_processor_snapshot_events_total').observe(events);
    if (this.snapshotAt !== undefined) histogram('validator_runtime_processor_snapshot_lifetime_duration_milliseconds').observe(now - this.snapshotAt);
    this.snapshotAt = now;
    this.result = { enabled: true, analyzedAt: new Date(now).toISOString(), messages };
    this.logOnChange(messages);
    for (const listener of this.listeners) listener(messages);
  }

  private logOnChange(messages: AnalysisMessage[]): void {
    const text = JSON.stringify(messages);
    if (text === this.lastLogged) return;
    this.lastLogged = text;
    log.info(`config analysis: ${messages.length} message(s)`);
    for (const m of messages) {
      const line = `${m.code} (${m.name}) ${m.resource.kind} ${m.resource.namespace}/${m.resource.name} ${m.path}: ${m.message}`;
      if (m.level === 'Info') log.info(line);
      else log.warn(`${m.level} ${line}`);
    }
  }

  current(): AnalysisResult {
    return this.result;
  }

  close(): void {
    clearTimeout(this.quiesce);
    clearTimeout(this.deadline);
  }
}

/** `/debug/analyze`: the latest analysis, or why there is none. */
export function installAnalysisDebug(mux: Mux, analysis: ConfigAnalysis | undefined): void {
  mux.handle('/debug/analyze', 'config analysis (PILOT_ENABLE_ANALYSIS): messages with code, resource and field path', (_req, res) =>
    sendJson(res, 200, analysis ? analysis.current() : ({ enabled: false, messages: [], reason: 'config analysis is off; set PILOT_ENABLE_ANALYSIS=true' } satisfies AnalysisResult)),
  );
}
