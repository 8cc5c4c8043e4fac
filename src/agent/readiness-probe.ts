// ProxyConfig.readinessProbe: checked when the agent reads its ProxyConfig, and turned into what the
// workload health checker runs, with the Go mesh's defaults filled in (a zero means "unset" there,
// as in protobuf: thresholds and the timeout become 1, the period 10 s, an HTTP path `/`).
import type { Issue } from '../api/errors.js';
import { checkReadinessProbe } from '../api/structural.js';
import type { ReadinessProbe } from '../api/types.js';
import type { AppProbe, ExecProbe } from './app-probes.js';

const METHODS = ['httpGet', 'tcpSocket', 'exec', 'grpc'] as const;
const SCHEMES = ['HTTP', 'HTTPS'];

/** What is wrong with a readinessProbe value, paths starting at `base`; empty = a usable probe. */
export function readinessProbeIssues(value: unknown, base: string): Issue[] {
  const issues = checkReadinessProbe(value, base);
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return issues;
  const probe = value as Record<string, unknown>;
  const methods = METHODS.filter((m) => probe[m] !== undefined);
  if (methods.length !== 1) issues.push({ path: base, message: `expected exactly one of ${METHODS.join(', ')} (found ${methods.join(', ') || 'none'})` });
  const scheme = (probe['httpGet'] as Record<string, unknown> | undefined)?.['scheme'];
  // The Go mesh takes any string and fails every probe at run time; an unusable scheme is caught here.
  if (typeof scheme === 'string' && scheme !== '' && !SCHEMES.includes(scheme.toUpperCase())) {
    issues.push({ path: `${base}.httpGet.scheme`, message: `expected HTTP or HTTPS, got ${JSON.stringify(scheme)}` });
  }
  return issues;
}

/** A readinessProbe with its defaults filled in, times in ms (tests use short ones). */
export interface HealthCheckSpec {
  initialDelayMs: number;
  periodMs: number;
  successThreshold: number;
  failureThreshold: number;
  /** What is run each period; its timeoutMs is the probe's. */
  action: AppProbe | ExecProbe;
}

const orDefault = (v: number | undefined, d: number) => (v ? v : d);

/** Go's fillInDefaults; `probe` has passed readinessProbeIssues. */
export function healthCheckSpec(probe: ReadinessProbe): HealthCheckSpec {
  const timeoutMs = orDefault(probe.timeoutSeconds, 1) * 1000;
  return {
    initialDelayMs: (probe.initialDelaySeconds ?? 0) * 1000,
    periodMs: orDefault(probe.periodSeconds, 10) * 1000,
    successThreshold: orDefault(probe.successThreshold, 1),
    failureThreshold: orDefault(probe.failureThreshold, 1),
    action: probeAction(probe, timeoutMs),
  };
}

function probeAction(p: ReadinessProbe, timeoutMs: number): AppProbe | ExecProbe {
  if (p.httpGet) {
    const path = p.httpGet.path || '/';
    return {
      kind: 'httpGet',
      path: path.startsWith('/') ? path : `/${path}`,
      port: p.httpGet.port,
      host: p.httpGet.host || undefined,
      scheme: (p.httpGet.scheme || 'HTTP').toUpperCase() === 'HTTPS' ? 'HTTPS' : 'HTTP',
      headers: (p.httpGet.httpHeaders ?? []).filter((h) => h.name).map(({ name, value }) => ({ name, value: value ?? '' })),
      timeoutMs,
    };
  }
  if (p.tcpSocket) return { kind: 'tcpSocket', port: p.tcpSocket.port, host: p.tcpSocket.host || undefined, timeoutMs };
  if (p.grpc) return { kind: 'grpc', port: p.grpc.port, service: p.grpc.service ?? '', timeoutMs };
  return { kind: 'exec', command: [...p.exec!.command], timeoutMs };
}
