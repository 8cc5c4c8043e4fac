// Loaded into the mesh's programs by bench/dataplane/memory.ts (`NODE_OPTIONS=--import` of its
// compiled file, so that no TypeScript loader adds to what it measures); acts in mesh-proxy only.
// On SIGUSR2 the proxy writes what its memory is made of, as V8 and Node see it, to
// MESH_BENCH_MEMORY_DIR/<pid>.json. MESH_BENCH_V8_FLAGS (space-separated) are set before the proxy's
// modules load, for trying V8 flags that NODE_OPTIONS does not accept.
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { getHeapSpaceStatistics, setFlagsFromString } from 'node:v8';

export interface ProxyMemory {
  usage: NodeJS.MemoryUsage;
  /** Bytes used per V8 heap space. */
  spaces: Record<string, number>;
}

const dir = process.env.MESH_BENCH_MEMORY_DIR;
if (dir && /mesh-proxy\.js$/.test(process.argv[1] ?? '')) {
  for (const flag of (process.env.MESH_BENCH_V8_FLAGS ?? '').split(' ').filter(Boolean)) setFlagsFromString(flag);
  process.on('SIGUSR2', () => {
    const spaces = Object.fromEntries(getHeapSpaceStatistics().map((s) => [s.space_name, s.space_used_size]));
    const report: ProxyMemory = { usage: process.memoryUsage(), spaces };
    writeFileSync(join(dir, `${process.pid}.json`), JSON.stringify(report));
  });
}
