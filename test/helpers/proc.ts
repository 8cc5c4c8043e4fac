// Runs the built programs as real processes (bin/*.js over dist/), as a user would.
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { dirname, join, resolve } from 'node:path';
import { existsSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';

/** The repository root, whether tests run from dist/test or from test/ through tsx. */
export const REPO_ROOT = (() => {
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, 'package.json'))) dir = dirname(dir);
  return dir;
})();

export type Program = 'pilot-discovery' | 'pilot-agent' | 'mesh-proxy';

export interface RunResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

export interface RunOptions {
  env?: NodeJS.ProcessEnv;
  cwd?: string;
  timeoutMs?: number;
  /** Runs the program inside this network namespace (`ip netns exec`). */
  netns?: string;
  /** Runs the program as this uid and gid (`setpriv`), as a sidecar runs as 1337. */
  uid?: number;
  /** Capabilities the program keeps as that uid (ambient), e.g. `net_admin`. */
  caps?: string[];
}

/** The command line that runs `argv` (node and its arguments) in the namespace and as the user asked. */
export function wrapped(argv: string[], opts: Pick<RunOptions, 'netns' | 'uid' | 'caps'>): string[] {
  const caps = (opts.caps ?? []).map((c) => `+${c}`).join(',');
  const keep = caps ? [`--inh-caps=${caps}`, `--ambient-caps=${caps}`] : [];
  const asUser = opts.uid === undefined ? argv : ['setpriv', `--reuid=${opts.uid}`, `--regid=${opts.uid}`, '--clear-groups', ...keep, ...argv];
  return opts.netns === undefined ? asUser : ['ip', 'netns', 'exec', opts.netns, ...asUser];
}

/** A clean environment: the test's own variables only, so a developer's shell cannot change results. */
function envFor(extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  return { PATH: process.env.PATH, HOME: process.env.HOME, ...extra };
}

export function start(program: Program, args: string[], opts: RunOptions = {}): ChildProcess {
  const [cmd, ...argv] = wrapped([process.execPath, resolve(REPO_ROOT, 'bin', `${program}.js`), ...args], opts);
  return spawn(cmd!, argv, {
    cwd: opts.cwd ?? REPO_ROOT,
    env: envFor(opts.env),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
}

/** Runs a command to completion (bounded by timeoutMs) and returns its exit code and output. */
export async function run(program: Program, args: string[], opts: RunOptions = {}): Promise<RunResult> {
  const child = start(program, args, opts);
  let stdout = '';
  let stderr = '';
  child.stdout!.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  const timer = setTimeout(() => child.kill('SIGKILL'), opts.timeoutMs ?? 20_000);
  const code = await new Promise<number | null>((r) => child.on('close', (c) => r(c)));
  clearTimeout(timer);
  return { code, stdout, stderr };
}

/** A long-running process whose output can be awaited line by line. */
export class Running {
  output = '';
  private readonly exited: Promise<number | null>;

  constructor(readonly child: ChildProcess) {
    child.stdout!.on('data', (d: Buffer) => (this.output += d.toString()));
    child.stderr!.on('data', (d: Buffer) => (this.output += d.toString()));
    this.exited = new Promise((r) => child.on('close', (c) => r(c)));
  }

  /**
   * Waits until the output matches, up to a bound; returns the match. When it gives up, the program
   * is killed: a test that failed must not leave it running (its pipes would keep the test file's
   * process, and so the whole suite, waiting).
   */
  async waitFor(re: RegExp, timeoutMs = 30_000): Promise<RegExpMatchArray> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const m = this.output.match(re);
      if (m) return m;
      if (this.child.exitCode !== null || Date.now() > deadline) {
        const exit = this.child.exitCode;
        if (exit === null) this.child.kill('SIGKILL');
        throw new Error(`output did not match ${re} (exit ${exit}):\n${this.output}`);
      }
      await new Promise((r) => setTimeout(r, 20));
    }
  }

  async stop(signal: NodeJS.Signals = 'SIGTERM'): Promise<number | null> {
    if (this.child.exitCode === null) this.child.kill(signal);
    return this.exited;
  }

  wait(): Promise<number | null> {
    return this.exited;
  }
}

/** Runs `body`; when it throws, the tail of the programs' output (`output()`) is added to the error. */
export async function withProgramOutput(output: () => string, body: () => Promise<void>, tail = 4000): Promise<void> {
  await body().catch((e: unknown) => {
    if (e instanceof Error) e.message = `${e.message}\n--- program output ---\n${output().slice(-tail)}`;
    throw e;
  });
}

/** Polls until `check` passes (a bounded wait for something asynchronous, never a timing assertion). */
export async function eventually<T>(check: () => T | Promise<T>, timeoutMs = 5_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      return await check();
    } catch (e) {
      if (Date.now() > deadline) throw e;
      await new Promise((r) => setTimeout(r, 25));
    }
  }
}

/**
 * Flags for a local discovery server on ephemeral ports, reading config from `configDir`
 * (an empty temporary directory when not given). `overrides` replace the defaults by flag name.
 */
export function discoveryArgs(configDir?: string, overrides: Record<string, string> = {}): string[] {
  const flags: Record<string, string> = {
    configDir: configDir ?? mkdtempSync(join(tmpdir(), 'mesh-config-')),
    grpcAddr: '127.0.0.1:0',
    secureGRPCAddr: '127.0.0.1:0',
    httpAddr: '127.0.0.1:0',
    httpsAddr: '127.0.0.1:0',
    monitoringAddr: '127.0.0.1:0',
    // The introspection facility on an ephemeral port too, so parallel tests do not contend for 9876.
    ctrlz_address: '127.0.0.1',
    ctrlz_port: '0',
    ...overrides,
  };
  return ['discovery', ...Object.entries(flags).flatMap(([k, v]) => [`--${k}`, v])];
}

/** A counter or gauge from the proxy admin's `/stats` text (`name: value` lines); 0 when absent. */
export function statValue(statsText: string, name: string): number {
  const line = statsText.split('\n').find((l) => l.startsWith(`${name}: `));
  return line ? Number(line.slice(name.length + 2)) : 0;
}
