// Circuit breakers and outlier detection through a real connection manager and the real cluster
// manager: Cluster messages as CDS delivers them, upstream servers on loopback.
import assert from 'node:assert/strict';
import { Agent, createServer, type Server } from 'node:http';
import { after, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { create, type MessageInitShape } from '@bufbuild/protobuf';
import { anyPack } from '@bufbuild/protobuf/wkt';
import type { CircuitBreakersSchema } from '../../src/gen/envoy/config/cluster/v3/circuit_breaker_pb.js';
import { ClusterSchema } from '../../src/gen/envoy/config/cluster/v3/cluster_pb.js';
import type { OutlierDetectionSchema } from '../../src/gen/envoy/config/cluster/v3/outlier_detection_pb.js';
import { FilterChainSchema } from '../../src/gen/envoy/config/listener/v3/listener_components_pb.js';
import { RouterSchema } from '../../src/gen/envoy/extensions/filters/http/router/v3/router_pb.js';
import { HttpConnectionManagerSchema } from '../../src/gen/envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager_pb.js';
import { DynamicClusterManager } from '../../src/dataplane/clusters.js';
import { buildHcmForFilterChain } from '../../src/dataplane/http-connection-manager.js';
import { StatsStore } from '../../src/dataplane/stats.js';
import { HCM_FILTER_NAME } from '../../src/envoy/names.js';
import { close, get, listen } from '../helpers/http.js';

interface Protections {
  circuitBreakers?: MessageInitShape<typeof CircuitBreakersSchema>;
  outlierDetection?: MessageInitShape<typeof OutlierDetectionSchema>;
}

const agent = new Agent({ keepAlive: true });
const servers: Server[] = [];
const cm = new DynamicClusterManager(new StatsStore());

const send = (port: number, path: string, headers: Record<string, string> = {}) => get(agent, port, path, headers);

/** An upstream answering `status` (or never, for 'hang'); `hits` counts what reached it. */
async function upstream(status: number | 'hang'): Promise<{ port: number; hits: () => number }> {
  let hits = 0;
  const server = createServer((_req, res) => {
    hits++;
    if (status !== 'hang') res.writeHead(status).end(String(status));
  });
  servers.push(server);
  return { port: await listen(server), hits: () => hits };
}

const endpoint = (port: number) => ({ hostIdentifier: { case: 'endpoint' as const, value: { address: { address: { case: 'socketAddress' as const, value: { address: '127.0.0.1', portSpecifier: { case: 'portValue' as const, value: port } } } } } } });

/** A proxy whose only route goes to a cluster made of `ports` with `extra` (as CDS sends it). */
async function proxy(name: string, ports: number[], extra: Protections): Promise<number> {
  const clusters = [...cm.dynamicMessages(), create(ClusterSchema, { name, loadAssignment: { clusterName: name, endpoints: [{ lbEndpoints: ports.map(endpoint) }] }, ...extra })];
  cm.commit(cm.prepare(clusters, new Map()));
  const hcm = create(HttpConnectionManagerSchema, {
    statPrefix: name,
    routeSpecifier: {
      case: 'routeConfig',
      value: { virtualHosts: [{ name: 'v', domains: ['*'], routes: [{ match: { pathSpecifier: { case: 'prefix', value: '/' } }, action: { case: 'route', value: { clusterSpecifier: { case: 'cluster', value: name }, timeout: { seconds: 5n } } } }] }] },
    },
    httpFilters: [{ name: 'envoy.filters.http.router', configType: { case: 'typedConfig', value: anyPack(RouterSchema, create(RouterSchema, {})) } }],
  });
  const handler = buildHcmForFilterChain(create(FilterChainSchema, { filters: [{ name: HCM_FILTER_NAME, configType: { case: 'typedConfig', value: anyPack(HttpConnectionManagerSchema, hcm) } }] }), { clusters: cm });
  const server = createServer((req, res) => handler.handle(req, res));
  servers.push(server);
  return listen(server);
}

after(async () => {
  agent.destroy();
  cm.close();
  await Promise.all(servers.map(close));
});

describe('cluster protections', () => {
  it('circuit breaker overflow answers 503 with x-envoy-overloaded, and admits again once the request ends', async () => {
    const hang = await upstream('hang');
    const port = await proxy('breaker', [hang.port], { circuitBreakers: { thresholds: [{ maxConnections: 1, maxPendingRequests: 1, maxRequests: 2 }] } });
    const first = send(port, '/1');
    const second = send(port, '/2');
    while (hang.hits() < 2) await sleep(10);
    const third = await send(port, '/3');
    assert.equal(third.status, 503);
    assert.equal(third.headers['x-envoy-overloaded'], 'true');
    assert.match(third.body, /reset reason: overflow/);
    // The route timeout (5 s) ends the first two; then a request is admitted again.
    assert.equal((await first).status, 504);
    await second;
    assert.equal((await send(port, '/4')).status, 504);
  });

  it('ejects a host after 5 consecutive 5xx and takes it back after base_ejection_time', async () => {
    const bad = await upstream(500);
    const good = await upstream(200);
    const port = await proxy('outlier', [bad.port, good.port], {
      outlierDetection: { consecutive5xx: 5, baseEjectionTime: { seconds: 1n }, maxEjectionPercent: 50, interval: { seconds: 1n } },
    });
    // Round robin: the bad host sees every other request until its fifth 500.
    for (let i = 0; i < 10; i++) await send(port, '/');
    assert.equal(bad.hits(), 5);
    const statuses = [];
    for (let i = 0; i < 10; i++) statuses.push((await send(port, '/')).status);
    assert.deepEqual(statuses, Array(10).fill(200), 'the ejected host gets nothing');
    assert.equal(bad.hits(), 5);
    await sleep(1100);
    for (let i = 0; i < 4; i++) await send(port, '/');
    assert.ok(bad.hits() > 5, 'the host is back after its ejection time');
  });
});
