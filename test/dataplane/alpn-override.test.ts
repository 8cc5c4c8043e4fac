// The `mesh.alpn` filter in a real mesh-proxy: a client sidecar (certificate and roots over its
// agent's SDS) whose outbound connection managers route to an HTTPS server on loopback that records
// the ALPN list each TLS connection offers. With the filter, mesh mTLS offers the HTTP/1.1 override;
// without it (another listener, same cluster and endpoint) the cluster's own ALPN, on a connection
// of its own (pools are keyed by ALPN); a user's TLS (no `mesh` token) keeps its ALPN.
import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:https';
import { create } from '@bufbuild/protobuf';
import type { Any } from '@bufbuild/protobuf/wkt';
import { HttpConnectionManagerSchema } from '../../src/gen/envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager_pb.js';
import { RouterSchema } from '../../src/gen/envoy/extensions/filters/http/router/v3/router_pb.js';
import { buildHttpConnectionManager } from '../../src/dataplane/http-connection-manager.js';
import { StaticClusterManager } from './static-cluster-manager.js';
import { FilterConfig_Protocol, FilterConfigSchema } from '../../src/gen/mesh/envoy/config/filter/http/alpn/v2alpha1/config_pb.js';
import { pack, TypeUrl } from '../../src/envoy/types.js';
import { alpnFilter } from '../../src/networking/alpn-filter.js';
import { freePort } from '../../samples/local-mesh.js';
import { eventually } from '../helpers/proc.js';
import { meshCa, meshTls, sidecar, spiffe, upstreamTls, workload, type MeshCa } from './tls-fixtures.js';
import { hcmChain, listener, staticCluster } from './xds-fixtures.js';

/** An HTTPS server with a mesh certificate for `sa/server`, recording each connection's offered ALPN. */
async function recordingServer(t: TestContext, ca: MeshCa): Promise<{ port: number; offered: string[][] }> {
  const { keyPem, chainPem } = await ca.issue(spiffe('server'));
  const offered: string[][] = [];
  const server = createServer(
    {
      key: keyPem,
      cert: chainPem,
      ALPNCallback: ({ protocols }) => {
        offered.push(protocols);
        return protocols.includes('http/1.1') ? 'http/1.1' : protocols[0];
      },
    },
    (req, res) => res.end(`app ${req.url}`),
  );
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.after(() => {
    server.closeAllConnections();
    server.close();
  });
  return { port: (server.address() as { port: number }).port, offered };
}

/** A cluster of the server over TLS with the mesh's certificates, offering `alpn`. */
function tlsCluster(name: string, port: number, alpn: readonly string[]) {
  return staticCluster(name, [port], { transportSocket: upstreamTls(meshTls([spiffe('server')], alpn), 'outbound_.80_._.server.default.svc.cluster.local') });
}

/** The filter as the discovery server builds it. */
const alpn = () => {
  const f = alpnFilter();
  assert.equal(f.configType.case, 'typedConfig');
  return { name: f.name, any: f.configType.value as Any };
};

test('mesh.alpn: mesh mTLS offers the HTTP/1.1 override, pooled apart from the cluster ALPN; a user TLS cluster keeps its own', async (t) => {
  const ca = await meshCa();
  const { ads, admin } = await sidecar(t, await workload(t, ca, 'client'));
  const server = await recordingServer(t, ca);
  const [withFilter, withoutFilter, userTls] = [await freePort(), await freePort(), await freePort()];
  ads.set(TypeUrl.Cluster, [tlsCluster('mesh', server.port, ['mesh-peer-exchange', 'mesh']), tlsCluster('user', server.port, ['http/1.1'])]);
  ads.set(TypeUrl.Listener, [
    listener('with', withFilter, [hcmChain({ cluster: 'mesh', extraFilters: [alpn()] })]),
    listener('without', withoutFilter, [hcmChain({ cluster: 'mesh' })]),
    listener('user', userTls, [hcmChain({ cluster: 'user', extraFilters: [alpn()] })]),
  ]);
  await ads.push(TypeUrl.Cluster, TypeUrl.Listener);
  await eventually(async () => assert.equal((await fetch(`${admin}/ready`)).status, 200), 15_000);
  const get = async (port: number, path: string) => {
    const r = await fetch(`http://127.0.0.1:${port}${path}`);
    return { status: r.status, body: await r.text() };
  };

  assert.deepEqual(await get(withFilter, '/a'), { status: 200, body: 'app /a' });
  assert.deepEqual(server.offered, [['mesh-http/1.1', 'mesh', 'http/1.1']], 'the override of HTTP/1.1 (the cluster is HTTP/1.1)');
  // Same cluster and endpoint, no filter: not the keep-alive connection opened with the override.
  assert.deepEqual(await get(withoutFilter, '/b'), { status: 200, body: 'app /b' });
  assert.deepEqual(server.offered[1], ['mesh-peer-exchange', 'mesh'], "without the filter: the cluster's ALPN, on a new connection");
  assert.deepEqual(await get(userTls, '/c'), { status: 200, body: 'app /c' });
  assert.deepEqual(server.offered[2], ['http/1.1'], 'TLS that is not the mesh keeps its ALPN');
});

test('mesh.alpn: an entry without tokens keeps the cluster ALPN', async (t) => {
  const ca = await meshCa();
  const { ads, admin } = await sidecar(t, await workload(t, ca, 'client'));
  const server = await recordingServer(t, ca);
  const port = await freePort();
  const emptyHttp11 = { name: 'mesh.alpn', any: pack(FilterConfigSchema, { alpnOverride: [{ upstreamProtocol: FilterConfig_Protocol.HTTP11, alpnOverride: [] }, { upstreamProtocol: FilterConfig_Protocol.HTTP2, alpnOverride: ['mesh-h2'] }] }) };
  ads.set(TypeUrl.Cluster, [tlsCluster('mesh', server.port, ['mesh-peer-exchange', 'mesh'])]);
  ads.set(TypeUrl.Listener, [listener('empty', port, [hcmChain({ cluster: 'mesh', extraFilters: [emptyHttp11] })])]);
  await ads.push(TypeUrl.Cluster, TypeUrl.Listener);
  await eventually(async () => assert.equal((await fetch(`${admin}/ready`)).status, 200), 15_000);
  assert.equal((await fetch(`http://127.0.0.1:${port}/`)).status, 200);
  assert.deepEqual(server.offered, [['mesh-peer-exchange', 'mesh']]);
});

test('mesh.alpn: an unknown upstream protocol is a ConfigError naming the field', () => {
  const bad = pack(FilterConfigSchema, { alpnOverride: [{ upstreamProtocol: 7 as FilterConfig_Protocol, alpnOverride: ['x'] }] });
  const build = () =>
    buildHttpConnectionManager(
      create(HttpConnectionManagerSchema, {
        routeSpecifier: { case: 'routeConfig', value: {} },
        httpFilters: [
          { name: 'mesh.alpn', configType: { case: 'typedConfig', value: bad } },
          { name: 'envoy.filters.http.router', configType: { case: 'typedConfig', value: pack(RouterSchema, {}) } },
        ],
      }),
      { clusters: new StaticClusterManager() },
    );
  assert.throws(build, /mesh\.alpn\.alpn_override\[0\]\.upstream_protocol: unknown protocol 7/);
});
