import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { createServer, type AddressInfo } from 'node:net';
import { join } from 'node:path';
import { loadSettings } from '../../src/common/env.js';
import { ProxyAgent, proxyCommandFor, runProxyAgent, type ProxyAgentOptions } from '../../src/agent/agent.js';
import { proxyProcessEnv } from '../../src/dataplane/node-flags.js';
import { AdsClient } from '../../src/envoy/ads-client.js';
import { HEALTH_INFO_TYPE_URL, TypeUrl } from '../../src/envoy/types.js';
import { freePort } from '../../samples/local-mesh.js';
import { eventually, REPO_ROOT } from '../helpers/proc.js';
import { FakeAds } from './fake-ads.js';
import { edsCluster, rdsListener } from './resources.js';

// From the repository root: tests also run compiled from dist/, where tsc does not copy .mjs files.
const FAKE_PROXY = join(REPO_ROOT, 'test', 'agent', 'fixtures', 'fake-proxy.mjs');

interface Setup {
  dir: string;
  events: string;
  opts: ProxyAgentOptions;
  readEvents(): string[];
}

async function setup(discovery: string, extraEnv: Record<string, string> = {}): Promise<Setup> {
  const dir = mkdtempSync(join(tmpdir(), 'agent-'));
  const events = join(dir, 'events');
  writeFileSync(events, '');
  const meshConfig = join(dir, 'mesh.yaml');
  writeFileSync(
    meshConfig,
    [
      'defaultConfig:',
      `  configPath: ${join(dir, 'proxy')}`,
      `  discoveryAddress: ${discovery}`,
      `  proxyAdminPort: ${await freePort()}`,
      '  statusPort: 0',
      '  metricsPort: 0',
      '  xdsProxyPort: 0',
      '  drainDuration: 3s',
      '',
    ].join('\n'),
  );
  const env = { POD_NAME: 'app-1', POD_NAMESPACE: 'ns', INSTANCE_IP: '10.1.2.3', FAKE_PROXY_EVENTS: events, TERMINATION_DRAIN_DURATION_SECONDS: '0', ...extraEnv };
  loadSettings('agent', env);
  return {
    dir,
    events,
    opts: {
      meshConfig,
      concurrency: 0,
      domain: '',
      outlierLogPath: '',
      proxyLogLevel: 'warning',
      proxyComponentLogLevel: 'misc:error',
      templateFile: '',
      annotationsFile: join(dir, 'annotations'),
      labelsFile: join(dir, 'labels'),
      proxyCommand: [process.execPath, FAKE_PROXY],
      proxyStdio: process.env.AGENT_TEST_STDIO === 'inherit' ? 'inherit' : 'ignore',
      statusHost: '127.0.0.1',
      env,
    },
    readEvents: () => readFileSync(events, 'utf8').split('\n').filter(Boolean),
  };
}

test('writes the bootstrap, starts the proxy with its flags, and exits with the proxy exit code', async () => {
  const h = await setup('127.0.0.1:1', { FAKE_PROXY_EXIT: '7' });
  const agent = new ProxyAgent(h.opts);
  await agent.start();
  assert.equal(await agent.wait(), 7);
  const args = JSON.parse(h.readEvents()[0]!.slice('args '.length)) as string[];
  assert.deepEqual(args, [
    '-c', join(h.dir, 'proxy', 'mesh-proxy-rev.json'),
    '--concurrency', '2',
    '--log-level', 'warning',
    '--component-log-level', 'misc:error',
    '--service-cluster', 'mesh-proxy',
    '--drain-time-s', '3',
  ]);
  const bootstrap = JSON.parse(readFileSync(agent.bootstrapFile!, 'utf8'));
  assert.equal(bootstrap.node.id, 'sidecar~10.1.2.3~app-1.ns~ns.svc.cluster.local');
  // Through the agent: the xds cluster points at the agent's local xDS proxy.
  const ep = bootstrap.static_resources.clusters[0].load_assignment.endpoints[0].lb_endpoints[0].endpoint.address.socket_address;
  assert.deepEqual([ep.address, ep.port_value], ['127.0.0.1', agent.ports.xds]);
});

test('the proxy command: a .js proxy runs under this Node with a 2 MiB young generation and 20 % old-generation growth (less RSS), another binary as it is', () => {
  assert.deepEqual(proxyCommandFor(''), [process.execPath, '--max-semi-space-size=2', '--heap-growing-percent=20', join(REPO_ROOT, 'bin', 'mesh-proxy.js')]);
  assert.deepEqual(proxyCommandFor('/opt/proxy/main.mjs'), [process.execPath, '--max-semi-space-size=2', '--heap-growing-percent=20', '/opt/proxy/main.mjs']);
  assert.deepEqual(proxyCommandFor('/usr/local/bin/envoy'), ['/usr/local/bin/envoy']);
});

test('the proxy starts with two malloc arenas unless the environment says otherwise', () => {
  assert.equal(proxyProcessEnv({ PATH: '/bin' }).MALLOC_ARENA_MAX, '2');
  assert.equal(proxyProcessEnv({ PATH: '/bin' }).PATH, '/bin');
  assert.equal(proxyProcessEnv({ MALLOC_ARENA_MAX: '8' }).MALLOC_ARENA_MAX, '8');
});

test('the written bootstrap carries MESH_BOOTSTRAP_OVERRIDE and PILOT_INITIAL_FETCH_TIMEOUT; an unreadable override stops the start naming it', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'agent-override-'));
  const override = join(dir, 'override.json');
  writeFileSync(override, JSON.stringify({ stats_flush_interval: '9s', node: { metadata: { FROM_OVERRIDE: 'yes' } } }));
  const h = await setup('127.0.0.1:1', { FAKE_PROXY_EXIT: '0', MESH_BOOTSTRAP_OVERRIDE: override, PILOT_INITIAL_FETCH_TIMEOUT: '3s' });
  const agent = new ProxyAgent(h.opts);
  await agent.start();
  assert.equal(await agent.wait(), 0);
  const bootstrap = JSON.parse(readFileSync(agent.bootstrapFile!, 'utf8'));
  assert.equal(bootstrap.stats_flush_interval, '9s');
  assert.equal(bootstrap.node.metadata.FROM_OVERRIDE, 'yes');
  assert.equal(bootstrap.node.id, 'sidecar~10.1.2.3~app-1.ns~ns.svc.cluster.local');
  assert.equal(bootstrap.dynamic_resources.lds_config.initial_fetch_timeout, '3s');

  const missing = await setup('127.0.0.1:1', { MESH_BOOTSTRAP_OVERRIDE: join(dir, 'absent.json') });
  await assert.rejects(runProxyAgent(missing.opts), /MESH_BOOTSTRAP_OVERRIDE .*absent\.json: ENOENT/);
});

test('a proxy that cannot be started makes the agent exit non-zero with the reason logged', async () => {
  const h = await setup('127.0.0.1:1');
  const agent = new ProxyAgent({ ...h.opts, proxyCommand: [join(h.dir, 'no-such-binary')] });
  await agent.start();
  assert.equal(await agent.wait(), 127);
});

test('becomes ready once the proxy applied listeners and clusters via the agent; SIGTERM drains before stopping', async (t) => {
  const ads = await FakeAds.start();
  t.after(() => ads.stop());
  const h = await setup(ads.address);
  const agent = new ProxyAgent(h.opts);
  await agent.start();
  await eventually(() => assert.ok(h.readEvents().includes('admin up'), 'stand-in proxy admin not up yet'));
  const ready = () => fetch(`http://127.0.0.1:${agent.ports.status}/healthz/ready`).then((r) => r.status);
  assert.equal(await ready(), 503);

  // The test plays the proxy's ADS stream (the stand-in proxy does not speak xDS).
  const proxyAds = new AdsClient({ address: `127.0.0.1:${agent.ports.xds}`, node: { id: agent.node!.id }, onUpdate: () => undefined });
  t.after(() => proxyAds.close());
  proxyAds.start();
  const s = await ads.streams.next();
  s.respond({ typeUrl: TypeUrl.Cluster, versionInfo: '1', resources: [edsCluster('a')] });
  s.respond({ typeUrl: TypeUrl.Listener, versionInfo: '1', resources: [rdsListener('l', 'r')] });
  await eventually(async () => assert.equal(await ready(), 200));

  await agent.shutdown('SIGTERM');
  assert.equal(await agent.wait(), 0);
  const ev = h.readEvents().filter((e) => !e.startsWith('args'));
  assert.deepEqual(ev, ['admin up', 'drain /drain_listeners?inboundonly&graceful', 'sigterm']);
});

test('runProxyAgent: a SIGTERM to the agent process drains and stops the proxy, and the agent exits 0', async () => {
  const h = await setup('127.0.0.1:1', { FAKE_PROXY_SIGTERM_EXIT: '0' });
  const done = runProxyAgent(h.opts);
  await eventually(() => assert.ok(h.readEvents().includes('admin up'), 'stand-in proxy admin not up yet'));
  process.kill(process.pid, 'SIGTERM');
  assert.equal(await done, 0);
  assert.deepEqual(h.readEvents().slice(-2), ['drain /drain_listeners?inboundonly&graceful', 'sigterm']);
  assert.equal(process.listenerCount('SIGTERM'), 0, 'signal handlers removed');
});

test('a bad mesh config fails start with a message naming the file and field', async () => {
  const h = await setup('127.0.0.1:1');
  writeFileSync(h.opts.meshConfig, 'defaultConfig:\n  statusPort: high\n');
  await assert.rejects(runProxyAgent(h.opts), /mesh config file .*mesh\.yaml, defaultConfig: field "statusPort": expected an integer from 0 to 65535, got "high"/);
});

test('a signal during startup: no proxy is started and the agent exits 0', async () => {
  const h = await setup('127.0.0.1:1');
  const agent = new ProxyAgent(h.opts);
  const starting = agent.start();
  await agent.shutdown('SIGTERM');
  await starting;
  assert.equal(await agent.wait(), 0);
  assert.deepEqual(h.readEvents(), [], 'the proxy never ran');
});

test('PROXY_CONFIG.readinessProbe: probed at INSTANCE_IP, the proxy first, each transition sent upstream as HealthInformation', async (t) => {
  const app = createServer((socket) => socket.destroy());
  await new Promise<void>((r) => app.listen(0, '127.0.0.1', r));
  const appPort = (app.address() as AddressInfo).port;
  const ads = await FakeAds.start();
  t.after(() => (app.close(), ads.stop()));
  const probe = { tcpSocket: { port: appPort }, periodSeconds: 1 };
  const h = await setup(ads.address, { INSTANCE_IP: '127.0.0.1', PROXY_CONFIG: JSON.stringify({ readinessProbe: probe }) });
  const agent = new ProxyAgent(h.opts);
  await agent.start();
  t.after(async () => {
    await agent.shutdown('SIGTERM');
    await agent.wait();
  });
  assert.deepEqual((agent.node!.metadata['PROXY_CONFIG'] as Record<string, unknown>)['readinessProbe'], probe, 'node metadata tells the discovery server the entry is health-checked');
  const proxyAds = new AdsClient({ address: `127.0.0.1:${agent.ports.xds}`, node: { id: agent.node!.id }, onUpdate: () => undefined });
  t.after(() => proxyAds.close());
  proxyAds.start();
  const s = await ads.streams.next();
  const health = () => s.requests.nextMatching((r) => r.typeUrl === HEALTH_INFO_TYPE_URL).then((r) => r.errorDetail?.message ?? 'healthy');
  assert.equal(await health(), 'the proxy is not ready: the proxy has not applied its listeners and clusters yet');
  s.respond({ typeUrl: TypeUrl.Cluster, versionInfo: '1', resources: [edsCluster('a')] });
  s.respond({ typeUrl: TypeUrl.Listener, versionInfo: '1', resources: [rdsListener('l', 'r')] });
  assert.equal(await health(), 'healthy');
  app.close();
  assert.equal(await health(), `connect 127.0.0.1:${appPort}: ECONNREFUSED`);
});
