// The merged metrics on the metrics port: the proxy's, the application's (when its prometheus.io
// annotations ask) and the agent's, as one exposition promtool accepts; a failing or hanging source
// is counted and left out while the rest are served.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { createServer, type RequestListener, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { programRegistry } from '../../src/common/metrics.js';
import { StatusServer } from '../../src/agent/status.js';
import { appScrapeConfig } from '../../src/agent/app-metrics.js';
import { mergeExpositions } from '../../src/agent/exposition.js';

const PROXY_STATS = [
  '# TYPE envoy_server_live gauge',
  'envoy_server_live 1',
  '# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.',
  '# TYPE process_cpu_seconds_total counter',
  'process_cpu_seconds_total 3',
  '# TYPE envoy_cluster_upstream_rq_time histogram',
  'envoy_cluster_upstream_rq_time_bucket{le="1"} 2',
  'envoy_cluster_upstream_rq_time_bucket{le="+Inf"} 3',
  'envoy_cluster_upstream_rq_time_sum 7',
  'envoy_cluster_upstream_rq_time_count 3',
  '',
].join('\n');

// The application exports a family the proxy also has (same series and a new one) and its own.
const APP_STATS = [
  '# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.',
  '# TYPE process_cpu_seconds_total counter',
  'process_cpu_seconds_total 99',
  'process_cpu_seconds_total{pid="app"} 5',
  '# HELP app_orders_total Orders taken.',
  '# TYPE app_orders_total counter',
  'app_orders_total{kind="book"} 42',
  '',
].join('\n');

async function serve(handler: RequestListener): Promise<{ server: Server; port: number }> {
  const server = createServer(handler);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { server, port: (server.address() as AddressInfo).port };
}

function promtool(text: string): { code: number | null; out: string } {
  const r = spawnSync('promtool', ['check', 'metrics'], { input: text, encoding: 'utf8' });
  assert.equal(r.error, undefined, 'promtool is installed (Debian package prometheus)');
  return { code: r.status, out: `${r.stdout}${r.stderr}` };
}

function sample(text: string, series: string): number | undefined {
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

test('merged exposition: proxy, application and agent in one valid exposition', async (t) => {
  const admin = await serve((req, res) => {
    if (req.url === '/stats/prometheus') res.writeHead(200).end(PROXY_STATS);
    else res.writeHead(404).end();
  });
  const app = await serve((req, res) => {
    if (req.url === '/custom/metrics') res.writeHead(200).end(APP_STATS);
    else res.writeHead(404).end();
  });
  const status = new StatusServer({
    statusAddress: '127.0.0.1:0',
    metricsAddress: '127.0.0.1:0',
    adminUrl: `http://127.0.0.1:${admin.port}`,
    registry: programRegistry('agent'),
    appScrape: appScrapeConfig(JSON.stringify({ scrape: 'true', port: String(app.port), path: '/custom/metrics' }), {})!,
  });
  const { metrics } = await status.start();
  t.after(async () => {
    await status.close();
    admin.server.close();
    app.server.close();
  });

  const res = await fetch(`http://127.0.0.1:${metrics}/stats/prometheus`);
  assert.equal(res.status, 200);
  const text = await res.text();
  // promtool exits 3 for lint findings (names the spec fixes), 1 for a parse error.
  const check = promtool(text);
  assert.ok(check.code === 0 || check.code === 3, `promtool accepts the merged exposition: ${check.out}`);
  for (const family of ['process_cpu_seconds_total', 'envoy_server_live', 'app_orders_total', 'scrapes_total']) {
    assert.equal(text.split('\n').filter((l) => l.startsWith(`# TYPE ${family} `)).length, 1, `${family} typed once`);
  }
  // The proxy's series comes first and wins; the application's other series joins the family.
  assert.equal(sample(text, 'process_cpu_seconds_total'), 3);
  assert.equal(sample(text, 'process_cpu_seconds_total{pid="app"}'), 5);
  assert.equal(sample(text, 'app_orders_total{kind="book"}'), 42);
  assert.equal(sample(text, 'envoy_cluster_upstream_rq_time_count'), 3);
  assert.ok(sample(text, 'scrapes_total')! >= 1);
});

test('a failing or hanging application is counted and the rest is still served', async (t) => {
  const admin = await serve((_req, res) => res.writeHead(200).end(PROXY_STATS));
  const failing = await serve((_req, res) => res.writeHead(500).end('boom'));
  const hanging = await serve(() => {
    /* never answers */
  });
  t.after(() => {
    admin.server.close();
    failing.server.close();
    hanging.server.closeAllConnections();
    hanging.server.close();
  });
  for (const app of [failing, hanging]) {
    const status = new StatusServer({
      statusAddress: '127.0.0.1:0',
      adminUrl: `http://127.0.0.1:${admin.port}`,
      registry: programRegistry('agent'),
      appScrape: { port: app.port, path: '/metrics' },
      appScrapeTimeoutMs: 300,
    });
    const { status: port } = await status.start();
    const before = sample(await status.mergedMetrics(), 'scrape_failures_total{type="application"}') ?? 0;
    const text = await (await fetch(`http://127.0.0.1:${port}/stats/prometheus`)).text();
    await status.close();
    assert.equal(sample(text, 'envoy_server_live'), 1, 'the proxy metrics are served');
    assert.equal(sample(text, 'scrape_failures_total{type="application"}'), before + 1);
    assert.equal(sample(text, 'app_orders_total{kind="book"}'), undefined);
    const check = promtool(text);
    assert.ok(check.code === 0 || check.code === 3, check.out);
  }
});

test('an unreachable proxy admin API is counted as a proxy scrape failure; the agent metrics are served', async () => {
  const status = new StatusServer({ statusAddress: '127.0.0.1:0', adminUrl: 'http://127.0.0.1:1', registry: programRegistry('agent') });
  const first = sample(await status.mergedMetrics(), 'scrape_failures_total{type="proxy"}');
  assert.ok(first !== undefined && first >= 1);
  const text = await status.mergedMetrics();
  assert.equal(sample(text, 'scrape_failures_total{type="proxy"}'), first + 1);
  assert.match(text, /^# TYPE scrapes_total counter$/m);
});

test('application scrape config: variable first, then the annotations; errors name the source', () => {
  assert.deepEqual(appScrapeConfig('{"scrape":"true","port":"8080"}', {}), { port: 8080, path: '/metrics' });
  assert.equal(appScrapeConfig('{"scrape":"false","port":"8080"}', {}), undefined);
  assert.deepEqual(appScrapeConfig('', { 'prometheus.io/scrape': 'true', 'prometheus.io/port': '9090', 'prometheus.io/path': 'stats' }), { port: 9090, path: '/stats' });
  assert.equal(appScrapeConfig('', { 'prometheus.io/port': '9090' }), undefined);
  // The variable wins over the annotations the injector rewrote to point at the agent.
  assert.deepEqual(appScrapeConfig('{"scrape":"true","port":"7070"}', { 'prometheus.io/scrape': 'true', 'prometheus.io/port': '15020' }), { port: 7070, path: '/metrics' });
  assert.throws(() => appScrapeConfig('{scrape', {}), /MESH_METRICS_ANNOTATIONS: not valid JSON/);
  assert.throws(() => appScrapeConfig('{"scrape":true}', {}), /MESH_METRICS_ANNOTATIONS: expected a JSON object of strings/);
  assert.throws(() => appScrapeConfig('{"scrape":"true","port":"http"}', {}), /MESH_METRICS_ANNOTATIONS: port "http" is not a port number/);
  assert.throws(() => appScrapeConfig('', { 'prometheus.io/scrape': 'true' }), /annotation prometheus.io\/port: port "" is not a port number/);
});

test('merging: a family typed differently by a later source is left out of it, and reported', () => {
  const { text, conflicts } = mergeExpositions(['# TYPE x gauge\nx 1\n', '# TYPE x counter\nx 2\n# TYPE y gauge\ny 3\n']);
  assert.equal(text, '# TYPE x gauge\nx 1\n# TYPE y gauge\ny 3\n');
  assert.deepEqual(conflicts, ['x (counter, already gauge)']);
});
