// The Node.js flags and environment mesh-proxy's processes run with (the main process started by
// the agent, and each worker it forks). V8's young generation defaults to 16 MiB semi-spaces, sized
// for throughput of allocation-heavy programs; a proxy's per-request garbage is small and
// short-lived, and 2 MiB semi-spaces take about 23 MiB off a proxy's RSS with no CPU per request
// measurable on the data-plane bench (docs/bench.md, 2026-11-24 "per-request cost").
// V8 otherwise lets the old generation grow by a factor it picks from GC speed (up to 4x the live
// size); a proxy's live data is mostly its loaded modules and config, so growing by 20 % takes
// 1-4 MiB off a loaded proxy's RSS (heap 2-3 MiB smaller) for about one more mark-compact (~5 ms)
// per 60,000 requests (docs/dataplane.md, issue 17). Not a NODE_OPTIONS flag: only the proxy's.
export const PROXY_NODE_FLAGS: readonly string[] = ['--max-semi-space-size=2', '--heap-growing-percent=20'];

/** A flag's name without its value and with V8's `_` spelling folded into `-`: `--max_semi_space_size=4` -> `--max-semi-space-size`. */
function flagName(flag: string): string {
  return flag.split('=', 1)[0]!.replaceAll('_', '-');
}

/**
 * The proxy's Node flags minus those the user's NODE_OPTIONS sets: Node applies its command line
 * after NODE_OPTIONS, so a flag given on both would otherwise override the user's value.
 */
export function proxyNodeFlags(env: NodeJS.ProcessEnv): string[] {
  const users = new Set((env.NODE_OPTIONS ?? '').split(/\s+/).filter((o) => o.startsWith('--')).map(flagName));
  return PROXY_NODE_FLAGS.filter((f) => !users.has(flagName(f)));
}

/**
 * glibc gives each thread that allocates its own malloc arena (up to 8 per core), and V8's
 * compiler and GC threads keep theirs populated; two arenas take about 3 MiB off a loaded proxy's
 * RSS with no CPU measurable (docs/bench.md, 2026-11-24 "mesh-proxy's memory"). glibc reads it at
 * process start, so it is set in the environment the proxy is started with; a value the user set
 * wins. Other allocators (Envoy's tcmalloc, musl) ignore it.
 */
export const PROXY_PROCESS_ENV: Readonly<Record<string, string>> = { MALLOC_ARENA_MAX: '2' };

/** The environment of a proxy process: `env` with the proxy's defaults under it. */
export function proxyProcessEnv(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  return { ...PROXY_PROCESS_ENV, ...env };
}
