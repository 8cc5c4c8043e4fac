// HTTP/1.1 upstream exchanges on a cluster's Http1Pool. Most requests go through undici: one
// dispatch() on the endpoint's pool, whose handler writes the response straight into the downstream
// response (no intermediate stream, backpressure through the dispatch controller). undici sends
// neither request trailers nor `Expect`, so a streamed (chunked) request and one that expects
// `100 Continue` go through node:http on the pool's agent instead, as they did before.
import { request as httpRequest } from 'node:http';
import { PassThrough } from 'node:stream';
import type { Dispatcher } from 'undici';
import type { Http1Pool } from './upstream-pools.js';
import {
  endToEnd,
  readableBody,
  trailerMap,
  type DownstreamResponse,
  type HeaderMap,
  type UpstreamBody,
  type UpstreamEvents,
  type UpstreamExchange,
  type UpstreamRequest,
} from './http-codec.js';

/** One request to an HTTP/1.1 upstream over the cluster's keep-alive connections. */
export function http1Exchange(r: UpstreamRequest, pool: Http1Pool, ev: UpstreamEvents): UpstreamExchange {
  return r.framing === 'stream' || r.headers.expect !== undefined ? nodeExchange(r, pool, ev) : new UndiciExchange(r, pool, ev);
}

function nodeExchange(r: UpstreamRequest, pool: Http1Pool, ev: UpstreamEvents): UpstreamExchange {
  const upstream = httpRequest({ host: r.endpoint.host, port: r.endpoint.port, method: r.method, path: r.path, headers: r.headers, ...pool.requestOptions(r.endpoint, r.source, r.alpn) });
  upstream.on('error', (e) => ev.error(e));
  upstream.on('response', (up) => {
    const trailers = (): HeaderMap | undefined => (up.rawTrailers.length > 0 ? trailerMap(up.trailers) : undefined);
    ev.head({ status: up.statusCode ?? 502, message: up.statusMessage, headers: endToEnd(up.headers), endStream: false }, readableBody(up, trailers));
  });
  return {
    body: upstream,
    finish(trailers) {
      if (trailers) upstream.addTrailers(trailers);
      upstream.end();
    },
    destroy: () => upstream.destroy(),
  };
}

const DESTROYED = new Error('upstream request destroyed');

/**
 * A request dispatched on undici. It is its own dispatch handler and the response's body: the
 * chunks go to the downstream response given to `pipeTo` (before that, or after `discard`,
 * nowhere). Once `destroy()` was called nothing more is reported: the caller already answered.
 */
class UndiciExchange implements UpstreamExchange, UpstreamBody, Dispatcher.DispatchHandler {
  readonly body?: PassThrough;
  private controller?: Dispatcher.DispatchController;
  private destroyed = false;
  private out?: NodeJS.WritableStream;
  private done?: (trailers: HeaderMap | undefined) => void;

  constructor(
    r: UpstreamRequest,
    pool: Http1Pool,
    private readonly ev: UpstreamEvents,
  ) {
    if (r.framing === 'length') {
      this.body = new PassThrough();
      // undici destroys a body it could not send; the failure itself reaches onResponseError.
      this.body.on('error', () => {});
    }
    pool.pool(r.endpoint, r.source, r.alpn).dispatch({ method: r.method, path: r.path, headers: r.headers as Record<string, string | string[]>, body: this.body ?? null }, this);
  }

  finish(): void {
    this.body?.end();
  }

  destroy(): void {
    if (this.destroyed) return;
    this.destroyed = true;
    // Not started yet (still connecting or queued): onRequestStart aborts it.
    this.controller?.abort(DESTROYED);
  }

  pipeTo(out: DownstreamResponse, done: (trailers: HeaderMap | undefined) => void): void {
    this.out = out;
    this.done = done;
  }

  discard(): void {
    this.out = undefined;
    this.done = undefined;
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.controller = controller;
    if (this.destroyed) controller.abort(DESTROYED);
  }

  onResponseStart(_controller: Dispatcher.DispatchController, status: number, headers: Record<string, string | string[] | undefined>, message?: string): void {
    // 1xx informational responses are not forwarded (node:http's client drops them too).
    if (this.destroyed || status < 200) return;
    this.ev.head({ status, message, headers: endToEnd(headers), endStream: false }, this);
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (this.out && !this.out.write(chunk)) {
      controller.pause();
      this.out.once('drain', () => controller.resume());
    }
  }

  onResponseEnd(_controller: Dispatcher.DispatchController, trailers: Record<string, string | string[] | undefined>): void {
    this.done?.(trailerMap(trailers));
  }

  onResponseError(_controller: Dispatcher.DispatchController, e: Error): void {
    if (!this.destroyed) this.ev.error(e);
  }
}
