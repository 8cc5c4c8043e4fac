// Envoy's original_src listener filter: the upstream connections of a downstream connection are
// made from the downstream client's address, so the application behind a TPROXY-capturing sidecar
// sees its real peer instead of the proxy. The listener records the source (and the mark its
// filter asks for) per connection; upstream sockets are then made by the addon: IP_TRANSPARENT (a
// non-local bind), SO_MARK (mesh-iptables' TPROXY mode routes marked replies back to this host
// through its `ip rule fwmark ... lookup` table), bound to that address on a port of the kernel's.
import { Socket } from 'node:net';
import { scope } from '../common/log.js';
import { normalizeIp } from '../envoy/matchers.js';
import { nativeAddon } from './original-dst.js';

const log = scope('conn_handler');

/** Where a connection's upstream connections come from. */
export interface OriginalSource {
  readonly address: string;
  readonly mark: number;
}

// A property rather than a WeakMap: node:http2 hands out its session's socket behind a Proxy,
// which reads properties through to the socket but is not the same WeakMap key.
const SOURCE = Symbol('originalSource');

interface Marked {
  [SOURCE]?: OriginalSource;
}

/** Records that `socket`'s upstream connections bind its peer's address (a listener with original_src). */
export function markOriginalSrc(socket: Socket, mark: number): void {
  const address = normalizeIp(socket.remoteAddress ?? '');
  if (address) (socket as Marked)[SOURCE] = { address, mark };
}

/** A socket layered on another (TLS over TCP) keeps the original source of the one below. */
export function inheritOriginalSrc(from: Socket, to: Socket): void {
  const s = (from as Marked)[SOURCE];
  if (s) (to as Marked)[SOURCE] = s;
}

/** The original source of a downstream connection, or undefined when its listener has no original_src. */
export function originalSrcOf(socket: object | null | undefined): OriginalSource | undefined {
  return socket ? (socket as Marked)[SOURCE] : undefined;
}

const warned = new Set<string>();

/** The kernel routes no packet from a non-loopback address to a loopback one. */
function loopback(address: string): boolean {
  return address.startsWith('127.') || address === '::1' || address === 'localhost';
}

/**
 * Whether an upstream connection to `host` can come from `src`: not to a loopback address (the
 * inbound clusters' usual 127.0.0.1) from a client elsewhere; such a connection keeps the proxy's
 * address, as it would without the filter.
 */
export function bindsOriginalSrc(src: OriginalSource, host: string): boolean {
  return !loopback(host) || loopback(src.address);
}

/**
 * An unconnected socket bound to the original source, or undefined (with one warning per reason)
 * when it cannot be made: no addon, no CAP_NET_ADMIN. The connection then goes from the proxy's
 * own address, as it would without the filter.
 */
export function originalSrcSocket(src: OriginalSource, options: { allowHalfOpen?: boolean } = {}): Socket | undefined {
  const addon = nativeAddon();
  let why: string;
  if (typeof addon === 'string') why = addon;
  else {
    try {
      return new Socket({ fd: addon.originalSrcSocket(src.address, src.mark), readable: true, writable: true, ...options });
    } catch (e) {
      why = (e as Error).message;
    }
  }
  if (!warned.has(why)) {
    warned.add(why);
    log.warn(`original_src: cannot bind upstream connections to the downstream address (${why}); they go from the proxy's address`);
  }
  return undefined;
}
