// Scoped logging with the Go mesh's flags and line format:
//   <RFC3339 UTC time with microseconds>\t<level>\t<scope>\t<message>
// Writes are synchronous so that no line is lost when a process exits or crashes, and so that lines
// from one process stay in order across targets.
import { closeSync, openSync, writeSync } from 'node:fs';
import { compareText } from './compare.js';
import { RotatingFile, type RotateOptions } from './rotate.js';

export const LEVELS = ['debug', 'info', 'warn', 'error', 'fatal', 'none'] as const;
export type Level = (typeof LEVELS)[number];
const RANK: Record<Level, number> = { debug: 0, info: 1, warn: 2, error: 3, fatal: 4, none: 5 };

export type Fields = Record<string, unknown>;

export interface Logger {
  readonly name: string;
  debug(msg: string, fields?: Fields): void;
  info(msg: string, fields?: Fields): void;
  warn(msg: string, fields?: Fields): void;
  error(msg: string, fields?: Fields): void;
  enabled(level: Level): boolean;
}

interface ScopeState {
  level: Level;
  stackLevel: Level;
  caller: boolean;
  logger: Logger;
}

interface Target {
  write(line: string): void;
  close(): void;
}

export class LogConfigError extends Error {}

const scopes = new Map<string, ScopeState>();
let asJson = false;
let targets: Target[] = [fdTarget(1)];

function fdTarget(fd: number): Target {
  return { write: (line) => writeAll(fd, line), close: () => undefined };
}

function writeAll(fd: number, line: string): void {
  try {
    writeSync(fd, line);
  } catch {
    // A closed stdout (e.g. `| head`) must not crash a long-running server.
  }
}

function fileTarget(path: string): Target {
  const fd = openSync(path, 'a');
  return { write: (line) => writeAll(fd, line), close: () => closeSync(fd) };
}

/** Returns the logger of a scope, creating the scope at the default scope's level. */
export function scope(name: string): Logger {
  const existing = scopes.get(name);
  if (existing) return existing.logger;
  const base = scopes.get('default');
  const state: ScopeState = {
    level: base?.level ?? 'info',
    stackLevel: base?.stackLevel ?? 'none',
    caller: false,
    logger: makeLogger(name),
  };
  scopes.set(name, state);
  return state.logger;
}

/** Declares the program's scopes up front, so --log_output_level can reject unknown ones. */
export function registerScopes(names: readonly string[]): void {
  scope('default');
  for (const n of names) if (n !== 'all') scope(n);
}

function makeLogger(name: string): Logger {
  const emit = (level: Level) => (msg: string, fields?: Fields) => {
    const st = scopes.get(name)!;
    if (RANK[level] < RANK[st.level] || st.level === 'none') return;
    write(name, level, msg, fields, st);
  };
  return {
    name,
    debug: emit('debug'),
    info: emit('info'),
    warn: emit('warn'),
    error: emit('error'),
    enabled: (level) => {
      const st = scopes.get(name)!;
      return st.level !== 'none' && RANK[level] >= RANK[st.level];
    },
  };
}

/** Logs at fatal level on the scope and exits, like the Go mesh's log.Fatal. */
export function fatal(logger: Logger, msg: string, code = 1): never {
  const st = scopes.get(logger.name)!;
  if (st.level !== 'none') write(logger.name, 'fatal', msg, undefined, st);
  process.exit(code);
}

function timestamp(): string {
  // Microsecond precision from the high-resolution clock; Date alone only has milliseconds.
  const nowUs = Math.floor((performance.timeOrigin + performance.now()) * 1000);
  const iso = new Date(Math.floor(nowUs / 1000)).toISOString();
  return `${iso.slice(0, 19)}.${String(nowUs % 1_000_000).padStart(6, '0')}Z`;
}

/** Frames of this module are skipped when finding the caller and capturing stacks. */
const SELF = import.meta.url;
const outside = (frame: string) => !frame.includes(SELF);

function callerOf(): string | undefined {
  const frames = new Error().stack?.split('\n').slice(1) ?? [];
  const frame = frames.find((f) => outside(f) && f.includes('('));
  const m = frame && /\(([^)]+):(\d+):\d+\)/.exec(frame);
  if (!m) return undefined;
  const file = m[1]!.replace(/^file:\/\//, '');
  return `${file.split('/').slice(-2).join('/')}:${m[2]}`;
}

function stackOf(): string {
  return (new Error().stack ?? '').split('\n').slice(1).filter(outside).join('\n');
}

function write(name: string, level: Level, msg: string, fields: Fields | undefined, st: ScopeState): void {
  const time = timestamp();
  const caller = st.caller ? callerOf() : undefined;
  const stack = st.stackLevel !== 'none' && RANK[level] >= RANK[st.stackLevel] ? stackOf() : undefined;
  let line: string;
  if (asJson) {
    line = JSON.stringify({ time, level, scope: name, msg, ...(caller ? { caller } : {}), ...fields, ...(stack ? { stack } : {}) });
  } else {
    const extra = fields ? Object.entries(fields).map(([k, v]) => `\t${k}=${typeof v === 'string' ? v : JSON.stringify(v)}`).join('') : '';
    line = `${time}\t${level}\t${name}\t${caller ? `${caller}\t` : ''}${msg}${extra}${stack ? `\n${stack}` : ''}`;
  }
  line += '\n';
  for (const t of targets) t.write(line);
}

/** Parses `scope:level,scope:level` (a bare level, or scope `all`, applies to every scope). */
export function parseLevelSpec(spec: string, flag: string): Array<[string | 'all', Level]> {
  const out: Array<[string, Level]> = [];
  for (const raw of spec.split(',')) {
    const item = raw.trim();
    if (item === '') continue;
    const idx = item.lastIndexOf(':');
    const scopeName = idx < 0 ? 'all' : item.slice(0, idx);
    const level = (idx < 0 ? item : item.slice(idx + 1)) as Level;
    if (!LEVELS.includes(level)) {
      throw new LogConfigError(`invalid argument "${spec}" for "${flag}" flag: unknown level "${level}" (expected one of ${LEVELS.join(', ')})`);
    }
    if (scopeName !== 'all' && !scopes.has(scopeName)) {
      throw new LogConfigError(`invalid argument "${spec}" for "${flag}" flag: unknown scope "${scopeName}" (known scopes: ${[...scopes.keys()].sort().join(', ')})`);
    }
    out.push([scopeName, level]);
  }
  return out;
}

export interface LogOptions {
  asJson: boolean;
  /** Scopes whose lines carry the caller's file:line. */
  caller: string[];
  outputLevel: string;
  stacktraceLevel: string;
  /** `stdout`, `stderr` or file paths; several at once. */
  targets: string[];
  rotate?: RotateOptions;
}

/** Applies the log flags; throws LogConfigError naming the flag and value on bad input. */
export function configureLogging(opts: LogOptions): void {
  const levels = parseLevelSpec(opts.outputLevel, '--log_output_level');
  const stackLevels = parseLevelSpec(opts.stacktraceLevel, '--log_stacktrace_level');
  for (const c of opts.caller) {
    if (c !== 'all' && !scopes.has(c)) throw new LogConfigError(`invalid argument "${opts.caller.join(',')}" for "--log_caller" flag: unknown scope "${c}"`);
  }
  // Levels of `default` seed every scope, then specific entries override, like the Go mesh.
  const apply = (pairs: Array<[string, Level]>, set: (st: ScopeState, l: Level) => void) => {
    const dflt = pairs.filter(([s]) => s === 'default' || s === 'all');
    for (const [, l] of dflt) for (const st of scopes.values()) set(st, l);
    for (const [s, l] of pairs) if (s !== 'default' && s !== 'all') set(scopes.get(s)!, l);
  };
  apply(levels, (st, l) => (st.level = l));
  apply(stackLevels, (st, l) => (st.stackLevel = l));
  for (const st of scopes.values()) st.caller = opts.caller.includes('all') || opts.caller.includes(st.logger.name);
  asJson = opts.asJson;
  const next: Target[] = opts.targets.map((t) => (t === 'stdout' ? fdTarget(1) : t === 'stderr' ? fdTarget(2) : fileTarget(t)));
  if (opts.rotate) {
    const file = new RotatingFile(opts.rotate);
    next.push({ write: (line) => file.write(line), close: () => file.close() });
  }
  for (const t of targets) t.close();
  targets = next;
}

/** Changes a scope's level at run time (the introspection UI calls this). */
export function setScopeLevel(name: string, level: Level): void {
  const st = scopes.get(name);
  if (!st) throw new LogConfigError(`unknown scope "${name}"`);
  if (!LEVELS.includes(level)) throw new LogConfigError(`unknown level "${level}"`);
  st.level = level;
}

/** What the introspection UI may change on a scope; absent fields stay as they are. */
export interface ScopeUpdate {
  level?: Level;
  stackTraceLevel?: Level;
  logCallers?: boolean;
}

/** Changes several settings of a scope at run time, all or none (a bad level changes nothing). */
export function updateScope(name: string, update: ScopeUpdate): void {
  const st = scopes.get(name);
  if (!st) throw new LogConfigError(`unknown scope "${name}"`);
  for (const l of [update.level, update.stackTraceLevel]) {
    if (l !== undefined && !LEVELS.includes(l)) throw new LogConfigError(`unknown level "${l}" for scope "${name}" (expected one of ${LEVELS.join(', ')})`);
  }
  if (update.level !== undefined) st.level = update.level;
  if (update.stackTraceLevel !== undefined) st.stackLevel = update.stackTraceLevel;
  if (update.logCallers !== undefined) st.caller = update.logCallers;
}

export interface ScopeInfo {
  name: string;
  level: Level;
  stackTraceLevel: Level;
  logCallers: boolean;
}

export function listScopes(): ScopeInfo[] {
  return [...scopes.entries()]
    .map(([name, st]) => ({ name, level: st.level, stackTraceLevel: st.stackLevel, logCallers: st.caller }))
    .sort((a, b) => compareText(a.name, b.name));
}

export function closeLogging(): void {
  for (const t of targets) t.close();
  targets = [fdTarget(1)];
}
