// A cluster manager over fixed endpoint lists, for tests that need upstreams without CDS/EDS.
import type { ClusterManager } from '../../src/dataplane/clusters.js';
import { Http1Pool, type Endpoint, type UpstreamCluster } from '../../src/dataplane/upstream-pools.js';
import { Http2Pool } from '../../src/dataplane/http2-pool.js';
import { TcpPool } from '../../src/dataplane/tcp-pool.js';

/** Round-robin over fixed endpoint lists; `set` replaces a cluster's endpoints (EDS-style). */
export class StaticClusterManager implements ClusterManager {
  private readonly clusters = new Map<string, { cluster: UpstreamCluster; endpoints: readonly Endpoint[] }>();

  /** `http2`: the cluster is reached over HTTP/2 (h2c) instead of HTTP/1.1. */
  set(name: string, endpoints: readonly Endpoint[], opts: { http2?: boolean } = {}): void {
    const existing = this.clusters.get(name);
    if (existing) {
      existing.endpoints = endpoints;
      return;
    }
    let next = 0;
    const entry: { cluster: UpstreamCluster; endpoints: readonly Endpoint[] } = {
      endpoints,
      cluster: {
        name,
        http1: new Http1Pool(),
        tcp: new TcpPool(),
        ...(opts.http2 ? { http2: new Http2Pool() } : {}),
        pick: () => {
          const eps = entry.endpoints;
          if (eps.length === 0) return undefined;
          return eps[next++ % eps.length];
        },
      },
    };
    this.clusters.set(name, entry);
  }

  remove(name: string): void {
    this.clusters.get(name)?.cluster.http1.destroy();
    this.clusters.get(name)?.cluster.http2?.destroy();
    this.clusters.delete(name);
  }

  get(name: string): UpstreamCluster | undefined {
    return this.clusters.get(name)?.cluster;
  }

  /** Closes every pooled upstream connection. */
  close(): void {
    for (const { cluster } of this.clusters.values()) {
      cluster.http1.destroy();
      cluster.http2?.destroy();
    }
    this.clusters.clear();
  }
}
