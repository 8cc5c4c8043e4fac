import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadProxyConfig, parseDownwardApiFile, PROXY_CONFIG_DEFAULTS, proxyConfigJson, ProxyConfigError } from '../../src/agent/mesh-config.js';

function files(mesh?: string, annotations?: string) {
  const dir = mkdtempSync(join(tmpdir(), 'meshcfg-'));
  const meshConfigFile = join(dir, 'mesh');
  const annotationsFile = join(dir, 'annotations');
  if (mesh !== undefined) writeFileSync(meshConfigFile, mesh);
  if (annotations !== undefined) writeFileSync(annotationsFile, annotations);
  return { meshConfigFile, annotationsFile };
}

test('absent files and no PROXY_CONFIG give the defaults', async () => {
  const pc = await loadProxyConfig({ ...files(), proxyConfigEnv: '' });
  assert.deepEqual(pc, { ...PROXY_CONFIG_DEFAULTS, proxyMetadata: {} });
  assert.equal(pc.discoveryAddress, 'meshd.mesh-system.svc:15012');
  assert.equal(pc.statusPort, 15021);
  assert.equal(pc.proxyAdminPort, 15000);
  assert.equal(pc.terminationDrainDuration, 5000);
});

test('precedence: mesh config defaultConfig < PROXY_CONFIG < annotation, field by field', async () => {
  const mesh = [
    'trustDomain: cluster.local   # a discovery-side field, not ours',
    'defaultConfig:',
    '  discoveryAddress: localhost:15010',
    '  statusPort: 16021',
    '  proxyAdminPort: 16000',
    '  drainDuration: 10s',
    '  proxyMetadata: { A: file, B: file }',
  ].join('\n');
  const annotation = JSON.stringify('proxyAdminPort: 18000\nproxyMetadata:\n  B: annotation\n');
  const pc = await loadProxyConfig({
    ...files(mesh, `app="x"\nproxy.mesh.io/config=${annotation}\n`),
    proxyConfigEnv: '{"statusPort": 17021, "proxyAdminPort": 17000, "interceptionMode": "NONE", "terminationDrainDuration": "1m30s"}',
  });
  assert.equal(pc.discoveryAddress, 'localhost:15010', 'from the file');
  assert.equal(pc.drainDuration, 10_000, 'from the file');
  assert.equal(pc.statusPort, 17021, 'PROXY_CONFIG over the file');
  assert.equal(pc.interceptionMode, 'NONE');
  assert.equal(pc.terminationDrainDuration, 90_000);
  assert.equal(pc.proxyAdminPort, 18000, 'the annotation over PROXY_CONFIG');
  assert.deepEqual(pc.proxyMetadata, { A: 'file', B: 'annotation' }, 'proxyMetadata merges key by key');
  assert.equal(pc.concurrency, 2, 'untouched fields keep their defaults');
});

test('bad inputs name the source, the field and what is expected', async () => {
  const cases: Array<[Parameters<typeof files>, string, RegExp]> = [
    [['defaultConfig:\n  statusPort: [1'], '', /mesh config file .*mesh: invalid YAML/],
    [['defaultConfig:\n  statusPort: 70000\n'], '', /mesh config file .*mesh, defaultConfig: field "statusPort": expected an integer from 0 to 65535, got 70000/],
    [['defaultConfig:\n  drainDuration: soon\n'], '', /defaultConfig: field "drainDuration": expected a duration such as 5s or 1m30s, got "soon"/],
    [['defaultConfig:\n  statusport: 1\n'], '', /defaultConfig: unknown field "statusport"; known fields: .*statusPort/],
    [['defaultConfig: [1, 2]\n'], '', /defaultConfig: expected a ProxyConfig map/],
    [[], 'interceptionMode: SIDECAR', /PROXY_CONFIG: field "interceptionMode": expected one of REDIRECT, TPROXY, NONE, got "SIDECAR"/],
    [[], '{"proxyMetadata": {"A": 1}}', /PROXY_CONFIG: field "proxyMetadata": key "A": expected a string, got 1/],
    [[], '{statusPort: ', /PROXY_CONFIG: invalid YAML/],
    [[undefined, 'proxy.mesh.io/config="concurrency: -1"\n'], '', /annotation proxy\.mesh\.io\/config in .*annotations: field "concurrency": expected an integer/],
    [[undefined, 'proxy.mesh.io/config=unquoted\n'], '', /annotations:1: expected key="value", got "proxy\.mesh\.io\/config=unquoted"/],
  ];
  for (const [f, env, re] of cases) {
    await assert.rejects(loadProxyConfig({ ...files(...f), proxyConfigEnv: env }), re, `${JSON.stringify(f)} ${env}`);
  }
});

test('downward-API files: quoted values with escapes, blank lines skipped', () => {
  assert.deepEqual(parseDownwardApiFile('app="httpbin"\n\nversion="v1"\nnote="a \\"b\\"\\nc"\n', 'labels'), { app: 'httpbin', version: 'v1', note: 'a "b"\nc' });
});

test('readinessProbe: read from PROXY_CONFIG as written, replaced whole by a later layer, carried by proxyConfigJson', async () => {
  const probe = { httpGet: { path: '/healthz', port: 8080, httpHeaders: [{ name: 'X-Probe', value: 'agent' }] }, periodSeconds: 5, failureThreshold: 3 };
  const pc = await loadProxyConfig({ ...files('defaultConfig:\n  readinessProbe:\n    tcpSocket: { port: 9000 }\n    initialDelaySeconds: 7\n'), proxyConfigEnv: JSON.stringify({ readinessProbe: probe }) });
  assert.deepEqual(pc.readinessProbe, probe, 'the later layer replaces the whole probe: no tcpSocket or initialDelaySeconds left from the file');
  assert.deepEqual(proxyConfigJson(pc)['readinessProbe'], probe, 'node metadata PROXY_CONFIG.readinessProbe: unchanged, no defaults filled in');

  const fromFile = await loadProxyConfig({ ...files('defaultConfig:\n  readinessProbe:\n    exec: { command: [/bin/check, --quick] }\n'), proxyConfigEnv: '' });
  assert.deepEqual(fromFile.readinessProbe, { exec: { command: ['/bin/check', '--quick'] } });
  const none = await loadProxyConfig({ ...files(), proxyConfigEnv: '' });
  assert.equal('readinessProbe' in proxyConfigJson(none), false, 'no probe, no field: the discovery server does not mark the entry health-checked');
});

test('a bad readinessProbe names the source, the field path and what is wrong', async () => {
  const cases: Array<[Parameters<typeof files>, string, string]> = [
    [[], '{"readinessProbe": {"httpGet": {"port": 70000}}}', 'PROXY_CONFIG: field "readinessProbe.httpGet.port": expected an integer in 1..65535, got 70000'],
    [[], '{"readinessProbe": {"tcpSocket": {"port": 80}, "httpGet": {"port": 80}}}', 'PROXY_CONFIG: field "readinessProbe": expected exactly one of httpGet, tcpSocket, exec, grpc (found httpGet, tcpSocket)'],
    [[], '{"readinessProbe": {"periodSeconds": 5}}', 'PROXY_CONFIG: field "readinessProbe": expected exactly one of httpGet, tcpSocket, exec, grpc (found none)'],
    [[], '{"readinessProbe": {"exec": {"command": []}}}', 'PROXY_CONFIG: field "readinessProbe.exec.command": must have at least 1 entry'],
    [[], '{"readinessProbe": {"httpGet": {"port": 80, "scheme": "FTP"}}}', 'PROXY_CONFIG: field "readinessProbe.httpGet.scheme": expected HTTP or HTTPS, got "FTP"'],
    [[], 'readinessProbe: yes', 'PROXY_CONFIG: field "readinessProbe": expected an object, got "yes"'],
    [['defaultConfig:\n  readinessProbe:\n    grpc: { port: 9090 }\n    timeout: 1\n'], '', 'defaultConfig: field "readinessProbe.timeout": unknown field "timeout"; expected one of initialDelaySeconds, timeoutSeconds, periodSeconds, successThreshold, failureThreshold, httpGet, tcpSocket, exec, grpc'],
    [[undefined, `proxy.mesh.io/config=${JSON.stringify('readinessProbe:\n  tcpSocket: {}\n')}\n`], '', 'annotations: field "readinessProbe.tcpSocket.port": required field is missing'],
  ];
  for (const [f, env, message] of cases) {
    const err = await loadProxyConfig({ ...files(...f), proxyConfigEnv: env }).then(
      () => assert.fail(`${env} ${JSON.stringify(f)}: accepted`),
      (e: unknown) => e,
    );
    assert.ok(err instanceof ProxyConfigError);
    assert.ok(err.message.endsWith(message), `${err.message}\n  does not end with\n${message}`);
  }
});
