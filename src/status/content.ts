// What the discovery server writes into a resource's `status`, as the Go mesh's status does: the
// `Reconciled` condition with how many proxies are up to date and the `observedGeneration` it is
// about, the analysis messages in `validationMessages`, and a WorkloadEntry's `Healthy` condition. Pure: the current status in, the
// desired one out; fields we do not own (other conditions, other keys) are kept as they are.
import { isDeepStrictEqual } from 'node:util';
import type { AnalysisMessage } from '../model/analysis/types.js';

export const RECONCILED = 'Reconciled';

export interface Condition {
  type: string;
  status: 'True' | 'False';
  lastProbeTime?: string;
  lastTransitionTime?: string;
  message?: string;
  [field: string]: unknown;
}

/** One `status.validationMessages` entry: the Go mesh's AnalysisMessageBase plus our text and path. */
export interface ValidationMessage {
  type: { code: string; name: string };
  /** ERROR, WARNING, INFO, as the Go mesh's enum is spelled in JSON. */
  level: 'ERROR' | 'WARNING' | 'INFO';
  description: string;
  path: string;
}

export type Status = Record<string, unknown>;

/** What one resource's status should say; a part left undefined is not ours to touch this time. */
export interface DesiredStatus {
  readonly distribution?: { readonly generation: number; readonly acked: number; readonly total: number };
  /** The resource's analysis messages (empty: the key is removed). */
  readonly messages?: readonly AnalysisMessage[];
  /** A WorkloadEntry's `Healthy` condition as its proxy last reported it; null: removed (health unknown). */
  readonly healthy?: Condition | null;
}

export function validationMessages(messages: readonly AnalysisMessage[]): ValidationMessage[] {
  return messages.map((m) => ({ type: { code: m.code, name: m.name }, level: m.level.toUpperCase() as ValidationMessage['level'], description: m.message, path: m.path }));
}

/** The `Reconciled` condition; its transition time moves only when its status flips. */
function reconciled(previous: Condition | undefined, acked: number, total: number, now: string): Condition {
  const status = acked >= total ? 'True' : 'False';
  return {
    type: RECONCILED,
    status,
    lastProbeTime: now,
    lastTransitionTime: previous?.status === status && previous.lastTransitionTime ? previous.lastTransitionTime : now,
    message: `${acked}/${total} proxies up to date.`,
  };
}

/**
 * The status to write over `current`, or undefined when it already says what is desired (the probe
 * time alone never causes a write).
 */
export function desiredStatus(current: Status | undefined, desired: DesiredStatus, now: string): Status | undefined {
  const next: Status = { ...(current ?? {}) };
  let changed = false;
  if (desired.distribution) {
    const { generation, acked, total } = desired.distribution;
    const conditions = Array.isArray(next['conditions']) ? (next['conditions'] as Condition[]) : [];
    const previous = conditions.find((c) => c?.type === RECONCILED);
    const condition = reconciled(previous, acked, total, now);
    if (previous?.status !== condition.status || previous?.message !== condition.message || next['observedGeneration'] !== generation) {
      next['conditions'] = previous ? conditions.map((c) => (c === previous ? condition : c)) : [...conditions, condition];
      next['observedGeneration'] = generation;
      changed = true;
    }
  }
  if (desired.messages) {
    const messages = validationMessages(desired.messages);
    const had = next['validationMessages'];
    if (messages.length === 0 && had !== undefined) {
      delete next['validationMessages'];
      changed = true;
    } else if (messages.length > 0 && !isDeepStrictEqual(had, messages)) {
      next['validationMessages'] = messages;
      changed = true;
    }
  }
  if (desired.healthy !== undefined && replaceCondition(next, 'Healthy', desired.healthy)) changed = true;
  return changed ? next : undefined;
}

/** Puts `condition` (null: none) as the status's condition of `type`; true when that changed it. */
function replaceCondition(status: Status, type: string, condition: Condition | null): boolean {
  const conditions = Array.isArray(status['conditions']) ? (status['conditions'] as Condition[]) : [];
  const previous = conditions.find((c) => c?.type === type);
  if (condition === null ? previous === undefined : isDeepStrictEqual(previous, condition)) return false;
  const others = conditions.filter((c) => c !== previous);
  status['conditions'] = condition ? [...others, condition] : others;
  return true;
}
