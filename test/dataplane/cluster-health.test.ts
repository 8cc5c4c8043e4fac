// Circuit breakers and outlier detection through a real connection manager and the real cluster
// manager: Cluster messages as CDS delivers them, upstream servers on loopback.
import assert from 'node:assert/strict';
import { Agent, createServer, type IncomingMessage, type Server } from 'node:http';
import type { Duplex } from 'node:stream';
import { after, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { create, type MessageInitShape } from '@bufbuild/protobuf';
import { anyPack } from '@bufbuild/protobuf/wkt';
import type { CircuitBreakersSchema } from '../../src/gen/envoy/config/cluster/v3/circuit_breaker_pb.js';
import { ClusterSchema, type Cluster_CommonLbConfigSchema } from '../../src/gen/envoy/config/cluster/v3/cluster_pb.js';
import { HealthStatus } from '../../src/gen/envoy/config/core/v3/health_check_pb.js';
import type { RetryPolicySchema } from '../../src/gen/envoy/config/route/v3/route_components_pb.js';
import { PreviousPrioritiesConfigSchema } from '../../src/gen/envoy/extensions/retry/priority/previous_priorities/v3/previous_priorities_config_pb.js';
import type { LocalityLbEndpointsSchema } from '../../src/gen/envoy/config/endpoint/v3/endpoint_components_pb.js';
import type { OutlierDetectionSchema } from '../../src/gen/envoy/config/cluster/v3/outlier_detection_pb.js';
import { FilterChainSchema } from '../../src/gen/envoy/config/listener/v3/listener_components_pb.js';
import { RouterSchema } from '../../src/gen/envoy/extensions/filters/http/router/v3/router_pb.js';
import { HttpConnectionManagerSchema } from '../../src/gen/envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager_pb.js';
import { healthFlags } from '../../src/dataplane/admin.js';
import { DynamicClusterManager } from '../../src/dataplane/clusters.js';
import { buildHcmForFilterChain } from '../../src/dataplane/http-connection-manager.js';
import { StatsStore } from '../../src/dataplane/stats.js';
import { HCM_FILTER_NAME } from '../../src/envoy/names.js';
import { close, get, listen } from '../helpers/http.js';
import { answerUpgrades, openUpgrade, upgradeVia } from './upgrade-fixtures.js';

interface Protections {
  circuitBreakers?: MessageInitShape<typeof CircuitBreakersSchema>;
  outlierDetection?: MessageInitShape<typeof OutlierDetectionSchema>;
  commonLbConfig?: MessageInitShape<typeof Cluster_CommonLbConfigSchema>;
}

type Localities = MessageInitShape<typeof LocalityLbEndpointsSchema>[];

const agent = new Agent({ keepAlive: true });
const servers: Server[] = [];
const stats = new StatsStore();
const cm = new DynamicClusterManager(stats);
const counter = (cluster: string, stat: string) => stats.samples().find((s) => s.name === `cluster.${cluster}.${stat}`)?.value ?? 0;

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
function proxy(name: string, ports: number[], extra: Protections, upgrades = false): Promise<number> {
  return proxyOver(name, [{ lbEndpoints: ports.map(endpoint) }], extra, undefined, upgrades);
}

/** The same over localities of its own (priorities, EDS health statuses); `retryPolicy`: the route's; `upgrades`: WebSocket allowed. */
async function proxyOver(name: string, localities: Localities, extra: Protections, retryPolicy?: MessageInitShape<typeof RetryPolicySchema>, upgrades = false): Promise<number> {
  const clusters = [...cm.dynamicMessages(), create(ClusterSchema, { name, loadAssignment: { clusterName: name, endpoints: localities }, ...extra })];
  cm.commit(cm.prepare(clusters, new Map()));
  const hcm = create(HttpConnectionManagerSchema, {
    statPrefix: name,
    routeSpecifier: {
      case: 'routeConfig',
      value: { virtualHosts: [{ name: 'v', domains: ['*'], routes: [{ match: { pathSpecifier: { case: 'prefix', value: '/' } }, action: { case: 'route', value: { clusterSpecifier: { case: 'cluster', value: name }, timeout: { seconds: 5n }, ...(retryPolicy ? { retryPolicy } : {}) } } }] }] },
    },
    httpFilters: [{ name: 'envoy.filters.http.router', configType: { case: 'typedConfig', value: anyPack(RouterSchema, create(RouterSchema, {})) } }],
    upgradeConfigs: upgrades ? [{ upgradeType: 'websocket' }] : [],
  });
  const handler = buildHcmForFilterChain(create(FilterChainSchema, { filters: [{ name: HCM_FILTER_NAME, configType: { case: 'typedConfig', value: anyPack(HttpConnectionManagerSchema, hcm) } }] }), { clusters: cm });
  const server = createServer((req, res) => handler.handle(req, res));
  server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => handler.handleUpgrade(req, socket, head));
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

  it('an upgrade (WebSocket) is one of max_requests while its tunnel is open: over the limit 503 UO, admitted again once it closes', async () => {
    const ws = createServer();
    answerUpgrades(ws);
    servers.push(ws);
    const port = await proxy('breaker-ws', [await listen(ws)], { circuitBreakers: { thresholds: [{ maxRequests: 1 }] } }, true);
    const held = await openUpgrade(port);
    assert.equal(held.status, 101);
    const overflowed = counter('breaker-ws', 'upstream_rq_503');
    assert.equal((await upgradeVia(port)).status, 503);
    assert.equal(counter('breaker-ws', 'upstream_rq_503'), overflowed + 1);
    held.socket!.destroy();
    let again = await upgradeVia(port);
    for (let i = 0; again.status !== 101 && i < 50; i++) {
      await sleep(20);
      again = await upgradeVia(port);
    }
    assert.deepEqual(again, { status: 101, echoed: 'HELLO', xPath: '/ws' });
  });

  it('retry_budget replaces max_retries: retries in flight up to budget_percent of the requests in flight, at least min_retry_concurrency', async () => {
    const { CircuitBreaker, compileCircuitBreakers } = await import('../../src/dataplane/cluster-health.js');
    const { CircuitBreakersSchema } = await import('../../src/gen/envoy/config/cluster/v3/circuit_breaker_pb.js');
    const limits = (retryBudget: MessageInitShape<typeof CircuitBreakersSchema>['thresholds']) => compileCircuitBreakers(create(CircuitBreakersSchema, { thresholds: retryBudget }), false);
    const retriesWith = (requests: number, l: ReturnType<typeof limits>) => {
      const breaker = new CircuitBreaker(l);
      for (let i = 0; i < requests; i++) breaker.admit();
      let retries = 0;
      while (breaker.admit(true) && retries < 1000) retries++;
      return retries;
    };
    // Envoy's defaults (20 %, at least 3), whatever max_retries says.
    const defaults = limits([{ maxRetries: 1, retryBudget: {} }]);
    assert.deepEqual([retriesWith(10, defaults), retriesWith(30, defaults)], [3, 6]);
    const own = limits([{ retryBudget: { budgetPercent: { value: 50 }, minRetryConcurrency: 1 } }]);
    assert.deepEqual([retriesWith(0, own), retriesWith(9, own)], [1, 4]);
    assert.equal(retriesWith(10, limits([{ maxRetries: 2 }])), 2, 'without a budget: max_retries');
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

describe('outlier detection: local-origin errors', () => {
  /** A port nothing listens on: connections to it are refused (a local-origin failure). */
  const deadPort = async () => {
    const s = createServer();
    const port = await listen(s);
    await close(s);
    return port;
  };

  it('split_external_local_origin_errors: refused connections eject by consecutive_local_origin_failure, not as 5xx', async () => {
    const dead = await deadPort();
    const good = await upstream(200);
    const statuses = async (port: number, n: number) => {
      const out: number[] = [];
      for (let i = 0; i < n; i++) out.push((await send(port, '/')).status);
      return out;
    };
    // Split: two refusals are not two 5xx; the default five local-origin failures eject.
    const split = await proxy('split', [dead, good.port], { outlierDetection: { splitExternalLocalOriginErrors: true, consecutive5xx: 2, baseEjectionTime: { seconds: 30n }, maxEjectionPercent: 100 } });
    assert.equal((await statuses(split, 6)).filter((s) => s === 503).length, 3, 'round robin: the dead host is tried three times, not ejected at two');
    assert.deepEqual(await statuses(split, 4), [503, 200, 503, 200], 'ejected at its fifth refusal');
    assert.deepEqual(await statuses(split, 4), [200, 200, 200, 200]);
    // With its own threshold of 2 the dead host goes at its second refusal.
    const tuned = await proxy('split-tuned', [dead, good.port], { outlierDetection: { splitExternalLocalOriginErrors: true, consecutiveLocalOriginFailure: 2, enforcingConsecutiveLocalOriginFailure: 100, baseEjectionTime: { seconds: 30n }, maxEjectionPercent: 100 } });
    assert.deepEqual(await statuses(tuned, 6), [503, 200, 503, 200, 200, 200]);
    // Without the split a refusal is a 503: two of them are two consecutive 5xx.
    const plain = await proxy('unsplit', [dead, good.port], { outlierDetection: { consecutive5xx: 2, baseEjectionTime: { seconds: 30n }, maxEjectionPercent: 100 } });
    assert.deepEqual(await statuses(plain, 6), [503, 200, 503, 200, 200, 200]);
  });
});

describe('priority levels and the panic threshold', () => {
  // Ejects a host at its second 5xx, whatever the share of the cluster already ejected.
  const ejectAtSecond = { consecutive5xx: 2, baseEjectionTime: { seconds: 30n }, maxEjectionPercent: 100 };

  it('all requests go to P=0 while it is healthy; once its host is ejected, to P=1', async () => {
    const bad = await upstream(500);
    const backup = await upstream(200);
    const port = await proxyOver('failover', [{ lbEndpoints: [endpoint(bad.port)] }, { priority: 1, lbEndpoints: [endpoint(backup.port)] }], { outlierDetection: ejectAtSecond });
    assert.deepEqual([(await send(port, '/')).status, (await send(port, '/')).status], [500, 500], 'P=0 serves while healthy');
    assert.equal(backup.hits(), 0);
    const after = [];
    for (let i = 0; i < 6; i++) after.push((await send(port, '/')).status);
    assert.deepEqual(after, Array(6).fill(200), 'P=0 has no healthy host: P=1 takes the whole load');
    assert.deepEqual([bad.hits(), backup.hits()], [2, 6]);
    assert.equal(counter('failover', 'lb_healthy_panic'), 0, 'P=1 is healthy: the cluster is at 100 %, no panic');
  });

  it("healthy_panic_threshold 0 (the Go mesh's default with outlier detection): an ejected only host leaves no healthy upstream", async () => {
    const bad = await upstream(500);
    const port = await proxy('no-panic', [bad.port], { outlierDetection: ejectAtSecond, commonLbConfig: { healthyPanicThreshold: { value: 0 } } });
    await send(port, '/');
    await send(port, '/');
    const r = await send(port, '/');
    assert.deepEqual([r.status, r.body], [503, 'no healthy upstream']);
    assert.equal(bad.hits(), 2);
    assert.equal(counter('no-panic', 'upstream_cx_none_healthy'), 1);
  });

  it("Envoy's default threshold (50 %): an ejected only host still gets the requests, counted as lb_healthy_panic", async () => {
    const bad = await upstream(500);
    const port = await proxy('panic', [bad.port], { outlierDetection: ejectAtSecond });
    for (let i = 0; i < 4; i++) assert.equal((await send(port, '/')).status, 500);
    assert.equal(bad.hits(), 4);
    assert.equal(counter('panic', 'lb_healthy_panic'), 2, 'the two requests after the ejection');
  });

  it('EDS-unhealthy hosts count against the level: under the threshold the level balances over all of its hosts', async () => {
    const good = await upstream(200);
    const unready = [await upstream(200), await upstream(200)];
    const unhealthy = (port: number) => ({ ...endpoint(port), healthStatus: HealthStatus.UNHEALTHY });
    const localities: Localities = [{ lbEndpoints: [endpoint(good.port), ...unready.map((u) => unhealthy(u.port))] }];
    // 1 healthy of 3 (33 %): under 50 %, the level is in panic.
    const panicking = await proxyOver('unready-panic', localities, {});
    for (let i = 0; i < 6; i++) await send(panicking, '/');
    assert.ok(unready.every((u) => u.hits() > 0), `the unhealthy hosts got requests: ${unready.map((u) => u.hits()).join(', ')}`);
    assert.equal(counter('unready-panic', 'lb_healthy_panic'), 6);
    // Under a threshold of 30 %, 33 % healthy is not panic: the healthy host alone serves.
    const before = unready.map((u) => u.hits());
    const calm = await proxyOver('unready-calm', localities, { commonLbConfig: { healthyPanicThreshold: { value: 30 } } });
    for (let i = 0; i < 6; i++) await send(calm, '/');
    assert.deepEqual(unready.map((u) => u.hits()), before);
    assert.equal(counter('unready-calm', 'lb_healthy_panic'), 0);
  });

  it('previous_priorities (retryRemoteLocalities): after every update_frequency attempts, retries leave the levels tried so far', async () => {
    const near = await upstream(503);
    const far = await upstream(200);
    const levels: Localities = [{ lbEndpoints: [endpoint(near.port)] }, { priority: 1, lbEndpoints: [endpoint(far.port)] }];
    const retry = (updateFrequency?: number) => ({
      retryOn: '5xx',
      numRetries: 3,
      retryBackOff: { baseInterval: { nanos: 1_000_000 } },
      ...(updateFrequency ? { retryPriority: { name: 'envoy.retry_priorities.previous_priorities', configType: { case: 'typedConfig' as const, value: anyPack(PreviousPrioritiesConfigSchema, create(PreviousPrioritiesConfigSchema, { updateFrequency })) } } } : {}),
    });
    // Without it every retry goes where the load is: the healthy P=0, whose host keeps failing.
    const stuck = await proxyOver('stay-near', levels, {}, retry());
    assert.equal((await send(stuck, '/')).status, 503);
    assert.deepEqual([near.hits(), far.hits()], [4, 0]);
    // update_frequency 2, as the Go mesh sets it: two attempts at P=0, then P=0 is left out and P=1 answers.
    const moving = await proxyOver('go-far', levels, {}, retry(2));
    assert.equal((await send(moving, '/')).status, 200);
    assert.deepEqual([near.hits(), far.hits()], [4 + 2, 1]);
    // update_frequency 1: the first retry already leaves P=0.
    const eager = await proxyOver('go-far-now', levels, {}, retry(1));
    assert.equal((await send(eager, '/')).status, 200);
    assert.deepEqual([near.hits(), far.hits()], [6 + 1, 2]);
  });

  it("what /clusters shows: an ejected host is Envoy's /failed_outlier_check, and membership_healthy drops", async () => {
    const bad = await upstream(500);
    const good = await upstream(200);
    const port = await proxy('flags', [bad.port, good.port], { outlierDetection: ejectAtSecond });
    for (let i = 0; i < 4; i++) await send(port, '/');
    const info = cm.info().find((c) => c.name === 'flags')!;
    assert.deepEqual(info.endpoints.map((e) => [e.port, healthFlags(e, info.ejected(e))]), [[bad.port, '/failed_outlier_check'], [good.port, 'healthy']]);
    const host = info.endpoints[0]!;
    assert.equal(healthFlags({ ...host, health: 'draining' }, true), '/failed_outlier_check/eds_status_draining');
    assert.equal(healthFlags({ ...host, health: 'unhealthy' }, false), '/failed_eds_health');
    const healthy = stats.samples().find((s) => s.name === 'cluster.flags.membership_healthy');
    assert.equal(healthy?.value, 1);
  });
});
