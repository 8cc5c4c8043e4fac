// The Node.js flags mesh-proxy's processes run with (the main process started by the agent, and
// each worker it forks). V8's young generation defaults to 16 MiB semi-spaces, sized for
// throughput of allocation-heavy programs; a proxy's per-request garbage is small and short-lived,
// and 2 MiB semi-spaces take about 23 MiB off a proxy's RSS with no CPU per request measurable on
// the data-plane bench (docs/bench.md, 2026-11-24 "per-request cost").
export const PROXY_NODE_FLAGS: readonly string[] = ['--max-semi-space-size=2'];
