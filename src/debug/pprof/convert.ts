// V8's profiles (node:inspector's Profiler and HeapProfiler) in pprof's protobuf format, built with
// the pprof-format library, so `go tool pprof` and other pprof tooling read them. Pure: profile in,
// pprof Profile out.
import { Function as PprofFunction, Line, Location, Profile, Sample, StringTable, ValueType } from 'pprof-format';

/** V8's call frame (Runtime.CallFrame): 0-based line and column. */
export interface CallFrame {
  functionName: string;
  scriptId: string;
  url: string;
  lineNumber: number;
  columnNumber: number;
}

/** Profiler.Profile, the `.cpuprofile` Chrome DevTools opens. */
export interface CpuProfile {
  nodes: Array<{ id: number; callFrame: CallFrame; hitCount?: number; children?: number[] }>;
  startTime: number;
  endTime: number;
  samples?: number[];
  timeDeltas?: number[];
}

/** HeapProfiler.SamplingHeapProfile. */
export interface HeapNode {
  callFrame: CallFrame;
  selfSize: number;
  id: number;
  children: HeapNode[];
}
export interface SamplingHeapProfile {
  head: HeapNode;
  samples: Array<{ size: number; nodeId: number; ordinal: number }>;
}

/** Functions and locations, one per distinct call frame, shared by every sample of a profile. */
class Frames {
  readonly strings = new StringTable();
  readonly functions: PprofFunction[] = [];
  readonly locations: Location[] = [];
  private readonly byKey = new Map<string, number>();

  /** The location id of a frame. */
  location(f: CallFrame): number {
    const name = f.functionName || '(anonymous)';
    const key = `${name}\0${f.url}\0${f.lineNumber}\0${f.columnNumber}`;
    let id = this.byKey.get(key);
    if (id === undefined) {
      id = this.locations.length + 1;
      const file = f.url || `script ${f.scriptId}`;
      this.functions.push(new PprofFunction({ id, name: this.strings.dedup(name), systemName: this.strings.dedup(name), filename: this.strings.dedup(file), startLine: f.lineNumber + 1 }));
      this.locations.push(new Location({ id, line: [new Line({ functionId: id, line: f.lineNumber + 1 })] }));
      this.byKey.set(key, id);
    }
    return id;
  }
}

/** V8's synthetic root frame, which is no function of the program. */
const isRoot = (f: CallFrame) => f.functionName === '(root)' && f.url === '';

function valueType(strings: StringTable, type: string, unit: string): ValueType {
  return new ValueType({ type: strings.dedup(type), unit: strings.dedup(unit) });
}

/**
 * CPU samples per stack: `samples/count` and `cpu/nanoseconds`, each sample's time being the delta
 * V8 recorded before the next one (the last gets the mean interval).
 */
export function cpuProfileToPprof(profile: CpuProfile, startedAt: Date): Profile {
  const frames = new Frames();
  const parent = new Map<number, number>();
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const stackOf = new Map<number, number[]>();
  const stack = (id: number): number[] => {
    let s = stackOf.get(id);
    if (!s) {
      s = [];
      for (let cur: number | undefined = id; cur !== undefined; cur = parent.get(cur)) {
        const f = byId.get(cur)!.callFrame;
        if (!isRoot(f)) s.push(frames.location(f));
      }
      stackOf.set(id, s);
    }
    return s;
  };
  const samples = profile.samples ?? [];
  const deltas = profile.timeDeltas ?? [];
  const durationUs = Math.max(0, profile.endTime - profile.startTime);
  const meanUs = samples.length > 0 ? durationUs / samples.length : 0;
  const perNode = new Map<number, { count: number; us: number }>();
  samples.forEach((id, i) => {
    const agg = perNode.get(id) ?? { count: 0, us: 0 };
    agg.count++;
    agg.us += deltas[i + 1] ?? meanUs;
    perNode.set(id, agg);
  });
  const strings = frames.strings;
  const sampleType = [valueType(strings, 'samples', 'count'), valueType(strings, 'cpu', 'nanoseconds')];
  const out = [...perNode].map(([id, agg]) => new Sample({ locationId: stack(id), value: [agg.count, Math.round(agg.us * 1000)] }));
  return new Profile({
    sampleType,
    sample: out,
    location: frames.locations,
    function: frames.functions,
    stringTable: strings,
    timeNanos: BigInt(startedAt.getTime()) * 1_000_000n,
    durationNanos: Math.round(durationUs * 1000),
    periodType: valueType(strings, 'cpu', 'nanoseconds'),
    period: Math.round(meanUs * 1000),
  });
}

/**
 * Sampled live allocations per stack: `inuse_objects/count` and `inuse_space/bytes`, as Go's heap
 * profile names them (V8's sampling heap profiler reports what is still alive).
 */
export function heapProfileToPprof(profile: SamplingHeapProfile, intervalBytes: number, at: Date): Profile {
  const frames = new Frames();
  const stacks = new Map<number, number[]>();
  const walk = (node: HeapNode, path: number[]) => {
    const here = isRoot(node.callFrame) ? path : [frames.location(node.callFrame), ...path];
    stacks.set(node.id, here);
    for (const c of node.children) walk(c, here);
  };
  walk(profile.head, []);
  const perNode = new Map<number, { count: number; bytes: number }>();
  for (const s of profile.samples) {
    const agg = perNode.get(s.nodeId) ?? { count: 0, bytes: 0 };
    agg.count++;
    agg.bytes += s.size;
    perNode.set(s.nodeId, agg);
  }
  const strings = frames.strings;
  return new Profile({
    sampleType: [valueType(strings, 'inuse_objects', 'count'), valueType(strings, 'inuse_space', 'bytes')],
    sample: [...perNode].filter(([id]) => stacks.has(id)).map(([id, agg]) => new Sample({ locationId: stacks.get(id)!, value: [agg.count, agg.bytes] })),
    location: frames.locations,
    function: frames.functions,
    stringTable: strings,
    timeNanos: BigInt(at.getTime()) * 1_000_000n,
    periodType: valueType(strings, 'space', 'bytes'),
    period: intervalBytes,
  });
}
