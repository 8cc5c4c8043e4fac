// The JSON API of the introspection UI (ControlZ): the page reads it, and so can scripts. Every
// topic is a GET returning JSON; a logging scope is also changed by PUT. Bad input gets a 400 whose
// `error` names the scope, field or value that is wrong.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { hostname } from 'node:os';
import type { Registry } from 'prom-client';
import { LEVELS, listScopes, LogConfigError, scope, updateScope, type Level, type ScopeUpdate } from '../../common/log.js';
import { buildInfo } from '../../common/version.js';
import { BodyTooLarge, readBody, sendJson } from '../http.js';
import type { ProcessSampler } from './process-info.js';

const log = scope('default');

/** A flag as the command line left it. */
export interface FlagView {
  readonly name: string;
  readonly value: string;
  readonly default: string;
  readonly explicit: boolean;
  readonly effective: boolean;
}

/** One connected proxy and, per xDS type, what was last pushed and whether it was acked. */
export interface ProxyView {
  readonly proxyId: string;
  readonly connectionId: string;
  readonly peer: string;
  readonly protocol: string;
  readonly connectedAt: string;
  readonly types: ReadonlyArray<{ type: string; state: string; sentVersion?: string; sentAt?: string; ackedVersion?: string; lastNack?: string }>;
}

export interface CtrlzSources {
  /** `pilot-discovery` or `pilot-agent`. */
  readonly component: string;
  readonly argv: readonly string[];
  readonly flags: readonly FlagView[];
  /** The effective settings (what `/debug/env` serves). */
  readonly settings: () => unknown;
  readonly metrics: Registry;
  readonly sampler: ProcessSampler;
  /** The discovery server's connected proxies; absent in the agent. */
  readonly proxies?: () => readonly ProxyView[];
}

export interface Topic {
  readonly path: string;
  readonly title: string;
  readonly help: string;
}

/** The API's index, also what the page builds its navigation from. */
export function topics(src: CtrlzSources): Topic[] {
  return [
    { path: '/api/v1/process', title: 'Process', help: 'pid, uptime, memory, event-loop delay and utilisation, active handles' },
    { path: '/api/v1/version', title: 'Version', help: 'build information' },
    { path: '/api/v1/args', title: 'Command line', help: 'the command line and every flag with its value' },
    { path: '/api/v1/env', title: 'Settings', help: 'environment settings with their effective values' },
    { path: '/api/v1/scopes', title: 'Logging scopes', help: 'scopes and levels; PUT /api/v1/scopes/<name> {"outputLevel","stackTraceLevel","logCallers"} changes one' },
    { path: '/api/v1/metrics', title: 'Metrics', help: "the program's metrics with their current values" },
    ...(src.proxies ? [{ path: '/api/v1/proxies', title: 'Proxies', help: 'connected proxies and their last pushes per type' }] : []),
  ];
}

class BadRequest extends Error {
  constructor(
    message: string,
    readonly status = 400,
  ) {
    super(message);
  }
}

/** The wire form of a scope, named like the Go mesh's ControlZ fields. */
function scopeJson(s: ReturnType<typeof listScopes>[number]) {
  return { name: s.name, outputLevel: s.level, stackTraceLevel: s.stackTraceLevel, logCallers: s.logCallers };
}

function findScope(name: string) {
  const s = listScopes().find((x) => x.name === name);
  if (!s) throw new BadRequest(`unknown scope "${name}" (known scopes: ${listScopes().map((x) => x.name).join(', ')})`, 404);
  return s;
}

function levelField(body: Record<string, unknown>, field: string, scopeName: string): Level | undefined {
  const v = body[field];
  if (v === undefined) return undefined;
  if (typeof v !== 'string' || !(LEVELS as readonly string[]).includes(v)) {
    throw new BadRequest(`scope "${scopeName}": invalid ${field} ${JSON.stringify(v)} (expected one of ${LEVELS.join(', ')})`);
  }
  return v as Level;
}

const SCOPE_FIELDS = new Set(['name', 'outputLevel', 'stackTraceLevel', 'logCallers']);

/** Reads a PUT body into a scope update; anything it cannot apply is a BadRequest naming it. */
export function parseScopeUpdate(scopeName: string, text: string): ScopeUpdate {
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch (e) {
    throw new BadRequest(`scope "${scopeName}": the body is not valid JSON: ${(e as Error).message}`);
  }
  if (typeof body !== 'object' || body === null || Array.isArray(body)) throw new BadRequest(`scope "${scopeName}": the body must be a JSON object`);
  const obj = body as Record<string, unknown>;
  const unknown = Object.keys(obj).filter((k) => !SCOPE_FIELDS.has(k));
  if (unknown.length > 0) throw new BadRequest(`scope "${scopeName}": unknown field ${unknown.map((k) => `"${k}"`).join(', ')} (expected outputLevel, stackTraceLevel, logCallers)`);
  if (obj.name !== undefined && obj.name !== scopeName) throw new BadRequest(`scope "${scopeName}": the body names scope ${JSON.stringify(obj.name)}`);
  if (obj.logCallers !== undefined && typeof obj.logCallers !== 'boolean') throw new BadRequest(`scope "${scopeName}": logCallers must be true or false`);
  const update: ScopeUpdate = {};
  const level = levelField(obj, 'outputLevel', scopeName);
  const stack = levelField(obj, 'stackTraceLevel', scopeName);
  if (level !== undefined) update.level = level;
  if (stack !== undefined) update.stackTraceLevel = stack;
  if (typeof obj.logCallers === 'boolean') update.logCallers = obj.logCallers;
  return update;
}

async function scopeRequest(req: IncomingMessage, res: ServerResponse, name: string): Promise<void> {
  const before = findScope(name);
  if (req.method === 'GET' || req.method === 'HEAD') {
    sendJson(res, 200, scopeJson(before));
    return;
  }
  if (req.method !== 'PUT') throw new BadRequest(`scope "${name}": use GET or PUT, not ${req.method}`, 405);
  let text: string;
  try {
    text = await readBody(req, 16 * 1024);
  } catch (e) {
    if (e instanceof BodyTooLarge) throw new BadRequest(`scope "${name}": ${e.message}`);
    throw e;
  }
  try {
    updateScope(name, parseScopeUpdate(name, text));
  } catch (e) {
    if (e instanceof LogConfigError) throw new BadRequest(e.message);
    throw e;
  }
  const after = findScope(name);
  // Logged at warn so the change is on record whatever the default scope's level is.
  log.warn(`introspection: scope ${name} set to output ${after.level}, stack traces ${after.stackTraceLevel}, callers ${after.logCallers}`);
  sendJson(res, 200, scopeJson(after));
}

/** Handles `/api/v1/...`; returns false for paths outside the API. */
export async function serveApi(src: CtrlzSources, req: IncomingMessage, res: ServerResponse, url: URL): Promise<boolean> {
  const path = url.pathname.replace(/\/+$/, '');
  if (!path.startsWith('/api/v1')) return false;
  try {
    if (path.startsWith('/api/v1/scopes/')) {
      await scopeRequest(req, res, decodeURIComponent(path.slice('/api/v1/scopes/'.length)));
      return true;
    }
    if (req.method !== 'GET' && req.method !== 'HEAD') throw new BadRequest(`${path}: use GET, not ${req.method}`, 405);
    const body = await topicBody(src, path);
    if (body === undefined) throw new BadRequest(`unknown API path ${path} (see /api/v1)`, 404);
    sendJson(res, 200, body);
  } catch (e) {
    if (!(e instanceof BadRequest)) throw e;
    sendJson(res, e.status, { error: e.message });
  }
  return true;
}

async function topicBody(src: CtrlzSources, path: string): Promise<unknown> {
  switch (path) {
    case '/api/v1':
      return { component: src.component, topics: topics(src) };
    case '/api/v1/process':
      return src.sampler.read(hostname());
    case '/api/v1/version':
      return { component: src.component, ...buildInfo };
    case '/api/v1/args':
      return { argv: src.argv, flags: src.flags };
    case '/api/v1/env':
      return src.settings();
    case '/api/v1/scopes':
      return listScopes().map(scopeJson);
    case '/api/v1/metrics':
      return (await src.metrics.getMetricsAsJSON()).map((m) => ({ name: m.name, type: m.type, help: m.help, values: m.values.map((v) => ({ labels: v.labels, value: v.value, ...('metricName' in v && v.metricName ? { series: v.metricName } : {}) })) }));
    case '/api/v1/proxies':
      return src.proxies ? src.proxies() : undefined;
    default:
      return undefined;
  }
}
