// Clusters and /stats readers for the tests of a cluster's connection and request stats
// (upstream-cx-stats, upstream-rq-stats, tcp-proxy-cx-stats): each test has its own cluster, so
// its stats start at zero and every stat of the list a test does not name must stay 0.
import assert from 'node:assert/strict';
import { HttpProtocolOptionsSchema } from '../../src/gen/envoy/extensions/upstreams/http/v3/http_protocol_options_pb.js';
import type { MeshProxy } from '../../src/dataplane/proxy.js';
import { pack } from '../../src/envoy/types.js';
import { get } from '../helpers/http.js';
import { eventually, statValue } from '../helpers/proc.js';
import { hcmChain, listener, staticCluster, startFixtureProxy } from './xds-fixtures.js';

/** A connection's lifecycle stats (upstream-cx-stats.ts). */
export const CX_STATS = [
  'upstream_cx_total',
  'upstream_cx_active',
  'upstream_cx_destroy',
  'upstream_cx_destroy_local',
  'upstream_cx_destroy_remote',
  'upstream_cx_destroy_with_active_rq',
  'upstream_cx_destroy_local_with_active_rq',
  'upstream_cx_destroy_remote_with_active_rq',
] as const;

const ms = (n: number) => ({ seconds: BigInt(Math.floor(n / 1000)), nanos: (n % 1000) * 1_000_000 });

/**
 * A cluster of one upstream port, HTTP/2 when `h2`, with the idle_timeout of its
 * common_http_protocol_options when given; `extra` adds Cluster fields (a transport socket).
 */
export function httpCluster(name: string, port: number, o: { h2?: boolean; idleMs?: number } = {}, extra: Parameters<typeof staticCluster>[2] = {}) {
  const options = pack(HttpProtocolOptionsSchema, {
    ...(o.idleMs !== undefined ? { commonHttpProtocolOptions: { idleTimeout: ms(o.idleMs) } } : {}),
    upstreamProtocolOptions: { case: 'explicitHttpConfig', value: { protocolConfig: o.h2 ? { case: 'http2ProtocolOptions', value: {} } : { case: 'httpProtocolOptions', value: {} } } },
  });
  return staticCluster(name, [port], { typedExtensionProtocolOptions: { 'envoy.extensions.upstreams.http.v3.HttpProtocolOptions': options }, ...extra });
}

/** The stats `names` of a cluster, as /stats shows them. */
export async function clusterStats<S extends string>(proxy: MeshProxy, cluster: string, names: readonly S[]): Promise<Record<S, number>> {
  const text = (await get(false, proxy.adminPort, `/stats?filter=${encodeURIComponent(`^cluster\\.${cluster}\\.`)}`)).body;
  return Object.fromEntries(names.map((s) => [s, statValue(text, `cluster.${cluster}.${s}`)])) as Record<S, number>;
}

/** Waits until the cluster's stats `names` are `expected`, every other one of them 0. */
export function settles<S extends string>(proxy: MeshProxy, cluster: string, names: readonly S[], expected: Partial<Record<S, number>>): Promise<unknown> {
  const want = Object.fromEntries(names.map((s) => [s, expected[s] ?? 0]));
  return eventually(async () => assert.deepEqual(await clusterStats(proxy, cluster, names), want));
}

type Cluster = ReturnType<typeof staticCluster>;
type Chain = ReturnType<typeof hcmChain>;

/**
 * A proxy whose ADS server gives it `clusters` and, for each, a listener of the cluster's name
 * whose chain (`chain`; an HTTP connection manager by default) reaches it. `stop` ends it all.
 */
export function proxyPerCluster(clusters: readonly Cluster[], chain: (cluster: string) => Chain = (c) => hcmChain({ cluster: c, statPrefix: c })): Promise<{ proxy: MeshProxy; stop(): Promise<void> }> {
  return startFixtureProxy(clusters, clusters.map((c) => listener(c.name, 0, [chain(c.name)])));
}
