// A small httpbin-like sample workload: it echoes what it received so a user can see what the
// sidecar forwarded (headers such as x-forwarded-for, the jwt payload header, ...).
//   GET /headers        {"headers": {...}}
//   GET /ip             {"origin": "<peer address>"}
//   GET /status/<code>  that status, empty body
//   ANY /anything[/...] method, url, args, headers, body
//   GET /get            url, args, headers, origin
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

function headersOf(req: IncomingMessage): Record<string, string> {
  const out: Record<string, string> = {};
  for (let i = 0; i < req.rawHeaders.length; i += 2) {
    const name = req.rawHeaders[i]!.replace(/(^|-)([a-z])/g, (_, d: string, c: string) => d + c.toUpperCase());
    out[name] = out[name] === undefined ? req.rawHeaders[i + 1]! : `${out[name]},${req.rawHeaders[i + 1]!}`;
  }
  return out;
}

function reply(res: import('node:http').ServerResponse, status: number, value: unknown): void {
  const body = JSON.stringify(value, null, 2) + '\n';
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

async function bodyOf(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of req as AsyncIterable<Buffer>) chunks.push(c);
  return Buffer.concat(chunks).toString('utf8');
}

export function httpbin(): Server {
  return createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://httpbin');
    const origin = req.socket.remoteAddress ?? '';
    const args = Object.fromEntries(url.searchParams);
    const status = /^\/status\/(\d{3})$/.exec(url.pathname);
    if (status) {
      res.writeHead(Number(status[1])).end();
    } else if (url.pathname === '/headers') {
      reply(res, 200, { headers: headersOf(req) });
    } else if (url.pathname === '/ip') {
      reply(res, 200, { origin });
    } else if (url.pathname === '/get') {
      reply(res, 200, { args, headers: headersOf(req), origin, url: url.pathname + url.search });
    } else if (url.pathname === '/anything' || url.pathname.startsWith('/anything/')) {
      bodyOf(req).then((data) => reply(res, 200, { method: req.method, url: url.pathname + url.search, args, headers: headersOf(req), origin, data }));
    } else if (url.pathname === '/') {
      reply(res, 200, { endpoints: ['/headers', '/ip', '/get', '/status/<code>', '/anything'] });
    } else {
      reply(res, 404, { error: `no such endpoint: ${url.pathname}` });
    }
  });
}

/** Starts the app; resolves to the bound address. */
export async function startHttpbin(port: number, host = '127.0.0.1'): Promise<{ server: Server; address: AddressInfo }> {
  const server = httpbin();
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, resolve);
  });
  return { server, address: server.address() as AddressInfo };
}

// `node dist/samples/apps/httpbin.js [port] [host]`: the app alone (default 127.0.0.1:8000).
if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const [port = '8000', host = '127.0.0.1'] = process.argv.slice(2);
  startHttpbin(Number(port), host).then(
    ({ address }) => console.log(`httpbin listening on ${address.address}:${address.port}`),
    (e: Error) => {
      console.error(`httpbin: cannot listen on ${host}:${port}: ${e.message}`);
      process.exit(1);
    },
  );
}
