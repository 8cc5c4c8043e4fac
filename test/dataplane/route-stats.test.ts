// Route-level stats (a route's stat_prefix) as an operator reads them from the admin's /stats,
// /stats?format=json and /stats/prometheus, through a real proxy (in-process, real sockets, routes
// over RDS from a real ADS server) to real HTTP/1.1 and h2c upstreams: 2xx and 5xx responses, a
// retry that succeeds and one whose retries run out, a route timeout, a refused connection, and the
// three ways a request reaches an upstream connection (the proxy's client, node:http, HTTP/2). A
// route without a stat_prefix has no stats, as in Envoy.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type ServerResponse } from 'node:http';
import { createServer as createH2Server } from 'node:http2';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { MessageInitShape } from '@bufbuild/protobuf';
import { RouteConfigurationSchema } from '../../src/gen/envoy/config/route/v3/route_pb.js';
import type { MeshProxy } from '../../src/dataplane/proxy.js';
import { routeStatName } from '../../src/dataplane/route-stats.js';
import { pack, TypeUrl } from '../../src/envoy/types.js';
import { chunkedPost, close, get, listen, rawGet } from '../helpers/http.js';
import { boundPort, FixtureAds, hcmChain, listener, startBoundProxy, staticCluster } from './xds-fixtures.js';
import { httpCluster } from './cluster-stats-fixtures.js';

type RouteInit = NonNullable<NonNullable<MessageInitShape<typeof RouteConfigurationSchema>['virtualHosts']>[number]['routes']>[number];
type ActionInit = Exclude<Extract<RouteInit['action'], { case: 'route' }>['value'], { $typeName: string }>;

/** The Go mesh's kind of virtual host name: `host:port`, dots included. */
const DOTTED_VHOST = 'reviews.default.svc.cluster.local:9080';

function route(prefix: string, cluster: string, statPrefix: string | undefined, extra: Omit<ActionInit, 'clusterSpecifier'> = {}): RouteInit {
  return {
    match: { pathSpecifier: { case: 'prefix', value: prefix } },
    action: { case: 'route', value: { clusterSpecifier: { case: 'cluster', value: cluster }, ...extra } },
    ...(statPrefix ? { statPrefix } : {}),
  };
}

const ROUTES = {
  name: 'routes',
  virtualHosts: [
    {
      name: 'backend',
      domains: ['*'],
      routes: [
        route('/api', 'app', 'api', { timeout: { nanos: 300_000_000 }, retryPolicy: { retryOn: 'retriable-status-codes', retriableStatusCodes: [503], numRetries: 1 } }),
        route('/lent', 'app', 'lent'),
        route('/h2', 'h2app', 'h2'),
        route('/refused', 'closed', 'refused'),
        route('/', 'app', undefined),
      ],
    },
    { name: DOTTED_VHOST, domains: ['reviews.test'], routes: [route('/', 'app', 'reviews')] },
  ],
};

/** Upstream answers by path: /api/fail 500, /api/down 503, /api/flaky 503 once then 200, /api/hang never; 200 otherwise. */
let flakyHits = 0;
const hanging: ServerResponse[] = [];
const app = createServer((req, res) => {
  req.resume();
  if (req.url === '/api/hang') hanging.push(res);
  else if (req.url === '/api/fail') res.writeHead(500).end();
  else if (req.url === '/api/down') res.writeHead(503).end();
  else if (req.url === '/api/flaky') res.writeHead(flakyHits++ === 0 ? 503 : 200).end();
  else res.end('ok');
});
const h2 = createH2Server();
h2.on('stream', (stream) => stream.respond({ ':status': 200 }, { endStream: true }));

/** /stats lines whose names start with `prefix` (the vhost stats unless said), by name. */
function vhostStats(text: string, prefix = 'vhost.'): Map<string, string> {
  return new Map(
    text
      .split('\n')
      .filter((l) => l.startsWith(prefix))
      .map((l) => [l.slice(0, l.indexOf(': ')), l.slice(l.indexOf(': ') + 2)]),
  );
}

/** The value of one sample line of the Prometheus text, or undefined. */
function promValue(text: string, series: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

describe('route-level stats (stat_prefix)', { timeout: 30_000 }, () => {
  let proxy: MeshProxy;
  let ads: FixtureAds;
  let dir: string;
  const statuses: Record<string, number> = {};

  before(async () => {
    const appPort = await listen(app);
    await new Promise<void>((r) => h2.listen(0, '127.0.0.1', r));
    // A port nothing listens on any more: its connections are refused.
    const gone = createServer();
    const closedPort = await listen(gone);
    await close(gone);
    dir = mkdtempSync(join(tmpdir(), 'route-stats-'));
    ads = await new FixtureAds().listen();
    ads.set(TypeUrl.Cluster, [staticCluster('app', [appPort]), httpCluster('h2app', (h2.address() as AddressInfo).port, { h2: true }), staticCluster('closed', [closedPort])]);
    ads.set(TypeUrl.Listener, [listener('in', 0, [hcmChain({ rds: 'routes', statPrefix: 'stats' })])]);
    ads.set(TypeUrl.RouteConfiguration, [{ name: 'routes', any: pack(RouteConfigurationSchema, ROUTES) }]);
    proxy = await startBoundProxy(dir, ads.port, 1);
    const port = boundPort(proxy, 'in');
    // One after another: each outcome is the request's own.
    for (const path of ['/api/ok', '/api/ok', '/api/fail', '/api/flaky', '/api/down', '/api/hang', '/h2/1', '/h2/2', '/refused', '/plain']) statuses[path] = (await rawGet(port, path)).status;
    statuses['POST /lent'] = (await chunkedPost(port, '/lent')).status;
    statuses['reviews'] = (await rawGet(port, '/ok', { host: 'reviews.test' })).status;
  });

  after(async () => {
    for (const r of hanging) r.end();
    await proxy.stop(0);
    ads.close();
    rmSync(dir, { recursive: true, force: true });
    await Promise.all([close(app), new Promise((r) => h2.close(r))]);
  });

  it('the requests had the outcomes the stats count', () => {
    assert.deepEqual(statuses, { '/api/ok': 200, '/api/fail': 500, '/api/flaky': 200, '/api/down': 503, '/api/hang': 504, '/h2/1': 200, '/h2/2': 200, '/refused': 503, '/plain': 200, 'POST /lent': 200, reviews: 200 });
  });

  it('/stats: the route counters as Envoy counts them, the histogram of complete responses, and nothing for the route without a stat_prefix', async () => {
    const stats = vhostStats((await get(false, proxy.adminPort, '/stats')).body);
    const counters = (prefix: string) => Object.fromEntries([...stats].filter(([n]) => n.startsWith(prefix) && !n.endsWith('upstream_rq_time')).map(([n, v]) => [n.slice(prefix.length), Number(v)]));
    assert.deepEqual(counters('vhost.backend.route.api.'), {
      // Attempts that reached a connection: /api/flaky and /api/down twice.
      upstream_rq_total: 8,
      upstream_rq_retry: 2,
      upstream_rq_retry_success: 1,
      upstream_rq_retry_limit_exceeded: 1,
      upstream_rq_retry_overflow: 0,
      upstream_rq_timeout: 1,
      // What went downstream: the retried 503 of /api/flaky is not in these; the timeout's 504 is.
      upstream_rq_completed: 6,
      upstream_rq_2xx: 3,
      upstream_rq_200: 3,
      upstream_rq_5xx: 3,
      upstream_rq_500: 1,
      upstream_rq_503: 1,
      upstream_rq_504: 1,
    });
    const zeroRetries = { upstream_rq_retry: 0, upstream_rq_retry_success: 0, upstream_rq_retry_limit_exceeded: 0, upstream_rq_retry_overflow: 0, upstream_rq_timeout: 0 };
    const ok = (n: number) => ({ upstream_rq_total: n, ...zeroRetries, upstream_rq_completed: n, upstream_rq_2xx: n, upstream_rq_200: n });
    assert.deepEqual(counters('vhost.backend.route.h2.'), ok(2), 'HTTP/2: the first request waited for the session to connect');
    assert.deepEqual(counters('vhost.backend.route.lent.'), ok(1), 'a chunked request, through node:http');
    assert.deepEqual(counters(`vhost.${DOTTED_VHOST}.route.reviews.`), ok(1));
    assert.deepEqual(counters('vhost.backend.route.refused.'), { upstream_rq_total: 0, ...zeroRetries, upstream_rq_completed: 1, upstream_rq_5xx: 1, upstream_rq_503: 1 }, 'a refused connection never became an upstream request');
    const prefixes = new Set([...stats.keys()].map((n) => /^vhost\.(.*)\.route\.([^.]+)\./.exec(n)?.slice(1).join(' ')));
    assert.deepEqual([...prefixes].sort(), ['backend api', 'backend h2', 'backend lent', 'backend refused', `${DOTTED_VHOST} reviews`], 'the / route has no stat_prefix: no stats');
    // The complete responses of /api (not the timed out one), as Envoy's `P<q>(interval,cumulative)` quantiles.
    assert.match(stats.get('vhost.backend.route.api.upstream_rq_time')!, /^P0\(nan,\d+\) P25\(nan,[\d.]+\) P50\(nan,[\d.]+\) P75\(nan,[\d.]+\) P90\(nan,[\d.]+\) P95\(nan,[\d.]+\) P99\(nan,[\d.]+\) P99\.5\(nan,[\d.]+\) P99\.9\(nan,[\d.]+\) P100\(nan,\d+\)$/);
    assert.ok(!stats.has('vhost.backend.route.refused.upstream_rq_time'), 'no complete response, no histogram');
  });

  it('/stats?format=json: the counters, then the histograms with their quantiles', async () => {
    const json = JSON.parse((await get(false, proxy.adminPort, `/stats?format=json&filter=${encodeURIComponent('^vhost\\.backend\\.route\\.api\\.')}`)).body) as { stats: ({ name: string; value: number } | { histograms: { supported_quantiles: number[]; computed_quantiles: { name: string; values: { interval: null; cumulative: number }[] }[] } })[] };
    const last = json.stats.at(-1)!;
    assert.ok('histograms' in last);
    assert.deepEqual(last.histograms.supported_quantiles, [0, 25, 50, 75, 90, 95, 99, 99.5, 99.9, 100]);
    assert.deepEqual(last.histograms.computed_quantiles.map((q) => [q.name, q.values.length, q.values[0]!.interval]), [['vhost.backend.route.api.upstream_rq_time', 10, null]]);
    assert.equal(json.stats.find((s) => 'name' in s && s.name === 'vhost.backend.route.api.upstream_rq_total')?.['value' as never], 8);
  });

  it('/stats/prometheus: Envoy tag extraction of the virtual host, route and response code; a histogram of buckets; promtool accepts it', async () => {
    const text = (await get(false, proxy.adminPort, '/stats/prometheus')).body;
    const api = 'envoy_route="api",envoy_virtual_host="backend"';
    assert.equal(promValue(text, `envoy_vhost_route_upstream_rq_total{${api}}`), 8);
    assert.equal(promValue(text, `envoy_vhost_route_upstream_rq_retry_success{${api}}`), 1);
    assert.equal(promValue(text, `envoy_vhost_route_upstream_rq_timeout{${api}}`), 1);
    assert.equal(promValue(text, `envoy_vhost_route_upstream_rq_completed{${api}}`), 6);
    assert.equal(promValue(text, `envoy_vhost_route_upstream_rq{envoy_response_code="504",${api}}`), 1);
    assert.equal(promValue(text, `envoy_vhost_route_upstream_rq_xx{envoy_response_code_class="2",${api}}`), 3);
    assert.equal(promValue(text, `envoy_vhost_route_upstream_rq_xx{envoy_response_code_class="5",${api}}`), 3);
    assert.match(text, /^# TYPE envoy_vhost_route_upstream_rq_time histogram$/m);
    assert.equal(promValue(text, `envoy_vhost_route_upstream_rq_time_count{${api}}`), 5);
    assert.equal(promValue(text, `envoy_vhost_route_upstream_rq_time_bucket{${api},le="+Inf"}`), 5);
    assert.equal(promValue(text, `envoy_vhost_route_upstream_rq_time_bucket{${api},le="3600000"}`), 5);
    // Tokens are the name's dot-separated parts: of a dotted virtual host name, Envoy takes the first as
    // the tag and leaves the rest, and the route, in the name.
    assert.equal(promValue(text, 'envoy_vhost_default_svc_cluster_local_9080_route_reviews_upstream_rq_total{envoy_virtual_host="reviews"}'), 1);
    assert.equal(promValue(text, 'envoy_vhost_default_svc_cluster_local_9080_route_reviews_upstream_rq{envoy_response_code="200",envoy_virtual_host="reviews"}'), 1);
    const check = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
    assert.equal(check.error, undefined, 'promtool is installed (Debian package prometheus)');
    // promtool exits 3 for lint findings (Envoy's names), 1 for a parse error.
    assert.ok(check.status === 0 || check.status === 3, `promtool accepts the exposition: ${check.stdout}${check.stderr}`);
  });
});

describe('cluster-level response and retry stats (every cluster, as Envoy)', { timeout: 30_000 }, () => {
  it('counts per cluster what the routes count per route, with Envoy\'s cluster and code tags in Prometheus', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'cluster-stats-'));
    const appPort = await listen(app);
    const ads = await new FixtureAds().listen();
    ads.set(TypeUrl.Cluster, [staticCluster('app', [appPort])]);
    ads.set(TypeUrl.Listener, [listener('in', 0, [hcmChain({ rds: 'routes', statPrefix: 'stats' })])]);
    // No stat_prefix anywhere: the route keeps no stats, the cluster does.
    const plain = { name: 'routes', virtualHosts: [{ name: 'backend', domains: ['*'], routes: [route('/', 'app', undefined, { retryPolicy: { retryOn: 'retriable-status-codes', retriableStatusCodes: [503], numRetries: 1 } })] }] };
    ads.set(TypeUrl.RouteConfiguration, [{ name: 'routes', any: pack(RouteConfigurationSchema, plain) }]);
    const proxy = await startBoundProxy(dir, ads.port, 1);
    try {
      flakyHits = 0;
      const port = boundPort(proxy, 'in');
      const got = [];
      for (const path of ['/api/ok', '/api/fail', '/api/flaky', '/api/down']) got.push((await rawGet(port, path)).status);
      assert.deepEqual(got, [200, 500, 200, 503]);
      const body = (await get(false, proxy.adminPort, '/stats')).body;
      const stats = vhostStats(body, 'cluster.app.');
      const counters = Object.fromEntries([...stats].filter(([n]) => n.startsWith('cluster.app.upstream_rq_') && /_(retry\w*|completed|\dxx|\d{3})$/.test(n)).map(([n, v]) => [n.slice('cluster.app.'.length), Number(v)]));
      assert.deepEqual(counters, {
        upstream_rq_retry: 2,
        upstream_rq_retry_limit_exceeded: 1,
        upstream_rq_retry_overflow: 0,
        upstream_rq_retry_success: 1,
        upstream_rq_completed: 4,
        upstream_rq_2xx: 2,
        upstream_rq_200: 2,
        upstream_rq_5xx: 2,
        upstream_rq_500: 1,
        upstream_rq_503: 1,
      });
      assert.equal(vhostStats(body).size, 0, 'no route stats without a stat_prefix');
      const text = (await get(false, proxy.adminPort, '/stats/prometheus')).body;
      assert.equal(promValue(text, 'envoy_cluster_upstream_rq{envoy_cluster_name="app",envoy_response_code="200"}'), 2);
      assert.equal(promValue(text, 'envoy_cluster_upstream_rq_xx{envoy_cluster_name="app",envoy_response_code_class="5"}'), 2);
      assert.equal(promValue(text, 'envoy_cluster_upstream_rq_retry{envoy_cluster_name="app"}'), 2);
      assert.equal(promValue(text, 'envoy_cluster_upstream_rq_time_count{envoy_cluster_name="app"}'), 4);
    } finally {
      await proxy.stop(0);
      ads.close();
      rmSync(dir, { recursive: true, force: true });
      await close(app);
    }
  });
});

describe('routeStatName', () => {
  it("extracts Envoy's default tags token by token, the response code and class from the leaf", () => {
    assert.deepEqual(routeStatName('backend', 'api', 'upstream_rq_total'), { name: 'vhost.backend.route.api.upstream_rq_total', prom: 'envoy_vhost_route_upstream_rq_total', labels: { envoy_virtual_host: 'backend', envoy_route: 'api' } });
    assert.deepEqual(routeStatName('backend', 'v1.api', 'upstream_rq_2xx'), {
      name: 'vhost.backend.route.v1.api.upstream_rq_2xx',
      prom: 'envoy_vhost_route_api_upstream_rq_xx',
      labels: { envoy_virtual_host: 'backend', envoy_route: 'v1', envoy_response_code_class: '2' },
    });
    assert.deepEqual(routeStatName('a.b', 'p', 'upstream_rq_404').labels, { envoy_virtual_host: 'a', envoy_response_code: '404' });
  });
});
