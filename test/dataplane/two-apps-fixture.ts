// A proxy over a real ADS server in front of two real upstreams on loopback: `app`, an HTTP/1.1
// node:http server (listener `in`), and `h2app`, an h2c node:http2 server (listener `in-h2app`,
// its cluster's upstream protocol HTTP/2), plus whatever listeners a test adds. codec_type AUTO:
// each listener takes HTTP/1.1, or HTTP/2 by its connection preface (h2c with prior knowledge).
import { mkdtempSync, rmSync } from 'node:fs';
import type { Server } from 'node:http';
import type { Http2Server } from 'node:http2';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { MeshProxy } from '../../src/dataplane/proxy.js';
import { TypeUrl } from '../../src/envoy/types.js';
import { close, listen } from '../helpers/http.js';
import { httpCluster } from './cluster-stats-fixtures.js';
import { FixtureAds, hcmChain, listener, staticCluster, startBoundProxy } from './xds-fixtures.js';

export interface TwoApps {
  readonly proxy: MeshProxy;
  stop(): Promise<void>;
}

export async function startTwoApps(app: Server, h2app: Http2Server, more: ReturnType<typeof listener>[] = []): Promise<TwoApps> {
  const dir = mkdtempSync(join(tmpdir(), 'mesh-two-apps-'));
  const appPort = await listen(app);
  await new Promise<void>((r) => h2app.listen(0, '127.0.0.1', r));
  const ads = await new FixtureAds().listen();
  ads.set(TypeUrl.Cluster, [staticCluster('app', [appPort]), httpCluster('h2app', (h2app.address() as AddressInfo).port, { h2: true })]);
  const listeners = [listener('in', 0, [hcmChain({ cluster: 'app' })]), listener('in-h2app', 0, [hcmChain({ cluster: 'h2app' })]), ...more];
  ads.set(TypeUrl.Listener, listeners);
  const proxy = await startBoundProxy(dir, ads.port, listeners.length);
  return {
    proxy,
    async stop() {
      await proxy.stop(0);
      ads.close();
      await close(app);
      await new Promise((r) => h2app.close(r));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
