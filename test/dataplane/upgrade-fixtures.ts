// Both ends of an upgrade (WebSocket) for the data-plane tests: a client that asks for one and
// sends "hello" through the tunnel, and an upstream that answers 101 and echoes in upper case.
import { request, type Server } from 'node:http';
import type { Duplex } from 'node:stream';

export interface UpgradeOutcome {
  readonly status: number;
  /** What came back through the tunnel after a 101. */
  readonly echoed?: string;
  /** The upstream's X-Path header: the path it was asked for. */
  readonly xPath?: string;
}

/** Asks `port` for an upgrade; on 101 sends "hello" through the tunnel and returns what comes back. */
export function upgradeVia(port: number, headers: Record<string, string> = {}): Promise<UpgradeOutcome> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path: '/ws', headers: { connection: 'Upgrade', upgrade: 'websocket', ...headers } });
    req.on('upgrade', (res, socket) => {
      socket.once('data', (d: Buffer) => {
        socket.destroy();
        resolve({ status: res.statusCode ?? 0, echoed: d.toString(), xPath: String(res.headers['x-path']) });
      });
      socket.write('hello');
    });
    req.on('response', (res) => {
      res.resume();
      resolve({ status: res.statusCode ?? 0 });
    });
    req.on('error', reject);
    req.end();
  });
}

/** Makes `server` accept every upgrade: 101 with X-Path, then everything it reads back in upper case. */
export function answerUpgrades(server: Server): void {
  server.on('upgrade', (req, socket: Duplex) => {
    socket.write(`HTTP/1.1 101 Switching Protocols\r\nUpgrade: ${String(req.headers.upgrade)}\r\nConnection: Upgrade\r\nX-Path: ${req.url}\r\n\r\n`);
    socket.on('data', (d: Buffer) => socket.write(d.toString().toUpperCase()));
    socket.on('end', () => socket.end());
    socket.on('error', () => socket.destroy());
  });
}
