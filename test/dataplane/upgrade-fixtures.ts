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
export async function upgradeVia(port: number, headers: Record<string, string> = {}): Promise<UpgradeOutcome> {
  const opened = await openUpgrade(port, headers);
  const socket = opened.socket;
  if (!socket) return { status: opened.status };
  return new Promise((resolve) => {
    socket.once('data', (d: Buffer) => {
      socket.destroy();
      resolve({ status: opened.status, echoed: d.toString(), xPath: opened.xPath });
    });
    socket.write('hello');
  });
}

/** Asks `port` for an upgrade: its status, and on 101 the open tunnel (the caller closes it). */
export function openUpgrade(port: number, headers: Record<string, string> = {}): Promise<{ status: number; socket?: Duplex; xPath?: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, path: '/ws', headers: { connection: 'Upgrade', upgrade: 'websocket', ...headers } });
    req.on('upgrade', (res, socket) => resolve({ status: res.statusCode ?? 0, socket, xPath: String(res.headers['x-path']) }));
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
