// An upstream that reads PROXY protocol headers the way a server behind a load balancer does: it
// parses each connection's header (v1 text or v2 binary, written here from the protocol's
// description, not from the proxy's encoder), records it, and passes the rest of the connection to
// a real backend (TCP, HTTP, h2c, HTTPS), so that whatever follows the header is served as usual.
import type { TestContext } from 'node:test';
import { connect, createServer, type Socket } from 'node:net';

export interface ParsedAddress {
  readonly address: string;
  readonly port: number;
}

export interface ParsedHeader {
  readonly version: 1 | 2;
  readonly command: 'PROXY' | 'LOCAL';
  readonly family?: 'TCP4' | 'TCP6';
  readonly source?: ParsedAddress;
  readonly destination?: ParsedAddress;
}

const V2_SIGNATURE = Buffer.from('\r\n\r\n\0\r\nQUIT\n', 'latin1');

/** An IPv6 address from its 16 bytes, every group written (`2001:db8:0:0:0:0:0:1`). */
function ipv6Text(b: Buffer): string {
  return Array.from({ length: 8 }, (_, i) => b.readUInt16BE(i * 2).toString(16)).join(':');
}

function parseV1(buf: Buffer): { header: ParsedHeader; length: number } | undefined {
  const end = buf.indexOf('\r\n');
  if (end < 0) {
    if (buf.length > 107) throw new Error('a v1 header longer than 107 bytes');
    return undefined;
  }
  const [proxy, family, src, dst, sport, dport, ...rest] = buf.subarray(0, end).toString('latin1').split(' ');
  if (proxy !== 'PROXY' || (family !== 'TCP4' && family !== 'TCP6') || rest.length > 0 || !src || !dst || !sport || !dport) throw new Error(`malformed v1 header ${JSON.stringify(buf.subarray(0, end).toString('latin1'))}`);
  return { header: { version: 1, command: 'PROXY', family, source: { address: src, port: Number(sport) }, destination: { address: dst, port: Number(dport) } }, length: end + 2 };
}

function parseV2(buf: Buffer): { header: ParsedHeader; length: number } | undefined {
  if (buf.length < 16) return undefined;
  const length = 16 + buf.readUInt16BE(14);
  if (buf.length < length) return undefined;
  const verCmd = buf[12]!;
  if (verCmd >> 4 !== 2) throw new Error(`v2 header of version ${verCmd >> 4}`);
  if ((verCmd & 0xf) === 0) return { header: { version: 2, command: 'LOCAL' }, length };
  if ((verCmd & 0xf) !== 1) throw new Error(`v2 header with command ${verCmd & 0xf}`);
  const body = buf.subarray(16, length);
  switch (buf[13]) {
    case 0x11:
      return { header: { version: 2, command: 'PROXY', family: 'TCP4', source: { address: [...body.subarray(0, 4)].join('.'), port: body.readUInt16BE(8) }, destination: { address: [...body.subarray(4, 8)].join('.'), port: body.readUInt16BE(10) } }, length };
    case 0x21:
      return { header: { version: 2, command: 'PROXY', family: 'TCP6', source: { address: ipv6Text(body.subarray(0, 16)), port: body.readUInt16BE(32) }, destination: { address: ipv6Text(body.subarray(16, 32)), port: body.readUInt16BE(34) } }, length };
    default:
      throw new Error(`v2 header of family/protocol 0x${buf[13]!.toString(16)}`);
  }
}

/** The header at the start of `buf` and its length; undefined while it is incomplete; throws when `buf` does not start with one. */
export function parseProxyHeader(buf: Buffer): { header: ParsedHeader; length: number } | undefined {
  const n = Math.min(buf.length, V2_SIGNATURE.length);
  if (buf.subarray(0, n).equals(V2_SIGNATURE.subarray(0, n))) return n < V2_SIGNATURE.length ? undefined : parseV2(buf);
  if ('PROXY '.startsWith(buf.subarray(0, 6).toString('latin1'))) return buf.length < 6 ? undefined : parseV1(buf);
  throw new Error(`no PROXY protocol header: the connection starts with ${JSON.stringify(buf.subarray(0, 16).toString('latin1'))}`);
}

/** What the front saw of one connection: its header, or why it had none. */
export type FrontRecord = ParsedHeader | { readonly error: string };

/**
 * A server on 127.0.0.1 that takes each connection's PROXY header off (recorded in `headers`, one
 * per connection, in order) and pipes the rest to 127.0.0.1:`backend`.
 */
export async function proxyProtocolFront(t: TestContext, backend: number): Promise<{ port: number; headers: FrontRecord[] }> {
  const headers: FrontRecord[] = [];
  const open = new Set<Socket>();
  const server = createServer((down) => {
    open.add(down);
    down.once('close', () => open.delete(down));
    let buf = Buffer.alloc(0);
    down.on('error', () => down.destroy());
    const onData = (d: Buffer): void => {
      buf = Buffer.concat([buf, d]);
      let parsed: ReturnType<typeof parseProxyHeader>;
      try {
        parsed = parseProxyHeader(buf);
      } catch (e) {
        headers.push({ error: (e as Error).message });
        down.destroy();
        return;
      }
      if (!parsed) return;
      down.off('data', onData);
      headers.push(parsed.header);
      const up = connect({ host: '127.0.0.1', port: backend });
      up.on('error', () => down.destroy());
      up.on('close', () => down.destroy());
      down.on('close', () => up.destroy());
      up.write(buf.subarray(parsed.length));
      down.pipe(up);
      up.pipe(down);
    };
    down.on('data', onData);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.after(() => {
    server.close();
    for (const s of open) s.destroy();
  });
  return { port: (server.address() as { port: number }).port, headers };
}
