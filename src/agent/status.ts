// The agent's status server: readiness on the status port (15021) and the merged proxy + application
// + agent Prometheus metrics on the metrics port (15020). Both ports serve both paths, so a probe or a
// scrape pointed at either works; the split only lets a deployment expose one and not the other.
//
// `/healthz/ready` is 200 only when the proxy has applied listeners and clusters (seen through its
// ACKs on the agent's xDS proxy) and its admin API answers `/ready` with 200. Each probe asks the
// admin API again, so a draining or stuck proxy turns the pod unready.
import type { Server } from 'node:http';
import type { Registry } from 'prom-client';
import type { AppScrape } from './app-metrics.js';
import { runAppProbe, type AppProbe } from './app-probes.js';
import { mergeExpositions } from './exposition.js';
import { scope } from '../common/log.js';
import { counter } from '../common/metrics.js';
import { closeServer, httpServer, listen, Mux, sendText } from '../debug/http.js';

const log = scope('healthcheck');

export interface XdsProgress {
  listeners: boolean;
  clusters: boolean;
}

export interface StatusServerOptions {
  /** Go-style listen address of readiness, e.g. `:15021`. */
  statusAddress: string;
  /** Listen address of merged metrics, e.g. `:15020`; absent = not served separately. */
  metricsAddress?: string;
  /** The proxy's admin API, e.g. `http://127.0.0.1:15000`. */
  adminUrl: string;
  /** What the proxy has applied; absent when the agent does not see its xDS (PROXY_XDS_VIA_AGENT=false). */
  xdsProgress?: () => XdsProgress;
  /** The agent's own metrics (programRegistry('agent')). */
  registry: Registry;
  /** Per request to the admin API; default 1 s. */
  adminTimeoutMs?: number;
  /** The application's metrics to merge (prometheus.io/* annotations); absent = not scraped. */
  appScrape?: AppScrape;
  /** The application's probes by path (MESH_APP_PROBERS), served on both ports. */
  appProbes?: ReadonlyMap<string, AppProbe>;
  /** Host the application listens on, for scrapes and probes that name none; default 127.0.0.1. */
  appHost?: string;
  /** Per scrape of the application; default 5 s. */
  appScrapeTimeoutMs?: number;
  /** ENABLE_ADMIN_ENDPOINTS: whether the endpoints that change state are served. */
  adminEndpoints?: boolean;
  /** What POST /quitquitquit does (the agent's graceful shutdown). */
  quit?: () => void;
}

type ScrapeSource = 'proxy' | 'application' | 'agent';

export class StatusServer {
  private readonly servers: Server[] = [];
  private readonly mux = new Mux();
  private lastReady = false;

  constructor(private readonly opts: StatusServerOptions) {
    this.mux.handle('/healthz/ready', 'readiness of the proxy', async (_req, res) => {
      const why = await this.notReadyReason();
      if (why !== null) {
        if (this.lastReady) log.warn(`proxy no longer ready: ${why}`);
        this.lastReady = false;
        sendText(res, 503, `not ready: ${why}\n`);
        return;
      }
      if (!this.lastReady) log.info('proxy is ready');
      this.lastReady = true;
      sendText(res, 200, 'ready\n');
    });
    this.mux.handle('/stats/prometheus', 'agent and proxy metrics, Prometheus text format', async (_req, res) => {
      sendText(res, 200, await this.mergedMetrics(), opts.registry.contentType);
    });
    this.serveAppProbes();
    this.mux.handle('/quitquitquit', 'POST from localhost: drain and stop the proxy and the agent (needs ENABLE_ADMIN_ENDPOINTS)', (req, res) => {
      // Changes state: refused unless the operator turned admin endpoints on, and only from the pod itself.
      if (!opts.adminEndpoints) return sendText(res, 403, 'refused: ENABLE_ADMIN_ENDPOINTS is off\n');
      if (req.method !== 'POST') return sendText(res, 405, 'use POST\n');
      const from = req.socket.remoteAddress ?? '';
      if (!['127.0.0.1', '::1', '::ffff:127.0.0.1'].includes(from)) return sendText(res, 403, `refused: only from localhost, not ${from}\n`);
      log.info('POST /quitquitquit: shutting down');
      sendText(res, 200, 'OK\n');
      opts.quit?.();
    });
  }

  private serveAppProbes(): void {
    for (const [path, probe] of this.opts.appProbes ?? []) {
      this.mux.handle(path, `the application's probe (${probe.kind} on port ${probe.port})`, async (_req, res) => {
        const r = await runAppProbe(probe, this.opts.appHost ?? '127.0.0.1');
        if (r.status >= 400) log.debug(`${path} failed: ${r.status} ${r.body.trim()}`);
        sendText(res, r.status, r.body);
      });
    }
  }

  /** Binds the ports; resolves to them (status, then metrics when served). */
  async start(): Promise<{ status: number; metrics?: number }> {
    const status = await this.bind(this.opts.statusAddress);
    if (this.opts.metricsAddress === undefined) return { status };
    return { status, metrics: await this.bind(this.opts.metricsAddress) };
  }

  async close(): Promise<void> {
    await Promise.all(this.servers.splice(0).map((s) => closeServer(s)));
  }

  private async bind(addr: string): Promise<number> {
    const server = httpServer(this.mux);
    this.servers.push(server);
    return (await listen(server, addr)).port;
  }

  /** null when ready; otherwise what is missing, for the probe's body and the log. */
  async notReadyReason(): Promise<string | null> {
    const progress = this.opts.xdsProgress?.();
    if (progress && (!progress.listeners || !progress.clusters)) {
      const missing = [progress.listeners ? '' : 'listeners', progress.clusters ? '' : 'clusters'].filter(Boolean).join(' and ');
      return `the proxy has not applied its ${missing} yet`;
    }
    try {
      const res = await this.admin('/ready');
      const body = (await res.text()).trim();
      return res.status === 200 ? null : `proxy admin /ready answered ${res.status}${body ? ` (${body})` : ''}`;
    } catch (e) {
      return `proxy admin API unreachable: ${describe(e)}`;
    }
  }

  /**
   * The proxy's, the application's and the agent's metrics as one valid exposition (families
   * merged, first source wins on a series). A source that fails or times out is counted in
   * scrape_failures_total{type} and left out; the others are still served.
   */
  async mergedMetrics(): Promise<string> {
    counter('scrapes_total').inc();
    const app = this.opts.appScrape;
    const others = await Promise.all([
      this.scrape('proxy', () => this.admin('/stats/prometheus')),
      app ? this.scrape('application', () => fetch(`http://${this.appHost()}:${app.port}${app.path}`, { signal: AbortSignal.timeout(this.opts.appScrapeTimeoutMs ?? 5000) })) : '',
    ]);
    // The agent's last, so its counters include this scrape's failures.
    const sources = [...others, await this.scrape('agent', async () => new Response(await this.opts.registry.metrics()))];
    const { text, conflicts } = mergeExpositions(sources);
    if (conflicts.length) log.warn(`metrics left out of the merged exposition, typed differently by two sources: ${conflicts.join(', ')}`);
    return text;
  }

  private appHost(): string {
    const h = this.opts.appHost ?? '127.0.0.1';
    return h.includes(':') ? `[${h}]` : h;
  }

  private async scrape(type: ScrapeSource, get: () => Promise<Response>): Promise<string> {
    try {
      const res = await get();
      if (res.status !== 200) {
        await res.body?.cancel();
        throw new Error(`HTTP ${res.status}`);
      }
      return await res.text();
    } catch (e) {
      counter('scrape_failures_total').inc({ type });
      log.debug(`${type} metrics not merged: ${describe(e)}`);
      return '';
    }
  }

  private admin(path: string): Promise<Response> {
    return fetch(new URL(path, this.opts.adminUrl), { signal: AbortSignal.timeout(this.opts.adminTimeoutMs ?? 1000) });
  }
}

function describe(e: unknown): string {
  const err = e as Error & { cause?: { code?: string; message?: string } };
  return err.cause?.code ?? err.cause?.message ?? err.message;
}
