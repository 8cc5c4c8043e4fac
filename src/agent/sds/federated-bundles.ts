// SPIFFE_BUNDLE_ENDPOINTS on the agent: each foreign trust domain's bundle fetched over HTTPS,
// refreshed at its `spiffe_refresh_hint` (else every 5 minutes); a failed fetch keeps the last
// good roots (logged). The roots join the ROOTCA secret the SDS server serves, so that the
// workload's proxy accepts peers whose certificates chain to a federated root.
import { EventEmitter } from 'node:events';
import { request } from 'node:https';
import { rootCertificates } from 'node:tls';
import { scope } from '../../common/log.js';
import { parseSpiffeBundle, type BundleEndpoint } from '../../security/federation/bundle-format.js';

const log = scope('sds');

const DEFAULT_REFRESH_MS = 5 * 60_000;
const MAX_BODY = 1 << 20;

export interface FederatedBundlesOptions {
  readonly endpoints: readonly BundleEndpoint[];
  /** Extra roots trusted for the endpoints' HTTPS certificates, beside the system's. */
  readonly caPem?: string;
  /** Refresh period when a bundle has no hint, and retry period after a failure (ms). */
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

export class FederatedBundles extends EventEmitter<{ update: [] }> {
  private readonly roots = new Map<string, readonly string[]>();
  private readonly timers = new Set<NodeJS.Timeout>();
  private readonly ca: readonly string[];
  private closed = false;

  constructor(private readonly opts: FederatedBundlesOptions) {
    super();
    this.ca = [...rootCertificates, ...(opts.caPem ? [opts.caPem] : [])];
  }

  /** First fetch of every endpoint; failures are logged and retried, they do not stop the agent. */
  async start(): Promise<void> {
    await Promise.all(this.opts.endpoints.map((e) => this.refresh(e)));
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

  private async refresh(e: BundleEndpoint): Promise<void> {
    const fallback = this.opts.defaultRefreshMs ?? DEFAULT_REFRESH_MS;
    let next = fallback;
    try {
      const bundle = parseSpiffeBundle(await fetchText(e.url, this.ca), `SPIFFE bundle of ${e.trustDomain} at ${e.url.href}`);
      if (bundle.refreshHintS !== undefined) next = bundle.refreshHintS * 1000;
      const before = this.roots.get(e.trustDomain)?.join('');
      this.roots.set(e.trustDomain, bundle.rootsPem);
      if (before !== bundle.rootsPem.join('')) {
        log.info(`SPIFFE bundle of ${e.trustDomain}: ${bundle.rootsPem.length} root(s) from ${e.url.href}`);
        this.emit('update');
      }
    } catch (err) {
      const kept = this.roots.get(e.trustDomain)?.length ?? 0;
      log.warn(`SPIFFE bundle of ${e.trustDomain} from ${e.url.href} failed, keeping the last good ${kept} root(s): ${(err as Error).message}`);
    }
    if (this.closed) return;
    const t = setTimeout(() => {
      this.timers.delete(t);
      void this.refresh(e);
    }, next);
    t.unref();
    this.timers.add(t);
  }
}
