// The parent side of ads-clients.ts: forks the simulated proxies and exchanges their messages,
// plus the table printing and resource sampling the xDS benchmarks share.
import { fork, type ChildProcess } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import type { ChildMessage, ConnectMessage } from './ads-clients.js';
import { siblingScript } from '../sibling.js';

export class SimulatedProxies {
  private readonly child: ChildProcess;

  constructor(address: string, streams: number, protocol: 'sotw' | 'delta' = 'sotw') {
    const script = siblingScript(import.meta.url, './ads-clients');
    this.child = fork(script.path, [address, String(streams), protocol], { execArgv: script.execArgv });
  }

  /**
   * Opens the streams; resolves once each has its first response of every type it asked for, with
   * the simulated proxies' own CPU time (ms) and the response bytes they read from the request to then.
   */
  async connect(init: ConnectMessage['connect']): Promise<{ cpuMs: number; bytes: number }> {
    const ready = this.next();
    this.child.send({ connect: init });
    const m = await ready;
    return 'cpuMs' in m ? { cpuMs: m.cpuMs, bytes: m.bytes } : { cpuMs: NaN, bytes: NaN };
  }

  /**
   * Arms a count of responses by type URL; the promise resolves once they have all arrived, with
   * the counts, the simulated proxies' own CPU time (ms) and the response bytes they read since this call.
   */
  expect(counts: Record<string, number>): Promise<{ received: Record<string, number>; cpuMs: number; bytes: number }> {
    const done = this.next().then((m) => ('received' in m ? m : { received: {}, cpuMs: NaN, bytes: NaN }));
    this.child.send({ expect: counts });
    return done;
  }

  close(): void {
    this.child.kill();
  }

  private next(): Promise<ChildMessage> {
    return new Promise((resolve, reject) => {
      const onExit = (code: number | null): void => reject(new Error(`simulated proxies exited (${code})`));
      this.child.once('exit', onExit);
      this.child.once('message', (m: ChildMessage) => {
        this.child.off('exit', onExit);
        // Without it the step would wait forever for the responses of a stream that is gone.
        if ('ended' in m) reject(new Error(`the server ended a simulated proxy's stream: ${m.ended}`));
        else resolve(m);
      });
    });
  }
}

export function cpuMs(u: NodeJS.CpuUsage): number {
  return (u.user + u.system) / 1000;
}

/**
 * This process's peak resident size since start or `reset()`, as the kernel counts it (VmHWM of
 * /proc/self/status; writing 5 to /proc/self/clear_refs sets it back to the current size). No
 * sampling timer: a 50 ms timer reading the RSS showed up in the server's profiles as up to a
 * sixth of a step on the loaded box, and could miss a peak between two samples.
 */
export class PeakRss {
  peak(): number {
    const kb = /^VmHWM:\s*(\d+) kB/m.exec(readFileSync('/proc/self/status', 'utf8'));
    return kb ? Number(kb[1]) * 1024 : process.memoryUsage.rss();
  }

  reset(): void {
    writeFileSync('/proc/self/clear_refs', '5');
  }
}

export function printTable(title: string, rows: string[][]): void {
  const widths = rows[0]!.map((_, c) => Math.max(...rows.map((r) => r[c]!.length)));
  console.log(title);
  for (const r of rows) console.log(r.map((cell, c) => cell.padEnd(widths[c]!)).join('  '));
}
