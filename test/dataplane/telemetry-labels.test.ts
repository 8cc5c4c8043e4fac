// The pure parts of the standard metrics, case by case with the Go mesh's stats filter's rules:
// the labels of each side, the overrides, the exchanged workload header, the attribute expressions.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { create } from '@bufbuild/protobuf';
import { MetricConfigSchema } from '../../src/gen/mesh/stats/config_pb.js';
import { AttributeExpressionError, parseAttributeExpression } from '../../src/envoy/attribute-expression.js';
import { compileMetricOverrides } from '../../src/dataplane/telemetry/metric-overrides.js';
import { namespaceOfPrincipal, standardLabels, type LabelContext, type StreamFacts } from '../../src/dataplane/telemetry/standard-labels.js';
import { localWorkload, peerHeaderValue, peerOfHeader, workloadOf } from '../../src/dataplane/telemetry/workload-metadata.js';

const local = localWorkload({ NAME: 'httpbin-1', NAMESPACE: 'default', CLUSTER_ID: 'c1', WORKLOAD_NAME: 'httpbin', LABELS: { app: 'httpbin', version: 'v1' } });
const peer = workloadOf({ NAMESPACE: 'from-header', WORKLOAD_NAME: 'sleep', LABELS: { app: 'sleep' } });
const facts = (f: Partial<StreamFacts> = {}): StreamFacts => ({ peer: undefined, peerSan: '', localSan: '', protocol: 'http', responseCode: 200, responseFlags: '-', ...f });
const server: LabelContext = { reporter: 'destination', local, hostFallback: false };
const client: LabelContext = { reporter: 'source', local, hostFallback: true };
const labelsOf = (ctx: LabelContext, f: StreamFacts) => Object.fromEntries(standardLabels(ctx, f));

test('labels: the certificate names the peer namespace before the peer header does', () => {
  const l = labelsOf(server, facts({ peer, peerSan: 'spiffe://cluster.local/ns/from-cert/sa/sleep', localSan: 'spiffe://cluster.local/ns/default/sa/httpbin' }));
  assert.equal(l['source_workload_namespace'], 'from-cert');
  assert.equal(l['source_workload'], 'sleep');
  assert.equal(l['connection_security_policy'], 'mutual_tls');
  assert.equal(labelsOf(server, facts({ peer }))['source_workload_namespace'], 'from-header', 'no certificate: the header');
  assert.equal(namespaceOfPrincipal('spiffe://td/ns/a'), 'a');
  assert.equal(namespaceOfPrincipal('spiffe://td/sa/a'), undefined);
});

test('labels: a serving proxy without a peer labels the source unknown and the destination with itself', () => {
  assert.deepEqual(standardLabels(server, facts()), [
    ['reporter', 'destination'],
    ['source_workload', 'unknown'],
    ['source_canonical_service', 'unknown'],
    ['source_canonical_revision', 'latest'],
    ['source_workload_namespace', 'unknown'],
    ['source_principal', 'unknown'],
    ['source_app', 'unknown'],
    ['source_version', 'unknown'],
    ['source_cluster', 'unknown'],
    ['destination_workload', 'httpbin'],
    ['destination_workload_namespace', 'default'],
    ['destination_principal', 'unknown'],
    ['destination_app', 'httpbin'],
    ['destination_version', 'v1'],
    ['destination_service', 'httpbin'],
    ['destination_canonical_service', 'httpbin'],
    ['destination_canonical_revision', 'v1'],
    ['destination_service_name', 'httpbin'],
    ['destination_service_namespace', 'default'],
    ['destination_cluster', 'c1'],
    ['request_protocol', 'http'],
    ['response_code', '200'],
    ['grpc_response_status', ''],
    ['response_flags', '-'],
    ['connection_security_policy', 'none'],
  ]);
});

test('labels: the destination service of a client: cluster metadata, else the Host header; the catch-all routes and clusters', () => {
  assert.equal(labelsOf(client, facts({ authority: 'httpbin:8000' }))['destination_service'], 'httpbin:8000');
  const withMeta = labelsOf(client, facts({ authority: 'httpbin:8000', clusterName: 'outbound|8000||httpbin.default.svc.cluster.local', clusterService: { host: 'httpbin.default.svc.cluster.local' } }));
  assert.equal(withMeta['destination_service'], 'httpbin.default.svc.cluster.local');
  assert.equal(withMeta['destination_service_name'], 'httpbin', 'no name: the host up to its first dot');
  assert.equal(labelsOf(client, facts({ authority: 'x.com', routeName: 'block_all' }))['destination_service_name'], 'BlackHoleCluster');
  assert.equal(labelsOf(client, facts({ authority: 'x.com', routeName: 'allow_any' }))['destination_service_name'], 'PassthroughCluster');
  assert.deepEqual([labelsOf(client, facts({ clusterName: 'PassthroughCluster' }))['destination_service'], labelsOf(client, facts({ clusterName: 'PassthroughCluster' }))['destination_service_name']], ['unknown', 'PassthroughCluster']);
  assert.equal(labelsOf({ ...client, hostFallback: false }, facts({ authority: 'httpbin:8000' }))['destination_service'], 'unknown');
  const l = labelsOf(client, facts({ peer, protocol: 'grpc', grpcStatus: 14 }));
  assert.deepEqual([l['connection_security_policy'], l['destination_workload'], l['destination_canonical_revision'], l['grpc_response_status'], l['request_protocol']], ['unknown', 'sleep', 'latest', '14', 'grpc']);
  const tcp = standardLabels(client, facts({ protocol: 'tcp' })).map(([k]) => k);
  assert.ok(!tcp.includes('response_code') && !tcp.includes('grpc_response_status'), 'TCP has neither');
});

test('overrides: a named metric dropped, a nameless drop changes nothing, labels removed, replaced and added in order', () => {
  const o = compileMetricOverrides([
    create(MetricConfigSchema, { drop: true }),
    create(MetricConfigSchema, { name: 'request_bytes', drop: true }),
    create(MetricConfigSchema, { tagsToRemove: ['source_app', 'made_up'] }),
    create(MetricConfigSchema, { name: 'requests_total', dimensions: { zeta: "'z'", alpha: 'request.method', source_version: 'upstream_peer.version' } }),
    create(MetricConfigSchema, { name: 'my_custom', dimensions: { x: "'y'" } }),
  ])!;
  const std: [string, string][] = [['reporter', 'source'], ['source_app', 'sleep'], ['source_version', 'v2']];
  const attrs = (root: string, field: string) => (root === 'request' && field === 'method' ? 'GET' : undefined);
  assert.equal(o.labels('request_bytes', std, attrs), undefined);
  assert.deepEqual(o.labels('response_bytes', std, attrs), [['reporter', 'source'], ['source_version', 'v2']], 'removed from every metric');
  assert.deepEqual(o.labels('requests_total', std, attrs), [['reporter', 'source'], ['source_version', 'unknown'], ['alpha', 'GET'], ['zeta', 'z']], 'additions sorted by name; an attribute with no value is unknown');
  assert.deepEqual(o.unevaluable, []);
  assert.equal(compileMetricOverrides([]), undefined);
});

test('peer header: the workload round-trips; only the telemetry labels and the additional ones are sent; garbage is no peer', () => {
  const w = localWorkload({ NAME: 'p', NAMESPACE: 'ns', WORKLOAD_NAME: 'wl', LABELS: { app: 'a', version: 'v', secret: 's', team: 't' } });
  const back = peerOfHeader(peerHeaderValue(w, ['team']))!;
  assert.deepEqual(back, { name: 'p', namespace: 'ns', cluster: '', workload: 'wl', app: 'a', version: 'v', canonicalName: 'a', canonicalRevision: 'v', labels: { app: 'a', version: 'v', team: 't', 'service.mesh.io/canonical-name': 'a', 'service.mesh.io/canonical-revision': 'v' } });
  assert.equal(peerOfHeader('not base64 protobuf!!'), undefined);
  assert.equal(peerOfHeader(''), undefined);
});

test('local workload: the canonical service and revision as the injector derives them when the labels are missing', () => {
  const of = (labels: Record<string, string>, workload = 'wl') => {
    const w = localWorkload({ WORKLOAD_NAME: workload, LABELS: labels });
    return [w.canonicalName, w.canonicalRevision];
  };
  assert.deepEqual(of({ 'service.mesh.io/canonical-name': 'c', 'service.mesh.io/canonical-revision': 'r', app: 'a' }), ['c', 'r']);
  assert.deepEqual(of({ 'app.kubernetes.io/name': 'k', app: 'a', 'app.kubernetes.io/version': '2', version: '1' }), ['k', '2']);
  assert.deepEqual(of({ app: 'a', version: '1' }), ['a', '1']);
  assert.deepEqual(of({}), ['wl', 'latest']);
});

test('attribute expressions: literals and attributes parse; anything else is refused saying why', () => {
  assert.deepEqual(parseAttributeExpression(" 'a \\'b' "), { kind: 'literal', value: "a 'b" });
  assert.deepEqual(parseAttributeExpression('"x"'), { kind: 'literal', value: 'x' });
  assert.deepEqual(parseAttributeExpression('request.host'), { kind: 'attribute', root: 'request', field: 'host' });
  assert.deepEqual(parseAttributeExpression("request.headers['X-User']"), { kind: 'attribute', root: 'request', field: 'headers', key: 'x-user' });
  assert.deepEqual(parseAttributeExpression('node.metadata["NAMESPACE"]'), { kind: 'attribute', root: 'node', field: 'metadata', key: 'NAMESPACE' });
  const refused = (text: string) => assert.throws(() => parseAttributeExpression(text), (e: unknown) => (e instanceof AttributeExpressionError ? e.message : '') !== '');
  for (const t of ['', 'size(request.path)', 'request.host == "a"', 'request.headers', 'request.host["a"]', "request.headers['a'].b", 'filter_state.x']) refused(t);
  assert.throws(() => parseAttributeExpression('request.hots'), { message: 'unknown attribute request.hots (expected one of request.host, request.method, request.path, request.url_path, request.scheme, request.protocol, request.id, request.useragent, request.referer, request.query, request.headers)' });
  assert.throws(() => parseAttributeExpression('upstream_peer.labels'), { message: "upstream_peer.labels is a map: name an entry, e.g. upstream_peer.labels['name']" });
});
