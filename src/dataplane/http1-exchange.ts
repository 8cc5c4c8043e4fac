// HTTP/1.1 upstream exchanges on a cluster's Http1Pool. Most requests go through the proxy's own
// keep-alive client (http1/client.ts): the head and the body's first bytes in one write, the
// response written straight into the downstream response. A streamed (chunked) request, which may
// end with trailers, and one that expects `100 Continue` go through node:http on the pool's agent.
import { request as httpRequest } from 'node:http';
import type { Http1Pool, UpstreamCluster } from './upstream-pools.js';
import type { Http2Pool } from './http2-pool.js';
import { ClientExchange } from './http1/client.js';
import { endToEnd, http2Exchange, readableBody, trailerMap, type HeaderMap, type UpstreamEvents, type UpstreamExchange, type UpstreamRequest } from './http-codec.js';

/** One request to the cluster over `http2` (its sessions, when the request goes over HTTP/2), else over its HTTP/1.1 connections. */
export function upstreamExchange(r: UpstreamRequest, cluster: UpstreamCluster, http2: Http2Pool | undefined, ev: UpstreamEvents): UpstreamExchange {
  return http2 ? http2Exchange(r, http2, ev) : http1Exchange(r, cluster.http1, ev);
}

/** One request to an HTTP/1.1 upstream over the cluster's keep-alive connections. */
export function http1Exchange(r: UpstreamRequest, pool: Http1Pool, ev: UpstreamEvents): UpstreamExchange {
  if (r.framing === 'stream' || r.headers.expect !== undefined) return nodeExchange(r, pool, ev);
  const request = { method: r.method, path: r.path, headers: r.headers, hasBody: r.framing === 'length', routeTotal: r.routeTotal };
  return new ClientExchange(request, pool.connections(r.endpoint, r), ev);
}

function nodeExchange(r: UpstreamRequest, pool: Http1Pool, ev: UpstreamEvents): UpstreamExchange {
  const upstream = httpRequest({ host: r.endpoint.host, port: r.endpoint.port, method: r.method, path: r.path, headers: r.headers, ...pool.requestOptions(r.endpoint, r) });
  pool.follow(upstream, r.routeTotal);
  upstream.on('error', (e) => ev.error(e));
  upstream.on('response', (up) => {
    const trailers = (): HeaderMap | undefined => (up.rawTrailers.length > 0 ? trailerMap(up.trailers) : undefined);
    ev.head({ status: up.statusCode ?? 502, message: up.statusMessage, headers: endToEnd(up.headers), endStream: false, connection: up.socket }, readableBody(up, trailers));
  });
  return {
    body: upstream,
    get sent() {
      return upstream.socket?.connecting === false;
    },
    finish(trailers) {
      if (trailers) upstream.addTrailers(trailers);
      upstream.end();
    },
    destroy: () => upstream.destroy(),
  };
}
