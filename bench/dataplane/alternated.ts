// bench/dataplane's alternated rounds: mesh-proxy's throughput as a ratio to nginx and to the Node
// floor, taken as the median over several short rounds in which the three are measured back to
// back (each round in a rotated order, so that no one always runs first). One pass of each row,
// as the main table makes, moves by up to ±0.3 × nginx from run to run on a two-core box: which
// of wrk, the app and the proxy share a core changes between runs, and a ratio of two passes
// minutes apart carries that drift. Ratios of passes seconds apart, and their median, do not.
import { wrk, type WrkResult } from './wrk.js';

/** One of the three measured proxies: where wrk sends its load, and with which headers. */
export interface Contender {
  readonly name: string;
  readonly url: string;
  readonly headers: Record<string, string>;
}

/** Requests/s of each contender in one round. */
export interface Round {
  readonly nginx: number;
  readonly floor: number;
  readonly proxy: number;
}

export interface Alternated {
  /** The measured proxy's row name (e.g. "mesh-proxy, JWT + RBAC"). */
  readonly name: string;
  readonly rounds: readonly Round[];
}

/** One pass of load against a contender (wrk in the bench). */
export type Measure = (url: string, seconds: number, headers: Record<string, string>) => Promise<WrkResult>;

/**
 * `rounds` rounds of `seconds` of load against each of nginx, the floor and the proxy, round i
 * starting with the i-th of them; fails on any socket error or non-2xx.
 */
export async function alternate(nginx: Contender, floor: Contender, proxy: Contender, rounds: number, seconds: number, measure: Measure = wrk): Promise<Alternated> {
  const order = [nginx, floor, proxy] as const;
  const measured: Round[] = [];
  for (let i = 0; i < rounds; i++) {
    const rps = new Map<Contender, number>();
    for (let k = 0; k < order.length; k++) {
      const c = order[(i + k) % order.length]!;
      const r = await measure(c.url, seconds, c.headers);
      if (r.errors + r.non2xx > 0) throw new Error(`alternated round ${i + 1}, ${c.name}: ${r.errors} socket errors, ${r.non2xx} non-2xx responses`);
      rps.set(c, r.rps);
    }
    measured.push({ nginx: rps.get(nginx)!, floor: rps.get(floor)!, proxy: rps.get(proxy)! });
  }
  return { name: proxy.name, rounds: measured };
}

export function median(values: readonly number[]): number {
  const s = [...values].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 === 1 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

/** The table of one alternated measurement: a line per round, then the medians and the ranges of the ratios. */
export function alternatedTable(a: Alternated, seconds: number): string {
  const f = (n: number, d = 0) => n.toFixed(d);
  const toNginx = a.rounds.map((r) => r.proxy / r.nginx);
  const toFloor = a.rounds.map((r) => r.proxy / r.floor);
  const floorToNginx = a.rounds.map((r) => r.floor / r.nginx);
  const range = (v: number[]) => `${f(Math.min(...v), 2)}-${f(Math.max(...v), 2)}`;
  const lines = [
    `| round | nginx req/s | Node floor req/s | ${a.name} req/s | × nginx | × Node floor | floor × nginx |`,
    '|---|---|---|---|---|---|---|',
    ...a.rounds.map((r, i) => `| ${i + 1} | ${f(r.nginx)} | ${f(r.floor)} | ${f(r.proxy)} | ${f(toNginx[i]!, 2)} | ${f(toFloor[i]!, 2)} | ${f(floorToNginx[i]!, 2)} |`),
    `| median | ${f(median(a.rounds.map((r) => r.nginx)))} | ${f(median(a.rounds.map((r) => r.floor)))} | ${f(median(a.rounds.map((r) => r.proxy)))} | ${f(median(toNginx), 2)} (${range(toNginx)}) | ${f(median(toFloor), 2)} (${range(toFloor)}) | ${f(median(floorToNginx), 2)} (${range(floorToNginx)}) |`,
  ];
  const head = `alternated rounds, ${a.name}: ${a.rounds.length} rounds of ${seconds} s of wrk -t1 -c20 each against nginx, the Node floor and mesh-proxy, back to back in a rotated order; ratios per round, then their median (min-max)`;
  return `\n${head}\n${lines.join('\n')}\n`;
}
