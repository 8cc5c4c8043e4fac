// A proxy over a real ADS server in front of two real upstreams on loopback: `app`, an HTTP/1.1
// node:http server (listener `in`), and `h2app`, an h2c node:http2 server (listener `in-h2app`,
// its cluster's upstream protocol HTTP/2), plus whatever listeners a test adds. codec_type AUTO:
// each listener takes HTTP/1.1, or HTTP/2 by its connection preface (h2c with prior knowledge).
import type { Server } from 'node:http';
import type { Http2Server } from 'node:http2';
import type { AddressInfo } from 'node:net';
import type { MeshProxy } from '../../src/dataplane/proxy.js';
import { close, listen } from '../helpers/http.js';
import { httpCluster } from './cluster-stats-fixtures.js';
import { hcmChain, listener, staticCluster, startFixtureProxy } from './xds-fixtures.js';

export interface TwoApps {
  readonly proxy: MeshProxy;
  stop(): Promise<void>;
}

export async function startTwoApps(app: Server, h2app: Http2Server, more: ReturnType<typeof listener>[] = []): Promise<TwoApps> {
  const appPort = await listen(app);
  await new Promise<void>((r) => h2app.listen(0, '127.0.0.1', r));
  const clusters = [staticCluster('app', [appPort]), httpCluster('h2app', (h2app.address() as AddressInfo).port, { h2: true })];
  const fixture = await startFixtureProxy(clusters, [listener('in', 0, [hcmChain({ cluster: 'app' })]), listener('in-h2app', 0, [hcmChain({ cluster: 'h2app' })]), ...more]);
  return {
    proxy: fixture.proxy,
    async stop() {
      await fixture.stop();
      await close(app);
      await new Promise((r) => h2app.close(r));
    },
  };
}
