// An HTTP/1.1 request head as the proxy's own client writes it: one string, one character per
// byte, refused when a header or the path could split it.
import type { OutgoingHttpHeaders } from 'node:http';

/** A character that could split the head (CR, LF, NUL), or one beyond a byte (from configuration). */
const SPECIAL = /[\r\n\0\u0100-\uffff]/;
const UNSAFE = /[\r\n\0]/;

/**
 * The head's text as bytes, one character per byte (latin1), as node:http's parser hands over the
 * downstream request's bytes, so that those pass unchanged; a value with characters beyond a byte
 * (configuration, JWT claims) goes as UTF-8, as Envoy sends configured values. Throws naming a
 * header (or the path) that could split the head.
 */
function byteString(where: string, text: string): string {
  if (!SPECIAL.test(text)) return text;
  if (UNSAFE.test(text)) throw new Error(`invalid character in ${where}`);
  return Buffer.from(text, 'utf8').toString('latin1');
}

/** The request head, to be written as latin1; throws naming a header whose value could split it. */
export function requestHead(method: string, path: string, headers: OutgoingHttpHeaders): string {
  let head = `${method} ${byteString('request path', path)} HTTP/1.1\r\n`;
  for (const name in headers) {
    const v = headers[name];
    if (v === undefined) continue;
    if (typeof v === 'object') {
      for (const one of v) head += `${name}: ${byteString(`header ${name}`, one)}\r\n`;
    } else head += `${name}: ${byteString(`header ${name}`, String(v))}\r\n`;
  }
  return `${head}\r\n`;
}
