// bench/dataplane hcm-alone: the connection manager alone, for A/B runs of the request path on a
// loaded box. This process hosts one HCM (router only, or jwt_authn + rbac + router as the mesh's
// JWT + RBAC) on a node:http server in front of a minimal node:http app in a child process; wrk
// (-t1 -c20, keep-alive) drives it for several rounds and each round's CPU of this process per
// request (user and system apart) is printed with the round's req/s. Compare two checkouts by
// running it alternately and comparing the minimum (the round least disturbed by the rest of the
// box).
// --telemetry adds the standard metrics (the metadata exchange and stats filters, as on every
// sidecar inbound by default).
//   npm run bench -- hcm-alone [--seconds N] [--rounds N] [--policy] [--telemetry]
import { spawn } from 'node:child_process';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { create } from '@bufbuild/protobuf';
import { anyPack } from '@bufbuild/protobuf/wkt';
import { FilterChainSchema } from '../../src/gen/envoy/config/listener/v3/listener_components_pb.js';
import { RBAC_Action } from '../../src/gen/envoy/config/rbac/v3/rbac_pb.js';
import { JwtAuthenticationSchema } from '../../src/gen/envoy/extensions/filters/http/jwt_authn/v3/config_pb.js';
import { RBACSchema } from '../../src/gen/envoy/extensions/filters/http/rbac/v3/rbac_pb.js';
import { RouterSchema } from '../../src/gen/envoy/extensions/filters/http/router/v3/router_pb.js';
import { HttpConnectionManagerSchema } from '../../src/gen/envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager_pb.js';
import { buildHcmForFilterChain } from '../../src/dataplane/http-connection-manager.js';
import { HCM_FILTER_NAME } from '../../src/envoy/names.js';
import { StaticClusterManager } from '../../test/dataplane/static-cluster-manager.js';
import { ISSUER, jwks, meshJwtAuthn, meshProvider, mint, testKey } from '../../test/dataplane/fixtures.js';
import { freePort } from '../../samples/local-mesh.js';
import { numberOption } from './options.js';
import { ConfigSchema } from '../../src/gen/mesh/http/peer_metadata/config_pb.js';
import { PluginConfigSchema } from '../../src/gen/mesh/stats/config_pb.js';
import { StatsStore } from '../../src/dataplane/stats.js';
import { localNode } from '../../src/dataplane/telemetry/workload-metadata.js';
import { wrk } from './wrk.js';

/** The app: a small JSON body with content-length, as the sample httpbin's /ip. */
const APP = `const body = JSON.stringify({ origin: '127.0.0.1' }) + '\\n';
const s = require('node:http').createServer((req, res) => { req.resume(); res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) }); res.end(body); });
s.keepAliveTimeout = 60000;
s.listen(Number(process.argv[1]), '127.0.0.1');`;

async function main(): Promise<void> {
  const seconds = numberOption('--seconds', 3);
  const rounds = numberOption('--rounds', 4);
  const policy = process.argv.includes('--policy');
  const telemetry = process.argv.includes('--telemetry');
  const appPort = await freePort();
  const app = spawn(process.execPath, ['-e', APP, String(appPort)], { stdio: 'inherit' });
  const clusters = new StaticClusterManager();
  const stats = new StatsStore();
  clusters.set('app', [{ host: '127.0.0.1', port: appPort }]);
  const key = await testKey('RS256', 'k1');
  const headers: Record<string, string> = policy ? { authorization: `Bearer ${await mint(key, { sub: 'bench' })}` } : {};
  const subIsBench = { filter: 'envoy.filters.http.jwt_authn', path: [ISSUER, 'sub'].map((k) => ({ segment: { case: 'key' as const, value: k } })), value: { matchPattern: { case: 'stringMatch' as const, value: { matchPattern: { case: 'exact' as const, value: 'bench' } } } } };
  const rbac = create(RBACSchema, { rules: { action: RBAC_Action.ALLOW, policies: { bench: { permissions: [{ rule: { case: 'any', value: true } }], principals: [{ identifier: { case: 'metadata', value: subIsBench } }] } } } });
  const httpFilters = [
    ...(policy
      ? [
          { name: 'envoy.filters.http.jwt_authn', configType: { case: 'typedConfig' as const, value: anyPack(JwtAuthenticationSchema, meshJwtAuthn({ origins: meshProvider(ISSUER, jwks(key)) })) } },
          { name: 'envoy.filters.http.rbac', configType: { case: 'typedConfig' as const, value: anyPack(RBACSchema, rbac) } },
        ]
      : []),
    ...(telemetry
      ? [
          { name: 'mesh.metadata_exchange', configType: { case: 'typedConfig' as const, value: anyPack(ConfigSchema, create(ConfigSchema, { downstreamDiscovery: [{ methodSpecifier: { case: 'istioHeaders', value: {} } }], downstreamPropagation: [{ methodSpecifier: { case: 'istioHeaders', value: {} } }] })) } },
          { name: 'mesh.stats', configType: { case: 'typedConfig' as const, value: anyPack(PluginConfigSchema, create(PluginConfigSchema, { disableHostHeaderFallback: true })) } },
        ]
      : []),
    { name: 'envoy.filters.http.router', configType: { case: 'typedConfig' as const, value: anyPack(RouterSchema, create(RouterSchema, {})) } },
  ];
  const route = { match: { pathSpecifier: { case: 'prefix' as const, value: '/' } }, action: { case: 'route' as const, value: { clusterSpecifier: { case: 'cluster' as const, value: 'app' } } } };
  const hcm = create(HttpConnectionManagerSchema, { statPrefix: 'bench', routeSpecifier: { case: 'routeConfig', value: { virtualHosts: [{ name: 'app', domains: ['*'], routes: [route] }] } }, httpFilters });
  const handler = buildHcmForFilterChain(create(FilterChainSchema, { filters: [{ name: HCM_FILTER_NAME, configType: { case: 'typedConfig', value: anyPack(HttpConnectionManagerSchema, hcm) } }] }), {
    clusters,
    telemetry: { node: localNode('sidecar~127.0.0.1~app-1.default~default.svc.cluster.local', 'app.default', { NAMESPACE: 'default', WORKLOAD_NAME: 'app', LABELS: { app: 'app', version: 'v1' } }), inbound: true, stats },
  });
  const server = createServer((req, res) => handler.handle(req, res));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/ip`;
  try {
    await wrk(url, 1, headers); // warm-up: JIT, upstream connections
    const perRequest: number[] = [];
    for (let i = 0; i < rounds; i++) {
      const before = process.cpuUsage();
      const r = await wrk(url, seconds, headers);
      const cpu = process.cpuUsage(before);
      if (r.errors + r.non2xx > 0) throw new Error(`round ${i + 1}: ${r.errors} socket errors, ${r.non2xx} non-2xx responses`);
      const requests = r.rps * seconds;
      perRequest.push((cpu.user + cpu.system) / requests);
      // The kernel's share (socket reads and writes, on loopback with the peer's receive path) apart.
      process.stdout.write(`round ${i + 1}: ${r.rps.toFixed(0)} req/s, ${perRequest[i]!.toFixed(1)} µs CPU per request (user ${(cpu.user / requests).toFixed(1)}, system ${(cpu.system / requests).toFixed(1)})\n`);
    }
    if (telemetry) {
      const counted = stats.samples().filter((x) => x.prom === 'istio_requests_total').reduce((n, x) => n + x.value, 0);
      process.stdout.write(`istio_requests_total: ${counted} requests in ${stats.samples().filter((x) => x.prom === 'istio_requests_total').length} series\n`);
    }
    const sorted = [...perRequest].sort((a, b) => a - b);
    process.stdout.write(`hcm-alone ${policy ? 'JWT + RBAC' : 'router only'}${telemetry ? ' + standard metrics' : ''}: µs CPU per request min ${sorted[0]!.toFixed(1)}, median ${sorted[Math.floor(sorted.length / 2)]!.toFixed(1)}\n`);
  } finally {
    app.kill();
    server.close();
    clusters.close();
  }
}

main().catch((e: unknown) => {
  process.stderr.write(`bench failed: ${(e as Error).message}\n`);
  process.exit(1);
});
