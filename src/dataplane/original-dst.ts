// A connection's original destination: where the client sent it before iptables REDIRECT (traffic
// capture) pointed it at the proxy. The kernel tells it through getsockopt(SO_ORIGINAL_DST), which
// Node does not expose, so a small N-API addon (native/original_dst.c, built by `npm run build`)
// asks for it. A use_original_dst listener restores it once per connection; everything that
// needs "the connection's destination" (filter chain match, RBAC destination.ip/port, ORIGINAL_DST
// clusters) reads it through `connectionDestination`.
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import type { Server, Socket } from 'node:net';
import { fileURLToPath } from 'node:url';
import { normalizeIp } from '../envoy/matchers.js';
import type { Destination } from '../envoy/request.js';

export interface Addon {
  originalDst(fd: number): { address: string; port: number } | null;
  setTransparent(fd: number): void;
  /** A transparent TCP socket (descriptor) bound to `address`, with SO_MARK `mark` unless 0; not connected. */
  originalSrcSocket(address: string, mark: number): number;
  /** SO_KEEPALIVE with TCP_KEEPIDLE / TCP_KEEPINTVL (seconds) and TCP_KEEPCNT where above 0; the three as the kernel now has them. */
  tcpKeepalive(fd: number, time: number, interval: number, probes: number): { time: number; interval: number; probes: number };
}

const ADDON = join('native', 'build', 'Release', 'original_dst.node');

/** The addon, or why it is not there (found by walking up to the package root: dist/ or src/). */
function loadAddon(): Addon | string {
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, 'package.json'))) {
    const up = dirname(dir);
    if (up === dir) return 'the package root was not found';
    dir = up;
  }
  const path = join(dir, ADDON);
  if (!existsSync(path)) return `${path} is not built (npm run build builds it)`;
  try {
    return createRequire(import.meta.url)(path) as Addon;
  } catch (e) {
    return `${path}: ${(e as Error).message}`;
  }
}

let addon: Addon | string | undefined;

/** The addon, or why it cannot be loaded. */
export function nativeAddon(): Addon | string {
  addon ??= loadAddon();
  return addon;
}

/** Why SO_ORIGINAL_DST cannot be read here, or undefined when it can. */
export function originalDstUnavailable(): string | undefined {
  const a = nativeAddon();
  return typeof a === 'string' ? a : undefined;
}

const restored = new WeakMap<Socket, Destination>();

interface HandleWithFd {
  readonly fd?: number;
}

/** The kernel descriptor of a socket or server (libuv's TCP wrap `fd` on Unix), or undefined when it has none. */
export function descriptorOf(handleOwner: Socket | Server): number | undefined {
  const fd = (handleOwner as unknown as { _handle?: HandleWithFd })._handle?.fd;
  return fd === undefined || fd < 0 ? undefined : fd;
}

/**
 * Reads the connection's original destination and records it for `connectionDestination`.
 * Undefined when the connection was not captured (conntrack has no entry for it, or it was
 * addressed to the listener itself, `listenerPort`: restoring that would make an ORIGINAL_DST
 * cluster connect back to the proxy in a loop), when the addon is missing, or when the socket has
 * no descriptor. A TPROXY connection keeps its destination as its local address, on another port
 * than the listener's: conntrack gives that address, and it counts as restored, as in Envoy.
 */
export function restoreOriginalDst(socket: Socket, listenerPort: number): Destination | undefined {
  if (originalDstUnavailable() !== undefined) return undefined;
  const fd = descriptorOf(socket);
  if (fd === undefined) return undefined;
  const dst = (addon as Addon).originalDst(fd);
  if (!dst) return undefined;
  const local = connectionDestination(socket);
  const address = normalizeIp(dst.address);
  if (address === local.address && dst.port === local.port && local.port === listenerPort) return undefined;
  const d: Destination = { address, port: dst.port, restored: true };
  restored.set(socket, d);
  return d;
}

/** A socket layered on another (TLS over TCP) has the original destination of the one below. */
export function inheritDestination(from: Socket, to: Socket): void {
  const d = restored.get(from);
  if (d) restored.set(to, d);
}

/** The restored original destination of the connection, else its local address. */
export function connectionDestination(socket: Socket): Destination {
  return restored.get(socket) ?? { address: normalizeIp(socket.localAddress ?? ''), port: socket.localPort ?? 0 };
}

/**
 * IP_TRANSPARENT on a bound listener (`transparent: true`): TPROXY capture delivers connections
 * addressed to other IPs to it. Why it cannot be set (no addon, no CAP_NET_ADMIN), or undefined.
 */
export function setTransparent(server: Server): string | undefined {
  const missing = originalDstUnavailable();
  if (missing) return missing;
  const fd = descriptorOf(server);
  if (fd === undefined) return 'the listening socket has no descriptor';
  try {
    (addon as Addon).setTransparent(fd);
    return undefined;
  } catch (e) {
    return (e as Error).message;
  }
}
