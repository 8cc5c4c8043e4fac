// request_mirror_policies: a shadow copy of a request sent to another cluster, fire and forget,
// over that cluster's own connection pools (its HTTP/1.1 or HTTP/2 connections, its transport
// socket: mesh mTLS to a sidecar, as Envoy's shadow goes through the cluster like any request).
// Its answer is read and dropped, its failure only logged: it never delays or fails the response.
import type { OutgoingHttpHeaders } from 'node:http';
import { Writable } from 'node:stream';
import { scope } from '../common/log.js';
import type { StreamRequest } from '../envoy/request.js';
import type { ClusterManager } from './clusters.js';
import { http2For } from './upstream-pools.js';
import { upstreamExchange } from './http1-exchange.js';
import { type BodyFraming, type DownstreamResponse, type HeaderMap, type UpstreamBody, type UpstreamEvents, type UpstreamExchange, type UpstreamRequest } from './http-codec.js';
import type { MirrorSpec } from './route-table.js';

const log = scope('router');

/** How long a shadow request may take before it is dropped (it holds a connection meanwhile). */
const SHADOW_TIMEOUT_MS = 30_000;

/** Envoy's shadow authority: `-shadow` appended to the host, before any port. */
export function shadowAuthority(authority: string): string {
  const m = /^(\[[^\]]*\]|[^:]*)(:\d+)?$/.exec(authority);
  return m ? `${m[1]}-shadow${m[2] ?? ''}` : `${authority}-shadow`;
}

/** How many body bytes a shadow may hold unsent before it is dropped (Envoy's default per-connection buffer limit). */
const SHADOW_BUFFER_LIMIT = 1024 * 1024;

/** The shadows' side of a request body: the router copies each chunk here as it forwards it. */
export interface ShadowBody {
  write(chunk: Buffer): void;
  end(trailers: HeaderMap | undefined): void;
  /** The request ended before its body did: its shadows are reset too. */
  abort(): void;
}

/**
 * Sends a shadow copy to each mirror cluster whose fraction the request falls in. A request with
 * a body (`framing` not none) gets shadows whose body the returned ShadowBody feeds; a shadow that
 * falls more than SHADOW_BUFFER_LIMIT behind is dropped rather than slowing the request.
 */
export function mirror(clusters: ClusterManager, mirrors: readonly MirrorSpec[], req: StreamRequest, path: string, headers: OutgoingHttpHeaders, framing: BodyFraming): ShadowBody | undefined {
  const shadows: UpstreamExchange[] = [];
  for (const m of mirrors) {
    if (m.fraction < 1 && Math.random() >= m.fraction) continue;
    const cluster = clusters.get(m.cluster);
    const endpoint = cluster?.pick(req);
    if (!cluster || !endpoint) {
      log.debug(`mirror cluster ${m.cluster}: no cluster or healthy endpoint`);
      continue;
    }
    const http2 = http2For(cluster, req.downstreamH2);
    const shadowHeaders: OutgoingHttpHeaders = { ...headers, host: shadowAuthority(String(headers.host ?? req.authority)) };
    // A streamed body stays chunked to an HTTP/1.1 mirror, whatever the main cluster speaks.
    if (framing === 'stream' && !http2) shadowHeaders['transfer-encoding'] = 'chunked';
    const shadow: UpstreamRequest = { endpoint, method: req.method, path, headers: shadowHeaders, framing, ...alpnOf(req, http2 !== undefined) };
    let exchange: UpstreamExchange | undefined;
    const timer = setTimeout(() => exchange?.destroy(), SHADOW_TIMEOUT_MS).unref();
    const events: UpstreamEvents = {
      // Read to its end and dropped, so that the connection goes back to the pool.
      head: (_h, body: UpstreamBody) => body.pipeTo(dropSink(), { bodyDone: () => clearTimeout(timer) }),
      error: (e) => {
        clearTimeout(timer);
        log.debug(`mirror to ${m.cluster} failed: ${e.message}`);
      },
    };
    try {
      exchange = upstreamExchange(shadow, cluster, http2, events);
      if (framing === 'none') exchange.finish(undefined);
      else shadows.push(exchange);
    } catch (e) {
      events.error(e as Error);
    }
  }
  return shadows.length > 0 ? shadowBody(shadows) : undefined;
}

function shadowBody(shadows: UpstreamExchange[]): ShadowBody {
  let live = shadows;
  return {
    write(chunk) {
      live = live.filter((x) => {
        if (!x.body || x.body.destroyed) return false;
        x.body.write(chunk);
        if (x.body.writableLength <= SHADOW_BUFFER_LIMIT) return true;
        log.debug(`mirror dropped: more than ${SHADOW_BUFFER_LIMIT} body bytes unsent`);
        x.destroy();
        return false;
      });
    },
    end(trailers) {
      for (const x of live) x.finish(trailers);
    },
    abort() {
      for (const x of live) x.destroy();
      live = [];
    },
  };
}

/** A response body's destination that keeps nothing (one per shadow: a body's error destroys it). */
function dropSink(): DownstreamResponse {
  return new Writable({ write: (_chunk, _enc, cb) => cb() }) as unknown as DownstreamResponse;
}

/** The request's ALPN override (`mesh.alpn`) for the shadow cluster's protocol, as the main request's. */
function alpnOf(req: StreamRequest, http2: boolean): Pick<UpstreamRequest, 'alpn'> {
  const alpn = req.alpnOverride?.get(http2 ? 'h2' : 'http/1.1');
  return alpn ? { alpn } : {};
}
