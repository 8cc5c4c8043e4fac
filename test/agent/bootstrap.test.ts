import { test } from 'node:test';
import assert from 'node:assert/strict';
import { equals } from '@bufbuild/protobuf';
import { BootstrapSchema } from '../../src/gen/envoy/config/bootstrap/v3/bootstrap_pb.js';
import { Cluster_DiscoveryType } from '../../src/gen/envoy/config/cluster/v3/cluster_pb.js';
import { ApiConfigSource_ApiType, ApiVersion } from '../../src/gen/envoy/config/core/v3/config_source_pb.js';
import { HttpProtocolOptionsSchema } from '../../src/gen/envoy/extensions/upstreams/http/v3/http_protocol_options_pb.js';
import { fromEnvoyJson, unpack } from '../../src/envoy/types.js';
import { applyBootstrapOverride, bootstrapJson, buildBootstrap, renderTemplate, templateValues, XDS_CLUSTER, type BootstrapInputs } from '../../src/agent/bootstrap.js';
import { mergeProxyConfig, PROXY_CONFIG_DEFAULTS } from '../../src/agent/mesh-config.js';
import { buildNodeIdentity } from '../../src/agent/node.js';

function inputs(xdsAddress: string, extra: Partial<BootstrapInputs> = {}): BootstrapInputs {
  const proxyConfig = mergeProxyConfig(PROXY_CONFIG_DEFAULTS, { proxyAdminPort: 16000 });
  const node = buildNodeIdentity({
    podName: 'app-1', namespace: 'ns', ips: ['10.0.0.1'], serviceAccount: 'app', clusterId: 'Orchestrator', dnsCapture: false,
    labels: { app: 'app' }, domain: '', serviceCluster: 'mesh-proxy', proxyConfig, env: {},
  });
  return { node, proxyConfig, xdsAddress, ...extra };
}

test('the bootstrap JSON round-trips through the generated type and carries node, admin and the xDS cluster', () => {
  const b = buildBootstrap(inputs('127.0.0.1:15011'));
  const json = bootstrapJson(b);
  const parsed = JSON.parse(json);
  assert.ok('static_resources' in parsed && 'dynamic_resources' in parsed, 'Envoy JSON uses the proto field names');
  const back = fromEnvoyJson(BootstrapSchema, parsed);
  assert.ok(equals(BootstrapSchema, back, b), 'round trip');

  assert.equal(back.node?.id, 'sidecar~10.0.0.1~app-1.ns~ns.svc.cluster.local');
  assert.equal(back.node?.cluster, 'mesh-proxy');
  assert.deepEqual(back.node?.metadata?.['LABELS'], { app: 'app' });
  const admin = back.admin?.address?.address;
  assert.equal(admin?.case, 'socketAddress');
  assert.deepEqual([admin?.value.address, admin?.value.portSpecifier.value], ['127.0.0.1', 16000]);

  const [xds] = back.staticResources?.clusters ?? [];
  assert.equal(xds?.name, XDS_CLUSTER);
  assert.deepEqual(xds?.clusterDiscoveryType, { case: 'type', value: Cluster_DiscoveryType.STATIC });
  const ep = xds?.loadAssignment?.endpoints[0]?.lbEndpoints[0]?.hostIdentifier;
  assert.equal(ep?.case, 'endpoint');
  const sa = ep?.value.address?.address;
  assert.deepEqual(sa?.case === 'socketAddress' ? [sa.value.address, sa.value.portSpecifier.value] : [], ['127.0.0.1', 15011]);
  const h2 = unpack(xds!.typedExtensionProtocolOptions['envoy.extensions.upstreams.http.v3.HttpProtocolOptions']!, HttpProtocolOptionsSchema);
  assert.equal(h2.upstreamProtocolOptions.case === 'explicitHttpConfig' && h2.upstreamProtocolOptions.value.protocolConfig.case, 'http2ProtocolOptions');

  const dyn = back.dynamicResources!;
  assert.equal(dyn.adsConfig?.apiType, ApiConfigSource_ApiType.GRPC);
  assert.equal(dyn.adsConfig?.transportApiVersion, ApiVersion.V3);
  const g = dyn.adsConfig?.grpcServices[0]?.targetSpecifier;
  assert.deepEqual(g?.case === 'envoyGrpc' ? g.value.clusterName : undefined, XDS_CLUSTER);
  for (const cfg of [dyn.ldsConfig, dyn.cdsConfig]) {
    assert.equal(cfg?.configSourceSpecifier.case, 'ads');
    assert.equal(cfg?.resourceApiVersion, ApiVersion.V3);
  }
  assert.equal(back.clusterManager, undefined);
});

test('a discovery host name is resolved by DNS; --outlierLogPath goes to the cluster manager', () => {
  const b = buildBootstrap(inputs('meshd.mesh-system.svc:15010', { outlierLogPath: '/tmp/outlier.log' }));
  assert.deepEqual(b.staticResources?.clusters[0]?.clusterDiscoveryType, { case: 'type', value: Cluster_DiscoveryType.STRICT_DNS });
  assert.equal(b.clusterManager?.outlierDetection?.eventLogPath, '/tmp/outlier.log');
  assert.throws(() => buildBootstrap(inputs('meshd')), /xDS address "meshd": expected host:port/);
});

test('--templateFile: {{ .name }} placeholders are filled; an unknown one is an error naming the line', () => {
  const values = templateValues(inputs('127.0.0.1:15011'));
  const out = renderTemplate('{"node": {"id": "{{ .nodeID }}", "metadata": {{.meta_json_str}}},\n "admin_port": {{ .admin_port }}, "xds": "{{ .xds_host }}:{{ .xds_port }}"}', values, 't.json');
  const parsed = JSON.parse(out);
  assert.equal(parsed.node.id, 'sidecar~10.0.0.1~app-1.ns~ns.svc.cluster.local');
  assert.equal(parsed.node.metadata.NAMESPACE, 'ns');
  assert.equal(parsed.admin_port, 16000);
  assert.equal(parsed.xds, '127.0.0.1:15011');
  assert.throws(() => renderTemplate('{\n"x": "{{ .nodeId }}"}', values, 't.json'), /t\.json:2: unknown template value \{\{ \.nodeId \}\}; known: .*nodeID/);
});

test('MESH_BOOTSTRAP_OVERRIDE merges over the generated bootstrap: scalars replaced, messages merged, lists appended', () => {
  const base = buildBootstrap(inputs('127.0.0.1:15011'));
  const override = [
    'admin:',
    '  address: { socket_address: { address: 127.0.0.1, port_value: 19000 } }',
    'node:',
    '  metadata: { EXTRA: "yes" }',
    'static_resources:',
    '  clusters:',
    '  - name: zipkin',
    '    type: STRICT_DNS',
    '    connect_timeout: 2s',
    'stats_flush_interval: 7s',
  ].join('\n');
  const merged = applyBootstrapOverride(base, override, 'override.yaml');
  const admin = merged.admin?.address?.address;
  assert.equal(admin?.case === 'socketAddress' ? admin.value.portSpecifier.value : undefined, 19000);
  assert.deepEqual(merged.staticResources?.clusters.map((c) => c.name), [XDS_CLUSTER, 'zipkin']);
  assert.equal(merged.node?.id, base.node?.id, 'fields the override does not name are kept');
  assert.equal(merged.node?.metadata?.['EXTRA'], 'yes');
  assert.deepEqual(merged.node?.metadata?.['LABELS'], { app: 'app' });
  assert.equal(merged.statsFlushInterval?.seconds, 7n);
  // JSON is YAML: the same file in JSON gives the same result.
  assert.ok(equals(BootstrapSchema, applyBootstrapOverride(base, '{"stats_flush_interval": "7s"}', 'o.json'), applyBootstrapOverride(base, 'stats_flush_interval: 7s', 'o.yaml')));
});

test('a bad MESH_BOOTSTRAP_OVERRIDE is an error naming the variable and the file', () => {
  const base = buildBootstrap(inputs('127.0.0.1:15011'));
  assert.throws(() => applyBootstrapOverride(base, 'admin: [', 'o.yaml'), /MESH_BOOTSTRAP_OVERRIDE o\.yaml: not valid JSON or YAML/);
  assert.throws(() => applyBootstrapOverride(base, '- 1', 'o.yaml'), /MESH_BOOTSTRAP_OVERRIDE o\.yaml: expected a bootstrap object/);
  assert.throws(() => applyBootstrapOverride(base, 'no_such_field: 1', 'o.yaml'), /MESH_BOOTSTRAP_OVERRIDE o\.yaml: not a valid bootstrap: .*no_such_field/);
});

test('PILOT_INITIAL_FETCH_TIMEOUT is the initial_fetch_timeout of listeners and clusters; 0 = no limit', () => {
  const json = (ms: number) => JSON.parse(bootstrapJson(buildBootstrap(inputs('127.0.0.1:15011', { initialFetchTimeoutMs: ms })))).dynamic_resources;
  assert.equal(json(0).lds_config.initial_fetch_timeout, '0s');
  assert.equal(json(2500).lds_config.initial_fetch_timeout, '2.500s');
  assert.equal(json(2500).cds_config.initial_fetch_timeout, '2.500s');
});

test('with an SDS socket the bootstrap has the sds-grpc cluster and tells the discovery server so (node metadata SDS)', () => {
  const b = buildBootstrap(inputs('127.0.0.1:15011', { sdsSocket: '/var/run/sds.sock' }));
  assert.equal(b.node?.metadata?.['SDS'], 'true');
  assert.ok(b.staticResources?.clusters.some((c) => c.name === 'sds-grpc'));
  assert.equal(buildBootstrap(inputs('127.0.0.1:15011')).node?.metadata?.['SDS'], undefined);
});
