// The parent side of ads-clients.ts: forks the simulated proxies and exchanges their messages,
// plus the table printing and resource sampling the xDS benchmarks share.
import { fork, type ChildProcess } from 'node:child_process';
import { extname } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { ChildMessage, ConnectMessage } from './ads-clients.js';

export class SimulatedProxies {
  private readonly child: ChildProcess;

  constructor(address: string, streams: number, protocol: 'sotw' | 'delta' = 'sotw') {
    // The sibling script with this module's extension: .ts under tsx, .js once built to dist/.
    const ext = extname(fileURLToPath(import.meta.url));
    this.child = fork(fileURLToPath(new URL(`./ads-clients${ext}`, import.meta.url)), [address, String(streams), protocol], {
      execArgv: ext === '.ts' ? ['--import', 'tsx'] : [],
    });
  }

  /** Opens the streams; resolves once each has its first response of every type it asked for. */
  async connect(init: ConnectMessage['connect']): Promise<void> {
    const ready = this.next();
    this.child.send({ connect: init });
    await ready;
  }

  /** Arms a count of responses by type URL; the promise resolves once they have all arrived. */
  expect(counts: Record<string, number>): Promise<Record<string, number>> {
    const done = this.next().then((m) => ('received' in m ? m.received : {}));
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
        resolve(m);
      });
    });
  }
}

export function cpuMs(u: NodeJS.CpuUsage): number {
  return (u.user + u.system) / 1000;
}

/** Samples this process's RSS every 50 ms; `peak()` is the highest seen since start or reset. */
export class RssSampler {
  private max = process.memoryUsage().rss;
  private readonly timer = setInterval(() => this.sample(), 50);

  peak(): number {
    this.sample();
    return this.max;
  }

  reset(): void {
    this.max = process.memoryUsage().rss;
  }

  stop(): void {
    clearInterval(this.timer);
  }

  private sample(): void {
    this.max = Math.max(this.max, process.memoryUsage().rss);
  }
}

export function printTable(title: string, rows: string[][]): void {
  const widths = rows[0]!.map((_, c) => Math.max(...rows.map((r) => r[c]!.length)));
  console.log(title);
  for (const r of rows) console.log(r.map((cell, c) => cell.padEnd(widths[c]!)).join('  '));
}
