// A weighted cluster's own header mutations and host rewrite (WeightedCluster.ClusterWeight), through
// a real connection manager to real upstreams on loopback: applied to the requests that cluster
// gets, before the route's (so the route's win, as Envoy's WeightedClusterEntry), and reported
// when a weighted cluster sets what the router does not apply.
import assert from 'node:assert/strict';
import { readFileSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent, createServer, type Server } from 'node:http';
import { after, before, describe, it } from 'node:test';
import { create, type MessageInitShape } from '@bufbuild/protobuf';
import { anyPack } from '@bufbuild/protobuf/wkt';
import { FilterChainSchema } from '../../src/gen/envoy/config/listener/v3/listener_components_pb.js';
import { HeaderValueOption_HeaderAppendAction } from '../../src/gen/envoy/config/core/v3/base_pb.js';
import type { RouteSchema } from '../../src/gen/envoy/config/route/v3/route_components_pb.js';
import { RouterSchema } from '../../src/gen/envoy/extensions/filters/http/router/v3/router_pb.js';
import { HttpConnectionManagerSchema } from '../../src/gen/envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager_pb.js';
import { buildHcmForFilterChain } from '../../src/dataplane/http-connection-manager.js';
import { configureLogging, registerScopes } from '../../src/common/log.js';
import { HCM_FILTER_NAME } from '../../src/envoy/names.js';
import { close, get, listen } from '../helpers/http.js';
import { StaticClusterManager } from './static-cluster-manager.js';

type RouteInit = MessageInitShape<typeof RouteSchema>;
type Weighted = Extract<NonNullable<NonNullable<Extract<RouteInit['action'], { case: 'route' }>['value']>['clusterSpecifier']>, { case: 'weightedClusters' }>['value'];

const logFile = join(mkdtempSync(join(tmpdir(), 'weighted-headers-')), 'out.log');
registerScopes(['router']);
configureLogging({ asJson: false, caller: [], outputLevel: 'default:info', stacktraceLevel: 'default:none', targets: [logFile] });

const agent = new Agent({ keepAlive: true });
const servers: Server[] = [];
const clusters = new StaticClusterManager();

/** An upstream that answers with the request's host and x-* headers as JSON, and its own name. */
async function upstream(name: string): Promise<void> {
  const server = createServer((req, res) => {
    const seen = Object.fromEntries(Object.entries(req.headers).filter(([k]) => k === 'host' || k.startsWith('x-')));
    res.writeHead(200, { 'x-upstream': name, 'x-from-app': 'app' }).end(JSON.stringify(seen));
  });
  servers.push(server);
  clusters.set(name, [{ host: '127.0.0.1', port: await listen(server) }]);
}

const set = (key: string, value: string) => ({ header: { key, value }, appendAction: HeaderValueOption_HeaderAppendAction.OVERWRITE_IF_EXISTS_OR_ADD });

async function proxy(route: RouteInit): Promise<number> {
  const hcm = create(HttpConnectionManagerSchema, {
    statPrefix: 'weighted',
    routeSpecifier: { case: 'routeConfig', value: { name: 'weighted-headers', virtualHosts: [{ name: 'v', domains: ['*'], routes: [route] }] } },
    httpFilters: [{ name: 'envoy.filters.http.router', configType: { case: 'typedConfig', value: anyPack(RouterSchema, create(RouterSchema, {})) } }],
  });
  const chain = create(FilterChainSchema, { filters: [{ name: HCM_FILTER_NAME, configType: { case: 'typedConfig', value: anyPack(HttpConnectionManagerSchema, hcm) } }] });
  const handler = buildHcmForFilterChain(chain, { clusters });
  const server = createServer((req, res) => handler.handle(req, res));
  servers.push(server);
  return listen(server);
}

type Mutations = Pick<RouteInit, 'requestHeadersToAdd' | 'responseHeadersToAdd'>;
const weightedRoute = (weighted: Weighted, extra: Mutations = {}, hostRewrite?: string): RouteInit => ({
  match: { pathSpecifier: { case: 'prefix', value: '/' } },
  action: { case: 'route', value: { clusterSpecifier: { case: 'weightedClusters', value: weighted }, ...(hostRewrite ? { hostRewriteSpecifier: { case: 'hostRewriteLiteral', value: hostRewrite } } : {}) } },
  ...extra,
});

before(async () => {
  await upstream('v1');
  await upstream('v2');
});

after(async () => {
  agent.destroy();
  await Promise.all(servers.map(close));
});

describe('weighted clusters: per-cluster header mutations', () => {
  it("each cluster's requests and responses carry that cluster's headers, and its host rewrite", async () => {
    const port = await proxy(
      weightedRoute({
        clusters: [
          { name: 'v1', weight: 50, requestHeadersToAdd: [set('x-version', 'v1')], responseHeadersToAdd: [set('x-served-by', 'v1')], responseHeadersToRemove: ['x-from-app'] },
          { name: 'v2', weight: 50, requestHeadersToAdd: [set('x-version', 'v2')], requestHeadersToRemove: ['x-drop'], hostRewriteSpecifier: { case: 'hostRewriteLiteral', value: 'v2.example' } },
        ],
      }),
    );
    const got = { v1: 0, v2: 0 };
    for (let i = 0; i < 40; i++) {
      const r = await get(agent, port, '/', { host: 'orig.example', 'x-drop': 'gone?' });
      const name = String(r.headers['x-upstream']) as 'v1' | 'v2';
      got[name]++;
      const seen = JSON.parse(r.body) as Record<string, string>;
      assert.equal(seen['x-version'], name, 'the request carries the chosen cluster\'s header');
      if (name === 'v1') {
        assert.equal(seen.host, 'orig.example');
        assert.equal(seen['x-drop'], 'gone?', 'v1 removes nothing from the request');
        assert.equal(r.headers['x-served-by'], 'v1');
        assert.equal(r.headers['x-from-app'], undefined, "v1 removes the app's response header");
      } else {
        assert.equal(seen.host, 'v2.example', "v2's host rewrite");
        assert.equal(seen['x-drop'], undefined, 'v2 removes x-drop');
        assert.equal(r.headers['x-served-by'], undefined, "v1's response header is v1's only");
        assert.equal(r.headers['x-from-app'], 'app');
      }
    }
    assert.ok(got.v1 > 0 && got.v2 > 0, `both clusters served: ${JSON.stringify(got)}`);
  });

  it("the route's own mutations and host rewrite apply after the cluster's, so they win", async () => {
    const port = await proxy(
      weightedRoute(
        { clusters: [{ name: 'v1', weight: 1, requestHeadersToAdd: [set('x-level', 'cluster'), set('x-cluster', 'yes')], responseHeadersToAdd: [set('x-level', 'cluster')], hostRewriteSpecifier: { case: 'hostRewriteLiteral', value: 'cluster.example' } }] },
        { requestHeadersToAdd: [set('x-level', 'route')], responseHeadersToAdd: [set('x-level', 'route')] },
      ),
    );
    const r = await get(agent, port, '/', { host: 'orig.example' });
    const seen = JSON.parse(r.body) as Record<string, string>;
    assert.deepEqual({ level: seen['x-level'], cluster: seen['x-cluster'], host: seen.host, response: r.headers['x-level'] }, { level: 'route', cluster: 'yes', host: 'cluster.example', response: 'route' });

    const rewritten = await proxy(weightedRoute({ clusters: [{ name: 'v1', weight: 1, hostRewriteSpecifier: { case: 'hostRewriteLiteral', value: 'cluster.example' } }] }, {}, 'route.example'));
    assert.equal((JSON.parse((await get(agent, rewritten, '/')).body) as Record<string, string>).host, 'route.example', "the route's host rewrite wins");
  });

  it('refuses a cluster named by a header, and reports the fields it does not apply', async () => {
    await assert.rejects(proxy(weightedRoute({ clusters: [{ clusterHeader: 'x-cluster', weight: 1 }] })), /weighted_clusters\.clusters\[0\]\.cluster_header/);
    await proxy(weightedRoute({ clusters: [{ name: 'v1', weight: 1, metadataMatch: { filterMetadata: { 'envoy.lb': { fields: { v: { kind: { case: 'stringValue', value: '1' } } } } } } }], runtimeKeyPrefix: 'routing.traffic_split' }));
    const log = readFileSync(logFile, 'utf8');
    assert.match(log, /route configuration "weighted-headers": accepted but not applied yet: .*weighted_clusters\.clusters\[\]\.metadata_match/);
    assert.match(log, /weighted_clusters\.runtime_key_prefix/);
    assert.doesNotMatch(log, /request_headers_to_add|host_rewrite/, 'what is applied is not reported');
  });
});
