// The agent's DNS server: UDP and TCP on one address (127.0.0.1:15053 by default, where the capture
// rules redirect the workload's port 53). Sockets only; what to answer is the resolver's job.
import { createSocket, type Socket } from 'node:dgram';
import { createServer, type Server, type Socket as TcpSocket } from 'node:net';
import { scope } from '../../common/log.js';
import type { DnsResolver } from './resolver.js';

const log = scope('dns');

/** An idle TCP client is let go after this long (RFC 7766 suggests seconds). */
const TCP_IDLE_MS = 10_000;

/** The resolver answers every message; should it fail anyway, the query goes unanswered, the agent runs on. */
function unexpected(e: unknown): undefined {
  log.error(`answering a DNS query failed: ${e instanceof Error ? e.message : String(e)}`);
  return undefined;
}

export class DnsServer {
  private udp?: Socket;
  private tcp?: Server;
  private readonly clients = new Set<TcpSocket>();

  constructor(
    private readonly resolver: DnsResolver,
    private readonly host = '127.0.0.1',
    private readonly port = 15053,
  ) {}

  /** Binds both sockets; resolves to the port (the same for UDP and TCP). */
  async start(): Promise<number> {
    const tcp = createServer((s) => this.serveTcp(s));
    await new Promise<void>((resolve, reject) => {
      tcp.once('error', (e) => reject(new Error(`DNS proxy: cannot listen on tcp ${this.host}:${this.port}: ${e.message}`)));
      tcp.listen(this.port, this.host, resolve);
    });
    this.tcp = tcp;
    const port = (tcp.address() as { port: number }).port;
    const udp = createSocket(this.host.includes(':') ? 'udp6' : 'udp4');
    await new Promise<void>((resolve, reject) => {
      udp.once('error', (e) => reject(new Error(`DNS proxy: cannot listen on udp ${this.host}:${port}: ${e.message}`)));
      udp.bind(port, this.host, resolve);
    }).catch((e: Error) => {
      tcp.close();
      throw e;
    });
    udp.on('error', (e) => log.warn(`udp socket: ${e.message}`));
    udp.on('message', (msg, from) => void this.serveUdp(udp, msg, from.address, from.port));
    this.udp = udp;
    log.info(`DNS proxy listening on ${this.host}:${port} (udp and tcp)`);
    return port;
  }

  close(): void {
    this.udp?.close();
    this.udp = undefined;
    this.tcp?.close();
    this.tcp = undefined;
    for (const c of this.clients) c.destroy();
  }

  private async serveUdp(udp: Socket, msg: Buffer, host: string, port: number): Promise<void> {
    const out = await this.resolver.answer(msg, 'udp').catch(unexpected);
    if (out && this.udp === udp) udp.send(out, port, host);
  }

  /** Length-prefixed messages, several per connection, answered as they complete (RFC 7766). */
  private serveTcp(socket: TcpSocket): void {
    this.clients.add(socket);
    socket.setTimeout(TCP_IDLE_MS, () => socket.destroy());
    socket.on('close', () => this.clients.delete(socket));
    socket.on('error', (e) => log.debug(`tcp client: ${e.message}`));
    let buf = Buffer.alloc(0);
    socket.on('data', (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      while (buf.length >= 2 && buf.length >= 2 + buf.readUInt16BE(0)) {
        const msg = buf.subarray(2, 2 + buf.readUInt16BE(0));
        buf = buf.subarray(2 + msg.length);
        void this.resolver.answer(msg, 'tcp').catch(unexpected).then((out) => {
          if (!out || socket.destroyed) return;
          const len = Buffer.alloc(2);
          len.writeUInt16BE(out.length);
          socket.write(Buffer.concat([len, out]));
        });
      }
    });
  }
}
