// /debug/pprof/ on the discovery server's HTTP debug address, when --profile is given: CPU and heap
// profiles in pprof's format (for `go tool pprof`), the same as V8's .cpuprofile and .heapsnapshot
// (for Chrome DevTools), and the runtime's nearest to Go's goroutine view: the handles and requests
// keeping the event loop alive, and its utilisation. Profiles come from node:inspector in-process.
import type { ServerResponse } from 'node:http';
import { Session } from 'node:inspector/promises';
import { performance } from 'node:perf_hooks';
import { activeResources } from '../ctrlz/process-info.js';
import { sendJson, sendText, type Mux } from '../http.js';
import { cpuProfileToPprof, heapProfileToPprof, type CpuProfile, type SamplingHeapProfile } from './convert.js';

/** Bytes between heap samples: V8's default, fine enough to see who holds memory, cheap enough to leave on. */
const HEAP_SAMPLING_INTERVAL = 32 * 1024;
const MAX_SECONDS = 300;
const DEFAULT_SECONDS = 30;

class ProfileRequestError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** `?seconds=`: a whole number from 1 to MAX_SECONDS; absent means DEFAULT_SECONDS, like Go's. */
export function profileSeconds(url: URL): number {
  const raw = url.searchParams.get('seconds');
  if (raw === null) return DEFAULT_SECONDS;
  if (!/^\d+$/.test(raw) || Number(raw) < 1 || Number(raw) > MAX_SECONDS) {
    throw new ProfileRequestError(400, `invalid seconds "${raw}": expected a whole number of seconds from 1 to ${MAX_SECONDS}`);
  }
  return Number(raw);
}

/** One inspector session for the process; V8 runs one CPU profile at a time. */
export class Profiler {
  private readonly session = new Session();
  private cpuBusy = false;
  private readonly heapStarted: Promise<void>;

  constructor() {
    this.session.connect();
    // Sampling from the start, so a heap profile shows what was allocated since and is still alive.
    this.heapStarted = this.session.post('HeapProfiler.startSampling', { samplingInterval: HEAP_SAMPLING_INTERVAL }).then(() => undefined);
  }

  async cpu(seconds: number): Promise<{ profile: CpuProfile; startedAt: Date }> {
    if (this.cpuBusy) throw new ProfileRequestError(409, 'a CPU profile is already being taken; try again when it completes');
    this.cpuBusy = true;
    try {
      await this.session.post('Profiler.enable');
      const startedAt = new Date();
      await this.session.post('Profiler.start');
      await new Promise((r) => setTimeout(r, seconds * 1000));
      const { profile } = (await this.session.post('Profiler.stop')) as { profile: CpuProfile };
      await this.session.post('Profiler.disable');
      return { profile, startedAt };
    } finally {
      this.cpuBusy = false;
    }
  }

  async heap(): Promise<SamplingHeapProfile> {
    await this.heapStarted;
    const { profile } = (await this.session.post('HeapProfiler.getSamplingProfile')) as { profile: SamplingHeapProfile };
    return profile;
  }

  /** Streams a heap snapshot (the .heapsnapshot DevTools loads) as V8 produces it. */
  async snapshot(res: ServerResponse): Promise<void> {
    res.writeHead(200, { 'content-type': 'application/json', 'content-disposition': 'attachment; filename="heap.heapsnapshot"' });
    const onChunk = (m: { params: { chunk: string } }) => res.write(m.params.chunk);
    this.session.on('HeapProfiler.addHeapSnapshotChunk', onChunk);
    try {
      await this.session.post('HeapProfiler.takeHeapSnapshot', { reportProgress: false });
    } finally {
      this.session.off('HeapProfiler.addHeapSnapshotChunk', onChunk);
    }
    res.end();
  }

  close(): void {
    this.session.disconnect();
  }
}

function sendBinary(res: ServerResponse, body: Uint8Array, filename: string): void {
  res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-disposition': `attachment; filename="${filename}"`, 'content-length': body.byteLength });
  res.end(body);
}

function guarded(fn: (res: ServerResponse, url: URL) => Promise<void> | void) {
  return async (_req: unknown, res: ServerResponse, url: URL) => {
    try {
      await fn(res, url);
    } catch (e) {
      if (e instanceof ProfileRequestError) sendText(res, e.status, `${e.message}\n`);
      else throw e;
    }
  };
}

const ENDPOINTS: Array<[string, string]> = [
  ['/debug/pprof/profile', '?seconds=N (default 30): CPU profile in pprof format (go tool pprof)'],
  ['/debug/pprof/heap', 'sampled live heap allocations in pprof format (go tool pprof)'],
  ['/debug/pprof/cpuprofile', '?seconds=N (default 30): CPU profile as V8 .cpuprofile (Chrome DevTools, Performance)'],
  ['/debug/pprof/heapsnapshot', 'V8 heap snapshot (Chrome DevTools, Memory)'],
  ['/debug/pprof/handles', 'active handles and requests keeping the event loop alive, event-loop utilisation'],
];

/** Registers the profiling endpoints; returns the profiler to close on shutdown. */
export function installPprof(mux: Mux): Profiler {
  const profiler = new Profiler();
  mux
    .handle('/debug/pprof/', 'profiling endpoints (--profile)', (_req, res) =>
      sendText(res, 200, `profiles of process ${process.pid}:\n\n${ENDPOINTS.map(([p, h]) => `${p}\n    ${h}\n`).join('')}`),
    )
    .handle(ENDPOINTS[0]![0], ENDPOINTS[0]![1], guarded(async (res, url) => {
      const { profile, startedAt } = await profiler.cpu(profileSeconds(url));
      sendBinary(res, cpuProfileToPprof(profile, startedAt).encode(), 'cpu.pprof');
    }))
    .handle(ENDPOINTS[1]![0], ENDPOINTS[1]![1], guarded(async (res) => sendBinary(res, heapProfileToPprof(await profiler.heap(), HEAP_SAMPLING_INTERVAL, new Date()).encode(), 'heap.pprof')))
    .handle(ENDPOINTS[2]![0], ENDPOINTS[2]![1], guarded(async (res, url) => {
      const { profile } = await profiler.cpu(profileSeconds(url));
      const body = JSON.stringify(profile);
      res.writeHead(200, { 'content-type': 'application/json', 'content-disposition': 'attachment; filename="cpu.cpuprofile"', 'content-length': Buffer.byteLength(body) });
      res.end(body);
    }))
    .handle(ENDPOINTS[3]![0], ENDPOINTS[3]![1], guarded((res) => profiler.snapshot(res)))
    .handle(ENDPOINTS[4]![0], ENDPOINTS[4]![1], (_req, res) =>
      sendJson(res, 200, { pid: process.pid, activeResources: activeResources(), eventLoopUtilization: performance.eventLoopUtilization().utilization }),
    );
  return profiler;
}
