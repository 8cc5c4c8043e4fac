// The upstream PROXY protocol transport socket (ProxyProtocolUpstreamTransport): its config, and
// the header it writes first on each new connection, in plaintext before the inner socket's bytes
// (a TLS ClientHello too), as Envoy's proxy_protocol transport socket. The header carries the
// downstream connection's source and destination (the destination as a use_original_dst listener
// restored it); without a downstream connection, v1 carries the upstream connection's own
// addresses and v2 is a LOCAL header, as in Envoy.
import { isIPv4, type Socket } from 'node:net';
import { scope } from '../../common/log.js';
import { ProxyProtocolConfig_Version, ProxyProtocolConfigSchema, type ProxyProtocolConfig } from '../../gen/envoy/config/core/v3/proxy_protocol_pb.js';
import { ConfigError, unappliedFields } from '../../envoy/config-error.js';
import { normalizeIp } from '../../envoy/matchers.js';
import type { Address } from '../../envoy/request.js';

const log = scope('upstream');

export type ProxyProtocolVersion = 1 | 2;

/** The downstream connection an upstream connection is made for: the addresses its header carries. */
export interface DownstreamAddresses {
  readonly source: Address;
  readonly destination: Address;
}

/** ProxyProtocolConfig: its version (unset: V1); any other value is a ConfigError naming the field. */
export function compileProxyProtocol(config: ProxyProtocolConfig | undefined, field: string): ProxyProtocolVersion {
  const version = config?.version ?? ProxyProtocolConfig_Version.V1;
  if (version !== ProxyProtocolConfig_Version.V1 && version !== ProxyProtocolConfig_Version.V2) {
    throw new ConfigError(`${field}.version`, `unknown PROXY protocol version ${String(version)}; expected V1 or V2`);
  }
  // No listener filter of ours reads a downstream PROXY header, so there are never TLVs to pass on.
  const unapplied = config ? unappliedFields(ProxyProtocolConfigSchema, config, ['passThroughTlvs']) : [];
  if (unapplied.length > 0) log.warn(`${field}: accepted but not applied: ${unapplied.join(', ')}`);
  return version === ProxyProtocolConfig_Version.V1 ? 1 : 2;
}

/** `\r\n\r\n\0\r\nQUIT\n`, the v2 signature. */
const V2_SIGNATURE = Buffer.from([0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a]);
/** Version 2 with the PROXY command, and with the LOCAL command (no addresses). */
const V2_PROXY = 0x21;
const V2_LOCAL = 0x20;
/** AF_INET / AF_INET6 with STREAM. */
const V2_TCP4 = 0x11;
const V2_TCP6 = 0x21;

/** The 16 bytes of an IPv6 address (a `::` run expanded, an IPv4 tail as two groups). */
function ipv6Bytes(ip: string): Buffer {
  const tail = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(ip);
  const text = tail ? `${ip.slice(0, tail.index)}${((Number(tail[1]) << 8) | Number(tail[2])).toString(16)}:${((Number(tail[3]) << 8) | Number(tail[4])).toString(16)}` : ip;
  const [head = '', rest] = text.split('::');
  const groups = (s: string) => (s ? s.split(':') : []);
  const all = rest === undefined ? groups(head) : [...groups(head), ...Array<string>(8 - groups(head).length - groups(rest).length).fill('0'), ...groups(rest)];
  const out = Buffer.alloc(16);
  all.forEach((g, i) => out.writeUInt16BE(parseInt(g, 16), i * 2));
  return out;
}

/**
 * Both ends in one family: as they are when both are IPv4 (an IPv4-mapped address counts as IPv4,
 * as Envoy reads it), else both IPv6, an IPv4 one as IPv4-mapped. Zone ids are dropped.
 */
function sameFamily(a: DownstreamAddresses): { v4: boolean; source: Address; destination: Address } {
  const plain = (x: Address): Address => ({ address: normalizeIp(x.address.replace(/%.*$/, '')), port: x.port });
  const source = plain(a.source);
  const destination = plain(a.destination);
  if (isIPv4(source.address) && isIPv4(destination.address)) return { v4: true, source, destination };
  const v6 = (x: Address): Address => (isIPv4(x.address) ? { address: `::ffff:${x.address}`, port: x.port } : x);
  return { v4: false, source: v6(source), destination: v6(destination) };
}

/** The v2 header that carries no addresses (the LOCAL command). */
const V2_LOCAL_HEADER = Buffer.concat([V2_SIGNATURE, Buffer.from([V2_LOCAL, 0, 0, 0])]);

/** The PROXY protocol header (the PROXY command) carrying these addresses. */
export function proxyProtocolHeader(version: ProxyProtocolVersion, addresses: DownstreamAddresses): Buffer {
  const { v4, source, destination } = sameFamily(addresses);
  if (version === 1) return Buffer.from(`PROXY ${v4 ? 'TCP4' : 'TCP6'} ${source.address} ${destination.address} ${source.port} ${destination.port}\r\n`, 'latin1');
  const ip = (x: Address) => (v4 ? Buffer.from(x.address.split('.').map(Number)) : ipv6Bytes(x.address));
  const body = Buffer.concat([ip(source), ip(destination), Buffer.alloc(4)]);
  body.writeUInt16BE(source.port, body.length - 4);
  body.writeUInt16BE(destination.port, body.length - 2);
  const head = Buffer.from([V2_PROXY, v4 ? V2_TCP4 : V2_TCP6, 0, 0]);
  head.writeUInt16BE(body.length, 2);
  return Buffer.concat([V2_SIGNATURE, head, body]);
}

/**
 * Writes the header as `tcp`'s first bytes: at once when it names the downstream connection (the
 * socket holds it until connected, ahead of whatever is written next: a request's head, TLS), else
 * as it connects, since it names the connection itself. Called before anything is layered on `tcp`
 * or written to it, so the 'connect' listener runs first too.
 */
export function writeProxyProtocolHeader(tcp: Socket, version: ProxyProtocolVersion, downstream: DownstreamAddresses | undefined): void {
  if (downstream) {
    tcp.write(proxyProtocolHeader(version, downstream));
    return;
  }
  tcp.once('connect', () => {
    const own = { source: { address: tcp.localAddress ?? '', port: tcp.localPort ?? 0 }, destination: { address: tcp.remoteAddress ?? '', port: tcp.remotePort ?? 0 } };
    tcp.write(version === 1 ? proxyProtocolHeader(version, own) : V2_LOCAL_HEADER);
  });
}
