// The discovery server's JWKS resolver: fetches each jwksUri, keeps the last usable key set, and
// hands the jwt_authn builder a key set for every provider at once (a synchronous lookup), so a
// push never waits on an issuer. Until a usable key set arrives the provider gets the fail-closed
// key set: tokens of that issuer get 401, never a pass. Retries back off exponentially; periodic
// refresh picks up key rotation; `onChange` asks the server to push when keys arrive or change.
// Nothing waits on an issuer for long: a push may hold the proxies that use a new jwksUri for its
// first fetch, at most FIRST_FETCH_WAIT_MS, and nothing else (readiness, other proxies) waits.
import { rootCertificates } from 'node:tls';
import { Agent, request, type Dispatcher } from 'undici';
import { scope } from '../../common/log.js';
import { counter } from '../../common/metrics.js';
import { DEFAULT_JWKS_TIMEOUT_MS, type JwksFetch, type JwksLookup } from './builder.js';
import { FAIL_CLOSED_JWKS, checkJwks } from '../../envoy/jwks.js';

const log = scope('authn');

/**
 * How long a push may hold the proxies using a new jwksUri for its first fetch (less if the rule's
 * timeout is shorter). Then they get the fail-closed key set, and the real keys by the push that
 * follows the fetch's success.
 */
export const FIRST_FETCH_WAIT_MS = 3_000;

export interface JwksResolverOptions {
  /** Re-fetch of a usable key set (key rotation at the issuer). Default 20 minutes. */
  readonly refreshIntervalMs?: number;
  /** First retry delay after a failed fetch, doubled up to retryMaxMs. Default 1 s. */
  readonly retryInitialMs?: number;
  /** Default 5 minutes. */
  readonly retryMaxMs?: number;
  /** At most one unknown-kid refetch per issuer within this window. Default 1 minute. */
  readonly unknownKidCooldownMs?: number;
  /** Largest JWKS document accepted. Default 1 MiB. */
  readonly maxBytes?: number;
  /** Extra CA certificates (PEM) trusted for https issuers, besides the public roots. */
  readonly ca?: string | readonly string[];
  /** Called with the jwksUri whose usable key set appeared or changed: push the affected proxies. */
  readonly onChange?: (jwksUri: string) => void;
  readonly now?: () => number;
}

interface Entry {
  readonly uri: string;
  readonly issuers: Set<string>;
  timeoutMs: number;
  /** Last usable key set (normalized), kept across failed refreshes. */
  keys?: string;
  kids: readonly string[];
  /** Why the last fetch failed; undefined after a success. */
  failure?: string;
  /** The failure last logged, so a repeating failure is logged once. */
  logged?: string;
  retryMs: number;
  /** The first fetch: a push can wait for it so that it does not ship the fail-closed set. */
  first: Promise<void>;
  /** Whether the first fetch has ended. */
  settled: boolean;
  /** Until when (epoch ms) a push may wait for the first fetch. */
  waitUntil: number;
  inflight?: Promise<void>;
  timer?: NodeJS.Timeout;
  /** No policy references it any more: never scheduled again, its result is dropped. */
  retired?: boolean;
}

class FetchError extends Error {}

export class JwksResolver {
  private readonly entries = new Map<string, Entry>();
  private readonly lastKidRefetch = new Map<string, number>();
  private readonly dispatcher?: Dispatcher;
  private readonly refreshMs: number;
  private readonly retryInitialMs: number;
  private readonly retryMaxMs: number;
  private readonly cooldownMs: number;
  private readonly maxBytes: number;
  private readonly now: () => number;
  private closed = false;

  constructor(private readonly opts: JwksResolverOptions = {}) {
    this.refreshMs = opts.refreshIntervalMs ?? 20 * 60_000;
    this.retryInitialMs = opts.retryInitialMs ?? 1_000;
    this.retryMaxMs = opts.retryMaxMs ?? 5 * 60_000;
    this.cooldownMs = opts.unknownKidCooldownMs ?? 60_000;
    this.maxBytes = opts.maxBytes ?? 1 << 20;
    this.now = opts.now ?? Date.now;
    if (opts.ca !== undefined) {
      const extra = typeof opts.ca === 'string' ? [opts.ca] : [...opts.ca];
      this.dispatcher = new Agent({ connect: { ca: [...rootCertificates, ...extra] } });
    }
  }

  /** The lookup for buildJwtAuthn: the usable key set, or the fail-closed one (and a fetch starts). */
  readonly lookup: JwksLookup = (issuer, jwksUri, timeoutMs) => {
    const entry = this.entry(jwksUri, timeoutMs);
    entry.issuers.add(issuer);
    return entry.keys ?? FAIL_CLOSED_JWKS;
  };

  /**
   * The config changed: fetches every jwksUri in use that is new (without waiting) and forgets
   * the others (see retain).
   */
  track(fetches: readonly JwksFetch[]): void {
    this.retain(new Set(fetches.map((f) => f.jwksUri)));
    for (const f of fetches) this.entry(f.jwksUri, f.timeoutMs).issuers.add(f.issuer);
  }

  /** The jwksUris whose first fetch is under way and may still be waited for (see firstFetches). */
  awaited(): Set<string> {
    const now = this.now();
    return new Set([...this.entries.values()].filter((e) => !e.settled && now < e.waitUntil).map((e) => e.uri));
  }

  /**
   * Resolves once the first fetch of each jwksUri has ended or its wait bound has passed, so that a
   * push to the proxies using a new issuer can carry its keys instead of the fail-closed set and a
   * second push. Never rejects, never waits past FIRST_FETCH_WAIT_MS from the fetch's start.
   */
  async firstFetches(uris: Iterable<string>): Promise<void> {
    const timers: NodeJS.Timeout[] = [];
    const bounded = (e: Entry) =>
      Promise.race([e.first, new Promise<void>((resolve) => timers.push(setTimeout(resolve, Math.max(0, e.waitUntil - this.now()))))]);
    try {
      await Promise.all([...uris].flatMap((uri) => {
        const e = this.entries.get(uri);
        return e && !e.settled ? [bounded(e)] : [];
      }));
    } finally {
      for (const t of timers) clearTimeout(t);
    }
  }

  /** Fetches now unless a fetch is under way; resolves when the key set is known or has failed. */
  resolve(jwksUri: string, timeoutMs = DEFAULT_JWKS_TIMEOUT_MS): Promise<void> {
    return this.fetch(this.entry(jwksUri, timeoutMs));
  }

  /** What the resolver holds for a jwksUri (for /debug and tests). */
  status(jwksUri: string): { keys: string; usable: boolean; kids: readonly string[]; failure?: string } | undefined {
    const e = this.entries.get(jwksUri);
    if (!e) return undefined;
    return { keys: e.keys ?? FAIL_CLOSED_JWKS, usable: e.keys !== undefined, kids: e.kids, ...(e.failure ? { failure: e.failure } : {}) };
  }

  /**
   * A proxy saw a token of `issuer` whose `kid` is not in the key set it was given (and rejected it
   * with 401). Refetches that issuer's key sets, at most once per issuer per cooldown, so a flood
   * of forged kids costs the issuer one request per cooldown. Returns whether a refetch started.
   */
  refreshForUnknownKid(issuer: string, kid?: string): boolean {
    return this.refetchForUnknownKid(issuer, kid).started;
  }

  /** refreshForUnknownKid with the reason, for the JwksService answer and its logs. */
  refetchForUnknownKid(issuer: string, kid?: string): { started: boolean; reason: string } {
    if (this.closed) return { started: false, reason: 'the resolver is closed' };
    const entries = [...this.entries.values()].filter((e) => e.issuers.has(issuer));
    if (entries.length === 0) return { started: false, reason: 'no jwksUri is fetched for this issuer' };
    if (kid !== undefined && entries.some((e) => e.kids.includes(kid))) return { started: false, reason: 'the kid is already in the key set' };
    const last = this.lastKidRefetch.get(issuer);
    const now = this.now();
    if (last !== undefined && now - last < this.cooldownMs) {
      return { started: false, reason: `an unknown-kid refetch of this issuer ran ${now - last}ms ago (cooldown ${this.cooldownMs}ms)` };
    }
    this.lastKidRefetch.set(issuer, now);
    log.info('refetching JWKS for an unknown key id', { issuer, ...(kid !== undefined ? { kid } : {}) });
    for (const e of entries) void this.fetch(e);
    return { started: true, reason: 'refetch started' };
  }

  /**
   * The config changed: `inUse` is every jwksUri a RequestAuthentication still references (see
   * jwksFetchesInUse). The others stop refreshing and retrying and are forgotten, so a deleted policy
   * does not keep the discovery server polling its issuer; a fetch under way finishes unused. A uri
   * referenced again later starts afresh (first fetch, fail closed until it succeeds).
   */
  retain(inUse: ReadonlySet<string>): void {
    for (const [uri, e] of this.entries) {
      if (inUse.has(uri)) continue;
      e.retired = true;
      clearTimeout(e.timer);
      this.entries.delete(uri);
      log.info('no policy references this JWKS any more; stopped fetching it', { jwksUri: uri });
    }
    const issuers = new Set([...this.entries.values()].flatMap((e) => [...e.issuers]));
    for (const issuer of this.lastKidRefetch.keys()) if (!issuers.has(issuer)) this.lastKidRefetch.delete(issuer);
  }

  /** The jwksUris the resolver holds (fetches and refreshes). */
  uris(): string[] {
    return [...this.entries.keys()];
  }

  /** Resolves when no fetch is under way. */
  async idle(): Promise<void> {
    for (;;) {
      const pending = [...this.entries.values()].flatMap((e) => (e.inflight ? [e.inflight] : []));
      if (pending.length === 0) return;
      await Promise.all(pending);
    }
  }

  close(): void {
    this.closed = true;
    for (const e of this.entries.values()) clearTimeout(e.timer);
    void this.dispatcher?.close();
  }

  private entry(uri: string, timeoutMs: number): Entry {
    let e = this.entries.get(uri);
    if (!e) {
      const waitUntil = this.now() + Math.min(timeoutMs, FIRST_FETCH_WAIT_MS);
      e = { uri, issuers: new Set(), timeoutMs, kids: [], retryMs: this.retryInitialMs, first: Promise.resolve(), settled: false, waitUntil };
      this.entries.set(uri, e);
      const entry = e;
      e.first = this.fetch(e).finally(() => (entry.settled = true));
    }
    e.timeoutMs = timeoutMs;
    return e;
  }

  private fetch(e: Entry): Promise<void> {
    if (this.closed || e.retired) return Promise.resolve();
    e.inflight ??= this.attempt(e).finally(() => (e.inflight = undefined));
    return e.inflight;
  }

  private async attempt(e: Entry): Promise<void> {
    clearTimeout(e.timer);
    let text: string;
    try {
      text = await this.get(e.uri, e.timeoutMs);
      counter('pilot_jwks_resolver_network_fetch_success_total').inc();
    } catch (err) {
      counter('pilot_jwks_resolver_network_fetch_fail_total').inc();
      this.failed(e, err instanceof FetchError ? err.message : `fetch failed (${(err as Error).message})`);
      return;
    }
    if (e.retired) return;
    const check = checkJwks(text);
    if (!check.ok) {
      this.failed(e, `invalid JWKS: ${check.reason}`);
      return;
    }
    if (e.failure !== undefined) log.info('JWKS fetched again; using its keys', { jwksUri: e.uri });
    const changed = e.keys !== check.jwks;
    e.keys = check.jwks;
    e.kids = check.kids;
    e.failure = undefined;
    e.logged = undefined;
    e.retryMs = this.retryInitialMs;
    this.schedule(e, this.refreshMs);
    if (changed) this.opts.onChange?.(e.uri);
  }

  private failed(e: Entry, reason: string): void {
    if (e.retired) return;
    e.failure = reason;
    if (e.logged !== reason) {
      e.logged = reason;
      const effect = e.keys ? 'keeping the last usable key set' : 'tokens of this issuer are rejected until it succeeds';
      log.warn(`cannot use JWKS: ${reason}; ${effect}`, { jwksUri: e.uri, issuers: [...e.issuers].join(','), retryIn: `${e.retryMs}ms` });
    }
    this.schedule(e, e.retryMs);
    e.retryMs = Math.min(e.retryMs * 2, this.retryMaxMs);
  }

  private schedule(e: Entry, ms: number): void {
    if (this.closed || e.retired) return;
    clearTimeout(e.timer);
    e.timer = setTimeout(() => void this.fetch(e), ms);
    e.timer.unref();
  }

  private async get(uri: string, timeoutMs: number): Promise<string> {
    let url: URL;
    try {
      url = new URL(uri);
    } catch {
      throw new FetchError(`"${uri}" is not a URL`);
    }
    if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new FetchError(`"${uri}" is not an http or https URL`);
    const signal = AbortSignal.timeout(timeoutMs);
    try {
      const res = await request(url, {
        signal,
        headersTimeout: timeoutMs,
        bodyTimeout: timeoutMs,
        headers: { accept: 'application/json' },
        ...(this.dispatcher ? { dispatcher: this.dispatcher } : {}),
      });
      if (res.statusCode < 200 || res.statusCode > 299) {
        await res.body.dump();
        throw new FetchError(`HTTP status ${res.statusCode}`);
      }
      const chunks: Buffer[] = [];
      let size = 0;
      for await (const chunk of res.body) {
        size += (chunk as Buffer).length;
        if (size > this.maxBytes) {
          res.body.destroy();
          throw new FetchError(`document larger than ${this.maxBytes} bytes`);
        }
        chunks.push(chunk as Buffer);
      }
      return Buffer.concat(chunks).toString('utf8');
    } catch (err) {
      if (err instanceof FetchError) throw err;
      if (signal.aborted) throw new FetchError(`no answer within ${timeoutMs}ms`);
      const cause = (err as { cause?: { code?: string; message?: string } }).cause;
      throw new FetchError(`fetch failed (${cause?.code ?? cause?.message ?? (err as Error).message})`);
    }
  }
}
