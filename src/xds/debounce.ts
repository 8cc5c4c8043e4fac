// Debouncing of config and registry events into pushes: a burst of edits becomes one push.
// A push fires once no event arrived for PILOT_DEBOUNCE_AFTER, or once PILOT_DEBOUNCE_MAX has passed
// since the first event of the burst, whichever comes first. With PILOT_ENABLE_EDS_DEBOUNCE off,
// endpoint-only events push at once (endpoints change often and matter for traffic).
import { settingDefault } from '../common/env.js';
import { counter } from '../common/metrics.js';
import type { PushRequest } from './generator.js';

export interface DebounceOptions {
  afterMs?: number;
  maxMs?: number;
  edsDebounce?: boolean;
}

/** An event to push for; `endpointsOnly` marks registry endpoint changes (EDS-only pushes). */
export interface PushEvent extends PushRequest {
  readonly endpointsOnly?: boolean;
}

/** Merges two requests: the union of types (absent = all), every reason, the earliest trigger. */
export function mergePush(a: PushRequest | undefined, b: PushRequest): PushRequest {
  if (!a) return b;
  const types = a.types && b.types ? new Set([...a.types, ...b.types]) : undefined;
  const reasons = [...new Set([...a.reason.split(','), ...b.reason.split(',')])].join(',');
  const triggeredAt = Math.min(a.triggeredAt ?? Infinity, b.triggeredAt ?? Infinity);
  return { reason: reasons, ...(types ? { types } : {}), ...(Number.isFinite(triggeredAt) ? { triggeredAt } : {}) };
}

export class Debouncer {
  private pending: PushRequest | undefined;
  private firstAt = 0;
  private quiet: NodeJS.Timeout | undefined;
  private readonly afterMs: number;
  private readonly maxMs: number;
  private readonly edsDebounce: boolean;

  constructor(
    private readonly push: (req: PushRequest) => void,
    opts: DebounceOptions = {},
  ) {
    this.afterMs = opts.afterMs ?? settingDefault('PILOT_DEBOUNCE_AFTER');
    this.maxMs = opts.maxMs ?? settingDefault('PILOT_DEBOUNCE_MAX');
    this.edsDebounce = opts.edsDebounce ?? settingDefault('PILOT_ENABLE_EDS_DEBOUNCE');
  }

  enqueue(event: PushEvent): void {
    const { endpointsOnly, ...req } = event;
    counter('pilot_inbound_updates').inc({ type: endpointsOnly ? 'eds' : 'config' });
    const stamped = { ...req, triggeredAt: req.triggeredAt ?? Date.now() };
    if (endpointsOnly && !this.edsDebounce) {
      this.fire(stamped);
      return;
    }
    if (!this.pending) this.firstAt = Date.now();
    this.pending = mergePush(this.pending, stamped);
    clearTimeout(this.quiet);
    const untilMax = this.firstAt + this.maxMs - Date.now();
    if (untilMax <= 0) this.flush();
    else this.quiet = setTimeout(() => this.flush(), Math.min(this.afterMs, untilMax));
  }

  /** Sends what is pending now (also used on shutdown so no edit is lost). */
  flush(): void {
    clearTimeout(this.quiet);
    const req = this.pending;
    this.pending = undefined;
    if (req) this.fire(req);
  }

  close(): void {
    clearTimeout(this.quiet);
    this.pending = undefined;
  }

  private fire(req: PushRequest): void {
    for (const reason of req.reason.split(',')) counter('pilot_push_triggers').inc({ type: reason });
    this.push(req);
  }
}
