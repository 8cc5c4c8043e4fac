// Flow control of pushes (PILOT_ENABLE_FLOW_CONTROL), as the Go mesh does it: a push of a type whose
// last response on the stream has no ACK or NACK yet is held rather than sent, so a slow proxy is not
// buried under responses it has not processed. Held pushes of a type merge into one; the proxy's
// reply for that type releases it. PILOT_FLOW_CONTROL_TIMEOUT bounds the wait: the Go mesh only
// notices the timeout when a later push comes, we also send the held push when it runs out, so a
// proxy that never replies still gets the latest config.
import { counter } from '../common/metrics.js';
import { scope } from '../common/log.js';
import { shortTypeName } from '../envoy/types.js';
import type { Watch } from './connection.js';
import type { PushRequest } from './generator.js';

const log = scope('ads');

export interface FlowControlOptions {
  /** PILOT_ENABLE_FLOW_CONTROL. */
  readonly enabled: boolean;
  /** PILOT_FLOW_CONTROL_TIMEOUT, ms: the longest a push waits for the previous response's reply. */
  readonly timeoutMs: number;
}

/** Two pushes as one: every type either names (undefined = all), the earliest trigger, both reasons. */
export function mergePushes(a: PushRequest, b: PushRequest): PushRequest {
  const types = a.types === undefined || b.types === undefined ? undefined : new Set([...a.types, ...b.types]);
  const triggers = [a.triggeredAt, b.triggeredAt].filter((t): t is number => t !== undefined);
  const reason = a.reason === b.reason ? a.reason : `${a.reason},${b.reason}`;
  return { reason, ...(types ? { types } : {}), ...(triggers.length > 0 ? { triggeredAt: Math.min(...triggers) } : {}) };
}

interface Held {
  push: PushRequest;
  readonly timer: NodeJS.Timeout;
}

/** The pushes one stream holds, per type URL. */
export class PushHold {
  private readonly held = new Map<string, Held>();

  constructor(
    private readonly connectionId: string,
    private readonly timeoutMs: number,
    /** Sends a held push whose wait ran out (on the stream's queue). */
    private readonly onTimeout: (typeUrl: string, push: PushRequest) => void,
  ) {}

  /**
   * Whether the push must wait for the watch's last response to be answered; if so it is kept
   * (merged with one already waiting). A reply already overdue lets the push through, counted as a
   * timeout as the Go mesh counts it.
   */
  hold(w: Watch, push: PushRequest, now = Date.now()): boolean {
    const waiting = this.held.get(w.typeUrl);
    const type = shortTypeName(w.typeUrl);
    if (waiting) {
      waiting.push = mergePushes(waiting.push, push);
      counter('pilot_xds_delayed_pushes_total').inc({ type });
      return true;
    }
    if (w.syncState() !== 'STALE') return false;
    const left = w.sent!.time.getTime() + this.timeoutMs - now;
    if (left <= 0) {
      counter('pilot_xds_delayed_push_timeouts_total').inc({ type });
      log.warn(`${this.connectionId}: ${type} response ${w.sent!.nonce} has no reply after ${this.timeoutMs}ms; pushing anyway`);
      return false;
    }
    counter('pilot_xds_delayed_pushes_total').inc({ type });
    log.debug(`${this.connectionId}: ${type} push held until response ${w.sent!.nonce} is answered`);
    const timer = setTimeout(() => {
      const expired = this.take(w.typeUrl);
      if (!expired) return;
      counter('pilot_xds_delayed_push_timeouts_total').inc({ type });
      log.warn(`${this.connectionId}: ${type} response ${w.sent?.nonce} has no reply after ${this.timeoutMs}ms; sending the held push`);
      this.onTimeout(w.typeUrl, expired);
    }, left);
    timer.unref();
    this.held.set(w.typeUrl, { push, timer });
    return true;
  }

  /** The push held for a type, now that the proxy answered its last response (ACK or NACK). */
  release(typeUrl: string): PushRequest | undefined {
    return this.take(typeUrl);
  }

  /** The stream ended: nothing more is sent. */
  clear(): void {
    for (const h of this.held.values()) clearTimeout(h.timer);
    this.held.clear();
  }

  private take(typeUrl: string): PushRequest | undefined {
    const h = this.held.get(typeUrl);
    if (!h) return undefined;
    clearTimeout(h.timer);
    this.held.delete(typeUrl);
    return h.push;
  }
}
