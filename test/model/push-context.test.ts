import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { AnyResource } from '../../src/api/types.js';
import { gauge } from '../../src/common/metrics.js';
import { MockRegistry } from '../../src/registry/mock.js';
import { authorizationPolicy, MESH, pushOf, serviceEntry, sidecar, sidecarProxy } from '../networking/fixtures.js';

const ECHO = 'echo.foo.svc.cluster.local';

async function gaugeValue(name: 'pilot_services' | 'pilot_virt_services' | 'pilot_eds_no_instances'): Promise<number> {
  return (await gauge(name).get()).values[0]!.value;
}

test('indexes: services by host and namespace, instances by service port and by proxy IP', () => {
  const push = pushOf(MESH);
  assert.deepEqual(push.services.map((s) => s.hostname), ['api.example.com', 'db.foo.svc.cluster.local', ECHO]);
  assert.deepEqual(push.servicesInNamespace('foo').map((s) => s.hostname), ['db.foo.svc.cluster.local', ECHO]);
  const echo = push.serviceForHost(ECHO, 'foo')!;
  assert.deepEqual(push.instances(echo, 80).map((i) => i.address), ['10.0.0.1', '10.0.0.2']);
  assert.equal(push.instances(echo).length, 4);
  assert.deepEqual(push.instances(echo, 9999), []);
  const proxy = sidecarProxy('10.0.0.2', 'echo-2', 'foo');
  assert.deepEqual(push.proxyInstances(proxy).map((i) => `${i.hostname}:${i.servicePort.port}->${i.endpointPort}`), [`${ECHO}:80->8080`, `${ECHO}:7070->17070`]);
});

test('a host in several namespaces: the caller namespace first; exportTo hides', () => {
  const push = pushOf([
    serviceEntry('a', 'x', { hosts: ['shared.example.com'], ports: [{ number: 80, name: 'http' }] }),
    serviceEntry('b', 'x', { hosts: ['shared.example.com'], ports: [{ number: 81, name: 'http' }] }),
    serviceEntry('b', 'private', { hosts: ['private.example.com'], ports: [{ number: 80, name: 'http' }], exportTo: ['.'] }),
  ]);
  assert.equal(push.serviceForHost('shared.example.com', 'b')!.namespace, 'b');
  assert.equal(push.serviceForHost('shared.example.com', 'c')!.namespace, 'a');
  assert.equal(push.serviceForHost('private.example.com', 'a'), undefined);
  assert.equal(push.serviceForHost('private.example.com', 'b')!.namespace, 'b');
  const scopeB = push.sidecarScope(sidecarProxy('10.0.0.1', 'p', 'b'));
  assert.deepEqual(scopeB.services.map((s) => `${s.namespace}/${s.hostname}`), ['b/private.example.com', 'b/shared.example.com']);
  const scopeC = push.sidecarScope(sidecarProxy('10.0.0.1', 'p', 'c'));
  assert.deepEqual(scopeC.services.map((s) => `${s.namespace}/${s.hostname}`), ['a/shared.example.com']);
});

test('policies select by namespace and matchLabels; root-namespace ones apply mesh-wide', () => {
  const push = pushOf([
    authorizationPolicy('mesh-system', 'global', {}),
    authorizationPolicy('mesh-system', 'global-v2', { selector: { matchLabels: { version: 'v2' } } }),
    authorizationPolicy('foo', 'all-foo', {}),
    authorizationPolicy('foo', 'echo-only', { selector: { matchLabels: { app: 'echo' } } }),
    authorizationPolicy('bar', 'other', {}),
  ]);
  const names = (labels: Record<string, string>, ns = 'foo'): string[] =>
    push.policiesFor('AuthorizationPolicy', sidecarProxy('10.0.0.1', 'p', ns, { LABELS: labels })).map((p) => p.metadata.name);
  assert.deepEqual(names({ app: 'echo', version: 'v1' }), ['global', 'all-foo', 'echo-only']);
  assert.deepEqual(names({ app: 'db', version: 'v2' }), ['global', 'global-v2', 'all-foo']);
  assert.deepEqual(names({}, 'baz'), ['global']);
  assert.deepEqual(push.policiesFor('RequestAuthentication', sidecarProxy('10.0.0.1', 'p', 'foo')), []);
});

test('sidecar scope: a selecting Sidecar wins over the namespace one, which wins over the root one', () => {
  const resources: AnyResource[] = [
    ...MESH,
    sidecar('mesh-system', 'root', { egress: [{ hosts: ['*/*'] }], outboundTrafficPolicy: { mode: 'REGISTRY_ONLY' } }),
    sidecar('foo', 'ns-wide', { egress: [{ hosts: ['./*'] }] }),
    sidecar('foo', 'for-echo', { workloadSelector: { labels: { app: 'echo' } }, egress: [{ hosts: ['bar/api.example.com'] }] }),
  ];
  const push = pushOf(resources);
  const echo = push.sidecarScope(sidecarProxy('10.0.0.1', 'e', 'foo', { LABELS: { app: 'echo' } }));
  assert.equal(echo.sidecar?.metadata.name, 'for-echo');
  assert.deepEqual(echo.services.map((s) => s.hostname), ['api.example.com']);
  assert.equal(echo.outboundTrafficPolicy, 'ALLOW_ANY');
  const other = push.sidecarScope(sidecarProxy('10.0.0.9', 'o', 'foo', { LABELS: { app: 'other' } }));
  assert.equal(other.sidecar?.metadata.name, 'ns-wide');
  assert.deepEqual(other.services.map((s) => s.hostname), ['db.foo.svc.cluster.local', ECHO]);
  const elsewhere = push.sidecarScope(sidecarProxy('10.0.0.8', 'x', 'baz'));
  assert.equal(elsewhere.sidecar?.metadata.name, 'root');
  assert.equal(elsewhere.outboundTrafficPolicy, 'REGISTRY_ONLY');
  assert.equal(elsewhere.services.length, 3);
  assert.equal(push.sidecarScope(sidecarProxy('10.0.0.8', 'y', 'baz')), elsewhere, 'scopes are shared per Sidecar and namespace');
  const none = pushOf([...MESH, sidecar('foo', 'nothing', { egress: [{ hosts: ['~/*'] }] })]);
  assert.deepEqual(none.sidecarScope(sidecarProxy('10.0.0.1', 'e', 'foo')).services, []);
});

test('gauges are set when a snapshot is built', async () => {
  const mock = new MockRegistry();
  mock.addService({ hostname: 'empty.foo.svc.cluster.local', namespace: 'foo', ports: [{ name: 'http', port: 80, protocol: 'HTTP' }, { name: 'tcp', port: 81, protocol: 'TCP' }] });
  const vs: AnyResource = { apiVersion: 'networking.mesh.io/v1', kind: 'VirtualService', metadata: { namespace: 'foo', name: 'vs' }, spec: { hosts: [ECHO] } };
  const push = pushOf([...MESH, vs], [mock]);
  assert.equal(await gaugeValue('pilot_services'), 4);
  assert.equal(await gaugeValue('pilot_virt_services'), 1);
  // The two Mock ports have no endpoint; the DNS service is not an EDS cluster.
  assert.equal(await gaugeValue('pilot_eds_no_instances'), 2);
  assert.equal(push.clustersWithoutInstances(), 2);
});
