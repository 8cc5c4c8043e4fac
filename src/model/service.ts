// The service model: what the registries produce and the builders consume. Plain readonly data, no
// I/O, so every registry (ServiceEntry, Mock, later the orchestrator) yields the same shapes.

/** Protocols the mesh distinguishes; anything unknown is treated as opaque TCP. */
export const PROTOCOLS = ['HTTP', 'HTTP2', 'GRPC', 'GRPC-Web', 'HTTPS', 'TLS', 'TCP', 'MONGO', 'REDIS', 'MYSQL', 'UDP', 'UNSUPPORTED'] as const;
export type Protocol = (typeof PROTOCOLS)[number];

/**
 * How a client reaches the service's endpoints (the ServiceEntry `resolution` field):
 * STATIC = endpoints known to the mesh (EDS), DNS / DNS_ROUND_ROBIN = resolved by the proxy,
 * NONE = to the original destination the client asked for.
 */
export type Resolution = 'STATIC' | 'DNS' | 'DNS_ROUND_ROBIN' | 'NONE';

export interface ServicePort {
  readonly name: string;
  readonly port: number;
  readonly protocol: Protocol;
}

export interface Service {
  /** Fully qualified, e.g. `echo.foo.svc.cluster.local` or `api.example.com`. */
  readonly hostname: string;
  readonly namespace: string;
  /** VIPs (ServiceEntry `addresses`); empty when the service has none. */
  readonly addresses: readonly string[];
  readonly ports: readonly ServicePort[];
  readonly resolution: Resolution;
  /** `*` (everyone), `.` (own namespace) or namespace names; empty = everyone. */
  readonly exportTo: readonly string[];
  /** MESH_EXTERNAL services are outside the mesh (no sidecar at the far end). */
  readonly external: boolean;
  /** Which registry produced it (`ServiceEntry`, `Mock`, a cluster id), for debug output. */
  readonly registry: string;
  /** Labels of the resource that declared it (for selection by policies later). */
  readonly labels: Readonly<Record<string, string>>;
  /** Names of the resource that declared it, e.g. `ServiceEntry/foo/echo`. */
  readonly source?: string;
}

/** `region/zone/subzone`, any part possibly empty. */
export interface Locality {
  readonly region: string;
  readonly zone: string;
  readonly subZone: string;
}

/** One endpoint of one service port. */
export interface ServiceInstance {
  readonly hostname: string;
  readonly namespace: string;
  /** The service port this instance serves. */
  readonly servicePort: ServicePort;
  /** IP address (or DNS name for DNS-resolved services). */
  readonly address: string;
  /** The port the workload listens on (the target port). */
  readonly endpointPort: number;
  readonly labels: Readonly<Record<string, string>>;
  readonly serviceAccount: string;
  readonly locality: Locality;
  /** Load-balancing weight, at least 1. */
  readonly weight: number;
  readonly network: string;
  /** Cluster id of the registry that holds the workload. */
  readonly clusterId: string;
  /**
   * The Pod's own DNS name parts when it sets `spec.subdomain` (a StatefulSet's Pods do): its
   * `spec.hostname`, else its name, and the subdomain. Under a headless service the Pod is then
   * `<hostname>.<subdomain>.<namespace>.svc.<domain>`.
   */
  readonly podDns?: { readonly hostname: string; readonly subdomain: string };
}

/** The registry of the services converted from the orchestrator's Services. */
export const ORCHESTRATOR_REGISTRY = 'Orchestrator';

/**
 * A service without an address of its own whose clients reach its endpoints by their own
 * addresses (resolution NONE): an orchestrator Service with `clusterIP: None`, a ServiceEntry
 * without addresses. Its host resolves to its endpoints' addresses.
 */
export function isHeadless(s: Pick<Service, 'resolution' | 'addresses'>): boolean {
  return s.resolution === 'NONE' && s.addresses.length === 0;
}

const PROTOCOL_BY_LOWER: ReadonlyMap<string, Protocol> = new Map(PROTOCOLS.map((p) => [p.toLowerCase(), p]));

/** A protocol name as written by a user (any case); undefined when not one the mesh knows. */
export function parseProtocol(value: string | undefined): Protocol | undefined {
  if (!value) return undefined;
  const lower = value.toLowerCase();
  // Orchestrator appProtocol spellings (`http2`, `grpc`, `kubernetes.io/h2c`, `kubernetes.io/ws`).
  if (lower === 'kubernetes.io/h2c') return 'HTTP2';
  if (lower === 'kubernetes.io/ws' || lower === 'kubernetes.io/wss') return 'HTTP';
  return PROTOCOL_BY_LOWER.get(lower);
}

/**
 * The port's protocol: explicit protocol first, then appProtocol, then the name prefix
 * (`http`, `http-web`, `grpc-echo`, `tcp`...), else UNSUPPORTED (sniffed or treated as TCP).
 */
export function portProtocol(port: { name?: string; protocol?: string; appProtocol?: string }): Protocol {
  const explicit = parseProtocol(port.protocol) ?? parseProtocol(port.appProtocol);
  if (explicit) return explicit;
  const name = port.name ?? '';
  const prefix = name.includes('-') ? name.slice(0, name.indexOf('-')) : name;
  return parseProtocol(prefix) ?? 'UNSUPPORTED';
}

/** Whether traffic on the port goes through an HTTP connection manager. */
export function isHttpProtocol(p: Protocol): boolean {
  return p === 'HTTP' || p === 'HTTP2' || p === 'GRPC' || p === 'GRPC-Web';
}

/** Whether the upstream speaks HTTP/2 (h2c), so clusters must use it. */
export function isHttp2Protocol(p: Protocol): boolean {
  return p === 'HTTP2' || p === 'GRPC';
}

export const EMPTY_LOCALITY: Locality = { region: '', zone: '', subZone: '' };

/** Parses `region/zone/subzone` (WorkloadEntry `locality`); missing parts are empty. */
export function parseLocality(value: string | undefined): Locality {
  if (!value) return EMPTY_LOCALITY;
  const [region = '', zone = '', subZone = ''] = value.split('/');
  return { region, zone, subZone };
}

export function localityString(l: Locality): string {
  return [l.region, l.zone, l.subZone].join('/');
}

/** Whether namespace `ns` may see `service`: its exportTo, else `fallback` (the mesh config's defaultServiceExportTo; all namespaces unless set). */
export function visibleTo(service: Service, ns: string, fallback: readonly string[] = ['*']): boolean {
  const list = service.exportTo.length > 0 ? service.exportTo : fallback;
  return list.some((e) => e === '*' || e === ns || (e === '.' && service.namespace === ns));
}
