// The standard metrics as a user scrapes them: two real sidecars (in-process mesh-proxies, config
// over ADS, certificates over their agents' SDS) with mesh mTLS between them, the metadata
// exchange and the stats filter on both. The client's outbound and the server's inbound each
// report the request with the other's workload, the destination service from the cluster's
// `mesh.services` metadata, the principals and the security policy; the application sees no
// exchange header, nor does the client; a caller outside the mesh is `unknown` and hears nothing.
// Overrides (labels removed, replaced, added; a metric dropped) and the TCP metrics too.
import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, request } from 'node:http';
import { connect } from 'node:net';
import type { JsonObject } from '@bufbuild/protobuf';
import type { Any } from '@bufbuild/protobuf/wkt';
import { ConfigSchema } from '../../src/gen/mesh/http/peer_metadata/config_pb.js';
import { PluginConfigSchema } from '../../src/gen/mesh/stats/config_pb.js';
import { TrafficDirection } from '../../src/gen/envoy/config/core/v3/base_pb.js';
import { pack, TypeUrl } from '../../src/envoy/types.js';
import { freePort } from '../../samples/local-mesh.js';
import { eventually, Running, start } from '../helpers/proc.js';
import { downstreamTls, meshCa, meshTls, sidecar, sidecarBootstrap, spiffe, upstreamTls, workload, type FixtureNode } from './tls-fixtures.js';
import { FixtureAds, hcmChain, listener, staticCluster, tcpChain } from './xds-fixtures.js';

const MX_INBOUND = { name: 'mesh.metadata_exchange', any: pack(ConfigSchema, { downstreamDiscovery: [{ methodSpecifier: { case: 'istioHeaders', value: {} } }], downstreamPropagation: [{ methodSpecifier: { case: 'istioHeaders', value: {} } }] }) };
const MX_OUTBOUND = { name: 'mesh.metadata_exchange', any: pack(ConfigSchema, { upstreamDiscovery: [{ methodSpecifier: { case: 'istioHeaders', value: {} } }], upstreamPropagation: [{ methodSpecifier: { case: 'istioHeaders', value: {} } }] }) };
const stats = (config: Parameters<typeof pack<typeof PluginConfigSchema>>[1] = {}): { name: string; any: Any } => ({ name: 'mesh.stats', any: pack(PluginConfigSchema, config) });

const node = (name: string, namespace: string, workloadName: string, labels: Record<string, string>): FixtureNode => ({
  id: `sidecar~127.0.0.1~${name}.${namespace}~${namespace}.svc.cluster.local`,
  cluster: `${workloadName}.${namespace}`,
  metadata: { NAME: name, NAMESPACE: namespace, WORKLOAD_NAME: workloadName, CLUSTER_ID: 'Kubernetes', LABELS: labels } as JsonObject,
});

/** The metadata the discovery server puts on a service's clusters. */
const serviceMetadata = (host: string, name: string, namespace: string) => ({ filterMetadata: { mesh: { services: [{ host, name, namespace }] } } });

const HTTPBIN = 'httpbin.default.svc.cluster.local';

/** The app: /status/<code> answers with that code, anything else echoes the request headers. */
async function app(t: TestContext): Promise<number> {
  const server = createServer((req, res) => {
    const code = /^\/status\/(\d{3})$/.exec(req.url ?? '');
    res.writeHead(code ? Number(code[1]) : 200, { 'content-type': 'application/json' });
    res.end(JSON.stringify(req.headers));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.after(() => {
    server.closeAllConnections();
    server.close();
  });
  return (server.address() as { port: number }).port;
}

async function get(port: number, path: string, host = HTTPBIN): Promise<{ status: number; headers: Record<string, unknown>; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path, headers: { host }, agent: false }, (res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

const scrape = async (admin: string): Promise<string> => (await fetch(`${admin}/stats/prometheus`)).text();

/** The value of the sample of `metric` whose labels include all of `labels`, and those labels; undefined when none. */
function sample(text: string, metric: string, labels: Record<string, string>): { value: number; labels: Record<string, string> } | undefined {
  for (const line of text.split('\n')) {
    if (!line.startsWith(`${metric}{`)) continue;
    const inner = line.slice(metric.length + 1, line.lastIndexOf('}'));
    const got = Object.fromEntries([...inner.matchAll(/([a-zA-Z_]+)="((?:[^"\\]|\\.)*)"/g)].map((m) => [m[1]!, m[2]!]));
    if (Object.entries(labels).every(([k, v]) => got[k] === v)) return { value: Number(line.slice(line.lastIndexOf(' ') + 1)), labels: got };
  }
  return undefined;
}

test('standard metrics: both sidecars of a mesh mTLS request report it with the other workload, the service and the principals', async (t) => {
  const ca = await meshCa();
  const appPort = await app(t);
  const server = await sidecar(t, await workload(t, ca, 'httpbin'), node('httpbin-1', 'default', 'httpbin', { app: 'httpbin', version: 'v1' }));
  const client = await sidecar(t, await workload(t, ca, 'sleep', 'sleep'), node('sleep-1', 'sleep', 'sleep', { app: 'sleep', version: 'v2', 'service.mesh.io/canonical-name': 'sleeper' }));
  const [inboundPort, plainInboundPort, outboundPort] = [await freePort(), await freePort(), await freePort()];

  server.ads.set(TypeUrl.Cluster, [staticCluster('inbound|8000||', [appPort], { metadata: serviceMetadata(HTTPBIN, 'httpbin', 'default') })]);
  const inboundChain = (tls: boolean) => hcmChain({ cluster: 'inbound|8000||', extraFilters: [MX_INBOUND, stats({ disableHostHeaderFallback: true })] }, tls ? { transportSocket: downstreamTls(meshTls([spiffe('sleep', 'sleep')], ['mesh'])) } : {});
  server.ads.set(TypeUrl.Listener, [listener('virtualInbound', inboundPort, [inboundChain(true)]), listener('plainInbound', plainInboundPort, [inboundChain(false)])]);
  await server.ads.push(TypeUrl.Cluster, TypeUrl.Listener);

  client.ads.set(TypeUrl.Cluster, [
    staticCluster(`outbound|8000||${HTTPBIN}`, [inboundPort], { metadata: serviceMetadata(HTTPBIN, 'httpbin', 'default'), transportSocket: upstreamTls(meshTls([spiffe('httpbin')], ['mesh']), `outbound_.8000_._.${HTTPBIN}`) }),
  ]);
  client.ads.set(TypeUrl.Listener, [listener('0.0.0.0_8000', outboundPort, [hcmChain({ cluster: `outbound|8000||${HTTPBIN}`, extraFilters: [MX_OUTBOUND, stats()] })], { trafficDirection: TrafficDirection.OUTBOUND })]);
  await client.ads.push(TypeUrl.Cluster, TypeUrl.Listener);
  for (const admin of [server.admin, client.admin]) await eventually(async () => assert.equal((await fetch(`${admin}/ready`)).status, 200), 15_000);

  const ok = await get(outboundPort, '/headers');
  assert.equal(ok.status, 200);
  const seen = JSON.parse(ok.body) as Record<string, string>;
  assert.equal(seen['x-envoy-peer-metadata'], undefined, 'the app does not see the exchange headers');
  assert.equal(seen['x-envoy-peer-metadata-id'], undefined);
  assert.equal(ok.headers['x-envoy-peer-metadata'], undefined, 'nor does the client application');
  assert.equal((await get(outboundPort, '/headers')).status, 200);
  assert.equal((await get(outboundPort, '/status/503')).status, 503);

  const serverSide = {
    reporter: 'destination',
    source_workload: 'sleep',
    source_workload_namespace: 'sleep',
    source_principal: spiffe('sleep', 'sleep'),
    source_app: 'sleep',
    source_version: 'v2',
    source_canonical_service: 'sleeper',
    source_canonical_revision: 'v2',
    source_cluster: 'Kubernetes',
    destination_workload: 'httpbin',
    destination_workload_namespace: 'default',
    destination_principal: spiffe('httpbin'),
    destination_app: 'httpbin',
    destination_version: 'v1',
    destination_service: HTTPBIN,
    destination_service_name: 'httpbin',
    destination_service_namespace: 'default',
    destination_canonical_service: 'httpbin',
    destination_canonical_revision: 'v1',
    destination_cluster: 'Kubernetes',
    request_protocol: 'http',
    grpc_response_status: '',
    response_flags: '-',
    connection_security_policy: 'mutual_tls',
  };
  await eventually(async () => {
    const text = await scrape(server.admin);
    assert.deepEqual(sample(text, 'istio_requests_total', { response_code: '200' }), { value: 2, labels: { ...serverSide, response_code: '200' } });
    assert.equal(sample(text, 'istio_requests_total', { response_code: '503' })?.value, 1);
    assert.equal(sample(text, 'istio_request_duration_milliseconds_count', { response_code: '200', reporter: 'destination' })?.value, 2);
    assert.equal(sample(text, 'istio_request_bytes_count', { response_code: '200' })?.value, 2);
    assert.ok((sample(text, 'istio_response_bytes_sum', { response_code: '200' })?.value ?? 0) > 100, 'the response head and body');
  }, 5_000);

  const text = await scrape(client.admin);
  // Both sides name the same workloads and service; the client cannot tell how its connection was secured.
  assert.deepEqual(sample(text, 'istio_requests_total', { response_code: '200' })?.labels, { ...serverSide, reporter: 'source', response_code: '200', connection_security_policy: 'unknown' });
  assert.equal(sample(text, 'istio_requests_total', { reporter: 'source', response_code: '200' })?.value, 2);
  const dotted = await (await fetch(`${client.admin}/stats?filter=istio_requests_total`)).text();
  assert.match(dotted, /^istiocustom\.istio_requests_total\.reporter\.source\.source_workload\.sleep\..*response_code\.200\..*: 2$/m);

  // A caller outside the mesh: no peer, no certificate, and it hears nothing of the workload.
  const outside = await get(plainInboundPort, '/headers');
  assert.equal(outside.status, 200);
  assert.equal(outside.headers['x-envoy-peer-metadata'], undefined);
  await eventually(async () => {
    const labels = sample(await scrape(server.admin), 'istio_requests_total', { connection_security_policy: 'none' })?.labels;
    assert.equal(labels?.['source_workload'], 'unknown');
    assert.equal(labels?.['source_principal'], 'unknown');
    assert.equal(labels?.['source_canonical_revision'], 'latest');
    assert.equal(labels?.['destination_service'], HTTPBIN, 'the inbound cluster names the service; the Host header is not used inbound');
  }, 5_000);
});

test('standard metrics: overrides remove, replace and add labels and drop a metric; TCP connections are counted', async (t) => {
  const ca = await meshCa();
  const appPort = await app(t);
  const proxy = await sidecar(t, await workload(t, ca, 'httpbin'), node('httpbin-1', 'default', 'httpbin', { app: 'httpbin' }));
  const [httpPort, tcpPort] = [await freePort(), await freePort()];
  const overrides = stats({
    metrics: [
      { name: 'requests_total', tagsToRemove: ['destination_principal', 'not_a_label'], dimensions: { request_method: 'request.method', source_version: "'pinned'", user: "request.headers['x-user']", odd: 'size(request.path) > 3' } },
      { name: 'request_bytes', drop: true },
    ],
  });
  proxy.ads.set(TypeUrl.Cluster, [staticCluster('inbound|8000||', [appPort]), staticCluster('tcp', [appPort])]);
  proxy.ads.set(TypeUrl.Listener, [
    listener('http', httpPort, [hcmChain({ cluster: 'inbound|8000||', extraFilters: [overrides] })]),
    listener('tcp', tcpPort, [tcpChain('tcp', { filters: [{ name: 'mesh.stats', configType: { case: 'typedConfig', value: stats().any } }, ...tcpChain('tcp').filters!] })]),
  ]);
  await proxy.ads.push(TypeUrl.Cluster, TypeUrl.Listener);
  await eventually(async () => assert.equal((await fetch(`${proxy.admin}/ready`)).status, 200), 15_000);

  assert.equal((await get(httpPort, '/headers', 'httpbin:8000')).status, 200);
  await eventually(async () => {
    const text = await scrape(proxy.admin);
    const labels = sample(text, 'istio_requests_total', { reporter: 'destination' })?.labels;
    assert.ok(labels, 'the request is counted');
    assert.equal(labels['destination_principal'], undefined, 'removed');
    assert.equal(labels['source_version'], 'pinned', 'a literal replaces a standard label');
    assert.equal(labels['request_method'], 'GET', 'an attribute adds a label');
    assert.equal(labels['user'], 'unknown', 'a header the request lacks');
    assert.equal(labels['odd'], 'unknown', 'an expression mesh-proxy does not evaluate');
    assert.equal(labels['destination_service'], 'httpbin:8000', 'no cluster metadata, and the Host fallback is on (disable_host_header_fallback unset)');
    assert.ok(!text.includes('istio_request_bytes'), 'dropped');
    assert.ok(sample(text, 'istio_request_duration_milliseconds_count', { reporter: 'destination' })?.labels['destination_principal'] !== undefined, 'the override was for requests_total only');
  }, 5_000);

  // A TCP connection through the tcp_proxy: a request up, the app's response down.
  const up = 'GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n';
  await new Promise<void>((resolve, reject) => {
    const s = connect(tcpPort, '127.0.0.1', () => s.end(up));
    s.on('data', () => undefined);
    s.on('close', () => resolve());
    s.on('error', reject);
  });
  await eventually(async () => {
    const text = await scrape(proxy.admin);
    const tcp = { request_protocol: 'tcp', reporter: 'destination' };
    assert.equal(sample(text, 'istio_tcp_connections_opened_total', tcp)?.value, 1);
    assert.equal(sample(text, 'istio_tcp_connections_closed_total', tcp)?.value, 1);
    assert.equal(sample(text, 'istio_tcp_received_bytes_total', tcp)?.value, Buffer.byteLength(up));
    assert.ok((sample(text, 'istio_tcp_sent_bytes_total', tcp)?.value ?? 0) > 50);
    assert.equal(sample(text, 'istio_tcp_connections_opened_total', tcp)?.labels['response_code'], undefined, 'TCP has no response code');
  }, 5_000);
});

test('standard metrics with --concurrency 3: every worker knows the node, and /stats/prometheus sums their series', async (t) => {
  const ca = await meshCa();
  const w = await workload(t, ca, 'httpbin');
  const ads = await new FixtureAds().listen();
  t.after(() => ads.close());
  const appPort = await app(t);
  const [adminPort, port] = [await freePort(), await freePort()];
  ads.set(TypeUrl.Cluster, [staticCluster('inbound|8000||', [appPort], { metadata: serviceMetadata(HTTPBIN, 'httpbin', 'default') })]);
  ads.set(TypeUrl.Listener, [listener('inbound', port, [hcmChain({ cluster: 'inbound|8000||', extraFilters: [MX_INBOUND, stats({ disableHostHeaderFallback: true })] })])]);
  const bootstrap = sidecarBootstrap(w, ads.port, adminPort, node('httpbin-1', 'default', 'httpbin', { app: 'httpbin', version: 'v1' }));
  const proxy = new Running(start('mesh-proxy', ['-c', bootstrap, '--concurrency', '3', '--drain-time-s', '1']));
  t.after(() => proxy.stop('SIGKILL'));
  const admin = `http://127.0.0.1:${adminPort}`;
  await eventually(async () => assert.equal((await fetch(`${admin}/ready`)).status, 200, proxy.output), 30_000);
  // New connections, spread over the processes by the kernel.
  for (let i = 0; i < 30; i++) assert.equal((await get(port, '/status/201')).status, 201);
  const s = sample(await scrape(admin), 'istio_requests_total', { response_code: '201' });
  assert.equal(s?.value, 30, 'every request once, whichever process served it');
  assert.deepEqual([s?.labels['destination_workload'], s?.labels['destination_app'], s?.labels['destination_service']], ['httpbin', 'httpbin', HTTPBIN], "the workers label with the node's workload");
});
