// `npm run bench -- <name>`: runs one benchmark. Each prints a table; see docs/bench.md.
const BENCHES: Record<string, { file: string; about: string }> = {
  xds: { file: './xds/discovery.js', about: 'discovery server, real pipeline: 1000 ServiceEntry services, 2000 proxies over gRPC' },
  'xds-generation': { file: './generation.js', about: 'the generators alone (no gRPC): CPU per change for 2000 sidecars' },
  'xds-server': { file: './xds/ads-server.js', about: 'ADS server alone with fixed resources' },
  dataplane: { file: './dataplane/run.js', about: 'mesh-proxy throughput, latency, CPU and RSS (--seconds N)' },
  memory: { file: './dataplane/memory.js', about: 'one mesh-proxy worker\'s RSS under wrk load, and what it is made of (--seconds N --rounds N --no-policy)' },
  'policy-cost': { file: './dataplane/policy-cost.js', about: 'jwt_authn + rbac CPU per request with the dataplane bench\'s policy (REQUESTS=, ROUNDS=)' },
  'hcm-alone': { file: './dataplane/hcm-alone.js', about: 'the connection manager alone, CPU per request over rounds, for A/B runs (--seconds N --rounds N --policy)' },
  'rbac-scale': { file: './dataplane/rbac-scale.js', about: 'RBAC decision time with a 6000-rule AuthorizationPolicy (RULES=, REQUESTS=)' },
};

const name = process.argv[2];
const bench = name === undefined ? undefined : BENCHES[name];
if (!bench) {
  console.error(`usage: npm run bench -- <name>\n${Object.entries(BENCHES).map(([n, b]) => `  ${n.padEnd(12)}${b.about}`).join('\n')}`);
  process.exit(2);
}
await import(bench.file);
