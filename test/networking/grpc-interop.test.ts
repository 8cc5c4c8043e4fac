// Unmodified @grpc/grpc-js-xds clients and servers against the real xDS server fed by these
// generators: a client resolves `xds:///echo.foo.svc.cluster.local:7070`, calls a real gRPC server
// and follows an endpoint change pushed over EDS; an xDS-enabled gRPC server gets its listener.
import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { Client, credentials, Server, ServerCredentials, type ServiceError } from '@grpc/grpc-js';
import { register as registerGrpcXds, XdsServer as GrpcXdsServer } from '@grpc/grpc-js-xds';
import { setScopeLevel } from '../../src/common/log.js';
import { PushContext } from '../../src/model/push-context.js';
import { MockRegistry } from '../../src/registry/mock.js';
import { createMeshGenerators, ProxyModels } from '../../src/xds/generators/index.js';
import { XdsServer } from '../../src/xds/server.js';
import { TypeUrl } from '../../src/envoy/types.js';
import { freePort } from '../../samples/local-mesh.js';
import { eventually } from '../helpers/proc.js';
import { storeOf } from './fixtures.js';

setScopeLevel('ads', 'warn');
registerGrpcXds();

const HOST = 'echo.foo.svc.cluster.local';
const METHOD = '/mesh.test.Echo/Echo';
/** grpc-js-xds takes a per-channel bootstrap here, so each test has its own xDS client. */
const BOOTSTRAP_OPTION = 'grpc.TEST_ONLY_DO_NOT_USE_IN_PROD.xds_bootstrap_config';
const identity = (b: Buffer): Buffer => b;
const echoService = {
  echo: { path: METHOD, requestStream: false, responseStream: false, requestSerialize: identity, requestDeserialize: identity, responseSerialize: identity, responseDeserialize: identity },
};

function answering(name: string): { echo: (call: unknown, cb: (err: null, res: Buffer) => void) => void } {
  return { echo: (_call, cb) => cb(null, Buffer.from(name)) };
}

async function echoServer(t: TestContext, name: string): Promise<number> {
  const server = new Server();
  server.addService(echoService, answering(name));
  t.after(() => server.forceShutdown());
  return new Promise((resolve, reject) => server.bindAsync('127.0.0.1:0', ServerCredentials.createInsecure(), (e, p) => (e ? reject(e) : resolve(p))));
}

function call(client: Client): Promise<string> {
  return new Promise((resolve, reject) =>
    client.makeUnaryRequest(METHOD, identity, identity, Buffer.from('hi'), (err: ServiceError | null, res?: Buffer) => (err ? reject(err) : resolve(res!.toString()))),
  );
}

/** The discovery server on 127.0.0.1:0 serving `push()`; returns the bootstrap a gRPC app would use. */
async function discovery(t: TestContext, push: () => PushContext): Promise<{ server: XdsServer; bootstrap: string }> {
  const proxies = new ProxyModels();
  const server = new XdsServer({ generators: createMeshGenerators({ pushContext: push, proxies }), onConnect: (p) => void proxies.of(p) });
  t.after(() => server.close());
  const port = await server.listen('127.0.0.1:0');
  const bootstrap = JSON.stringify({
    xds_servers: [{ server_uri: `127.0.0.1:${port}`, channel_creds: [{ type: 'insecure' }], server_features: ['xds_v3'] }],
    server_listener_resource_name_template: 'xds.mesh.io/grpc/lds/inbound/%s',
    node: { id: 'sidecar~127.0.0.1~app-1.foo~foo.svc.cluster.local', metadata: { GENERATOR: 'grpc', NAMESPACE: 'foo' }, locality: {} },
  });
  return { server, bootstrap };
}

// The timeouts only bound a hang (e.g. a listener the server never accepts); nothing asserts on time.
test('grpc-js-xds resolves and calls a mesh service, then follows its endpoints', { timeout: 30_000 }, async (t) => {
  const a = await echoServer(t, 'a');
  const b = await echoServer(t, 'b');
  const mock = new MockRegistry();
  mock.addService({ hostname: HOST, namespace: 'foo', ports: [{ name: 'grpc', port: 7070, protocol: 'GRPC' }] });
  mock.setEndpoints(HOST, 'foo', [{ address: '127.0.0.1', endpointPort: a }]);
  const store = storeOf([]);
  const build = (): PushContext => PushContext.build({ config: store, registry: mock });
  let push = build();
  const { server, bootstrap } = await discovery(t, () => push);
  const client = new Client(`xds:///${HOST}:7070`, credentials.createInsecure(), { [BOOTSTRAP_OPTION]: bootstrap });
  t.after(() => client.close());

  assert.equal(await eventually(() => call(client), 10_000), 'a');

  mock.setEndpoints(HOST, 'foo', [{ address: '127.0.0.1', endpointPort: b }]);
  push = build();
  await server.pushAll({ reason: 'endpoint', types: new Set([TypeUrl.ClusterLoadAssignment]) });
  await eventually(async () => assert.equal(await call(client), 'b'), 10_000);
});

test('an xDS-enabled gRPC server gets its listener and serves', { timeout: 30_000 }, async (t) => {
  const push = PushContext.build({ config: storeOf([]), registry: new MockRegistry() });
  const { bootstrap } = await discovery(t, () => push);
  const server = new GrpcXdsServer({ [BOOTSTRAP_OPTION]: bootstrap });
  server.addService(echoService, answering('xds-server'));
  t.after(() => server.forceShutdown());
  const port = await freePort();
  // The callback comes only once the server has received and accepted its listener.
  await new Promise<void>((resolve, reject) => server.bindAsync(`127.0.0.1:${port}`, ServerCredentials.createInsecure(), (e) => (e ? reject(e) : resolve())));
  const client = new Client(`127.0.0.1:${port}`, credentials.createInsecure());
  t.after(() => client.close());
  assert.equal(await eventually(() => call(client), 10_000), 'xds-server');
});
