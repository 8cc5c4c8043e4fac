// The generated cookie of a cookie hash policy, with Envoy's semantics: when the request lacks the
// cookie and the policy has a ttl, the router generates one from the downstream connection's remote
// and local addresses, hashes the request on it and sends it back as
// `Set-Cookie: <name>="<16 hex digits>"; Max-Age=<ttl s>; Path=<path>; <attributes>; HttpOnly`
// (Max-Age only for a non-zero ttl, Path only when set). A client that returns the cookie keeps
// landing on the same endpoint. All streams of one connection get the same value, as in Envoy.
import type { Address, RequestView } from '../envoy/request.js';
import { hashOf } from './load-balancers.js';

export interface CookieAttribute {
  readonly name: string;
  readonly value: string;
}

/** What a cookie policy with a ttl asks the router to set when the request lacks the cookie. */
export interface CookieRequest {
  readonly name: string;
  readonly path: string;
  /** Max-Age in seconds; 0 = a session cookie (no Max-Age). */
  readonly ttlSeconds: number;
  readonly attributes: readonly CookieAttribute[];
}

/** Sets the cookie on the response and returns its value (what the request is hashed on). */
export type AddCookie = (cookie: CookieRequest) => string;

/** An address as Envoy prints it: `1.2.3.4:80`, `[::1]:80`. */
function addressText(a: Address): string {
  return a.address.includes(':') ? `[${a.address}]:${a.port}` : `${a.address}:${a.port}`;
}

/** The generated value: a hash of the connection's remote then local address, 16 hex digits. */
export function connectionCookieValue(req: RequestView): string {
  return hashOf(`${addressText(req.source)}${addressText(req.destination)}`).toString(16).padStart(16, '0');
}

/** The Set-Cookie header value, attributes in Envoy's order. */
export function setCookieHeader(c: CookieRequest, value: string): string {
  const parts = [`${c.name}="${value}"`];
  if (c.ttlSeconds !== 0) parts.push(`Max-Age=${c.ttlSeconds}`);
  if (c.path !== '') parts.push(`Path=${c.path}`);
  for (const a of c.attributes) parts.push(a.value === '' ? a.name : `${a.name}=${a.value}`);
  parts.push('HttpOnly');
  return parts.join('; ');
}

/**
 * The router's side for one request: `add` generates and records cookies, `setCookies` are the
 * Set-Cookie values its upstream response gets.
 */
export function cookieJar(req: RequestView): { add: AddCookie; readonly setCookies: string[] } {
  const setCookies: string[] = [];
  return {
    setCookies,
    add(c) {
      const value = connectionCookieValue(req);
      setCookies.push(setCookieHeader(c, value));
      return value;
    },
  };
}
