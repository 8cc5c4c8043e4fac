// Leader election among discovery server replicas, as the Go mesh elects the one replica that
// writes to the orchestrator: a lock object (./leader-lock.ts) in the system namespace names its
// holder; a replica takes it when it is absent, released, or unchanged for a lease duration by the
// replica's own clock (so clocks need not agree), renews it every retry period while leading, and
// stops leading (its run functions' signal aborts) when it cannot renew within the renew deadline:
// before any other replica may take the lock, so two leaders never write at once.
import { hostname } from 'node:os';
import { scope } from '../../common/log.js';
import { messageOf, statusOf, type OrchestratorClient } from '../../config/informer.js';
import { realClock, type Clock } from '../../config/pacing.js';
import { lockOf, type LeaderRecord, type Lock, type LockKind } from './leader-lock.js';

// The Go mesh logs its elections on the default scope.
const log = scope('default');

export interface ElectionTimings {
  /** How long an unrenewed lock stays its holder's. */
  readonly leaseDurationMs: number;
  /** How long a leader tries to renew before it stops leading. */
  readonly renewDeadlineMs: number;
  /** Between two attempts to acquire or renew. */
  readonly retryPeriodMs: number;
}

/** The Go mesh's: a 30 s lease, renewed within half of it, tried every quarter of it. */
export const DEFAULT_TIMINGS: ElectionTimings = { leaseDurationMs: 30_000, renewDeadlineMs: 15_000, retryPeriodMs: 7_500 };

/** Acquire attempts wait the retry period plus up to this much more of it, so replicas do not try in step. */
const JITTER_FACTOR = 1.2;

/** One election: its lock's name and kind, and whether each revision elects its own leader. */
export interface Election {
  readonly id: string;
  readonly lock: LockKind;
  /** The lock is `<id>-<revision>`: replicas of one revision elect among themselves. */
  readonly perRevision: boolean;
}

export interface LeaderElectionOptions {
  readonly client: Pick<OrchestratorClient, 'request'>;
  /** The system namespace, where the lock lives. */
  readonly namespace: string;
  readonly election: Election;
  /** This replica (POD_NAME); empty: `unknown-<hostname>`, as the Go mesh. */
  readonly identity: string;
  /** REVISION; empty: `default`. */
  readonly revision: string;
  readonly timings?: ElectionTimings;
  readonly clock?: Clock;
  readonly random?: () => number;
}

export class LeaderElection {
  private readonly lock: Lock;
  private readonly identity: string;
  private readonly key: string;
  private readonly timings: ElectionTimings;
  private readonly clock: Clock;
  private readonly runs: Array<(leading: AbortSignal) => void> = [];
  private readonly stop = new AbortController();
  private loop: Promise<void> | undefined;
  private observed: LeaderRecord | undefined;
  private observedRaw = '';
  private observedAt = 0;
  private leading: AbortController | undefined;
  private lastError = '';

  constructor(private readonly options: LeaderElectionOptions) {
    this.key = options.revision || 'default';
    const name = options.election.perRevision ? `${options.election.id}-${this.key}` : options.election.id;
    this.identity = options.identity || `unknown-${hostname()}`;
    this.timings = options.timings ?? DEFAULT_TIMINGS;
    this.clock = options.clock ?? realClock;
    this.lock = lockOf(options.election.lock, options.client, options.namespace, name);
  }

  /** `fn` runs each time this replica becomes leader; its signal aborts when it stops leading. */
  addRunFunction(fn: (leading: AbortSignal) => void): this {
    this.runs.push(fn);
    return this;
  }

  /** Starts campaigning in the background. */
  start(): void {
    this.loop ??= this.campaign();
  }

  isLeader(): boolean {
    return this.leading !== undefined;
  }

  /** Stops campaigning; a leader stops leading and releases the lock so another replica takes it at once. */
  async close(): Promise<void> {
    this.stop.abort();
    await this.loop;
  }

  private async campaign(): Promise<void> {
    log.info(`campaigning for ${this.lock.description} as ${this.identity} (revision ${this.key})`);
    while (!this.stop.signal.aborted) {
      if (!(await this.acquire())) break;
      this.leading = new AbortController();
      log.info(`leader election lock obtained: ${this.lock.description} (${this.identity})`);
      for (const run of this.runs) run(this.leading.signal);
      await this.renew();
      this.leading.abort();
      this.leading = undefined;
      log.info(`leader election lock lost: ${this.lock.description} (${this.identity})${this.stop.signal.aborted ? ', stopping' : '; trying again'}`);
      if (this.stop.signal.aborted) await this.release();
    }
  }

  /** Tries until the lock is ours; false when stopped first. */
  private async acquire(): Promise<boolean> {
    for (;;) {
      if (await this.attempt(this.timings.renewDeadlineMs)) return true;
      const wait = this.timings.retryPeriodMs * (1 + JITTER_FACTOR * (this.options.random ?? Math.random)());
      if (!(await this.pause(wait))) return false;
    }
  }

  /** Renews every retry period until an attempt fails to renew within the renew deadline, or close(). */
  private async renew(): Promise<void> {
    while (await this.pause(this.timings.retryPeriodMs)) {
      const deadline = this.clock.now() + this.timings.renewDeadlineMs;
      let renewed = false;
      while (!renewed && !this.stop.signal.aborted && this.clock.now() < deadline) {
        renewed = await this.attempt(deadline - this.clock.now());
        // Another replica holds it now (ours expired by its clock): stop writing at once.
        const holder = this.observed?.holderIdentity ?? '';
        if (!renewed && holder !== '' && holder !== this.identity) {
          log.warn(`${this.lock.description}: now held by ${holder}; no longer leader`);
          return;
        }
        if (!renewed && !(await this.pause(Math.min(this.timings.retryPeriodMs, Math.max(0, deadline - this.clock.now()))))) return;
      }
      if (!renewed) {
        if (!this.stop.signal.aborted) log.warn(`${this.lock.description}: not renewed within ${this.timings.renewDeadlineMs} ms; no longer leader`);
        return;
      }
    }
  }

  /** Waits; false when stopped first. */
  private async pause(ms: number): Promise<boolean> {
    try {
      await this.clock.sleep(ms, this.stop.signal);
      return true;
    } catch {
      return false;
    }
  }

  /** One attempt, bounded by `withinMs` (a hung API server must not keep a leader leading) and by close(). */
  private async attempt(withinMs: number): Promise<boolean> {
    const bound = new AbortController();
    const timeout = this.clock.sleep(withinMs, AbortSignal.any([bound.signal, this.stop.signal])).then(
      () => false,
      () => false,
    );
    try {
      return await Promise.race([this.tryAcquireOrRenew(), timeout]);
    } catch (e) {
      this.report(e);
      return false;
    } finally {
      bound.abort();
    }
  }

  private async tryAcquireOrRenew(): Promise<boolean> {
    const now = new Date().toISOString();
    const wanted = { holderIdentity: this.identity, holderKey: this.key, leaseDurationSeconds: Math.max(1, Math.round(this.timings.leaseDurationMs / 1000)), acquireTime: now, renewTime: now };
    const held = await this.lock.get();
    if (!held) {
      await this.lock.create({ ...wanted, leaderTransitions: 0 });
      this.observe({ ...wanted, leaderTransitions: 0 }, '');
      return true;
    }
    if (held.raw !== this.observedRaw) this.observe(held.record, held.raw);
    const mine = held.record.holderIdentity === this.identity;
    if (held.record.holderIdentity !== '' && !mine && this.clock.now() < this.observedAt + this.timings.leaseDurationMs) return false;
    const record = mine ? { ...wanted, acquireTime: held.record.acquireTime || now, leaderTransitions: held.record.leaderTransitions } : { ...wanted, leaderTransitions: held.record.leaderTransitions + 1 };
    await this.lock.update(record);
    this.observe(record, '');
    this.lastError = '';
    return true;
  }

  private observe(record: LeaderRecord, raw: string): void {
    this.observed = record;
    this.observedRaw = raw;
    this.observedAt = this.clock.now();
  }

  /** Errors are logged when they change, not at every retry. */
  private report(e: unknown): void {
    const text = statusOf(e) === 409 ? `${this.lock.description}: written by another replica meanwhile (409), trying again` : `${this.lock.description}: ${messageOf(e)}`;
    if (text === this.lastError) return;
    this.lastError = text;
    log.warn(text);
  }

  /** On close: the lock, if ours, is marked released (no holder, 1 s) so the next replica need not wait for it to expire. */
  private async release(): Promise<void> {
    const held = this.observed;
    if (!held || held.holderIdentity !== this.identity) return;
    const now = new Date().toISOString();
    try {
      await this.lock.update({ holderIdentity: '', holderKey: '', leaseDurationSeconds: 1, acquireTime: now, renewTime: now, leaderTransitions: held.leaderTransitions });
    } catch (e) {
      log.warn(`${this.lock.description}: not released (${messageOf(e)}); another replica takes it when it expires`);
    }
  }
}
