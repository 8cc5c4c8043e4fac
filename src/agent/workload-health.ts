// The workload health checker (ProxyConfig.readinessProbe, the agent half of the Go mesh's
// PILOT_ENABLE_WORKLOAD_ENTRY_HEALTHCHECKS): probes the application periodically and reports each
// health *transition*, which the agent sends upstream so the discovery server can set the
// WorkloadEntry's Healthy condition and leave an unhealthy workload out of endpoints.
//
// As the Go mesh's agent: the first probe runs right after the initial delay, then one per period;
// successes and failures are counted consecutively; healthy is reported when the successes reach
// successThreshold and the last report was not healthy, unhealthy likewise with failureThreshold
// (so the first report may be either). The proxy's own readiness comes first: while the proxy is
// not ready the workload is unhealthy, whatever the application says. One departure: an unhealthy
// workload whose reason changes (the proxy became ready, the application still fails) is reported
// again, so the WorkloadEntry's condition says why it is unhealthy now, not why it first was.
import { scope } from '../common/log.js';
import { probeApp, type ProbeOutcome } from './app-probes.js';
import type { HealthReport } from '../envoy/types.js';
import type { HealthCheckSpec } from './readiness-probe.js';

const log = scope('healthcheck');

export interface WorkloadHealthOptions {
  spec: HealthCheckSpec;
  /** Where the application listens when the probe names no host (defaultProbeHost). */
  defaultHost: string;
  /** The proxy's readiness: null when ready, else why not (StatusServer.notReadyReason). */
  proxyReady: () => Promise<string | null>;
  /** Called on each transition. */
  report: (r: HealthReport) => void;
}

/** The Go mesh's default host: the workload's first IP (INSTANCE_IPS), else `localhost`. */
export function defaultProbeHost(instanceIps: readonly string[]): string {
  return instanceIps.find((ip) => ip !== '') ?? 'localhost';
}

/** Why an outcome is unhealthy, or null: HTTP 200-399, TCP connected, gRPC SERVING, exec exit 0. */
export function unhealthyReason(o: ProbeOutcome): string | null {
  if (o.failure !== undefined) return `${o.target}: ${o.failure}`;
  if (o.httpStatus !== undefined && (o.httpStatus < 200 || o.httpStatus >= 400)) return `${o.target}: ${o.httpStatus}`;
  if (o.servingStatus !== undefined && o.servingStatus !== 'SERVING') return `${o.target}: ${o.servingStatus}`;
  return null;
}

type Last = 'none' | 'healthy' | 'unhealthy';

/** Probes from start() until stop(); one run per instance. */
export class WorkloadHealthChecker {
  private timer?: NodeJS.Timeout;
  /** Ends the probe in flight on stop(): no socket or process outlives the checker. */
  private readonly abort = new AbortController();
  private successes = 0;
  private failures = 0;
  private last: Last = 'none';
  /** The reason last reported unhealthy. */
  private lastReason?: string;

  constructor(private readonly opts: WorkloadHealthOptions) {}

  start(): void {
    const { action, initialDelayMs } = this.opts.spec;
    log.info(`starting the workload health check (${action.kind}) in ${initialDelayMs / 1000}s`);
    this.timer = setTimeout(() => void this.tick(), initialDelayMs);
  }

  stop(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    this.abort.abort();
  }

  private get stopped(): boolean {
    return this.abort.signal.aborted;
  }

  /** One check, then the next one a period after this one started (as a ticker would). */
  private async tick(): Promise<void> {
    const started = Date.now();
    const why = await this.check();
    if (this.stopped) return;
    this.record(why);
    this.timer = setTimeout(() => void this.tick(), Math.max(0, started + this.opts.spec.periodMs - Date.now()));
  }

  /** null when healthy, else why not. */
  private async check(): Promise<string | null> {
    const proxy = await this.opts.proxyReady().catch((e: Error) => e.message);
    if (proxy !== null) return `the proxy is not ready: ${proxy}`;
    // Stopped while the proxy was asked: start nothing an abort could no longer reach.
    if (this.stopped) return null;
    return unhealthyReason(await probeApp(this.opts.spec.action, this.opts.defaultHost, this.abort.signal));
  }

  private record(why: string | null): void {
    const { successThreshold, failureThreshold } = this.opts.spec;
    if (why === null) {
      this.successes++;
      this.failures = 0;
      log.debug('workload health probe passed');
      if (this.successes >= successThreshold && this.last !== 'healthy') {
        this.successes = 0;
        this.last = 'healthy';
        log.info(`workload is healthy (${successThreshold} consecutive probe${successThreshold > 1 ? 's' : ''} passed)`);
        this.opts.report({ healthy: true });
      }
      return;
    }
    this.failures++;
    this.successes = 0;
    log.debug(`workload health probe failed: ${why}`);
    if (this.failures >= failureThreshold && (this.last !== 'unhealthy' || why !== this.lastReason)) {
      this.failures = 0;
      this.last = 'unhealthy';
      this.lastReason = why;
      log.info(`workload is unhealthy: ${why}`);
      this.opts.report({ healthy: false, message: why });
    }
  }
}
