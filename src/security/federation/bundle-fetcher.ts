// SPIFFE_BUNDLE_ENDPOINTS, the I/O side (agent and pilot-discovery alike): each foreign trust
// domain's bundle fetched over HTTPS, refreshed at its `spiffe_refresh_hint` (else every 5
// minutes); a failed fetch keeps the last good roots (logged) and is retried at the same period. The agent serves the roots in its
// ROOTCA secret; pilot-discovery trusts them for client certificates on its secured port.
import { EventEmitter } from 'node:events';
import { request } from 'node:https';
import { rootCertificates } from 'node:tls';
import { scope } from '../../common/log.js';
import { parseSpiffeBundle, type BundleEndpoint } from '../../security/federation/bundle-format.js';

// The Go mesh logs bundle retrieval under its `spiffe` scope.
const log = scope('spiffe');

const DEFAULT_REFRESH_MS = 5 * 60_000;
const MAX_BODY = 1 << 20;
/** The first retry of a required load (doubling after each failure), as the Go mesh's retrieval. */
const FIRST_RETRY_MS = 50;

export interface FederatedBundlesOptions {
  readonly endpoints: readonly BundleEndpoint[];
  /** Extra roots trusted for the endpoints' HTTPS certificates, beside the system's; read at each fetch (the mesh root rotates). */
  readonly caPem?: () => string;
  /** Refresh period when a bundle has no hint, and the longest retry period after a failure (ms). */
  readonly defaultRefreshMs?: number;
}

function fetchText(url: URL, ca: readonly string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    const req = request(url, { ca: [...ca], timeout: 10_000 }, (res) => {
      if (res.statusCode !== 200) {
        res.resume();
        reject(new Error(`HTTP ${res.statusCode}`));
        return;
      }
      const parts: Buffer[] = [];
      let size = 0;
      res.on('data', (c: Buffer) => {
        size += c.length;
        if (size > MAX_BODY) req.destroy(new Error(`bundle larger than ${MAX_BODY} bytes`));
        else parts.push(c);
      });
      res.on('end', () => resolve(Buffer.concat(parts).toString('utf8')));
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error('timed out')));
    req.on('error', reject);
    req.end();
  });
}

/** A required load that did not complete (the message names each trust domain, URL and error). */
export class BundleLoadError extends Error {}

export class FederatedBundles extends EventEmitter<{ update: [] }> {
  private readonly roots = new Map<string, readonly string[]>();
  private readonly errors = new Map<string, string>();
  /** The last refresh hint of each trust domain (ms): failures are retried at it too. */
  private readonly hints = new Map<string, number>();
  private readonly timers = new Set<NodeJS.Timeout>();
  private closed = false;

  constructor(private readonly opts: FederatedBundlesOptions) {
    super();
  }

  /** First fetch of every endpoint; failures are logged and retried, they do not stop the agent. */
  async start(): Promise<void> {
    await Promise.all(this.opts.endpoints.map((e) => this.refresh(e)));
  }

  /**
   * Fetches until every trust domain has roots, retrying with a doubling backoff for `withinMs`;
   * then throws naming each trust domain still without roots, its URL and its last error. The Go
   * mesh's discovery server does not start without its bundles.
   */
  async requireAll(withinMs: number): Promise<void> {
    const deadline = Date.now() + withinMs;
    for (let wait = FIRST_RETRY_MS; ; wait *= 2) {
      const missing = this.opts.endpoints.filter((e) => !this.roots.has(e.trustDomain));
      if (missing.length === 0) return;
      if (Date.now() + wait > deadline) {
        throw new BundleLoadError(`SPIFFE_BUNDLE_ENDPOINTS: no bundle after ${withinMs / 1000}s for ${missing.map((e) => `${e.trustDomain} (${e.url.href}): ${this.errors.get(e.trustDomain) ?? 'not fetched'}`).join('; ')}`);
      }
      await new Promise((r) => setTimeout(r, wait));
      await Promise.all(missing.map((e) => this.fetch(e)));
    }
  }

  /** Trust domains with roots. */
  trustDomains(): string[] {
    return [...this.roots.keys()];
  }

  close(): void {
    this.closed = true;
    for (const t of this.timers) clearTimeout(t);
    this.timers.clear();
  }

  /** PEM of every federated root, by trust domain order. */
  get pem(): string {
    return [...this.roots.values()].flat().join('');
  }

  /** The last good roots of one trust domain. */
  rootsOf(trustDomain: string): readonly string[] {
    return this.roots.get(trustDomain) ?? [];
  }

  /** One fetch; when to fetch again: the bundle's hint (kept for retries after a failure), else the default period. */
  private async fetch(e: BundleEndpoint): Promise<number> {
    try {
      const bundle = parseSpiffeBundle(await fetchText(e.url, [...rootCertificates, this.opts.caPem?.() ?? ''].filter(Boolean)), `SPIFFE bundle of ${e.trustDomain} at ${e.url.href}`);
      const before = this.roots.get(e.trustDomain)?.join('');
      this.roots.set(e.trustDomain, bundle.rootsPem);
      this.errors.delete(e.trustDomain);
      if (before !== bundle.rootsPem.join('')) {
        log.info(`SPIFFE bundle of ${e.trustDomain}: ${bundle.rootsPem.length} root(s) from ${e.url.href}`);
        this.emit('update');
      }
      if (bundle.refreshHintS !== undefined) this.hints.set(e.trustDomain, bundle.refreshHintS * 1000);
      else this.hints.delete(e.trustDomain);
      return this.hints.get(e.trustDomain) ?? this.defaultRefreshMs;
    } catch (err) {
      const kept = this.roots.get(e.trustDomain)?.length ?? 0;
      this.errors.set(e.trustDomain, (err as Error).message);
      log.warn(`SPIFFE bundle of ${e.trustDomain} from ${e.url.href} failed, keeping the last good ${kept} root(s): ${(err as Error).message}`);
      return Math.min(this.hints.get(e.trustDomain) ?? Infinity, this.defaultRefreshMs);
    }
  }

  private get defaultRefreshMs(): number {
    return this.opts.defaultRefreshMs ?? DEFAULT_REFRESH_MS;
  }

  private async refresh(e: BundleEndpoint): Promise<void> {
    const next = await this.fetch(e);
    if (this.closed) return;
    const t = setTimeout(() => {
      this.timers.delete(t);
      void this.refresh(e);
    }, next);
    t.unref();
    this.timers.add(t);
  }
}
