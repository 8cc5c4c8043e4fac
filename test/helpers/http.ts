// node:http servers on loopback for tests: listen on a free port, close with every connection;
// one GET through an agent or on a fresh connection, with the path sent byte for byte.
import { request, type Agent, type IncomingHttpHeaders, type Server } from 'node:http';
import { connect, type AddressInfo } from 'node:net';

/** Listens on 127.0.0.1 at a free port and returns it. */
export async function listen(server: Server): Promise<number> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return (server.address() as AddressInfo).port;
}

/** Closes the server and every connection it has, idle or not. */
export async function close(server: Server): Promise<void> {
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
}

/**
 * A GET to 127.0.0.1 through `agent` (false: a fresh connection) with the path sent byte for byte
 * (fetch would resolve `.`/`..` segments and escapes itself) and headers possibly repeated: status,
 * headers and the body as text.
 */
export function get(agent: Agent | false, port: number, path: string, headers: Record<string, string | string[]> = {}, method = 'GET'): Promise<{ status: number; headers: IncomingHttpHeaders; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path, method, headers, agent }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks).toString() }));
    });
    req.on('error', reject);
    req.end();
  });
}

/**
 * Raw bytes to a server on a fresh connection; the whole answer up to the connection's end (the
 * server must close it: `connection: close`, an error, an upgrade). The client does not half-close:
 * node:http, as Envoy, takes a client's FIN for the end of the connection.
 */
export function rawExchange(port: number, bytes: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = connect(port, '127.0.0.1', () => s.write(bytes));
    let out = '';
    s.setEncoding('latin1');
    s.on('data', (d: string) => (out += d));
    s.on('end', () => resolve(out));
    s.on('error', reject);
  });
}

/** A GET on a fresh connection (see get). */
export function rawGet(port: number, path: string, headers: Record<string, string | string[]> = {}): ReturnType<typeof get> {
  return get(false, port, path, headers);
}

/** A POST with a chunked body on a fresh connection (the proxy forwards it through node:http on its pool's agent): its status and whether it completed. */
export function chunkedPost(port: number, path: string): Promise<{ status: number; complete: boolean }> {
  return new Promise((resolve) => {
    const req = request({ host: '127.0.0.1', port, method: 'POST', path, agent: false }, (res) => {
      res.resume();
      res.on('close', () => resolve({ status: res.statusCode ?? 0, complete: res.complete }));
    });
    req.on('error', () => resolve({ status: 0, complete: false }));
    req.write('a chunk');
    req.end();
  });
}
