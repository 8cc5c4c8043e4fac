// The commands' observable behaviour with real processes and real ports: errors, version,
// request, wait and the discovery server's lifecycle.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { parse as parseYaml } from 'yaml';
import { discoveryArgs, run, Running, start } from '../helpers/proc.js';

/** One line on stderr, naming what is wrong; exit code 1. */
async function assertUsageError(args: Parameters<typeof run>, expected: RegExp): Promise<void> {
  const r = await run(...args);
  assert.equal(r.code, 1, `exit code for ${args[1].join(' ')}: ${r.stdout}${r.stderr}`);
  assert.equal(r.stderr.trimEnd().split('\n').length, 1, `one line: ${r.stderr}`);
  assert.match(r.stderr, expected);
}

test('unknown flags and commands get one line with a "did you mean"', async () => {
  await assertUsageError(['pilot-discovery', ['discovery', '--namespce', 'x']], /^Error: unknown flag: --namespce \(did you mean --namespace\?\)/);
  await assertUsageError(['pilot-discovery', ['discovry']], /unknown command "discovry" for "pilot-discovery" \(did you mean discovery\?\)/);
  await assertUsageError(['pilot-agent', ['wait', '--bogus']], /unknown flag: --bogus/);
});

test('pilot-agent proxy takes a proxy type, sidecar or router, and nothing else', async () => {
  await assertUsageError(['pilot-agent', ['proxy', 'gateway']], /invalid proxy type "gateway": expected one of sidecar, router/);
  await assertUsageError(['pilot-agent', ['proxy', 'router', 'sidecar']], /too many arguments|accepts at most 1 arg/);
});

test('flag values are type-checked, naming the flag, the value and what is expected', async () => {
  const cases: Array<[Parameters<typeof run>, RegExp]> = [
    [['pilot-discovery', ['discovery', '--resync', 'fast']], /invalid argument "fast" for "--resync" flag: expected a duration/],
    [['pilot-discovery', ['discovery', '--keepaliveTimeout=10']], /invalid argument "10" for "--keepaliveTimeout" flag: expected a duration/],
    [['pilot-discovery', ['discovery', '--ctrlz_port', '65536']], /invalid argument "65536" for "--ctrlz_port" flag: expected an integer from 0 to 65535/],
    [['pilot-discovery', ['discovery', '--ctrlz_port', '-1']], /invalid argument "-1" for "--ctrlz_port"/],
    [['pilot-discovery', ['discovery', '--orchestratorApiQPS', 'lots']], /invalid argument "lots" for "--orchestratorApiQPS" flag: expected a number/],
    [['pilot-discovery', ['discovery', '--orchestratorApiBurst', '1.5']], /invalid argument "1.5" for "--orchestratorApiBurst" flag: expected an integer/],
    [['pilot-discovery', ['discovery', '--profile=maybe']], /invalid argument "maybe" for "--profile" flag: expected a boolean/],
    [['pilot-discovery', ['discovery', '--registries', 'Consul']], /invalid argument "Consul" for "--registries" flag: expected one of Orchestrator, Mock/],
    [['pilot-discovery', ['discovery', '--plugins', 'authz,mixer']], /invalid argument "mixer" for "--plugins" flag: expected some of ext_authz, authn, authz/],
    [['pilot-discovery', ['discovery', '--log_output_level', 'ads:loud']], /unknown level "loud"/],
    [['pilot-discovery', ['discovery', '--log_output_level', 'nosuch:debug']], /unknown scope "nosuch"/],
    [['pilot-agent', ['wait', '--periodMillis', 'x']], /invalid argument "x" for "--periodMillis" flag: expected an integer/],
    [['pilot-agent', ['proxy', '--proxyLogLevel', 'loud']], /invalid argument "loud" for "--proxyLogLevel" flag: expected one of trace/],
    [['pilot-agent', ['mesh-iptables', '-m', 'BRIDGE']], /invalid argument "BRIDGE" for "-m, --mesh-inbound-interception-mode" flag/],
    [['pilot-discovery', ['version', '-o', 'xml']], /invalid argument "xml" for "-o, --output" flag: expected 'yaml' or 'json'/],
    [['pilot-discovery', ['discovery'], { env: { PILOT_DEBOUNCE_AFTER: 'fast' } }], /PILOT_DEBOUNCE_AFTER="fast": invalid value, expected a Duration/],
    [['pilot-discovery', ['discovery'], { env: { PILOT_PUSH_THROTTLE: 'many' } }], /PILOT_PUSH_THROTTLE="many": invalid value, expected an Integer/],
    [['pilot-agent', ['wait'], { env: { PROXY_XDS_VIA_AGENT: 'yes' } }], /PROXY_XDS_VIA_AGENT="yes": invalid value, expected a Boolean/],
    [['pilot-agent', ['request']], /missing required argument "method"/],
  ];
  for (const [args, re] of cases) await assertUsageError(args, re);
});

test('version: short by default, full with --short=false, yaml and json', async () => {
  for (const program of ['pilot-discovery', 'pilot-agent'] as const) {
    const short = await run(program, ['version']);
    assert.equal(short.code, 0);
    assert.match(short.stdout, /^\d+\.\d+\.\d+\S*\n$/);
    const full = await run(program, ['version', '--short=false']);
    assert.match(full.stdout, /^version\.BuildInfo\{Version:"\d+\.\d+\.\d+", GitRevision:"[^"]+", BuildDate:"[^"]+", NodeVersion:"v\d+\.\d+\.\d+", Platform:"linux\/\w+", BuildStatus:"(Clean|Modified)", GitTag:"[^"]+"\}\n$/);
    const json = JSON.parse((await run(program, ['version', '-o', 'json'])).stdout) as { clientVersion: Record<string, string> };
    assert.equal(json.clientVersion.version, short.stdout.trim());
    assert.equal(json.clientVersion.node_version, process.version);
    const yaml = parseYaml((await run(program, ['version', '--output=yaml'])).stdout) as { clientVersion: Record<string, string> };
    assert.deepEqual(yaml, json);
  }
  const proxy = await run('mesh-proxy', ['--version']);
  assert.match(proxy.stdout, /^mesh-proxy version: \S+\/\d+\.\d+\.\d+/);
});

async function serve(handler: Parameters<typeof createServer>[1]): Promise<{ server: Server; url: string }> {
  const server = createServer(handler);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` };
}

test('wait: exits 0 once the URL answers 200, also when it becomes ready late', async () => {
  let calls = 0;
  const { server, url } = await serve((_req, res) => {
    calls += 1;
    res.writeHead(calls >= 3 ? 200 : 503).end();
  });
  try {
    const r = await run('pilot-agent', ['wait', '--url', `${url}/healthz/ready`, '--periodMillis', '50', '--timeoutSeconds', '10']);
    assert.equal(r.code, 0, r.stdout + r.stderr);
    assert.equal(calls, 3);
    assert.match(r.stdout, /Proxy is ready/);
  } finally {
    server.close();
  }
});

test('wait: a URL that never becomes ready fails after --timeoutSeconds with the last reason', async () => {
  const { server, url } = await serve((_req, res) => res.writeHead(503).end());
  try {
    const r = await run('pilot-agent', ['wait', '--url', url, '--periodMillis', '100', '--timeoutSeconds', '1']);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /timeout waiting for .* to become ready after 1s; last attempt: HTTP status code 503/);
  } finally {
    server.close();
  }
  const hung = await serve(() => undefined);
  try {
    const r = await run('pilot-agent', ['wait', '--url', hung.url, '--requestTimeoutMillis', '100', '--periodMillis', '100', '--timeoutSeconds', '1']);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /last attempt: timed out/);
  } finally {
    hung.server.closeAllConnections();
    hung.server.close();
  }
});

test('discovery: binds HTTP and monitoring, serves /ready, /metrics, /version, and stops on SIGTERM', async () => {
  const d = new Running(start('pilot-discovery', discoveryArgs()));
  try {
    const http = (await d.waitFor(/http server listening on (\S+)/))[1];
    const mon = (await d.waitFor(/monitoring server listening on (\S+)/))[1];
    await d.waitFor(/discovery server ready/);
    const ready = await fetch(`http://${http}/ready`);
    assert.equal(ready.status, 200);
    const metrics = await (await fetch(`http://${mon}/metrics`)).text();
    assert.match(metrics, /^mesh_build\{component="pilot-discovery",version="[^"]+"\} 1$/m);
    assert.match(metrics, /^startup_duration_seconds \d+(\.\d+)?(e-\d+)?$/m);
    const version = (await (await fetch(`http://${mon}/version`)).json()) as { version: string };
    assert.match(version.version, /^\d+\.\d+\.\d+/);
    const env = (await (await fetch(`http://${mon}/debug/env`)).json()) as Array<{ name: string; value: string; set: boolean }>;
    assert.deepEqual(env.find((e) => e.name === 'PILOT_DEBOUNCE_AFTER'), { ...env.find((e) => e.name === 'PILOT_DEBOUNCE_AFTER'), value: '100ms', set: false });
  } finally {
    assert.equal(await d.stop('SIGTERM'), 0);
  }
  assert.match(d.output, /received SIGTERM, shutting down/);
  assert.match(d.output, /shutdown complete/);
});

test('discovery: SIGINT shuts down gracefully too', async () => {
  const d = new Running(start('pilot-discovery', discoveryArgs()));
  await d.waitFor(/discovery server ready/);
  assert.equal(await d.stop('SIGINT'), 0);
});

test('discovery: a taken port fails fast, naming the address', async () => {
  const { server, url } = await serve(() => undefined);
  try {
    const addr = url.replace('http://', '');
    const r = await run('pilot-discovery', discoveryArgs(undefined, { httpAddr: addr }));
    assert.equal(r.code, 1);
    assert.match(r.stderr, new RegExp(`^Error: failed to listen on ${addr.replace(/\./g, '\\.')}: address already in use\\n$`));
  } finally {
    server.close();
  }
});

test('discovery: startup warns about set flags and variables that are not yet effective', async () => {
  const d = new Running(start('pilot-discovery', [...discoveryArgs(), '--clusterRegistriesNamespace', 'other'], { env: { PILOT_TRACE_SAMPLING: '50' } }));
  try {
    await d.waitFor(/discovery server ready/);
    assert.match(d.output, /\twarn\tdefault\tflag --clusterRegistriesNamespace is accepted but not yet effective/);
    assert.match(d.output, /\twarn\tdefault\tenvironment variable PILOT_TRACE_SAMPLING is accepted but not yet effective/);
  } finally {
    await d.stop();
  }
});
