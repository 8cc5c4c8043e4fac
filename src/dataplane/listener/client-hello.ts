// What tls_inspector reads from a TLS ClientHello, as Envoy's does: the server name (SNI, RFC 6066)
// and the offered ALPN protocols (RFC 7301), for filter chain selection. The hello may span several
// TLS records; nothing is decrypted or answered.

/** Envoy's tls_inspector gives up on a ClientHello larger than this. */
export const MAX_CLIENT_HELLO = 64 * 1024;

export interface ClientHello {
  /** Lower case; empty without the server_name extension. */
  readonly serverName: string;
  readonly alpn: readonly string[];
}

/** The handshake bytes of consecutive handshake records, or undefined while a record is incomplete. */
function handshakeBytes(buf: Buffer, need: number): Buffer | 'invalid' | undefined {
  const parts: Buffer[] = [];
  let have = 0;
  let at = 0;
  while (have < need) {
    if (buf.length < at + 5) return undefined;
    if (buf[at] !== 0x16) return 'invalid';
    const len = buf.readUInt16BE(at + 3);
    if (buf.length < at + 5 + len) return undefined;
    parts.push(buf.subarray(at + 5, at + 5 + len));
    have += len;
    at += 5 + len;
  }
  return Buffer.concat(parts);
}

/**
 * The ClientHello at the start of `buf`: undefined while more bytes are needed, 'invalid' when the
 * bytes are not a ClientHello (the connection then has no server name, as Envoy treats it).
 */
export function parseClientHello(buf: Buffer): ClientHello | 'invalid' | undefined {
  const head = handshakeBytes(buf, 4);
  if (head === undefined || head === 'invalid') return head;
  if (head[0] !== 0x01) return 'invalid';
  const total = 4 + head.readUIntBE(1, 3);
  if (total > MAX_CLIENT_HELLO) return 'invalid';
  const hs = handshakeBytes(buf, total);
  if (hs === undefined || hs === 'invalid') return hs;
  return readHello(hs.subarray(4, total));
}

function readHello(b: Buffer): ClientHello | 'invalid' {
  let at = 2 + 32; // client_version, random
  const skip = (lenBytes: 1 | 2): boolean => {
    if (b.length < at + lenBytes) return false;
    at += lenBytes + b.readUIntBE(at, lenBytes);
    return at <= b.length;
  };
  if (!skip(1) || !skip(2) || !skip(1)) return 'invalid'; // session_id, cipher_suites, compression
  let serverName = '';
  const alpn: string[] = [];
  if (b.length < at + 2) return { serverName, alpn }; // no extensions
  const end = Math.min(b.length, at + 2 + b.readUInt16BE(at));
  at += 2;
  while (at + 4 <= end) {
    const type = b.readUInt16BE(at);
    const len = b.readUInt16BE(at + 2);
    const data = b.subarray(at + 4, at + 4 + len);
    at += 4 + len;
    if (type === 0) serverName = sniOf(data);
    else if (type === 16) alpn.push(...alpnOf(data));
  }
  return { serverName, alpn };
}

/** The host_name entry of a server_name extension. */
function sniOf(d: Buffer): string {
  let at = 2;
  while (at + 3 <= d.length) {
    const type = d[at]!;
    const len = d.readUInt16BE(at + 1);
    if (type === 0) return d.subarray(at + 3, at + 3 + len).toString('latin1').toLowerCase();
    at += 3 + len;
  }
  return '';
}

function alpnOf(d: Buffer): string[] {
  const out: string[] = [];
  let at = 2;
  while (at < d.length) {
    const len = d[at]!;
    out.push(d.subarray(at + 1, at + 1 + len).toString('latin1'));
    at += 1 + len;
  }
  return out;
}
