// The byte sniffers: the listener inspection (tls_inspector, http_inspector) that picks a filter
// chain, and the codec AUTO check for the HTTP/2 preface. Both read the first bytes of a
// connection, put them back and leave the socket paused for whoever serves it.
import type { Socket } from 'node:net';
import { parseClientHello } from './client-hello.js';

/** The whole HTTP/2 client connection preface (RFC 9113 3.4). */
const H2_CLIENT_PREFACE = Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n', 'latin1');
/** Its first line, which is what http_inspector looks for. */
const H2_PREFACE_LINE = H2_CLIENT_PREFACE.subarray(0, H2_CLIENT_PREFACE.indexOf('\r\n') + 2).toString('latin1');
/** http_inspector gives up on a request line longer than this. */
const MAX_INSPECT_BYTES = 8192;

export interface Inspection {
  readonly http: boolean;
  readonly tls: boolean;
  readonly timeoutMs: number;
  readonly continueOnTimeout: boolean;
}

/**
 * Codec AUTO on plaintext: whether the connection starts with the HTTP/2 client preface (h2c with
 * prior knowledge). Reads just enough bytes to tell, puts them back and leaves the socket paused.
 * Undefined when the connection went away or stayed silent for `timeoutMs`.
 */
export function sniffH2Preface(socket: Socket, timeoutMs: number): Promise<boolean | undefined> {
  return new Promise((resolve) => {
    let buf = Buffer.alloc(0);
    const finish = (verdict: boolean | undefined): void => {
      socket.setTimeout(0);
      socket.off('timeout', onTimeout);
      socket.off('data', onData);
      socket.off('end', onEnd);
      socket.off('close', onClose);
      socket.pause();
      if (buf.length > 0 && !socket.readableEnded) socket.unshift(buf);
      resolve(verdict);
    };
    const onData = (d: Buffer): void => {
      buf = Buffer.concat([buf, d]);
      const n = Math.min(buf.length, H2_CLIENT_PREFACE.length);
      if (!buf.subarray(0, n).equals(H2_CLIENT_PREFACE.subarray(0, n))) finish(false);
      else if (n === H2_CLIENT_PREFACE.length) finish(true);
    };
    // A half-close before the preface completed: HTTP/1.1 (its parser answers what it got).
    const onEnd = (): void => finish(buf.length > 0 ? false : undefined);
    const onClose = (): void => finish(undefined);
    const onTimeout = (): void => finish(undefined);
    socket.setTimeout(timeoutMs);
    socket.once('timeout', onTimeout);
    socket.on('data', onData);
    socket.once('end', onEnd);
    socket.once('close', onClose);
    // Bytes put back by listener inspection are already buffered: this reads them first.
    socket.resume();
  });
}

/**
 * The listener filters this proxy runs: tls_inspector (a ClientHello starts with 0x16, giving
 * transport `tls`) and http_inspector (an HTTP/1.x request line or the HTTP/2 preface, giving
 * `http/1.0`, `http/1.1` or `h2c`). The bytes read are put back for the chain. Resolves undefined
 * when the connection should be closed (timeout without continue_on_listener_filters_timeout).
 */
export function inspectConnection(socket: Socket, how: Inspection): Promise<Inspected | undefined> {
  return new Promise((resolve) => {
    let buf = Buffer.alloc(0);
    const finish = (result: Inspected | undefined) => {
      clearTimeout(timer);
      socket.off('data', onData);
      socket.off('end', onEnd);
      socket.off('close', onClose);
      socket.pause();
      if (buf.length > 0) {
        // Bytes read cannot be put back once the stream ended (a client that half-closed mid-line).
        if (socket.readableEnded) {
          resolve(undefined);
          return;
        }
        socket.unshift(buf);
      }
      resolve(result);
    };
    const timer = setTimeout(() => finish(how.continueOnTimeout ? { transport: 'raw_buffer', protocols: [] } : undefined), how.timeoutMs);
    const onEnd = () => finish({ transport: 'raw_buffer', protocols: [] });
    const onClose = () => finish(undefined);
    const onData = (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      const verdict = classify(buf, how);
      if (verdict) finish(verdict);
    };
    socket.on('data', onData);
    socket.once('end', onEnd);
    socket.once('close', onClose);
  });
}

/** What listener inspection found: transport, application protocols (ALPN or HTTP), and SNI. */
export interface Inspected {
  readonly transport: string;
  readonly protocols: string[];
  readonly serverName?: string;
}

/**
 * What the first bytes say, or undefined while they could still be the HTTP/2 preface, an
 * unfinished request line or an incomplete ClientHello. A TLS handshake gives its SNI and ALPN.
 */
export function classify(buf: Buffer, how: Inspection): Inspected | undefined {
  if (how.tls && buf[0] === 0x16) {
    const hello = parseClientHello(buf);
    if (hello === undefined) return undefined;
    return hello === 'invalid' ? { transport: 'tls', protocols: [] } : { transport: 'tls', protocols: [...hello.alpn], serverName: hello.serverName };
  }
  if (!how.http) return { transport: 'raw_buffer', protocols: [] };
  const text = buf.subarray(0, MAX_INSPECT_BYTES).toString('latin1');
  if (H2_PREFACE_LINE.startsWith(text)) return undefined; // could still be the preface
  if (text.startsWith(H2_PREFACE_LINE)) return { transport: 'raw_buffer', protocols: ['h2c'] };
  if (!/^[A-Z]/.test(text)) return { transport: 'raw_buffer', protocols: [] };
  const eol = text.indexOf('\r\n');
  if (eol < 0) return buf.length >= MAX_INSPECT_BYTES || !/^[A-Z]+( |$)/.test(text) ? { transport: 'raw_buffer', protocols: [] } : undefined;
  const m = /^[A-Z]+ \S+ HTTP\/1\.([01])$/.exec(text.slice(0, eol));
  return { transport: 'raw_buffer', protocols: m ? [`http/1.${m[1]}`] : [] };
}
