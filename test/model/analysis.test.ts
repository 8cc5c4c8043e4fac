// Each analyzer on fixtures: one config that makes it fire (code, resource, field path, message) and
// one close to it that keeps it quiet.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ROOT_NAMESPACE, type AnyResource, type Kind, type ResourceOf, type SpecByKind } from '../../src/api/types.js';
import { analyze } from '../../src/model/analysis/index.js';
import { gatewaySelector } from '../../src/model/analysis/gateway-selector.js';
import { mtlsDestinationRule } from '../../src/model/analysis/mtls-destination-rule.js';
import { peerAuthenticationConflict } from '../../src/model/analysis/peerauthentication-conflict.js';
import { requestPrincipalIssuer } from '../../src/model/analysis/request-principal-issuer.js';
import { selectorNoWorkload } from '../../src/model/analysis/selector-no-workload.js';
import { telemetryConflict } from '../../src/model/analysis/telemetry-conflict.js';
import type { AnalysisInput, Analyzer } from '../../src/model/analysis/types.js';
import { virtualServiceConflict } from '../../src/model/analysis/virtualservice-conflict.js';
import { virtualServiceSubset } from '../../src/model/analysis/virtualservice-subset.js';
import type { WorkloadRef } from '../../src/model/selection.js';

function res<K extends Kind>(kind: K, ns: string, name: string, spec: SpecByKind[K]): ResourceOf<K> {
  return { apiVersion: 'v1', kind, metadata: { namespace: ns, name }, spec };
}

const httpbin: WorkloadRef = { namespace: 'default', labels: { app: 'httpbin', version: 'v1' } };
const ingress: WorkloadRef = { namespace: 'mesh-system', labels: { app: 'ingressgateway' } };

function input(resources: AnyResource[], workloads: WorkloadRef[] = [httpbin], gateways: WorkloadRef[] = [ingress]): AnalysisInput {
  return {
    list: <K extends Kind>(kind: K) => resources.filter((r) => r.kind === kind) as ResourceOf<K>[],
    workloads,
    gateways,
    rootNamespace: ROOT_NAMESPACE,
    domain: 'cluster.local',
  };
}

const brief = (a: Analyzer, i: AnalysisInput) => a.analyze(i).map((m) => `${m.code} ${m.resource.kind}/${m.resource.namespace}/${m.resource.name} ${m.path}`);

test('selector matching no workload: fires for a policy and a Sidecar with a label no workload has', () => {
  const i = input([
    res('AuthorizationPolicy', 'default', 'typo', { selector: { matchLabels: { app: 'httbin' } } }),
    res('Sidecar', 'default', 'sc', { workloadSelector: { labels: { app: 'ratings' } } }),
    res('PeerAuthentication', 'other', 'elsewhere', { selector: { matchLabels: { app: 'httpbin' } } }),
  ]);
  assert.deepEqual(brief(selectorNoWorkload, i), [
    'MSH0127 AuthorizationPolicy/default/typo spec.selector.matchLabels',
    'MSH0127 PeerAuthentication/other/elsewhere spec.selector.matchLabels',
    'MSH0127 Sidecar/default/sc spec.workloadSelector.labels',
  ]);
  assert.match(selectorNoWorkload.analyze(i)[0]!.message, /no workload in namespace default matches the selector app=httbin/);
});

test('selector matching no workload: quiet for a matching selector, no selector, and a root-namespace policy matching anywhere', () => {
  const i = input([
    res('AuthorizationPolicy', 'default', 'ok', { selector: { matchLabels: { app: 'httpbin' } } }),
    res('RequestAuthentication', 'default', 'all', {}),
    res('AuthorizationPolicy', ROOT_NAMESPACE, 'mesh', { selector: { matchLabels: { version: 'v1' } } }),
    res('Sidecar', 'default', 'sc', { workloadSelector: { labels: { app: 'httpbin' } } }),
  ]);
  assert.deepEqual(brief(selectorNoWorkload, i), []);
});

test('untrusted requestPrincipals issuer: fires for an issuer no RequestAuthentication names', () => {
  const i = input([
    res('RequestAuthentication', 'default', 'jwt', { jwtRules: [{ issuer: 'https://issuer.example' }] }),
    res('AuthorizationPolicy', 'default', 'allow', { rules: [{ from: [{ source: { requestPrincipals: ['https://issuer.example/alice', 'https://other.example/bob'] } }] }] }),
  ]);
  const msgs = requestPrincipalIssuer.analyze(i);
  assert.deepEqual(brief(requestPrincipalIssuer, i), ['MSH0201 AuthorizationPolicy/default/allow spec.rules[0].from[0].source.requestPrincipals[1]']);
  assert.match(msgs[0]!.message, /issuer "https:\/\/other.example", which no RequestAuthentication in namespace default or mesh-system trusts/);
});

test('untrusted requestPrincipals issuer: quiet for trusted issuers (own or root namespace) and wildcards', () => {
  const i = input([
    res('RequestAuthentication', ROOT_NAMESPACE, 'jwt', { jwtRules: [{ issuer: 'https://issuer.example' }] }),
    res('AuthorizationPolicy', 'default', 'allow', { rules: [{ from: [{ source: { requestPrincipals: ['https://issuer.example/*', '*', '*/alice'] } }] }] }),
  ]);
  assert.deepEqual(brief(requestPrincipalIssuer, i), []);
});

const reviewsDr = res('DestinationRule', 'default', 'reviews', { host: 'reviews', subsets: [{ name: 'v1', labels: { version: 'v1' } }] });

test('VirtualService subset: fires for a route to a subset no DestinationRule defines', () => {
  const i = input([
    reviewsDr,
    res('VirtualService', 'default', 'reviews', { hosts: ['reviews'], http: [{ route: [{ destination: { host: 'reviews', subset: 'v1' } }, { destination: { host: 'reviews.default.svc.cluster.local', subset: 'v2' } }] }], tcp: [{ route: [{ destination: { host: 'ratings', subset: 'v1' } }] }] }),
  ]);
  assert.deepEqual(brief(virtualServiceSubset, i), ['MSH0101 VirtualService/default/reviews spec.http[0].route[1].destination.subset', 'MSH0101 VirtualService/default/reviews spec.tcp[0].route[0].destination.subset']);
  assert.match(virtualServiceSubset.analyze(i)[0]!.message, /subset "v2" of host reviews.default.svc.cluster.local is not defined by any DestinationRule/);
});

test('VirtualService subset: quiet for defined subsets (short and full host names) and routes without subset', () => {
  const i = input([reviewsDr, res('VirtualService', 'default', 'reviews', { hosts: ['reviews'], http: [{ route: [{ destination: { host: 'reviews.default.svc.cluster.local', subset: 'v1' } }, { destination: { host: 'ratings' } }] }] })]);
  assert.deepEqual(brief(virtualServiceSubset, i), []);
});

test('Gateway selector: fires when no gateway proxy has the labels', () => {
  const i = input([res('Gateway', 'default', 'gw', { selector: { istio: 'egress' }, servers: [] })]);
  assert.deepEqual(brief(gatewaySelector, i), ['MSH0101 Gateway/default/gw spec.selector']);
  assert.match(gatewaySelector.analyze(i)[0]!.message, /no gateway proxy matches the selector istio=egress/);
});

test('Gateway selector: quiet when a gateway proxy matches; a sidecar workload with the labels does not count', () => {
  assert.deepEqual(brief(gatewaySelector, input([res('Gateway', 'default', 'gw', { selector: { app: 'ingressgateway' }, servers: [] })])), []);
  const sidecarOnly = input([res('Gateway', 'default', 'gw', { selector: { app: 'httpbin' }, servers: [] })], [httpbin], []);
  assert.equal(brief(gatewaySelector, sidecarOnly).length, 1);
});

test('two VirtualServices for one host: both are reported, on the host entry', () => {
  const i = input([res('VirtualService', 'default', 'a', { hosts: ['reviews'] }), res('VirtualService', 'default', 'b', { hosts: ['ratings', 'reviews.default.svc.cluster.local'], gateways: ['mesh'] })]);
  assert.deepEqual(brief(virtualServiceConflict, i), ['MSH0109 VirtualService/default/a spec.hosts[0]', 'MSH0109 VirtualService/default/b spec.hosts[1]']);
  assert.match(virtualServiceConflict.analyze(i)[0]!.message, /host reviews.default.svc.cluster.local is defined by several VirtualServices for the mesh: default\/a, default\/b/);
});

test('two VirtualServices for one host: quiet for one per host, and for one bound only to a gateway', () => {
  const i = input([res('VirtualService', 'default', 'a', { hosts: ['reviews'] }), res('VirtualService', 'default', 'b', { hosts: ['reviews'], gateways: ['default/gw'] }), res('VirtualService', 'other', 'c', { hosts: ['reviews'] })]);
  assert.deepEqual(brief(virtualServiceConflict, i), []);
});

test('conflicting PeerAuthentications: two namespace-wide ones, and two selecting one workload', () => {
  const i = input([
    res('PeerAuthentication', 'default', 'strict', { mtls: { mode: 'STRICT' } }),
    res('PeerAuthentication', 'default', 'permissive', { mtls: { mode: 'PERMISSIVE' } }),
    res('PeerAuthentication', 'default', 'by-app', { selector: { matchLabels: { app: 'httpbin' } }, mtls: { mode: 'DISABLE' } }),
    res('PeerAuthentication', 'default', 'by-version', { selector: { matchLabels: { version: 'v1' } }, mtls: { mode: 'STRICT' } }),
  ]);
  assert.deepEqual(brief(peerAuthenticationConflict, i), [
    'MSH0113 PeerAuthentication/default/strict spec.selector',
    'MSH0113 PeerAuthentication/default/permissive spec.selector',
    'MSH0113 PeerAuthentication/default/by-app spec.selector.matchLabels',
    'MSH0113 PeerAuthentication/default/by-version spec.selector.matchLabels',
  ]);
});

test('conflicting PeerAuthentications: quiet for one per level (mesh, namespace, workload)', () => {
  const i = input([
    res('PeerAuthentication', ROOT_NAMESPACE, 'mesh', { mtls: { mode: 'STRICT' } }),
    res('PeerAuthentication', 'default', 'ns', { mtls: { mode: 'PERMISSIVE' } }),
    res('PeerAuthentication', 'default', 'by-app', { selector: { matchLabels: { app: 'httpbin' } }, mtls: { mode: 'DISABLE' } }),
    res('PeerAuthentication', 'default', 'other-app', { selector: { matchLabels: { app: 'ratings' } } }),
  ]);
  assert.deepEqual(brief(peerAuthenticationConflict, i), []);
});

test('DestinationRule disabling TLS to a STRICT namespace: fires per place it disables, for services and ServiceEntry hosts', () => {
  const i = input([
    res('PeerAuthentication', ROOT_NAMESPACE, 'mesh', { mtls: { mode: 'STRICT' } }),
    res('DestinationRule', 'default', 'httpbin', { host: 'httpbin', trafficPolicy: { tls: { mode: 'DISABLE' } }, subsets: [{ name: 'v1', labels: { version: 'v1' }, trafficPolicy: { portLevelSettings: [{ port: { number: 80 }, tls: { mode: 'DISABLE' } }] } }] }),
    res('ServiceEntry', 'shop', 'db', { hosts: ['db.internal'], ports: [{ number: 5432, name: 'tcp', protocol: 'TCP' }] }),
    res('DestinationRule', 'other', 'db', { host: 'db.internal', trafficPolicy: { tls: { mode: 'DISABLE' } } }),
  ]);
  assert.deepEqual(brief(mtlsDestinationRule, i), [
    'MSH0202 DestinationRule/default/httpbin spec.trafficPolicy.tls.mode',
    'MSH0202 DestinationRule/default/httpbin spec.subsets[0].trafficPolicy.portLevelSettings[0].tls.mode',
    'MSH0202 DestinationRule/other/db spec.trafficPolicy.tls.mode',
  ]);
  assert.match(mtlsDestinationRule.analyze(i)[2]!.message, /TLS is disabled for db.internal, but PeerAuthentication requires mutual TLS \(STRICT\) in namespace shop/);
});

test('DestinationRule disabling TLS: quiet where the namespace is PERMISSIVE or the rule keeps TLS', () => {
  const i = input([
    res('PeerAuthentication', ROOT_NAMESPACE, 'mesh', { mtls: { mode: 'STRICT' } }),
    res('PeerAuthentication', 'default', 'ns', { mtls: { mode: 'PERMISSIVE' } }),
    res('DestinationRule', 'default', 'httpbin', { host: 'httpbin', trafficPolicy: { tls: { mode: 'DISABLE' } } }),
    res('DestinationRule', 'default', 'ratings', { host: 'ratings.prod.svc.cluster.local', trafficPolicy: { tls: { mode: 'ISTIO_MUTUAL' } } }),
  ]);
  assert.deepEqual(brief(mtlsDestinationRule, i), []);
});

test('analyze runs every analyzer and sorts by resource and path', () => {
  const i = input([res('Gateway', 'default', 'gw', { selector: { istio: 'egress' } }), res('AuthorizationPolicy', 'default', 'typo', { selector: { matchLabels: { app: 'x' } } })]);
  assert.deepEqual(analyze(i).map((m) => m.code), ['MSH0127', 'MSH0101']);
});

test('Telemetries as the Go mesh analyzes them: two namespace-wide, two selecting one workload, a selector matching nothing', () => {
  const i = input([
    res('Telemetry', 'default', 'a', { accessLogging: [{ providers: [{ name: 'envoy' }] }] }),
    res('Telemetry', 'default', 'b', { accessLogging: [{ disabled: true }] }),
    res('Telemetry', 'default', 'by-app', { selector: { matchLabels: { app: 'httpbin' } } }),
    res('Telemetry', 'default', 'by-version', { selector: { matchLabels: { version: 'v1' } } }),
    res('Telemetry', 'default', 'ratings', { selector: { matchLabels: { app: 'ratings' } } }),
    res('Telemetry', 'other', 'httpbin-elsewhere', { selector: { matchLabels: { app: 'httpbin' } } }),
    res('Telemetry', 'default', 'gateway', { targetRefs: [{ kind: 'Gateway', name: 'gw' }] }),
  ]);
  assert.deepEqual(brief(telemetryConflict, i), [
    'MSH0160 Telemetry/default/a spec.selector',
    'MSH0160 Telemetry/default/b spec.selector',
    'MSH0159 Telemetry/default/by-app spec.selector.matchLabels',
    'MSH0159 Telemetry/default/by-version spec.selector.matchLabels',
    'MSH0101 Telemetry/default/ratings spec.selector.matchLabels',
    'MSH0101 Telemetry/other/httpbin-elsewhere spec.selector.matchLabels',
  ]);
  assert.match(telemetryConflict.analyze(i).find((m) => m.resource.name === 'httpbin-elsewhere')!.message, /no workload in namespace other matches the selector app=httpbin; the Telemetry applies to nothing/);
  assert.deepEqual(brief(telemetryConflict, input([res('Telemetry', ROOT_NAMESPACE, 'mesh', {}), res('Telemetry', 'default', 'ns', {}), res('Telemetry', 'default', 'by-app', { selector: { matchLabels: { app: 'httpbin' } } })])), [], 'one per level is quiet');
});
