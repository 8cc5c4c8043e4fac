// An open-loop load client for latency at a fixed rate: requests are sent on schedule whether or
// not earlier ones have come back (a closed-loop tool such as wrk waits, and so hides queueing),
// over keep-alive connections, and each latency is recorded in microseconds in an HDR histogram.
// Runs as its own process so that its event loop is not the measured one's; prints one JSON line.
// The first `warm-up` seconds run at the same rate and are not recorded: they hold this client's
// own JIT warm-up and whatever the previous load left behind (wrk's end aborts the requests it had
// in flight, and a proxy closes those upstream connections, as Envoy does, so the next requests
// pay for new ones), so the histogram is the steady state at that rate.
//   node --import tsx bench/dataplane/open-loop.ts <url> <rate> <seconds> [headers-json] [warm-up seconds, default 0]
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

async function run(url: URL, rate: number, seconds: number, warmUpSeconds: number, headers: Record<string, string>): Promise<OpenLoopResult> {
  const pool = new Pool(url.origin, { connections: CONNECTIONS, pipelining: 1 });
  const histogram = build({ lowestDiscernibleValue: 1, highestTrackableValue: 60_000_000, numberOfSignificantValueDigits: 3 });
  const path = url.pathname + url.search;
  const warmUp = Math.round(rate * warmUpSeconds);
  const total = warmUp + Math.round(rate * seconds);
  let scheduled = 0;
  const intervalNs = BigInt(Math.round(1e9 / rate));
  const result = { sent: 0, completed: 0, errors: 0, non2xx: 0 };
  const inFlight = new Set<Promise<void>>();
  const send = (recorded: boolean): void => {
    const start = process.hrtime.bigint();
    const p = pool
      .request({ path, method: 'GET', headers })
      .then(async (res) => {
        await res.body.dump();
        if (!recorded) return;
        histogram.recordValue(Number((process.hrtime.bigint() - start) / 1000n));
        result.completed++;
        if (res.statusCode < 200 || res.statusCode > 299) result.non2xx++;
      })
      .catch(() => {
        if (recorded) result.errors++;
      })
      .finally(() => inFlight.delete(p));
    inFlight.add(p);
    if (recorded) result.sent++;
  };
  // Warm the connections so that connection setup is not counted as latency.
  await Promise.all(Array.from({ length: CONNECTIONS }, () => pool.request({ path, method: 'GET', headers }).then((r) => r.body.dump())));
  const t0 = process.hrtime.bigint();
  while (scheduled < total) {
    const due = Number((process.hrtime.bigint() - t0) / intervalNs) + 1;
    for (; scheduled < Math.min(due, total); scheduled++) send(scheduled >= warmUp);
    // Sleep until the next request is due; timers are coarse, so requests that fell due meanwhile
    // are sent on waking, each timed from its own send.
    const next = t0 + BigInt(scheduled) * intervalNs;
    const waitMs = Number(next - process.hrtime.bigint()) / 1e6;
    await new Promise((r) => setTimeout(r, Math.max(0, waitMs)));
  }
  await Promise.all(inFlight);
  await pool.close();
  const at = (q: number) => histogram.getValueAtPercentile(q);
  return { ...result, p50: at(50), p90: at(90), p99: at(99), p999: at(99.9), max: histogram.maxValue };
}

const [url, rate, seconds, headers, warmUp] = process.argv.slice(2);
if (!url || !rate || !seconds) {
  process.stderr.write('usage: open-loop.ts <url> <rate> <seconds> [headers-json] [warm-up seconds]\n');
  process.exit(2);
}
const out = await run(new URL(url), Number(rate), Number(seconds), Number(warmUp ?? 0), headers ? (JSON.parse(headers) as Record<string, string>) : {});
process.stdout.write(`${JSON.stringify(out)}\n`);
