// An unmodified @grpc/grpc-js-xds client resolves a service through our ADS server (LDS -> RDS ->
// CDS -> EDS over State of the World), calls it, and follows an endpoint change. The resources are
// fixtures here; what is under test is that the server speaks the protocol a real client expects.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Client, Server, ServerCredentials, credentials } from '@grpc/grpc-js';
import * as grpcXds from '@grpc/grpc-js-xds';
import { ListenerSchema } from '../../src/gen/envoy/config/listener/v3/listener_pb.js';
import { RouteConfigurationSchema } from '../../src/gen/envoy/config/route/v3/route_pb.js';
import { Cluster_DiscoveryType, Cluster_LbPolicy, ClusterSchema } from '../../src/gen/envoy/config/cluster/v3/cluster_pb.js';
import { ClusterLoadAssignmentSchema } from '../../src/gen/envoy/config/endpoint/v3/endpoint_pb.js';
import { ApiVersion } from '../../src/gen/envoy/config/core/v3/config_source_pb.js';
import { RouterSchema } from '../../src/gen/envoy/extensions/filters/http/router/v3/router_pb.js';
import { HttpConnectionManagerSchema } from '../../src/gen/envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager_pb.js';
import { pack, TypeUrl } from '../../src/envoy/types.js';
import { startServer, type Harness } from './harness.js';

const TARGET = 'echo.foo.svc.cluster.local:7070';
const CLUSTER = 'outbound|7070||echo.foo.svc.cluster.local';
const ROUTE = '7070';
const ADS = { configSourceSpecifier: { case: 'ads', value: {} }, resourceApiVersion: ApiVersion.V3 } as const;

const identity = (b: Buffer): Buffer => b;
/** A one-method service that answers with the backend's name, to see which backend served a call. */
const WHO = {
  who: {
    path: '/mesh.test.Echo/Who',
    requestStream: false,
    responseStream: false,
    requestSerialize: identity,
    requestDeserialize: identity,
    responseSerialize: identity,
    responseDeserialize: identity,
  },
};

async function backend(name: string): Promise<{ port: number; server: Server }> {
  const server = new Server();
  server.addService(WHO, { who: (_call: unknown, cb: (err: null, res: Buffer) => void) => cb(null, Buffer.from(name)) });
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
  );
  return { port, server };
}

function setEndpoint(h: Harness, port: number): void {
  h.fixtures.setNamed(TypeUrl.ClusterLoadAssignment, CLUSTER, ClusterLoadAssignmentSchema, {
    clusterName: CLUSTER,
    endpoints: [
      {
        locality: { region: 'local' },
        loadBalancingWeight: 1,
        lbEndpoints: [
          {
            hostIdentifier: {
              case: 'endpoint',
              value: { address: { address: { case: 'socketAddress', value: { address: '127.0.0.1', portSpecifier: { case: 'portValue', value: port } } } } },
            },
            loadBalancingWeight: 1,
          },
        ],
      },
    ],
  });
}

function call(client: Client): Promise<string> {
  return new Promise((resolve, reject) =>
    client.makeUnaryRequest(WHO.who.path, identity, identity, Buffer.alloc(0), (err, res) => (err ? reject(err) : resolve(res!.toString()))),
  );
}

test('an unmodified grpc-js-xds client resolves and calls a service through the ADS server, and follows endpoint changes', async (t) => {
  const h = await startServer();
  const [b1, b2] = await Promise.all([backend('b1'), backend('b2')]);
  t.after(() => {
    h.close();
    b1.server.forceShutdown();
    b2.server.forceShutdown();
  });
  h.fixtures.set(TypeUrl.Listener, ListenerSchema, {
    name: TARGET,
    apiListener: {
      apiListener: pack(HttpConnectionManagerSchema, {
        routeSpecifier: { case: 'rds', value: { routeConfigName: ROUTE, configSource: ADS } },
        httpFilters: [{ name: 'envoy.filters.http.router', configType: { case: 'typedConfig', value: pack(RouterSchema, {}) } }],
      }),
    },
  });
  h.fixtures.set(TypeUrl.RouteConfiguration, RouteConfigurationSchema, {
    name: ROUTE,
    virtualHosts: [
      {
        name: 'echo',
        domains: [TARGET],
        routes: [{ match: { pathSpecifier: { case: 'prefix', value: '' } }, action: { case: 'route', value: { clusterSpecifier: { case: 'cluster', value: CLUSTER } } } }],
      },
    ],
  });
  h.fixtures.set(TypeUrl.Cluster, ClusterSchema, {
    name: CLUSTER,
    clusterDiscoveryType: { case: 'type', value: Cluster_DiscoveryType.EDS },
    edsClusterConfig: { edsConfig: ADS },
    lbPolicy: Cluster_LbPolicy.ROUND_ROBIN,
  });
  setEndpoint(h, b1.port);

  process.env.GRPC_XDS_BOOTSTRAP_CONFIG = JSON.stringify({
    xds_servers: [{ server_uri: h.address, channel_creds: [{ type: 'insecure' }], server_features: ['xds_v3'] }],
    node: { id: 'proxyless~127.0.0.1~client-1.foo~foo.svc.cluster.local', metadata: { GENERATOR: 'grpc', NAMESPACE: 'foo' }, locality: {} },
  });
  grpcXds.register();
  const client = new Client(`xds:///${TARGET}`, credentials.createInsecure());
  t.after(() => client.close());

  assert.equal(await call(client), 'b1');
  const conn = h.server.connections().find((c) => c.proxyId.startsWith('proxyless~'));
  // A call needs endpoints, so by then the client has subscribed to every type; gRPC names even
  // its listener and cluster. (Its ACKs may still be in flight: their state is not asserted.)
  assert.deepEqual(conn?.watches.map((w) => [w.type, w.wildcard, w.names]).sort(), [
    ['cds', false, [CLUSTER]],
    ['eds', false, [CLUSTER]],
    ['lds', false, [TARGET]],
    ['rds', false, [ROUTE]],
  ]);

  setEndpoint(h, b2.port);
  await h.server.pushAll({ reason: 'endpoint', types: new Set([TypeUrl.ClusterLoadAssignment]) });
  // The client applies the update asynchronously; calls reach b1 until it has.
  let who = '';
  for (let i = 0; i < 1000 && who !== 'b2'; i++) who = await call(client);
  assert.equal(who, 'b2');
});
