// Throughput with wrk (Debian's `wrk`, a C load generator): one thread, 20 keep-alive connections,
// so that the load tool takes as little of the machine's two cores as it can.
import { spawn } from 'node:child_process';

export interface WrkResult {
  rps: number;
  errors: number;
  non2xx: number;
}

export async function wrk(url: string, seconds: number, headers: Record<string, string>): Promise<WrkResult> {
  // wrk adds its own Host unless one is given spelled exactly `Host`.
  const header = (k: string) => (k.toLowerCase() === 'host' ? 'Host' : k);
  const args = ['-t1', '-c20', `-d${seconds}s`, ...Object.entries(headers).flatMap(([k, v]) => ['-H', `${header(k)}: ${v}`]), url];
  const child = spawn('wrk', args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr.on('data', (d: Buffer) => (out += d.toString()));
  const code = await new Promise<number | null>((resolve, reject) => {
    child.on('error', (e) => reject(new Error(`wrk could not start (${e.message}); install Debian's wrk`)));
    child.on('close', resolve);
  });
  const rps = /Requests\/sec:\s+([\d.]+)/.exec(out);
  if (code !== 0 || !rps) throw new Error(`wrk failed (exit ${code}): ${out.trim()}`);
  const socket = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(out);
  const errors = socket ? socket.slice(1).reduce((s, n) => s + Number(n), 0) : 0;
  const non2xx = Number(/Non-2xx or 3xx responses: (\d+)/.exec(out)?.[1] ?? 0);
  return { rps: Number(rps[1]), errors, non2xx };
}
