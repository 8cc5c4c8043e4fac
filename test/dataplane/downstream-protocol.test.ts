// use_downstream_protocol_config (the Go mesh's sniffed ports and DestinationRule useClientProtocol):
// a request that came over HTTP/2 goes upstream over HTTP/2, one that came over HTTP/1.1 over
// HTTP/1.1, through a real connection manager and a compiled Cluster, to an upstream port that
// speaks both (a front that hands each connection to an HTTP/1.1 or an h2c server by its preface).
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import { createServer as createH2Server, type Http2Server } from 'node:http2';
import type { AddressInfo, Server as TcpServer } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { create } from '@bufbuild/protobuf';
import { anyPack } from '@bufbuild/protobuf/wkt';
import { Cluster_DiscoveryType, ClusterSchema } from '../../src/gen/envoy/config/cluster/v3/cluster_pb.js';
import { FilterChainSchema } from '../../src/gen/envoy/config/listener/v3/listener_components_pb.js';
import { HttpProtocolOptionsSchema } from '../../src/gen/envoy/extensions/upstreams/http/v3/http_protocol_options_pb.js';
import { RouterSchema } from '../../src/gen/envoy/extensions/filters/http/router/v3/router_pb.js';
import { HttpConnectionManagerSchema } from '../../src/gen/envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager_pb.js';
import { compileCluster } from '../../src/dataplane/cluster-spec.js';
import { DynamicClusterManager } from '../../src/dataplane/clusters.js';
import { buildHcmForFilterChain } from '../../src/dataplane/http-connection-manager.js';
import { StatsStore } from '../../src/dataplane/stats.js';
import { HCM_FILTER_NAME } from '../../src/envoy/names.js';
import { pack } from '../../src/envoy/types.js';
import { close, get, listen } from '../helpers/http.js';
import { bothProtocolsFront, h2Get, portOf } from '../helpers/h2c.js';

let h1: Server;
let h2: Http2Server;
let front: TcpServer;
let frontPort: number;
const servers: Server[] = [];
const h2Servers: Http2Server[] = [];
const cm = new DynamicClusterManager(new StatsStore());

function cluster(name: string, upstream: 'downstream' | 'http1') {
  return create(ClusterSchema, {
    name,
    clusterDiscoveryType: { case: 'type', value: Cluster_DiscoveryType.STATIC },
    loadAssignment: { clusterName: name, endpoints: [{ lbEndpoints: [{ hostIdentifier: { case: 'endpoint', value: { address: { address: { case: 'socketAddress', value: { address: '127.0.0.1', portSpecifier: { case: 'portValue', value: frontPort } } } } } } }] }] },
    typedExtensionProtocolOptions: {
      'envoy.extensions.upstreams.http.v3.HttpProtocolOptions': pack(HttpProtocolOptionsSchema, {
        upstreamProtocolOptions:
          upstream === 'downstream'
            ? { case: 'useDownstreamProtocolConfig', value: { httpProtocolOptions: {}, http2ProtocolOptions: {} } }
            : { case: 'explicitHttpConfig', value: { protocolConfig: { case: 'httpProtocolOptions', value: {} } } },
      }),
    },
  });
}

/** The connection manager routing everything to `clusterName`, behind an HTTP/1.1 and an h2c listener. */
async function proxy(clusterName: string): Promise<{ h1Port: number; h2Port: number }> {
  const hcm = create(HttpConnectionManagerSchema, {
    statPrefix: 'protocol',
    routeSpecifier: { case: 'routeConfig', value: { name: 'r', virtualHosts: [{ name: 'v', domains: ['*'], routes: [{ match: { pathSpecifier: { case: 'prefix', value: '/' } }, action: { case: 'route', value: { clusterSpecifier: { case: 'cluster', value: clusterName } } } }] }] } },
    httpFilters: [{ name: 'envoy.filters.http.router', configType: { case: 'typedConfig', value: anyPack(RouterSchema, create(RouterSchema, {})) } }],
  });
  const chain = create(FilterChainSchema, { filters: [{ name: HCM_FILTER_NAME, configType: { case: 'typedConfig', value: anyPack(HttpConnectionManagerSchema, hcm) } }] });
  const handler = buildHcmForFilterChain(chain, { clusters: cm });
  const viaH1 = createServer((req, res) => handler.handle(req, res));
  servers.push(viaH1);
  const viaH2 = createH2Server((req, res) => handler.handle(req, res));
  h2Servers.push(viaH2);
  await new Promise<void>((r) => viaH2.listen(0, '127.0.0.1', r));
  return { h1Port: await listen(viaH1), h2Port: (viaH2.address() as AddressInfo).port };
}
before(async () => {
  h1 = createServer((req, res) => res.end(`upstream HTTP/${req.httpVersion}`));
  h2 = createH2Server((req, res) => res.end(`upstream HTTP/${req.httpVersion}`));
  const h1Port = await listen(h1);
  await new Promise<void>((r) => h2.listen(0, '127.0.0.1', r));
  const h2Port = (h2.address() as AddressInfo).port;
  front = await bothProtocolsFront(0, h1Port, h2Port);
  frontPort = portOf(front);
  cm.commit(cm.prepare([cluster('follows', 'downstream'), cluster('fixed', 'http1')], new Map()));
});

after(async () => {
  cm.close();
  await Promise.all([h1, ...servers].map(close));
  for (const s of [h2, ...h2Servers]) s.close();
  front.close();
});

describe('use_downstream_protocol_config', () => {
  it('compiles to the downstream choice', () => {
    assert.equal(compileCluster(cluster('follows', 'downstream'), new Map(), 'clusters[0]').protocol, 'downstream');
  });

  it('HTTP/1.1 in, HTTP/1.1 out; HTTP/2 in, HTTP/2 out', async () => {
    const { h1Port, h2Port } = await proxy('follows');
    assert.equal((await get(false, h1Port, '/')).body, 'upstream HTTP/1.1');
    assert.equal(await h2Get(h2Port), 'upstream HTTP/2.0');
  });

  it('an explicit HTTP/1.1 cluster stays HTTP/1.1 for an HTTP/2 request', async () => {
    const { h2Port } = await proxy('fixed');
    assert.equal(await h2Get(h2Port), 'upstream HTTP/1.1');
  });
});
