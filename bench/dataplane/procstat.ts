// CPU and memory of a process and its direct children (mesh-proxy's workers, nginx's worker), read
// from /proc.
import { execFileSync } from 'node:child_process';
import { readFileSync, readdirSync } from 'node:fs';

const CLOCK_TICKS = Number(execFileSync('getconf', ['CLK_TCK']).toString().trim());

/** The child of `parentPid` whose command line contains `name`. */
export function childPid(parentPid: number, name: string): number {
  for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (ppid === parentPid && readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes(name)) return Number(pid);
    } catch {
      // The process ended while we looked.
    }
  }
  throw new Error(`no ${name} child of pid ${parentPid}`);
}

function withChildren(pid: number): number[] {
  return [pid, ...readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').split(' ').filter(Boolean).map(Number)];
}

/** CPU seconds (user + system) used by the process and its children. */
export function cpuSeconds(pid: number): number {
  return withChildren(pid).reduce((sum, p) => {
    const stat = readFileSync(`/proc/${p}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return sum + (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS;
  }, 0);
}

export function rssMiB(pid: number): number {
  return withChildren(pid).reduce((sum, p) => {
    const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${p}/status`, 'utf8'));
    return sum + (m ? Number(m[1]) / 1024 : NaN);
  }, 0);
}

/** The process's resident memory by kind, MiB (/proc/<pid>/smaps_rollup): anonymous (heaps, stacks) and file-backed (the executable's and libraries' pages). */
export function residentMiB(pid: number): { rss: number; anonymous: number; file: number } {
  const text = readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8');
  const kb = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(text)?.[1] ?? NaN);
  return { rss: kb('Rss') / 1024, anonymous: kb('Anonymous') / 1024, file: (kb('Rss') - kb('Anonymous')) / 1024 };
}
