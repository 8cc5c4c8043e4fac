// Forwards the queries the name table does not answer to the resolvers of resolv.conf, unchanged:
// over UDP from a fresh socket (a new source port per query), over TCP when the UDP answer is
// truncated; each server in turn, `attempts` rounds, `timeout` per try. A query every server fails
// is the caller's to answer with SERVFAIL.
import { createSocket } from 'node:dgram';
import { connect } from 'node:net';
import type { ResolvConf, Upstream } from './resolv-conf.js';

const TC_BIT = 0x02; // in the third header byte

/** Whether a DNS message has the truncation flag. */
export function truncated(message: Buffer): boolean {
  return message.length > 2 && (message[2]! & TC_BIT) !== 0;
}

function sameId(a: Buffer, b: Buffer): boolean {
  return a.length >= 2 && b.length >= 2 && a[0] === b[0] && a[1] === b[1];
}

/**
 * A promise settled once, by the first of: the query's answer, its error, or the timeout; `cleanup`
 * then releases the socket.
 */
function exchange(label: string, timeoutMs: number, cleanup: () => void, run: (done: (err: Error | undefined, answer?: Buffer) => void) => void): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    let settled = false;
    const done = (err: Error | undefined, answer?: Buffer) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      cleanup();
      if (err) reject(new Error(`${label}: ${err.message}`));
      else resolve(answer!);
    };
    const timer = setTimeout(() => done(new Error(`no answer in ${timeoutMs}ms`)), timeoutMs);
    run(done);
  });
}

export function queryUdp(server: Upstream, query: Buffer, timeoutMs: number): Promise<Buffer> {
  const socket = createSocket(server.host.includes(':') ? 'udp6' : 'udp4');
  return exchange(`${server.host}:${server.port} udp`, timeoutMs, () => socket.close(), (done) => {
    socket.on('error', (e) => done(e));
    socket.on('message', (msg, from) => {
      // Anything else (a late answer, a spoof) is not this query's answer.
      if (from.address === server.host && from.port === server.port && sameId(msg, query)) done(undefined, msg);
    });
    socket.send(query, server.port, server.host);
  });
}

/** DNS over TCP: each message preceded by its 16-bit length. */
export function queryTcp(server: Upstream, query: Buffer, timeoutMs: number): Promise<Buffer> {
  const socket = connect({ host: server.host, port: server.port });
  return exchange(`${server.host}:${server.port} tcp`, timeoutMs, () => socket.destroy(), (done) => {
    let buf = Buffer.alloc(0);
    socket.on('error', (e) => done(e));
    socket.on('end', () => done(new Error('closed before answering')));
    socket.on('data', (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      if (buf.length >= 2 && buf.length >= 2 + buf.readUInt16BE(0)) done(undefined, buf.subarray(2, 2 + buf.readUInt16BE(0)));
    });
    const framed = Buffer.alloc(2 + query.length);
    framed.writeUInt16BE(query.length, 0);
    query.copy(framed, 2);
    socket.write(framed);
  });
}

export class DnsForwarder {
  constructor(private readonly conf: Pick<ResolvConf, 'servers' | 'timeoutMs' | 'attempts'>) {}

  get servers(): readonly Upstream[] {
    return this.conf.servers;
  }

  /** The first answer of any server; `viaTcp` when the client asked over TCP. Rejects when none answers. */
  async forward(query: Buffer, viaTcp = false): Promise<Buffer> {
    const errors: string[] = [];
    if (this.conf.servers.length === 0) throw new Error('no nameserver in resolv.conf');
    for (let round = 0; round < this.conf.attempts; round++) {
      for (const server of this.conf.servers) {
        try {
          if (viaTcp) return await queryTcp(server, query, this.conf.timeoutMs);
          const answer = await queryUdp(server, query, this.conf.timeoutMs);
          if (!truncated(answer)) return answer;
          // The truncated answer still tells the client to ask again over TCP itself.
          return await queryTcp(server, query, this.conf.timeoutMs).catch(() => answer);
        } catch (e) {
          errors.push((e as Error).message);
        }
      }
    }
    throw new Error(`no upstream resolver answered: ${errors.join('; ')}`);
  }
}
