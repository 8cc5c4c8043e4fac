import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parseProxy, ProxyParseError } from '../../src/model/proxy.js';

const ID = 'sidecar~10.0.0.1~echo-1.foo~foo.svc.cluster.local';

test('node.id and metadata are parsed into the proxy', () => {
  const p = parseProxy(ID, {
    NAMESPACE: 'foo',
    LABELS: { app: 'echo', version: 'v1' },
    SERVICE_ACCOUNT: 'echo-sa',
    CLUSTER_ID: 'c1',
    INSTANCE_IPS: '10.0.0.1, fd00::1',
    INTERCEPTION_MODE: 'NONE',
    GENERATOR: 'grpc',
    AUTO_REGISTER_GROUP: 'echo-group',
  });
  assert.equal(p.type, 'sidecar');
  assert.equal(p.id, 'echo-1.foo');
  assert.equal(p.nodeId, ID);
  assert.equal(p.namespace, 'foo');
  assert.equal(p.dnsDomain, 'foo.svc.cluster.local');
  assert.deepEqual(p.ipAddresses, ['10.0.0.1', 'fd00::1']);
  assert.deepEqual(p.labels, { app: 'echo', version: 'v1' });
  assert.equal(p.serviceAccount, 'echo-sa');
  assert.equal(p.clusterId, 'c1');
  assert.equal(p.interceptionMode, 'NONE');
  assert.equal(p.generator, 'grpc');
  assert.equal(p.autoRegisterGroup, 'echo-group');
});

test('defaults: IP from node.id, namespace from the id, REDIRECT, no labels', () => {
  const p = parseProxy('router~192.168.1.2~gw-1.edge~edge.svc.cluster.local');
  assert.equal(p.type, 'router');
  assert.deepEqual(p.ipAddresses, ['192.168.1.2']);
  assert.equal(p.namespace, 'edge');
  assert.equal(p.interceptionMode, 'REDIRECT');
  assert.deepEqual(p.labels, {});
  assert.equal(p.generator, '');
});

test('bad node ids and metadata are refused with the field named', () => {
  const cases: Array<[string, Record<string, unknown>, RegExp]> = [
    ['sidecar~10.0.0.1~echo-1.foo', {}, /expected 4 parts/],
    ['', {}, /expected 4 parts/],
    ['gateway~10.0.0.1~echo-1.foo~foo.svc.cluster.local', {}, /type "gateway"/],
    ['sidecar~not-an-ip~echo-1.foo~foo.svc.cluster.local', {}, /"not-an-ip" is not an IP/],
    ['sidecar~10.0.0.1~~foo.svc.cluster.local', {}, /workload id/],
    ['sidecar~10.0.0.1~pod~', {}, /no namespace/],
    [ID, { LABELS: 'app=echo' }, /node.metadata.LABELS: expected an object/],
    [ID, { LABELS: { app: 1 } }, /node.metadata.LABELS.app: expected a string/],
    [ID, { INSTANCE_IPS: '10.0.0.1,bogus' }, /INSTANCE_IPS: "bogus"/],
    [ID, { INTERCEPTION_MODE: 'IPTABLES' }, /INTERCEPTION_MODE: "IPTABLES"/],
    [ID, { NAMESPACE: 7 }, /node.metadata.NAMESPACE: expected a string/],
  ];
  for (const [id, meta, re] of cases) {
    assert.throws(() => parseProxy(id, meta as never), (e: unknown) => e instanceof ProxyParseError && re.test(e.message), `${id} ${JSON.stringify(meta)}`);
  }
});

test('mesh mTLS only for a proxy with SDS (metadata SDS=true) that lists the TLS transport socket among its extensions', () => {
  const tls = ['envoy.transport_sockets.tls'];
  assert.equal(parseProxy(ID, { SDS: 'true' }, tls).meshMtls, true);
  assert.equal(parseProxy(ID, { SDS: 'true' }, []).meshMtls, false, 'a proxy without TLS transport sockets');
  assert.equal(parseProxy(ID, {}, tls).meshMtls, false, 'no workload certificate to use');
  assert.equal(parseProxy(ID, { SDS: 'false' }, tls).meshMtls, false);
});
