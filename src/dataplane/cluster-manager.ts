// How the router reaches upstreams: by cluster name. The real cluster manager (CDS/EDS, health,
// ORIGINAL_DST) plugs in behind this interface; `StaticClusterManager` is a plain one for tests and
// for wiring before CDS exists.
import { Agent } from 'node:http';
import type { RequestView } from './request.js';

export interface Endpoint {
  readonly host: string;
  readonly port: number;
}

export interface UpstreamCluster {
  readonly name: string;
  /** The endpoint for this request (the cluster's load balancing), or undefined: no healthy upstream. */
  pick(req: RequestView): Endpoint | undefined;
  /** The cluster's connection pool; keep-alive, so upstream connections are reused. */
  readonly agent: Agent;
  /** Connect timeout for raw (TCP proxy) upstream connections; absent = none. */
  readonly connectTimeoutMs?: number;
}

export interface ClusterManager {
  /** undefined when no cluster of that name exists (the route's cluster_not_found_response_code). */
  get(name: string): UpstreamCluster | undefined;
}

/** A keep-alive pool sized for a proxy: unbounded sockets per endpoint, idle ones kept. */
export function upstreamAgent(): Agent {
  return new Agent({ keepAlive: true, maxSockets: Infinity, maxFreeSockets: 256, scheduling: 'lifo' });
}

/** Round-robin over fixed endpoint lists; `set` replaces a cluster's endpoints (EDS-style). */
export class StaticClusterManager implements ClusterManager {
  private readonly clusters = new Map<string, { cluster: UpstreamCluster; endpoints: readonly Endpoint[] }>();

  set(name: string, endpoints: readonly Endpoint[]): void {
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
        agent: upstreamAgent(),
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
    this.clusters.get(name)?.cluster.agent.destroy();
    this.clusters.delete(name);
  }

  get(name: string): UpstreamCluster | undefined {
    return this.clusters.get(name)?.cluster;
  }

  /** Closes every pooled upstream connection. */
  close(): void {
    for (const { cluster } of this.clusters.values()) cluster.agent.destroy();
    this.clusters.clear();
  }
}
