import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadSettings } from '../../src/common/env.js';
import { mergeProxyConfig, PROXY_CONFIG_DEFAULTS } from '../../src/agent/mesh-config.js';
import { loadNodeIdentity } from '../../src/agent/node.js';

function labelsFile(text: string): string {
  const f = join(mkdtempSync(join(tmpdir(), 'labels-')), 'labels');
  writeFileSync(f, text);
  return f;
}

test('node id and metadata from the environment and the labels file', async () => {
  const env = {
    POD_NAME: 'httpbin-1',
    POD_NAMESPACE: 'foo',
    INSTANCE_IP: '10.0.0.7',
    SERVICE_ACCOUNT: 'httpbin',
    CLUSTER_ID: 'Kubernetes',
    MESH_META_DNS_CAPTURE: 'true',
    MESH_META_GENERATOR: 'grpc',
    MESH_META_AUTO_REGISTER_GROUP: 'httpbin-group',
    MESH_META_CUSTOM: 'x',
    MESH_METAJSON_EXTRA: '{"a": [1, 2]}',
    MESH_METAJSON_LABELS: '{"team": "blue", "app": "overridden"}',
  };
  loadSettings('agent', env);
  const pc = mergeProxyConfig(PROXY_CONFIG_DEFAULTS, { interceptionMode: 'NONE', proxyMetadata: { MESH_META_FROM_CONFIG: 'pc', MESH_META_CUSTOM: 'loses' } });
  const node = await loadNodeIdentity({ proxyConfig: pc, env, labelsFile: labelsFile('app="httpbin"\nversion="v1"\n') });
  assert.equal(node.id, 'sidecar~10.0.0.7~httpbin-1.foo~foo.svc.cluster.local');
  assert.equal(node.cluster, 'mesh-proxy');
  const m = node.metadata;
  assert.equal(m['NAMESPACE'], 'foo');
  assert.equal(m['NAME'], 'httpbin-1');
  assert.deepEqual(m['LABELS'], { team: 'blue', app: 'httpbin', version: 'v1' }, 'the labels file wins over MESH_METAJSON_LABELS');
  assert.equal(m['SERVICE_ACCOUNT'], 'httpbin');
  assert.equal(m['CLUSTER_ID'], 'Kubernetes');
  assert.equal(m['INSTANCE_IPS'], '10.0.0.7');
  assert.equal(m['INTERCEPTION_MODE'], 'NONE');
  assert.equal(m['GENERATOR'], 'grpc');
  assert.equal(m['DNS_CAPTURE'], 'true');
  assert.equal(m['AUTO_REGISTER_GROUP'], 'httpbin-group');
  assert.equal(m['CUSTOM'], 'x', 'the environment wins over proxyMetadata');
  assert.equal(m['FROM_CONFIG'], 'pc', 'proxyMetadata feeds the MESH_META_ family');
  assert.deepEqual(m['EXTRA'], { a: [1, 2] });
  assert.equal((m['PROXY_CONFIG'] as { drainDuration: string }).drainDuration, '45s');
});

test('--domain, --serviceCluster and MESH_META_CLUSTER_ID; a missing labels file means no labels', async () => {
  const env = { POD_NAME: 'p', POD_NAMESPACE: 'bar', INSTANCE_IP: '10.0.0.8', CLUSTER_ID: 'c1', MESH_META_CLUSTER_ID: 'c2' };
  loadSettings('agent', env);
  const node = await loadNodeIdentity({ proxyConfig: mergeProxyConfig(PROXY_CONFIG_DEFAULTS), env, domain: 'bar.svc.example.org', serviceCluster: 'app.bar', labelsFile: '/nonexistent/labels' });
  assert.equal(node.id, 'sidecar~10.0.0.8~p.bar~bar.svc.example.org');
  assert.equal(node.cluster, 'app.bar');
  assert.equal(node.metadata['CLUSTER_ID'], 'c2');
  assert.deepEqual(node.metadata['LABELS'], {});
  assert.equal(node.metadata['DNS_CAPTURE'], 'false');
  assert.equal(node.metadata['SERVICE_ACCOUNT'], undefined);
});

test('bad inputs: MESH_METAJSON_ and the labels file are named', async () => {
  const env = { POD_NAME: 'p', POD_NAMESPACE: 'bar', MESH_METAJSON_OWNER: '{not json' };
  loadSettings('agent', env);
  const pc = mergeProxyConfig(PROXY_CONFIG_DEFAULTS);
  await assert.rejects(loadNodeIdentity({ proxyConfig: pc, env, labelsFile: '/nonexistent' }), /MESH_METAJSON_OWNER="\{not json": invalid JSON/);
  const env2 = { POD_NAME: 'p', MESH_METAJSON_LABELS: '[1]' };
  loadSettings('agent', env2);
  await assert.rejects(loadNodeIdentity({ proxyConfig: pc, env: env2, labelsFile: '/nonexistent' }), /MESH_METAJSON_LABELS: expected a JSON object of strings/);
  const f = labelsFile('app=httpbin\n');
  await assert.rejects(loadNodeIdentity({ proxyConfig: pc, env: { POD_NAME: 'p' }, labelsFile: f }), /labels:1: expected key="value"/);
  // A registry variable with a bad value is reported by name.
  assert.throws(() => loadSettings('agent', { MESH_META_DNS_CAPTURE: 'yes' }), /MESH_META_DNS_CAPTURE="yes": invalid value, expected a Boolean/);
});

test('MESH_META_INTERCEPTION_MODE (what the injector writes) sets the node\'s interception mode over ProxyConfig; a bad one is named', async () => {
  const pc = mergeProxyConfig(PROXY_CONFIG_DEFAULTS, { interceptionMode: 'REDIRECT' });
  const env = { POD_NAME: 'p', POD_NAMESPACE: 'bar', INSTANCE_IP: '10.0.0.9', MESH_META_INTERCEPTION_MODE: 'NONE' };
  loadSettings('agent', env);
  const node = await loadNodeIdentity({ proxyConfig: pc, env, labelsFile: '/nonexistent' });
  assert.equal(node.metadata['INTERCEPTION_MODE'], 'NONE', 'the variable wins, as in the Go mesh');
  const withoutVar = await loadNodeIdentity({ proxyConfig: pc, env: { POD_NAME: 'p', POD_NAMESPACE: 'bar' }, labelsFile: '/nonexistent' });
  assert.equal(withoutVar.metadata['INTERCEPTION_MODE'], 'REDIRECT', 'ProxyConfig when the variable is unset');
  await assert.rejects(
    loadNodeIdentity({ proxyConfig: pc, env: { POD_NAME: 'p', MESH_META_INTERCEPTION_MODE: 'SIDECAR' }, labelsFile: '/nonexistent' }),
    /MESH_META_INTERCEPTION_MODE="SIDECAR": expected one of REDIRECT, TPROXY, NONE/,
  );
});

test('pilot-agent proxy router: the node id names the router type, for the discovery server to build a gateway', async () => {
  loadSettings('agent', { POD_NAME: 'ingress-1', POD_NAMESPACE: 'mesh-system', INSTANCE_IP: '10.0.0.9' });
  const node = await loadNodeIdentity({ proxyType: 'router', proxyConfig: PROXY_CONFIG_DEFAULTS, env: {}, labelsFile: labelsFile('app="ingress"\n') });
  assert.equal(node.id, 'router~10.0.0.9~ingress-1.mesh-system~mesh-system.svc.cluster.local');
  assert.deepEqual(node.metadata['LABELS'], { app: 'ingress' });
});

test('MESH_META_WORKLOAD_NAME and MESH_META_OWNER (what the injector writes) arrive as WORKLOAD_NAME and OWNER; none is made up', async () => {
  const owner = 'kubernetes://apis/apps/v1/namespaces/bookinfo/deployments/reviews-v1';
  const env = { POD_NAME: 'reviews-v1-5b4f8c6d9-x2x7q', POD_NAMESPACE: 'bookinfo', MESH_META_WORKLOAD_NAME: 'reviews-v1', MESH_META_OWNER: owner };
  loadSettings('agent', env);
  const labels = labelsFile('app="reviews"\nservice.mesh.io/canonical-name="reviews"\nservice.mesh.io/canonical-revision="v1"\n');
  const node = await loadNodeIdentity({ proxyConfig: PROXY_CONFIG_DEFAULTS, env, labelsFile: labels });
  assert.equal(node.metadata['WORKLOAD_NAME'], 'reviews-v1');
  assert.equal(node.metadata['OWNER'], owner);
  assert.deepEqual(node.metadata['LABELS'], { app: 'reviews', 'service.mesh.io/canonical-name': 'reviews', 'service.mesh.io/canonical-revision': 'v1' });
  // A VM is not injected: its generated proxyMetadata names the workload (its WorkloadGroup).
  loadSettings('agent', { POD_NAME: 'vm-1' });
  const vm = await loadNodeIdentity({ proxyConfig: mergeProxyConfig(PROXY_CONFIG_DEFAULTS, { proxyMetadata: { MESH_META_WORKLOAD_NAME: 'billing' } }), env: { POD_NAME: 'vm-1' }, labelsFile: '/nonexistent' });
  assert.equal(vm.metadata['WORKLOAD_NAME'], 'billing');
  // Without either, the Go agent leaves both unset rather than guessing from the pod name; so do we.
  const bare = await loadNodeIdentity({ proxyConfig: PROXY_CONFIG_DEFAULTS, env: { POD_NAME: 'vm-1' }, labelsFile: '/nonexistent' });
  assert.deepEqual([bare.metadata['WORKLOAD_NAME'], bare.metadata['OWNER']], [undefined, undefined]);
});
