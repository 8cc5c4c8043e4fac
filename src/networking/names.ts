// Resource names the proxies, debug tools and tests rely on (the conventions of production meshes).

export const BLACKHOLE_CLUSTER = 'BlackHoleCluster';
export const PASSTHROUGH_CLUSTER = 'PassthroughCluster';
export const VIRTUAL_OUTBOUND = 'virtualOutbound';
export const VIRTUAL_INBOUND = 'virtualInbound';
export const VIRTUAL_OUTBOUND_PORT = 15001;
export const VIRTUAL_INBOUND_PORT = 15006;
export const WILDCARD_ADDRESS = '0.0.0.0';
export const LOCALHOST = '127.0.0.1';
/** Prefix of the listener names xDS-enabled gRPC servers ask for, followed by `<ip>:<port>`. */
export const GRPC_SERVER_LISTENER_PREFIX = 'xds.mesh.io/grpc/lds/inbound/';

export type Direction = 'inbound' | 'outbound';

/** `outbound|<port>|<subset>|<host>` */
export function outboundClusterName(port: number, hostname: string, subset = ''): string {
  return `outbound|${port}|${subset}|${hostname}`;
}

/** `inbound|<port>||` */
export function inboundClusterName(port: number): string {
  return `inbound|${port}||`;
}

export interface ClusterNameParts {
  readonly direction: Direction;
  readonly port: number;
  readonly subset: string;
  readonly hostname: string;
}

/** The parts of an `outbound|...` or `inbound|...` cluster name; undefined for other names. */
export function parseClusterName(name: string): ClusterNameParts | undefined {
  const parts = name.split('|');
  if (parts.length !== 4) return undefined;
  const [direction, port, subset, hostname] = parts as [string, string, string, string];
  if (direction !== 'inbound' && direction !== 'outbound') return undefined;
  const n = Number(port);
  if (!Number.isInteger(n) || n <= 0 || n > 65535) return undefined;
  return { direction, port: n, subset, hostname };
}

/** `<address>_<port>`: outbound listeners and inbound filter chains. */
export function listenerName(address: string, port: number): string {
  return `${address}_${port}`;
}

/** Outbound HTTP route configurations are named by port. */
export function outboundRouteName(port: number): string {
  return String(port);
}
