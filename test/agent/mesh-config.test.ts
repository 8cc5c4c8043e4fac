import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadProxyConfig, parseDownwardApiFile, PROXY_CONFIG_DEFAULTS } from '../../src/agent/mesh-config.js';

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
