// Assembles the discovery server from its flags: the HTTP server (--httpAddr: /ready and the debug
// endpoints), the monitoring server (--monitoringAddr: /metrics, /version, and the same debug
// endpoints so `pilot-discovery request` reaches them), and the components as they land.
import type { Server } from 'node:http';
import { listSettings } from '../common/env.js';
import { scope } from '../common/log.js';
import { gauge, programRegistry } from '../common/metrics.js';
import { buildInfo } from '../common/version.js';
import { closeServer, formatAddress, httpServer, listen, Mux, sendJson, sendText } from '../debug/http.js';

const log = scope('default');

export interface DiscoveryOptions {
  httpAddr: string;
  monitoringAddr: string;
}

export class DiscoveryServer {
  private readonly servers: Server[] = [];
  private ready = false;
  readonly debug = new Mux();
  // The debug endpoints are reachable on the monitoring address too, like the Go mesh's, so
  // `pilot-discovery request` reaches them.
  readonly monitoring = new Mux(this.debug);
  /** Bound addresses, for logs and tests that listen on port 0. */
  readonly addresses: Record<string, string> = {};

  constructor(private readonly opts: DiscoveryOptions) {
    const metrics = programRegistry('discovery');
    this.debug
      .handle('/ready', 'readiness: 200 once the server serves', (_req, res) => sendText(res, this.ready ? 200 : 503, this.ready ? 'ready\n' : 'not ready\n'))
      .handle('/debug', 'this list of debug endpoints', (_req, res) => sendJson(res, 200, this.debug.list()))
      .handle('/debug/env', 'settings registry: every variable with its value, default and whether it is effective', (_req, res) => sendJson(res, 200, listSettings('discovery')));
    this.monitoring
      .handle('/metrics', 'Prometheus metrics of the discovery server', async (_req, res) => sendText(res, 200, await metrics.metrics(), metrics.contentType))
      .handle('/version', 'build information', (_req, res) => sendJson(res, 200, buildInfo));
  }

  /** Binds every listener; a taken port rejects with the address named. */
  async start(): Promise<void> {
    await this.bind('http', this.opts.httpAddr, this.debug);
    await this.bind('monitoring', this.opts.monitoringAddr, this.monitoring);
    this.ready = true;
    gauge('startup_duration_seconds').set(process.uptime());
    gauge('mesh_build').set({ component: 'pilot-discovery', version: buildInfo.version }, 1);
    log.info('discovery server ready');
  }

  private async bind(name: string, addr: string, mux: Mux): Promise<void> {
    const server = httpServer(mux);
    const bound = await listen(server, addr);
    this.servers.push(server);
    this.addresses[name] = formatAddress(bound);
    log.info(`${name} server listening on ${formatAddress(bound)}`);
  }

  async stop(): Promise<void> {
    this.ready = false;
    await Promise.all(this.servers.map(closeServer));
    this.servers.length = 0;
  }
}
