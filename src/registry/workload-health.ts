// WorkloadEntry health (PILOT_ENABLE_WORKLOAD_ENTRY_HEALTHCHECKS), as the Go mesh keeps it: an
// entry annotated `proxy.mesh.io/health-checks-enabled: "true"` is an endpoint only while its
// `Healthy` condition is True. A new entry has no condition, so it stays out of the endpoints
// until its agent's first probe passes: traffic never reaches a workload not yet proven ready.
//
// The conditions are the discovery server's own state (the agents' reports), kept here rather
// than in the stores: the file store is the user's read-only config, and an orchestrator's status
// write would come back as the same fact a watch later. With an orchestrator, a condition read
// from an entry's status (written by a discovery server before a restart, or by another replica)
// stands until a report or a clear here replaces it, as the Go mesh reads it back.
//
// Registries read WorkloadEntries through `view()`, which leaves unhealthy ones out and announces
// a health change as the entry leaving or joining the view, so the registries recompute and push
// as for any other entry change.
import type { WorkloadEntry } from '../api/types.js';
import { scope } from '../common/log.js';
import type { ConfigEvent, ConfigEventHandler, ConfigStore } from '../config/store.js';

const log = scope('wle');

/** On a WorkloadEntry: its health is reported by its proxy, and only a healthy entry is an endpoint. */
export const HEALTH_CHECKS_ANNOTATION = 'proxy.mesh.io/health-checks-enabled';

/** The `Healthy` condition of a WorkloadEntry, as its agent last reported it. */
export interface HealthCondition {
  readonly type: 'Healthy';
  readonly status: 'True' | 'False';
  /** Why the probe failed; absent when healthy. */
  readonly message?: string;
  readonly lastProbeTime: string;
  readonly lastTransitionTime: string;
}

export type EntryStoreView = Pick<ConfigStore, 'list' | 'get' | 'onEvent' | 'hasSynced'>;

// Go's strconv.ParseBool spellings of true; any other value (or none) leaves health checks off.
const TRUE_WORDS = new Set(['1', 't', 'T', 'TRUE', 'true', 'True']);

const entryKey = (we: Pick<WorkloadEntry, 'metadata'>): string => `${we.metadata.namespace}/${we.metadata.name}`;

/** The entry's health decides whether it is an endpoint. */
export function isHealthChecked(we: WorkloadEntry): boolean {
  return TRUE_WORDS.has(we.metadata.annotations?.[HEALTH_CHECKS_ANNOTATION] ?? '');
}

/** Its proxy may report its health: the annotation is present, whatever its value (as in the Go mesh). */
export function takesHealthReports(we: WorkloadEntry): boolean {
  return we.metadata.annotations?.[HEALTH_CHECKS_ANNOTATION] !== undefined;
}

export class WorkloadHealth {
  /** By entry key; null: forgotten here, whatever the orchestrator's status still says. */
  private readonly conditions = new Map<string, HealthCondition | null>();
  private readonly listeners = new Set<(we: WorkloadEntry, healthy: boolean) => void>();
  private readonly conditionListeners = new Set<(we: WorkloadEntry, condition: HealthCondition | undefined) => void>();

  private readonly now: () => Date;
  private readonly persisted: (we: Pick<WorkloadEntry, 'metadata'>) => HealthCondition | undefined;

  /** `enabled` false: every entry is an endpoint, and reports are not taken. */
  constructor(
    readonly enabled: boolean,
    options: { now?: () => Date; persisted?: (we: Pick<WorkloadEntry, 'metadata'>) => HealthCondition | undefined } = {},
  ) {
    this.now = options.now ?? (() => new Date());
    this.persisted = options.persisted ?? (() => undefined);
  }

  condition(we: Pick<WorkloadEntry, 'metadata'>): HealthCondition | undefined {
    const own = this.conditions.get(entryKey(we));
    return own === undefined ? this.persisted(we) : (own ?? undefined);
  }

  /** An endpoint: health checks off, the entry not health-checked, or its last report healthy. */
  isEndpoint(we: WorkloadEntry): boolean {
    return !this.enabled || !isHealthChecked(we) || this.condition(we)?.status === 'True';
  }

  /** Records a report for an entry that takes them; the views announce a change of endpoint. */
  report(we: WorkloadEntry, healthy: boolean, message?: string): void {
    if (!this.enabled || !takesHealthReports(we)) return;
    const before = this.condition(we);
    const status = healthy ? 'True' : 'False';
    const at = this.now().toISOString();
    const transitioned = before?.status !== status;
    const condition: HealthCondition = {
      type: 'Healthy',
      status,
      ...(healthy || !message ? {} : { message }),
      lastProbeTime: at,
      lastTransitionTime: transitioned || !before ? at : before.lastTransitionTime,
    };
    this.changeTo(we, condition);
    if (transitioned) log.info(`WorkloadEntry ${entryKey(we)}: ${healthy ? 'healthy' : `unhealthy (${message ?? 'no reason given'})`}${isHealthChecked(we) ? (healthy ? '; an endpoint again' : '; not an endpoint') : ''}`);
  }

  /** Forgets an entry's health: its proxy is gone, so its last report can no longer be trusted. */
  clear(we: WorkloadEntry): void {
    if (!this.condition(we)) return;
    this.changeTo(we, undefined);
    log.info(`WorkloadEntry ${entryKey(we)}: health unknown (its proxy disconnected)${isHealthChecked(we) ? '; not an endpoint' : ''}`);
  }

  /** Entries as a user reads them: the Healthy condition in `status`, and whether each is an endpoint. */
  describe(entries: readonly WorkloadEntry[]): Array<WorkloadEntry & { status: { conditions: HealthCondition[] }; endpoint: boolean }> {
    return entries.map((we) => {
      const c = this.condition(we);
      return { ...we, status: { conditions: c ? [c] : [] }, endpoint: this.isEndpoint(we) };
    });
  }

  /** Called with every change of an entry's condition (undefined: forgotten); returns the unsubscriber. */
  onCondition(listener: (we: WorkloadEntry, condition: HealthCondition | undefined) => void): () => void {
    this.conditionListeners.add(listener);
    return () => this.conditionListeners.delete(listener);
  }

  /** A store whose WorkloadEntries are the endpoints among `source`'s; other kinds pass through. */
  view(source: EntryStoreView): EntryStoreView {
    return {
      list: (kind, namespace) => {
        const all = source.list(kind, namespace);
        return kind === 'WorkloadEntry' ? all.filter((we) => this.isEndpoint(we as WorkloadEntry)) : all;
      },
      get: (key) => {
        const r = source.get(key);
        return r && key.kind === 'WorkloadEntry' && !this.isEndpoint(r as WorkloadEntry) ? undefined : r;
      },
      onEvent: (handler) => this.subscribe(source, handler),
      hasSynced: () => source.hasSynced(),
    };
  }

  private subscribe(source: EntryStoreView, handler: ConfigEventHandler): () => void {
    const offSource = source.onEvent(handler);
    const onHealth = (we: WorkloadEntry, endpoint: boolean): void => {
      const current = source.get({ kind: 'WorkloadEntry', namespace: we.metadata.namespace, name: we.metadata.name });
      if (!current) return;
      const event: ConfigEvent = endpoint ? { type: 'add', new: current } : { type: 'delete', old: current };
      handler(event);
    };
    this.listeners.add(onHealth);
    return () => {
      offSource();
      this.listeners.delete(onHealth);
    };
  }

  private changeTo(we: WorkloadEntry, condition: HealthCondition | undefined): void {
    const was = this.isEndpoint(we);
    // A forgotten entry keeps a tombstone only while the orchestrator's status may still hold one.
    if (condition || this.persisted(we)) this.conditions.set(entryKey(we), condition ?? null);
    else this.conditions.delete(entryKey(we));
    const is = this.isEndpoint(we);
    if (was !== is) for (const l of this.listeners) l(we, is);
    for (const l of this.conditionListeners) l(we, condition);
  }
}

/** A `Healthy` condition as an orchestrator's status holds it; undefined unless well formed. */
export function healthConditionFrom(raw: Readonly<Record<string, unknown>> | undefined): HealthCondition | undefined {
  if (raw?.['type'] !== 'Healthy' || (raw['status'] !== 'True' && raw['status'] !== 'False')) return undefined;
  const text = (k: string) => (typeof raw[k] === 'string' ? (raw[k] as string) : undefined);
  const message = text('message');
  return { type: 'Healthy', status: raw['status'], ...(message ? { message } : {}), lastProbeTime: text('lastProbeTime') ?? '', lastTransitionTime: text('lastTransitionTime') ?? '' };
}
