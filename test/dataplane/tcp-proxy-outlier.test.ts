// Outlier detection behind tcp_proxy, over a real listener and real upstreams: a refused upstream
// connection counts against its host (a 503 to Envoy's detector; a local-origin failure with
// split_external_local_origin_errors), an established one for it, so a dead host of a TCP
// service is ejected and the next connections all reach the live one.
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { connect, createServer, type AddressInfo, type Server } from 'node:net';
import { TcpProxySchema } from '../../src/gen/envoy/extensions/filters/network/tcp_proxy/v3/tcp_proxy_pb.js';
import type { MeshProxy } from '../../src/dataplane/proxy.js';
import { pack } from '../../src/envoy/types.js';
import { boundPort, listener, staticCluster, startFixtureProxy } from './xds-fixtures.js';

const chain = (cluster: string) => ({ filters: [{ name: 'envoy.filters.network.tcp_proxy', configType: { case: 'typedConfig' as const, value: pack(TcpProxySchema, { statPrefix: cluster, clusterSpecifier: { case: 'cluster', value: cluster } }) } }] });

describe('tcp_proxy and outlier detection', () => {
  let live: Server;
  let fixture: { proxy: MeshProxy; stop(): Promise<void> };

  before(async () => {
    live = createServer((s) => s.end('live\n'));
    await new Promise<void>((r) => live.listen(0, '127.0.0.1', r));
    const dead = createServer();
    await new Promise<void>((r) => dead.listen(0, '127.0.0.1', r));
    const deadPort = (dead.address() as AddressInfo).port;
    await new Promise((r) => dead.close(r));
    const ports = [deadPort, (live.address() as AddressInfo).port];
    const ejectAt = (extra: object) => ({ outlierDetection: { baseEjectionTime: { seconds: 30n }, maxEjectionPercent: 100, enforcingSuccessRate: 0, ...extra } });
    fixture = await startFixtureProxy(
      [staticCluster('plain', ports, ejectAt({ consecutive5xx: 2 })), staticCluster('split', ports, ejectAt({ consecutive5xx: 2, splitExternalLocalOriginErrors: true, consecutiveLocalOriginFailure: 3, enforcingLocalOriginSuccessRate: 0 }))],
      [listener('plain', 0, [chain('plain')]), listener('split', 0, [chain('split')])],
    );
  });

  after(async () => {
    await fixture?.stop();
    live?.close();
  });

  /** What one connection through the listener gets: the live upstream's line, or '' when closed without it. */
  const once = (name: string): Promise<string> =>
    new Promise((resolve) => {
      const s = connect(boundPort(fixture.proxy, name), '127.0.0.1');
      let data = '';
      s.on('data', (d: Buffer) => (data += d.toString()));
      s.on('error', () => {});
      s.on('close', () => resolve(data.trim()));
    });
  const series = async (name: string, n: number) => {
    const out: string[] = [];
    for (let i = 0; i < n; i++) out.push(await once(name));
    return out;
  };

  it('refused connections eject the dead host: at two consecutive 5xx, or at three local-origin failures with the split', async () => {
    assert.deepEqual(await series('plain', 6), ['', 'live', '', 'live', 'live', 'live']);
    assert.deepEqual(await series('split', 8), ['', 'live', '', 'live', '', 'live', 'live', 'live']);
  });
});
