// The application's orchestrator probes, rewritten by the injector to go through the agent: the
// kubelet asks `/app-health/<container>/livez|readyz|startupz` on the status port, and the agent
// runs the original probe (MESH_APP_PROBERS, the format of the Go mesh's ISTIO_KUBE_APP_PROBERS)
// against the application from inside the pod, where capture does not get in the way.
//
// Answers, as the Go mesh's agent: an HTTP probe passes the application's status code on; a TCP or
// gRPC probe is 200 when the connection opens / the service is SERVING, else 500; a probe that
// cannot run (refused, timed out) is 500 with the reason in the body.
//
// The runners (`probeApp`, plus exec, which only ProxyConfig.readinessProbe has) are shared with the
// workload health checker (workload-health.ts), which judges their outcomes its own way.
import { spawn } from 'node:child_process';
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { connect } from 'node:net';
import { credentials, makeGenericClientConstructor, type Client, type ServiceError } from '@grpc/grpc-js';
import { service as healthService } from 'grpc-health-check';

export interface HttpGetProbe {
  kind: 'httpGet';
  path: string;
  port: number;
  host?: string;
  scheme: 'HTTP' | 'HTTPS';
  headers: Array<{ name: string; value: string }>;
}
export interface TcpProbe {
  kind: 'tcpSocket';
  port: number;
  host?: string;
}
export interface GrpcProbe {
  kind: 'grpc';
  port: number;
  /** The service name asked for; empty = the server as a whole. */
  service: string;
}
export type AppProbe = (HttpGetProbe | TcpProbe | GrpcProbe) & { timeoutMs: number };
/** A command run without a shell; passes when it exits 0 within the timeout. */
export interface ExecProbe {
  kind: 'exec';
  command: readonly string[];
  timeoutMs: number;
}

export class AppProbersError extends Error {}

const PATH = /^\/app-health\/[^/]+\/(livez|readyz|startupz)$/;
/** The orchestrator's default probe timeout. */
const DEFAULT_TIMEOUT_S = 1;

type Json = Record<string, unknown>;
const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);

function fail(where: string, what: string): never {
  throw new AppProbersError(`MESH_APP_PROBERS: ${where}: ${what}`);
}

function portOf(v: unknown, where: string): number {
  // The injector resolves named ports; a name left here could never be probed.
  if (typeof v === 'number' && Number.isInteger(v) && v >= 1 && v <= 65535) return v;
  if (typeof v === 'string' && /^\d+$/.test(v) && Number(v) >= 1 && Number(v) <= 65535) return Number(v);
  return fail(where, `port ${JSON.stringify(v)} is not a port number (1-65535)`);
}

function optionalString(o: Json, key: string, where: string): string | undefined {
  const v = o[key];
  if (v === undefined || v === '') return undefined;
  if (typeof v !== 'string') fail(where, `${key} must be a string`);
  return v;
}

function parseProbe(path: string, spec: unknown): AppProbe {
  if (!PATH.test(path)) fail(path, 'not a probe path, expected /app-health/<container>/livez|readyz|startupz');
  if (!isObject(spec)) fail(path, 'expected an object');
  const kinds = ['httpGet', 'tcpSocket', 'grpc'].filter((k) => spec[k] !== undefined);
  if (kinds.length !== 1) fail(path, `expected exactly one of httpGet, tcpSocket, grpc (found ${kinds.join(', ') || 'none'})`);
  const t = spec['timeoutSeconds'] ?? DEFAULT_TIMEOUT_S;
  if (typeof t !== 'number' || !Number.isInteger(t) || t < 0) fail(path, `timeoutSeconds ${JSON.stringify(t)} is not a non-negative integer`);
  const timeoutMs = (t || DEFAULT_TIMEOUT_S) * 1000;
  const kind = kinds[0]!;
  const where = `${path}.${kind}`;
  const a = spec[kind];
  if (!isObject(a)) fail(where, 'expected an object');
  if (kind === 'tcpSocket') return { kind, port: portOf(a['port'], where), host: optionalString(a, 'host', where), timeoutMs };
  if (kind === 'grpc') return { kind, port: portOf(a['port'], where), service: optionalString(a, 'service', where) ?? '', timeoutMs };
  const scheme = (optionalString(a, 'scheme', where) ?? 'HTTP').toUpperCase();
  if (scheme !== 'HTTP' && scheme !== 'HTTPS') fail(where, `scheme ${JSON.stringify(scheme)} is not HTTP or HTTPS`);
  const rawHeaders = a['httpHeaders'] ?? [];
  if (!Array.isArray(rawHeaders) || !rawHeaders.every((h) => isObject(h) && typeof h['name'] === 'string' && typeof h['value'] === 'string')) {
    fail(where, 'httpHeaders must be a list of {name, value} strings');
  }
  const probePath = optionalString(a, 'path', where) ?? '/';
  return {
    kind: 'httpGet',
    path: probePath.startsWith('/') ? probePath : `/${probePath}`,
    port: portOf(a['port'], where),
    host: optionalString(a, 'host', where),
    scheme,
    headers: (rawHeaders as Array<{ name: string; value: string }>).map(({ name, value }) => ({ name, value })),
    timeoutMs,
  };
}

/** The probes by status-server path; empty text = none. Throws naming the variable and the probe. */
export function parseAppProbers(text: string): Map<string, AppProbe> {
  if (text.trim() === '') return new Map();
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch (e) {
    throw new AppProbersError(`MESH_APP_PROBERS: not valid JSON: ${(e as Error).message}`);
  }
  if (!isObject(doc)) throw new AppProbersError('MESH_APP_PROBERS: expected a JSON object keyed by /app-health/<container>/<probe> paths');
  return new Map(Object.entries(doc).map(([path, spec]) => [path, parseProbe(path, spec)]));
}

export interface ProbeResult {
  status: number;
  body: string;
}

/** What one run of a probe saw; each caller decides what passes. */
export interface ProbeOutcome {
  /** What was asked, for messages: `GET http://10.0.0.5:8080/healthz`, `connect 10.0.0.5:9000`, `exec ["/bin/check"]`. */
  target: string;
  /** httpGet: the application's status code. */
  httpStatus?: number;
  /** grpc: the serving status the application answered. */
  servingStatus?: string;
  /** Why no answer came (refused, timed out, a non-zero exit); absent = answered, connected or exited 0. */
  failure?: string;
}

/** Runs one probe against the application (status server): the orchestrator's answer for it. */
export async function runAppProbe(p: AppProbe, appHost: string): Promise<ProbeResult> {
  const o = await probeApp(p, appHost);
  if (o.failure !== undefined) return { status: 500, body: `${o.target}: ${o.failure}\n` };
  if (o.httpStatus !== undefined) return { status: o.httpStatus, body: `${o.httpStatus}\n` };
  if (o.servingStatus !== undefined) return { status: o.servingStatus === 'SERVING' ? 200 : 500, body: `${o.servingStatus}\n` };
  return { status: 200, body: 'ok\n' };
}

/**
 * Runs one probe; `appHost` is where the application listens when the probe names no host. An
 * abort ends it early (its outcome is then meaningless): a stopped checker leaves nothing behind.
 */
export function probeApp(p: AppProbe | ExecProbe, appHost: string, signal?: AbortSignal): Promise<ProbeOutcome> {
  switch (p.kind) {
    case 'httpGet':
      return httpProbe(p, p.host ?? appHost, signal);
    case 'tcpSocket':
      return tcpProbe(p.host ?? appHost, p.port, p.timeoutMs, signal);
    case 'grpc':
      return grpcProbe(appHost, p, signal);
    case 'exec':
      return execProbe(p, signal);
  }
}

function hostPort(host: string, port: number): string {
  return host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
}

const timedOut = (ms: number) => `timed out after ${ms / 1000}s`;

function httpProbe(p: HttpGetProbe & { timeoutMs: number }, host: string, signal?: AbortSignal): Promise<ProbeOutcome> {
  const target = `GET ${p.scheme.toLowerCase()}://${hostPort(host, p.port)}${p.path}`;
  const headers: Record<string, string> = { 'user-agent': 'mesh-probe/1.0' };
  for (const h of p.headers) headers[h.name.toLowerCase()] = h.value;
  const request = p.scheme === 'HTTPS' ? httpsRequest : httpRequest;
  return new Promise((resolve) => {
    // As the kubelet: an HTTPS probe does not verify the application's certificate. A connection
    // of its own (agent: false), as the Go prober disables keep-alive: no socket outlives a probe.
    const req = request({ host, port: p.port, path: p.path, method: 'GET', headers, agent: false, rejectUnauthorized: false, signal }, (res: IncomingMessage) => {
      res.resume();
      res.on('end', () => resolve({ target, httpStatus: res.statusCode ?? 500 }));
    });
    // The whole exchange, not just idle time, is bounded by the timeout.
    const timer = setTimeout(() => req.destroy(new Error(timedOut(p.timeoutMs))), p.timeoutMs);
    req.on('close', () => clearTimeout(timer));
    req.on('error', (e: Error & { code?: string }) => resolve({ target, failure: e.code ?? e.message }));
    req.end();
  });
}

function tcpProbe(host: string, port: number, timeoutMs: number, signal?: AbortSignal): Promise<ProbeOutcome> {
  const target = `connect ${hostPort(host, port)}`;
  return new Promise((resolve) => {
    const socket = connect({ host, port, timeout: timeoutMs, signal });
    socket.once('connect', () => {
      socket.destroy();
      resolve({ target });
    });
    socket.once('timeout', () => {
      socket.destroy();
      resolve({ target, failure: timedOut(timeoutMs) });
    });
    socket.once('error', (e: Error & { code?: string }) => resolve({ target, failure: e.code ?? e.message }));
  });
}

interface HealthClient extends Client {
  check(req: { service: string }, opts: { deadline: number }, cb: (err: ServiceError | null, res?: { status: string }) => void): { cancel(): void };
}
const HealthClientCtor = makeGenericClientConstructor(healthService, 'grpc.health.v1.Health');

/** grpc.health.v1.Health/Check: the serving status, or why it could not be asked. */
function grpcProbe(appHost: string, p: GrpcProbe & { timeoutMs: number }, signal?: AbortSignal): Promise<ProbeOutcome> {
  const address = hostPort(appHost, p.port);
  const target = `grpc.health.v1.Health/Check on ${address}${p.service ? ` for service "${p.service}"` : ''}`;
  const client = new HealthClientCtor(address, credentials.createInsecure()) as unknown as HealthClient;
  return new Promise<ProbeOutcome>((resolve) => {
    const call = client.check({ service: p.service }, { deadline: Date.now() + p.timeoutMs }, (err, res) => {
      signal?.removeEventListener('abort', cancel);
      resolve(err ? { target, failure: err.details || err.message } : { target, servingStatus: res?.status ?? 'UNKNOWN' });
    });
    const cancel = () => call.cancel();
    signal?.addEventListener('abort', cancel, { once: true });
  }).finally(() => client.close());
}

/** Longest stderr kept for the message: enough for a reason, not a log. */
const STDERR_LIMIT = 512;

/** Runs the command without a shell; a non-zero exit fails, with the last line of its stderr. */
function execProbe(p: ExecProbe, signal?: AbortSignal): Promise<ProbeOutcome> {
  const target = `exec ${JSON.stringify(p.command)}`;
  return new Promise((resolve) => {
    // Its own process group, so a timeout or an abort also ends whatever the command started.
    const child = spawn(p.command[0]!, p.command.slice(1), { stdio: ['ignore', 'ignore', 'pipe'], detached: true });
    let stderr = '';
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => {
      if (stderr.length < STDERR_LIMIT) stderr += chunk;
    });
    let killedFor: string | undefined;
    const kill = (why: string) => {
      killedFor ??= why;
      try {
        if (child.pid !== undefined) process.kill(-child.pid, 'SIGKILL');
      } catch {
        // Already gone.
      }
    };
    const timer = setTimeout(() => kill(timedOut(p.timeoutMs)), p.timeoutMs);
    const onAbort = () => kill('stopped');
    signal?.addEventListener('abort', onAbort, { once: true });
    let settled = false;
    const done = (failure?: string) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      signal?.removeEventListener('abort', onAbort);
      resolve(failure === undefined ? { target } : { target, failure });
    };
    child.once('error', (e: Error & { code?: string }) => done(e.code ?? e.message));
    child.once('close', (code, sig) => {
      if (killedFor !== undefined) return done(killedFor);
      if (code === 0) return done();
      const last = stderr.slice(0, STDERR_LIMIT).trim().split('\n').at(-1);
      done(`${code !== null ? `exit code ${code}` : `killed by ${sig}`}${last ? ` (${last})` : ''}`);
    });
  });
}
