// An HTTP/1.1 request head as the proxy's own client writes it: one string, one character per
// byte, refused when a header or the path could split it.
import type { OutgoingHttpHeaders } from 'node:http';

/** A character that could split the head (CR, LF, NUL), or one beyond a byte (from configuration). */
const SPECIAL = /[\r\n\0\u0100-\uffff]/;
const UNSAFE = /[\r\n\0]/;

/**
 * The head's text as bytes, one character per byte (latin1), as node:http's parser hands over the
 * downstream request's bytes, so that those pass unchanged; a value with characters beyond a byte
 * (configuration, JWT claims) goes as UTF-8, as Envoy sends configured values. Throws naming the
 * header (else the path) that could split the head.
 */
function byteString(text: string, header?: string): string {
  if (!SPECIAL.test(text)) return text;
  if (UNSAFE.test(text)) throw new Error(`invalid character in ${header === undefined ? 'request path' : `header ${header}`}`);
  return Buffer.from(text, 'utf8').toString('latin1');
}

/**
 * What goes before a header's value: the end of the line before it and `name: `, made once per
 * name, so that a line adds two pieces to the head rather than four. The names a proxy sends are
 * few; past this many distinct ones, the rest are made for each request.
 */
const LEADS = new Map<string, string>();
const MAX_LEADS = 256;

function lead(name: string): string {
  let l = LEADS.get(name);
  if (l === undefined) {
    l = `\r\n${name}: `;
    if (LEADS.size < MAX_LEADS) LEADS.set(name, l);
  }
  return l;
}

/** The request head, to be written as latin1; throws naming a header whose value could split it. */
export function requestHead(method: string, path: string, headers: OutgoingHttpHeaders): string {
  let head = `${method} ${byteString(path)} HTTP/1.1`;
  for (const name in headers) {
    const v = headers[name];
    if (v === undefined) continue;
    if (typeof v === 'object') {
      for (const one of v) {
        head += lead(name);
        head += byteString(one, name);
      }
    } else {
      head += lead(name);
      head += byteString(typeof v === 'string' ? v : String(v), name);
    }
  }
  return `${head}\r\n\r\n`;
}
