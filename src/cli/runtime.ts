// What every command of both programs shares: the log flags, settings and logging set up before a
// command runs, the `version` and `request` commands; the process entry point (main.ts).
import { ineffectiveSettings, loadSettings, SettingsError, type Program } from '../common/env.js';
import { configureLogging, LogConfigError, registerScopes, scope } from '../common/log.js';
import { ineffectiveMetrics } from '../common/metrics.js';
import { formatVersion } from '../common/version.js';
import { UsageError, type CommandDef, type RunContext } from './command.js';
import type { FlagDef } from './flags.js';
import { httpRequest } from './http-request.js';

export { main } from './main.js';

export const LOG_FLAGS: readonly FlagDef[] = [
  { name: 'log_as_json', type: 'bool', default: 'false', usage: 'Whether to format output as JSON or in plain console-friendly format', effective: true },
  { name: 'log_caller', type: 'string', default: '', usage: 'Comma-separated list of scopes for which to include caller information', effective: true },
  { name: 'log_output_level', type: 'string', default: 'default:info', usage: 'Comma-separated minimum per-scope logging level of messages to output, in the form of <scope>:<level>,<scope>:<level>,... where level is one of debug, info, warn, error, fatal, none', effective: true },
  { name: 'log_rotate', type: 'string', default: '', usage: 'The path for the optional rotating log file', effective: true },
  { name: 'log_rotate_max_age', type: 'int', default: '30', usage: 'The maximum age in days of a log file beyond which the file is rotated (0 indicates no limit)', effective: true },
  { name: 'log_rotate_max_backups', type: 'int', default: '1000', usage: 'The maximum number of log file backups to keep before older files are deleted (0 indicates no limit)', effective: true },
  { name: 'log_rotate_max_size', type: 'int', default: '104857600', usage: 'The maximum size in megabytes of a log file beyond which the file is rotated', effective: true },
  { name: 'log_stacktrace_level', type: 'string', default: 'default:none', usage: 'Comma-separated minimum per-scope logging level at which stack traces are captured, in the form of <scope>:<level>,<scope:level>,... where level is one of debug, info, warn, error, fatal, none', effective: true },
  { name: 'log_target', type: 'stringArray', default: 'stdout', usage: 'The set of paths where to output the log. This can be any path as well as the special values stdout and stderr', effective: true },
];

/** Applies settings and log flags; a bad value is a UsageError naming it. */
export function startRuntime(program: Program, scopes: readonly string[], ctx: RunContext): void {
  registerScopes(scopes);
  try {
    loadSettings(program);
  } catch (e) {
    if (e instanceof SettingsError) throw new UsageError(e.problems.join('; '));
    throw e;
  }
  const f = ctx.flags;
  for (const n of ['log_rotate_max_age', 'log_rotate_max_backups', 'log_rotate_max_size']) {
    if (f.number(n) < 0) throw new UsageError(`invalid argument "${f.number(n)}" for "--${n}" flag: expected a non-negative integer`);
  }
  const rotate = f.string('log_rotate');
  try {
    configureLogging({
      asJson: f.bool('log_as_json'),
      caller: f.string('log_caller').split(',').map((s) => s.trim()).filter(Boolean),
      outputLevel: f.string('log_output_level'),
      stacktraceLevel: f.string('log_stacktrace_level'),
      targets: f.list('log_target'),
      ...(rotate ? { rotate: { path: rotate, maxSizeMB: f.number('log_rotate_max_size'), maxAgeDays: f.number('log_rotate_max_age'), maxBackups: f.number('log_rotate_max_backups') } } : {}),
    });
  } catch (e) {
    if (e instanceof LogConfigError) throw new UsageError(e.message);
    if (e instanceof Error && 'code' in e) throw new UsageError(`cannot open log target: ${e.message}`);
    throw e;
  }
}

/**
 * The startup notice of long-running commands: what the user set that has no effect yet is a
 * warning; the full list of not-yet-effective names is one info line.
 */
export function announceIneffective(program: Program, ctx: RunContext): void {
  const log = scope('default');
  for (const f of ctx.flags.explicitIneffective()) log.warn(`flag --${f.name} is accepted but not yet effective; it changes nothing`);
  const vars = ineffectiveSettings(program);
  for (const v of vars) if (process.env[v] !== undefined) log.warn(`environment variable ${v} is accepted but not yet effective; it changes nothing`);
  log.info(`accepted but not yet effective: variables ${vars.join(', ')}`);
  log.info(`exported at zero until their component lands: metrics ${ineffectiveMetrics(program).join(', ')}`);
}

/** Help footer naming the program's settings that change nothing yet. */
export function ineffectiveFooter(program: Program): () => string {
  return () => wrap(`Environment variables accepted but not yet effective: ${ineffectiveSettings(program).join(', ')}`, 100);
}

function wrap(text: string, width: number): string {
  const lines: string[] = [];
  let cur = '';
  for (const word of text.split(' ')) {
    if (cur && cur.length + word.length + 1 > width) {
      lines.push(cur);
      cur = '  ' + word;
    } else cur = cur ? `${cur} ${word}` : word;
  }
  return [...lines, cur].join('\n');
}

export function versionCommand(program: Program, scopes: readonly string[]): CommandDef {
  return {
    name: 'version',
    short: 'Prints out build version information',
    flags: [
      { name: 'output', short: 'o', type: 'string', default: '', usage: "One of 'yaml' or 'json'.", effective: true },
      { name: 'short', short: 's', type: 'bool', default: 'true', usage: 'Use --short=false to generate full version information', effective: true },
    ],
    run: async (ctx) => {
      startRuntime(program, scopes, ctx);
      const output = ctx.flags.string('output');
      if (!['', 'yaml', 'json'].includes(output)) throw new UsageError(`invalid argument "${output}" for "-o, --output" flag: expected 'yaml' or 'json'`);
      process.stdout.write(formatVersion(output, ctx.flags.bool('short')));
    },
  };
}

export function requestCommand(program: Program, scopes: readonly string[], short: string, target: () => string): CommandDef {
  return {
    name: 'request',
    short,
    args: '<method> <path> [body]',
    run: async (ctx) => {
      startRuntime(program, scopes, ctx);
      const [method, path, body] = ctx.args as [string, string, string | undefined];
      const res = await httpRequest(target(), method, path, body);
      process.stdout.write(res.body);
      if (res.status < 200 || res.status > 299) {
        process.stderr.write(`Error: ${method.toUpperCase()} ${path} returned HTTP ${res.status}\n`);
        return 1;
      }
      return 0;
    },
  };
}
