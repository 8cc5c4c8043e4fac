// `pilot-agent wait`: polls a readiness URL until it answers 200 or the time runs out.
import { scope } from '../common/log.js';
import { describeFailure } from './http-request.js';

export interface WaitOptions {
  url: string;
  periodMs: number;
  requestTimeoutMs: number;
  timeoutMs: number;
}

/** One attempt: null when ready, else why not (status or connection error). */
async function probe(url: string, timeoutMs: number): Promise<string | null> {
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) });
    await res.body?.cancel();
    return res.status === 200 ? null : `HTTP status code ${res.status}`;
  } catch (e) {
    return describeFailure(e);
  }
}

/** Resolves to the exit code: 0 once ready, 1 after the timeout with the last reason. */
export async function waitForReady(opts: WaitOptions): Promise<number> {
  const log = scope('default');
  log.info(`Waiting for proxy to be ready (timeout: ${Math.round(opts.timeoutMs / 1000)} seconds)...`);
  const deadline = Date.now() + opts.timeoutMs;
  let last = 'no attempt made';
  for (;;) {
    const started = Date.now();
    // Each attempt gets the whole --requestTimeoutMillis, as in the Go mesh's agent: the deadline is
    // checked between attempts. Cut to the time left, an attempt near the deadline had a few ms
    // and reported "timed out" for a server that answers 503 at once.
    const why = await probe(opts.url, opts.requestTimeoutMs);
    if (why === null) {
      log.info('Proxy is ready');
      return 0;
    }
    last = why;
    log.debug(`not ready: ${why}`);
    const next = started + opts.periodMs;
    if (next >= deadline) break;
    await new Promise((r) => setTimeout(r, next - Date.now()));
  }
  process.stderr.write(`Error: timeout waiting for ${opts.url} to become ready after ${Math.round(opts.timeoutMs / 1000)}s; last attempt: ${last}\n`);
  return 1;
}
