// A cluster's upstream_connection_options.tcp_keepalive on its upstream connections: SO_KEEPALIVE
// with the idle time, probe interval and probe count it sets (each unset one the system's), as
// Envoy sets them on the socket. Node's setKeepAlive sets only the idle time, so the native addon
// (native/original_dst.c) sets all three; without it the idle time alone is applied, and said once.
import type { Socket } from 'node:net';
import type { UpstreamConnectionOptions } from '../gen/envoy/config/cluster/v3/cluster_pb.js';
import { UpstreamConnectionOptionsSchema } from '../gen/envoy/config/cluster/v3/cluster_pb.js';
import { scope } from '../common/log.js';
import { unappliedFields } from '../envoy/config-error.js';
import { descriptorOf, nativeAddon } from './original-dst.js';

const log = scope('upstream');

/** Seconds, and a count; 0: the system's value. */
export interface TcpKeepaliveSpec {
  readonly time: number;
  readonly interval: number;
  readonly probes: number;
}

const UNAPPLIED_OPTIONS = ['setLocalInterfaceNameOnUpstreamConnections', 'happyEyeballsConfig'];

/** The keepalive of a cluster's upstream_connection_options (undefined: none); what else they set is logged. */
export function compileTcpKeepalive(o: UpstreamConnectionOptions | undefined, field: string): TcpKeepaliveSpec | undefined {
  if (!o) return undefined;
  const unapplied = unappliedFields(UpstreamConnectionOptionsSchema, o, UNAPPLIED_OPTIONS);
  if (unapplied.length > 0) log.warn(`${field}.upstream_connection_options: accepted but not applied yet: ${unapplied.join(', ')}`);
  const k = o.tcpKeepalive;
  return k ? { time: k.keepaliveTime ?? 0, interval: k.keepaliveInterval ?? 0, probes: k.keepaliveProbes ?? 0 } : undefined;
}

let warned = false;

/** Turns keepalive on for a connected socket. */
export function applyTcpKeepalive(socket: Socket, k: TcpKeepaliveSpec): void {
  const addon = nativeAddon();
  const fd = descriptorOf(socket);
  if (typeof addon !== 'string' && fd !== undefined) {
    addon.tcpKeepalive(fd, k.time, k.interval, k.probes);
    return;
  }
  socket.setKeepAlive(true, k.time * 1000);
  if (!warned && (k.interval > 0 || k.probes > 0)) {
    warned = true;
    log.warn(`tcp_keepalive: keepalive_interval and keepalive_probes are not applied (${typeof addon === 'string' ? addon : 'the socket has no descriptor'}); the idle time is`);
  }
}
