// The local mesh's child processes: started from bin/, polled until ready, stopped.
import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { ROOT } from './repo.js';

/** Starts one of the programs; with `sink`, its output is collected there (never left unread). */
export function program(name: string, args: string[], opts: { cwd?: string; env?: NodeJS.ProcessEnv; sink?: string[] }): ChildProcess {
  const child = spawn(process.execPath, [join(ROOT, 'bin', `${name}.js`), ...args], {
    cwd: opts.cwd ?? ROOT,
    env: { ...process.env, ...opts.env },
    stdio: ['ignore', opts.sink ? 'pipe' : 'inherit', opts.sink ? 'pipe' : 'inherit'],
  });
  const sink = opts.sink;
  if (sink) for (const s of [child.stdout!, child.stderr!]) s.on('data', (d: Buffer) => sink.push(`[${name}] ${d.toString()}`));
  return child;
}

/** Why an answer is not the one waited for; null when it is. The default: anything but 200. */
export type Judge = (res: Response) => Promise<string | null>;
const ok200: Judge = async (res) => {
  await res.body?.cancel();
  return res.status === 200 ? null : `HTTP ${res.status}`;
};

/** Polls a URL until `judge` accepts its answer (200 by default); rejects with the last reason after the bound, or when `child` exits. */
export async function untilReady(url: string, child: ChildProcess, what: string, timeoutMs = 30_000, judge: Judge = ok200): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last = 'no answer yet';
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`${what} exited with code ${child.exitCode} before it was ready`);
    try {
      const why = await judge(await fetch(url, { signal: AbortSignal.timeout(1000) }));
      if (why === null) return;
      last = why;
    } catch (e) {
      last = (e as Error).message;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${what} not ready at ${url} after ${timeoutMs} ms: ${last}`);
}

export async function stopChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((r) => child.once('exit', r));
  child.kill('SIGTERM');
  const killer = setTimeout(() => child.kill('SIGKILL'), 15_000);
  await exited;
  clearTimeout(killer);
}
