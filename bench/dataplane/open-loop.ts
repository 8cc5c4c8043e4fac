// An open-loop load client for latency at a fixed rate: requests are sent on schedule whether or
// not earlier ones have come back (a closed-loop tool such as wrk waits, and so hides queueing),
// over keep-alive connections, and each latency is recorded in microseconds in an HDR histogram.
// Runs as its own process so that its event loop is not the measured one's; prints one JSON line.
//   node --import tsx bench/dataplane/open-loop.ts <url> <rate> <seconds> [headers-json]
import { build } from 'hdr-histogram-js';
import { Pool } from 'undici';

export interface OpenLoopResult {
  /** Requests scheduled, and how many of them completed with any status. */
  sent: number;
  completed: number;
  errors: number;
  non2xx: number;
  /** Latency percentiles in microseconds. */
  p50: number;
  p90: number;
  p99: number;
  p999: number;
  max: number;
}

const CONNECTIONS = 20;

async function run(url: URL, rate: number, seconds: number, headers: Record<string, string>): Promise<OpenLoopResult> {
  const pool = new Pool(url.origin, { connections: CONNECTIONS, pipelining: 1 });
  const histogram = build({ lowestDiscernibleValue: 1, highestTrackableValue: 60_000_000, numberOfSignificantValueDigits: 3 });
  const path = url.pathname + url.search;
  const total = Math.round(rate * seconds);
  const intervalNs = BigInt(Math.round(1e9 / rate));
  const result = { sent: 0, completed: 0, errors: 0, non2xx: 0 };
  const inFlight = new Set<Promise<void>>();
  const send = (): void => {
    const start = process.hrtime.bigint();
    const p = pool
      .request({ path, method: 'GET', headers })
      .then(async (res) => {
        await res.body.dump();
        histogram.recordValue(Number((process.hrtime.bigint() - start) / 1000n));
        result.completed++;
        if (res.statusCode < 200 || res.statusCode > 299) result.non2xx++;
      })
      .catch(() => {
        result.errors++;
      })
      .finally(() => inFlight.delete(p));
    inFlight.add(p);
    result.sent++;
  };
  // Warm the connections so that connection setup is not counted as latency.
  await Promise.all(Array.from({ length: CONNECTIONS }, () => pool.request({ path, method: 'GET', headers }).then((r) => r.body.dump())));
  const t0 = process.hrtime.bigint();
  while (result.sent < total) {
    const due = Number((process.hrtime.bigint() - t0) / intervalNs) + 1;
    while (result.sent < Math.min(due, total)) send();
    // Sleep until the next request is due; timers are coarse, so requests that fell due meanwhile
    // are sent on waking, each timed from its own send.
    const next = t0 + BigInt(result.sent) * intervalNs;
    const waitMs = Number(next - process.hrtime.bigint()) / 1e6;
    await new Promise((r) => setTimeout(r, Math.max(0, waitMs)));
  }
  await Promise.all(inFlight);
  await pool.close();
  const at = (q: number) => histogram.getValueAtPercentile(q);
  return { ...result, p50: at(50), p90: at(90), p99: at(99), p999: at(99.9), max: histogram.maxValue };
}

const [url, rate, seconds, headers] = process.argv.slice(2);
if (!url || !rate || !seconds) {
  process.stderr.write('usage: open-loop.ts <url> <rate> <seconds> [headers-json]\n');
  process.exit(2);
}
const out = await run(new URL(url), Number(rate), Number(seconds), headers ? (JSON.parse(headers) as Record<string, string>) : {});
process.stdout.write(`${JSON.stringify(out)}\n`);
