// What the introspection UI and the profiling endpoints report about the running process: identity,
// uptime, memory, event-loop delay and utilisation, and the handles and requests keeping it alive
// (Node's nearest equivalent of a goroutine view).
import { monitorEventLoopDelay, performance, type EventLoopUtilization, type IntervalHistogram } from 'node:perf_hooks';
import { getHeapStatistics } from 'node:v8';

export interface ProcessInfo {
  pid: number;
  ppid: number;
  hostname: string;
  startTime: string;
  uptimeSeconds: number;
  node: string;
  platform: string;
  memory: {
    rssBytes: number;
    heapUsedBytes: number;
    heapTotalBytes: number;
    heapLimitBytes: number;
    externalBytes: number;
    arrayBuffersBytes: number;
  };
  eventLoop: {
    /** Delay percentiles in milliseconds since the sampler started (or was reset). */
    delayMs: { min: number; mean: number; p50: number; p99: number; max: number };
    /** Share of time the loop was busy since the previous reading, 0..1. */
    utilization: number;
  };
  /** Active resources by type (TCPServerWrap, Timeout, FSReqCallback, ...). */
  activeResources: Record<string, number>;
}

/** Counts Node's active resources by type. */
export function activeResources(): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const r of process.getActiveResourcesInfo()) counts[r] = (counts[r] ?? 0) + 1;
  return counts;
}

const ms = (ns: number) => Math.round(ns / 1e4) / 100;

/**
 * Samples the event loop for as long as it is open. The delay histogram runs from construction;
 * utilisation is reported for the interval since the previous reading, which is what a polling
 * page wants.
 */
export class ProcessSampler {
  private readonly delay: IntervalHistogram = monitorEventLoopDelay({ resolution: 10 });
  private lastElu: EventLoopUtilization = performance.eventLoopUtilization();

  constructor() {
    this.delay.enable();
  }

  /** Event-loop utilisation since the previous call. */
  utilization(): number {
    const now = performance.eventLoopUtilization();
    const delta = performance.eventLoopUtilization(now, this.lastElu);
    this.lastElu = now;
    return Math.round(delta.utilization * 1e4) / 1e4;
  }

  read(hostname: string): ProcessInfo {
    const mem = process.memoryUsage();
    const d = this.delay;
    return {
      pid: process.pid,
      ppid: process.ppid,
      hostname,
      startTime: new Date(performance.timeOrigin).toISOString(),
      uptimeSeconds: Math.round(process.uptime() * 10) / 10,
      node: process.version,
      platform: `${process.platform}/${process.arch}`,
      memory: {
        rssBytes: mem.rss,
        heapUsedBytes: mem.heapUsed,
        heapTotalBytes: mem.heapTotal,
        heapLimitBytes: getHeapStatistics().heap_size_limit,
        externalBytes: mem.external,
        arrayBuffersBytes: mem.arrayBuffers,
      },
      eventLoop: {
        // Before the first sample the histogram's min is a sentinel, not a delay.
        delayMs: d.count === 0 ? { min: 0, mean: 0, p50: 0, p99: 0, max: 0 } : { min: ms(d.min), mean: ms(d.mean), p50: ms(d.percentile(50)), p99: ms(d.percentile(99)), max: ms(d.max) },
        utilization: this.utilization(),
      },
      activeResources: activeResources(),
    };
  }

  close(): void {
    this.delay.disable();
  }
}
