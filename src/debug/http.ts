// The plain HTTP servers of both programs (discovery HTTP and monitoring, the agent's status port):
// Go-style listen addresses, a fail-fast bind with the address in the message, a small route table
// that debug handlers register into, and graceful close.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { compareText } from '../common/compare.js';

export type Handler = (req: IncomingMessage, res: ServerResponse, url: URL) => void | Promise<void>;

interface Route {
  path: string;
  help: string;
  handler: Handler;
}

/** Exact-path routes; `/debug` lists them, so every endpoint is discoverable. */
export class Mux {
  private readonly routes = new Map<string, Route>();

  /** A mux to try for paths this one does not have (monitoring falls back to debug). */
  constructor(private readonly fallback?: Mux) {}

  handle(path: string, help: string, handler: Handler): this {
    this.routes.set(path, { path, help, handler });
    return this;
  }

  list(): Array<{ path: string; help: string }> {
    return [...this.routes.values()].map(({ path, help }) => ({ path, help })).sort((a, b) => compareText(a.path, b.path));
  }

  /** Serves a request; unknown paths are 404 naming the path, handler errors are 500 with the reason. */
  readonly serve = (req: IncomingMessage, res: ServerResponse): void => {
    const url = new URL(req.url ?? '/', 'http://localhost');
    const route = this.routes.get(url.pathname);
    if (!route && this.fallback) {
      this.fallback.serve(req, res);
      return;
    }
    if (!route) {
      sendText(res, 404, `404 page not found: ${url.pathname}\n`);
      return;
    }
    Promise.resolve()
      .then(() => route.handler(req, res, url))
      .catch((e: unknown) => {
        if (!res.headersSent) sendText(res, 500, `internal error serving ${url.pathname}: ${(e as Error).message}\n`);
        else res.destroy();
      });
  };
}

export function sendText(res: ServerResponse, status: number, body: string, contentType = 'text/plain; charset=utf-8'): void {
  res.writeHead(status, { 'content-type': contentType, 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

export function sendJson(res: ServerResponse, status: number, value: unknown): void {
  sendText(res, status, JSON.stringify(value, null, 2) + '\n', 'application/json');
}

/** Reads a request body up to a limit; a larger body is rejected rather than buffered. */
export async function readBody(req: IncomingMessage, limit = 1 << 20): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > limit) throw new BodyTooLarge(limit);
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString('utf8');
}

export class BodyTooLarge extends Error {
  constructor(limit: number) {
    super(`request body larger than ${limit} bytes`);
  }
}

export class ListenError extends Error {}

/** Splits a Go listen address (`:8080`, `127.0.0.1:0`, `[::1]:15014`) into host and port. */
export function parseListenAddress(addr: string): { host: string | undefined; port: number } {
  const m = /^(?:\[([^\]]+)\]|([^:]*)):(\d+)$/.exec(addr.trim());
  if (!m || Number(m[3]) > 65535) throw new ListenError(`invalid listen address "${addr}": expected host:port or :port`);
  const host = m[1] ?? m[2];
  return { host: host === '' ? undefined : host, port: Number(m[3]) };
}

/** Binds a server, or fails fast with a message naming the address (a taken port, say). */
export async function listen(server: Server, addr: string): Promise<AddressInfo> {
  const { host, port } = parseListenAddress(addr);
  await new Promise<void>((resolve, reject) => {
    const onError = (e: NodeJS.ErrnoException) => {
      const why = e.code === 'EADDRINUSE' ? 'address already in use' : e.code === 'EACCES' ? 'permission denied' : e.message;
      reject(new ListenError(`failed to listen on ${addr}: ${why}`));
    };
    server.once('error', onError);
    server.listen(port, host, () => {
      server.off('error', onError);
      resolve();
    });
  });
  return server.address() as AddressInfo;
}

export function formatAddress(a: AddressInfo): string {
  return a.family === 'IPv6' ? `[${a.address}]:${a.port}` : `${a.address}:${a.port}`;
}

export function httpServer(mux: Mux): Server {
  return createServer(mux.serve);
}

/** Stops accepting, lets in-flight requests finish, and drops idle keep-alive connections. */
export async function closeServer(server: Server): Promise<void> {
  await new Promise<void>((resolve) => {
    server.close(() => resolve());
    server.closeIdleConnections();
  });
}
