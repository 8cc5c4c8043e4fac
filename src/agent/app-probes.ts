// The application's orchestrator probes, rewritten by the injector to go through the agent: the
// kubelet asks `/app-health/<container>/livez|readyz|startupz` on the status port, and the agent
// runs the original probe (MESH_APP_PROBERS, the format of the Go mesh's ISTIO_KUBE_APP_PROBERS)
// against the application from inside the pod, where capture does not get in the way.
//
// Answers, as the Go mesh's agent: an HTTP probe passes the application's status code on; a TCP or
// gRPC probe is 200 when the connection opens / the service is SERVING, else 500; a probe that
// cannot run (refused, timed out) is 500 with the reason in the body.
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

/** Runs one probe against the application; `appHost` is where it listens when the probe names no host. */
export function runAppProbe(p: AppProbe, appHost: string): Promise<ProbeResult> {
  const failed = (why: string): ProbeResult => ({ status: 500, body: `${why}\n` });
  if (p.kind === 'tcpSocket') return tcpProbe(p.host ?? appHost, p.port, p.timeoutMs).then((why) => (why === null ? { status: 200, body: 'ok\n' } : failed(why)));
  if (p.kind === 'grpc') return grpcProbe(appHost, p).then((status) => (status === 'SERVING' ? { status: 200, body: 'SERVING\n' } : failed(status)));
  return httpProbe(p, appHost).catch((e: Error) => failed(e.message));
}

function httpProbe(p: HttpGetProbe & { timeoutMs: number }, appHost: string): Promise<ProbeResult> {
  const host = p.host ?? appHost;
  const headers: Record<string, string> = { 'user-agent': 'mesh-probe/1.0' };
  for (const h of p.headers) headers[h.name.toLowerCase()] = h.value;
  const request = p.scheme === 'HTTPS' ? httpsRequest : httpRequest;
  return new Promise((resolve, reject) => {
    // As the kubelet: an HTTPS probe does not verify the application's certificate.
    const req = request({ host, port: p.port, path: p.path, method: 'GET', headers, timeout: p.timeoutMs, rejectUnauthorized: false }, (res: IncomingMessage) => {
      res.resume();
      res.on('end', () => resolve({ status: res.statusCode ?? 500, body: `${res.statusCode}\n` }));
    });
    req.on('timeout', () => req.destroy(new Error(`timed out after ${p.timeoutMs / 1000}s`)));
    req.on('error', (e: Error & { code?: string }) => reject(new Error(`GET ${p.scheme.toLowerCase()}://${host}:${p.port}${p.path}: ${e.code ?? e.message}`)));
    req.end();
  });
}

function tcpProbe(host: string, port: number, timeoutMs: number): Promise<string | null> {
  return new Promise((resolve) => {
    const socket = connect({ host, port, timeout: timeoutMs });
    socket.once('connect', () => {
      socket.destroy();
      resolve(null);
    });
    socket.once('timeout', () => {
      socket.destroy();
      resolve(`connect ${host}:${port}: timed out after ${timeoutMs / 1000}s`);
    });
    socket.once('error', (e: Error & { code?: string }) => resolve(`connect ${host}:${port}: ${e.code ?? e.message}`));
  });
}

interface HealthClient extends Client {
  check(req: { service: string }, opts: { deadline: number }, cb: (err: ServiceError | null, res?: { status: string }) => void): void;
}
const HealthClientCtor = makeGenericClientConstructor(healthService, 'grpc.health.v1.Health');

/** grpc.health.v1.Health/Check: the serving status, or why it could not be asked. */
function grpcProbe(appHost: string, p: GrpcProbe & { timeoutMs: number }): Promise<string> {
  const host = appHost.includes(':') ? `[${appHost}]` : appHost;
  const client = new HealthClientCtor(`${host}:${p.port}`, credentials.createInsecure()) as unknown as HealthClient;
  return new Promise<string>((resolve) => {
    client.check({ service: p.service }, { deadline: Date.now() + p.timeoutMs }, (err, res) => {
      resolve(err ? `grpc.health.v1.Health/Check: ${err.details || err.message}` : (res?.status ?? 'UNKNOWN'));
    });
  }).finally(() => client.close());
}
