// The DNS name table over a real ADS stream: delivered to DNS_CAPTURE proxies only, pushed again
// when services change, not by pushes limited to other types.
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { NameTableSchema } from '../../src/gen/mesh/v1/dns_pb.js';
import type { PushContext } from '../../src/model/push-context.js';
import { createMeshGenerators } from '../../src/xds/generators/index.js';
import { TypeUrl, unpack } from '../../src/envoy/types.js';
import type { AnyResource } from '../../src/api/types.js';
import { MESH, pushOf, serviceEntry } from '../networking/fixtures.js';
import { node, sotw, startServer, type Harness, type SotwStream } from './harness.js';

const NDS = TypeUrl.NameTable;

function external(name: string, address: string): AnyResource {
  return serviceEntry('foo', name, { hosts: [`${name}.example.com`], addresses: [address], location: 'MESH_EXTERNAL', resolution: 'DNS', ports: [{ number: 443, name: 'tls', protocol: 'TLS' }] });
}

let push: PushContext = pushOf(MESH);
const harnesses: Harness[] = [];
after(() => harnesses.forEach((h) => h.close()));

async function serve(): Promise<Harness> {
  const h = await startServer({ generators: createMeshGenerators({ pushContext: () => push }) });
  harnesses.push(h);
  return h;
}

function subscribe(h: Harness, id: string, metadata: Record<string, string>): SotwStream {
  const s = sotw(h.client());
  s.send({ node: node(id, { NAMESPACE: 'foo', ...metadata }), typeUrl: NDS });
  return s;
}

async function hosts(s: SotwStream): Promise<string[]> {
  const r = await s.next();
  assert.equal(r.typeUrl, NDS);
  s.send({ typeUrl: NDS, versionInfo: r.versionInfo, responseNonce: r.nonce });
  return r.resources.flatMap((any) => Object.keys(unpack(any, NameTableSchema).table)).sort();
}

test('NDS over ADS: the table goes to DNS_CAPTURE proxies; others get an empty set', async () => {
  push = pushOf(MESH);
  const h = await serve();
  const capture = subscribe(h, 'sidecar~10.0.0.1~a-1.foo~foo.svc.cluster.local', { DNS_CAPTURE: 'true' });
  const plain = subscribe(h, 'sidecar~10.0.0.2~b-1.foo~foo.svc.cluster.local', {});
  assert.deepEqual(await hosts(capture), ['db.foo.svc.cluster.local', 'echo.foo.svc.cluster.local']);
  const none = await plain.next();
  assert.equal(none.typeUrl, NDS);
  assert.equal(none.resources.length, 0);
});

test('NDS over ADS: a service change pushes a new table; an endpoint-only or listener-only push does not', async () => {
  push = pushOf(MESH);
  const h = await serve();
  const capture = subscribe(h, 'sidecar~10.0.0.1~a-1.foo~foo.svc.cluster.local', { DNS_CAPTURE: 'true' });
  assert.deepEqual(await hosts(capture), ['db.foo.svc.cluster.local', 'echo.foo.svc.cluster.local']);

  // One host added, then pushes that do not cover NDS: nothing may be sent for them...
  push = pushOf([...MESH, external('one', '10.50.0.1')]);
  await h.server.pushAll({ reason: 'endpoint', types: new Set([TypeUrl.ClusterLoadAssignment]) });
  await h.server.pushAll({ reason: 'config', types: new Set([TypeUrl.Listener]) });
  // ...so the next table the proxy sees is the one of the full push, with the second host too.
  push = pushOf([...MESH, external('one', '10.50.0.1'), external('two', '10.50.0.2')]);
  await h.server.pushAll({ reason: 'service' });
  assert.deepEqual(await hosts(capture), ['db.foo.svc.cluster.local', 'echo.foo.svc.cluster.local', 'one.example.com', 'two.example.com']);
});
