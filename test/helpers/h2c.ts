// h2c (HTTP/2 with prior knowledge) on loopback for tests: a request that resolves with its body,
// and a front port that speaks both HTTP/1.1 and h2c by handing each connection to one of two
// servers by its first bytes (node's cleartext HTTP/2 server does not take HTTP/1.1 itself).
import { connect as h2connect } from 'node:http2';
import { connect, createServer, type AddressInfo, type Server } from 'node:net';

const H2_PREFACE = 'PRI * HTTP/2.0';

/** A GET of `/` over h2c; resolves with the body. */
export function h2Get(port: number, authority?: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const session = h2connect(`http://127.0.0.1:${port}`);
    session.on('error', reject);
    const stream = session.request({ ':path': '/', ...(authority ? { ':authority': authority } : {}) });
    let body = '';
    stream.on('data', (d: Buffer) => (body += d.toString()));
    stream.on('end', () => {
      session.close();
      resolve(body);
    });
    stream.on('error', reject);
  });
}

/** Listens on `port` (0: any) and splices each connection to the h2c server's port or the HTTP/1.1 one's. */
export async function bothProtocolsFront(port: number, h1Port: number, h2Port: number): Promise<Server> {
  const front = createServer((socket) =>
    socket.once('data', (first: Buffer) => {
      const upstream = connect(first.toString('latin1').startsWith(H2_PREFACE) ? h2Port : h1Port, '127.0.0.1', () => {
        upstream.write(first);
        socket.pipe(upstream);
        upstream.pipe(socket);
      });
      upstream.on('error', () => socket.destroy());
      socket.on('error', () => upstream.destroy());
    }),
  );
  await new Promise<void>((r) => front.listen(port, '127.0.0.1', r));
  return front;
}

export const portOf = (s: { address(): AddressInfo | string | null }): number => (s.address() as AddressInfo).port;
