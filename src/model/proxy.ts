// A connected proxy as the model sees it: its identity parsed from node.id and node.metadata.
// Parsing is strict because everything generated for the proxy (which services it sees, which
// policies select it, which ports are its inbound ports) follows from these fields; a malformed
// node is refused with a message naming the field, rather than configured wrongly.
import { isIP } from 'node:net';
import type { JsonObject, JsonValue } from '@bufbuild/protobuf';
import { UPSTREAM_PROXY_PROTOCOL_SOCKET_NAME } from '../envoy/names.js';
import { EMPTY_LOCALITY, type Locality } from './service.js';

export const PROXY_TYPES = ['sidecar', 'router'] as const;
export type ProxyType = (typeof PROXY_TYPES)[number];

export const INTERCEPTION_MODES = ['REDIRECT', 'TPROXY', 'NONE'] as const;
export type InterceptionMode = (typeof INTERCEPTION_MODES)[number];

export interface Proxy {
  readonly type: ProxyType;
  /** The whole node.id. */
  readonly nodeId: string;
  /** `<pod>.<namespace>` from node.id. */
  readonly id: string;
  /** The workload's IPs: INSTANCE_IPS when given, else the IP in node.id. The first is primary. */
  readonly ipAddresses: readonly string[];
  readonly namespace: string;
  /** DNS domain of the proxy, e.g. `foo.svc.cluster.local` (node.id's last part). */
  readonly dnsDomain: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly serviceAccount: string;
  readonly clusterId: string;
  readonly interceptionMode: InterceptionMode;
  /** `grpc` for proxyless gRPC clients and servers; empty for Envoy-style proxies. */
  readonly generator: string;
  /** WorkloadGroup name for auto-registration, empty when absent. */
  readonly autoRegisterGroup: string;
  /** WORKLOAD_ENTRY: the existing WorkloadEntry this proxy runs for (health reports apply to it); empty when absent. */
  readonly workloadEntry: string;
  /** Its agent runs a readinessProbe (PROXY_CONFIG.readinessProbe) and reports the workload's health. */
  readonly healthProbed: boolean;
  /** DNS_CAPTURE: the agent answers the workload's DNS queries (and takes the DNS name table). */
  readonly dnsCapture: boolean;
  /** DNS_AUTO_ALLOCATE: with DNS capture, ServiceEntries without addresses get allocated ones. */
  readonly dnsAutoAllocate: boolean;
  /**
   * The proxy can take mesh mTLS config: its agent serves the workload certificate over SDS
   * (metadata SDS=true) and it announces Envoy's TLS transport socket among its node extensions.
   * Without both, TLS config would reference a secret or a socket it does not have.
   */
  readonly meshMtls?: boolean;
  /**
   * The proxy announces the upstream PROXY protocol transport socket among its node extensions
   * (Envoy and mesh-proxy do, proxyless gRPC does not): only then do its clusters carry a
   * DestinationRule's proxyProtocol, which the others would refuse.
   */
  readonly upstreamProxyProtocol?: boolean;
  /** node.locality (region, zone, sub_zone); empty parts when the node gives none. */
  readonly locality: Locality;
  readonly metadata: JsonObject;
}

export class ProxyParseError extends Error {}

function metaString(metadata: JsonObject, key: string): string {
  const v = metadata[key];
  if (v === undefined || v === null) return '';
  if (typeof v !== 'string') throw new ProxyParseError(`node.metadata.${key}: expected a string, got ${JSON.stringify(v)}`);
  return v;
}

// Go's strconv.ParseBool spellings, which the Go mesh's metadata booleans accept.
const TRUE_WORDS = new Set(['1', 't', 'T', 'TRUE', 'true', 'True']);
const FALSE_WORDS = new Set(['0', 'f', 'F', 'FALSE', 'false', 'False']);

function hasReadinessProbe(proxyConfig: unknown): boolean {
  const probe = typeof proxyConfig === 'object' && proxyConfig !== null ? (proxyConfig as Record<string, unknown>)['readinessProbe'] : undefined;
  return typeof probe === 'object' && probe !== null;
}

function metaBool(metadata: JsonObject, key: string): boolean {
  const v = metadata[key];
  if (v === undefined || v === null || v === '') return false;
  if (typeof v === 'boolean') return v;
  if (typeof v === 'string' && TRUE_WORDS.has(v)) return true;
  if (typeof v === 'string' && FALSE_WORDS.has(v)) return false;
  throw new ProxyParseError(`node.metadata.${key}: expected "true" or "false", got ${JSON.stringify(v)}`);
}

function metaLabels(value: JsonValue | undefined): Record<string, string> {
  if (value === undefined || value === null) return {};
  if (typeof value !== 'object' || Array.isArray(value)) {
    throw new ProxyParseError(`node.metadata.LABELS: expected an object of string values, got ${JSON.stringify(value)}`);
  }
  const labels: Record<string, string> = {};
  for (const [k, v] of Object.entries(value)) {
    if (typeof v !== 'string') throw new ProxyParseError(`node.metadata.LABELS.${k}: expected a string, got ${JSON.stringify(v)}`);
    labels[k] = v;
  }
  return labels;
}

/**
 * Parses `<type>~<ip>~<pod>.<namespace>~<namespace>.svc.<domain>` and the metadata the agent sets.
 * Throws ProxyParseError naming the offending part.
 */
/** The extension a proxy must list in node.extensions to be sent TLS transport sockets. */
export const TLS_TRANSPORT_EXTENSION = 'envoy.transport_sockets.tls';

export function parseProxy(nodeId: string, metadata: JsonObject = {}, extensions: readonly string[] = [], locality: Locality = EMPTY_LOCALITY): Proxy {
  const parts = nodeId.split('~');
  if (parts.length !== 4) {
    throw new ProxyParseError(`node.id "${nodeId}": expected 4 parts "<type>~<ip>~<pod>.<namespace>~<namespace>.svc.<domain>", got ${parts.length}`);
  }
  const [type, ip, id, dnsDomain] = parts as [string, string, string, string];
  if (!(PROXY_TYPES as readonly string[]).includes(type)) {
    throw new ProxyParseError(`node.id "${nodeId}": type "${type}" is not one of ${PROXY_TYPES.join(', ')}`);
  }
  if (!isIP(ip)) throw new ProxyParseError(`node.id "${nodeId}": "${ip}" is not an IP address`);
  if (!id) throw new ProxyParseError(`node.id "${nodeId}": the workload id (<pod>.<namespace>) is empty`);

  const ipsMeta = metaString(metadata, 'INSTANCE_IPS');
  const ipAddresses = ipsMeta ? ipsMeta.split(',').map((s) => s.trim()).filter(Boolean) : [ip];
  for (const a of ipAddresses) {
    if (!isIP(a)) throw new ProxyParseError(`node.metadata.INSTANCE_IPS: "${a}" is not an IP address`);
  }

  // NAMESPACE wins; otherwise the id's suffix after the pod name, then the DNS domain's first label.
  const dot = id.indexOf('.');
  const namespace = metaString(metadata, 'NAMESPACE') || (dot > 0 ? id.slice(dot + 1) : '') || dnsDomain.split('.')[0] || '';
  if (!namespace) throw new ProxyParseError(`node.id "${nodeId}": no namespace in the id and no node.metadata.NAMESPACE`);

  const mode = metaString(metadata, 'INTERCEPTION_MODE') || 'REDIRECT';
  if (!(INTERCEPTION_MODES as readonly string[]).includes(mode)) {
    throw new ProxyParseError(`node.metadata.INTERCEPTION_MODE: "${mode}" is not one of ${INTERCEPTION_MODES.join(', ')}`);
  }

  return {
    type: type as ProxyType,
    nodeId,
    id,
    ipAddresses,
    namespace,
    dnsDomain,
    labels: metaLabels(metadata['LABELS']),
    serviceAccount: metaString(metadata, 'SERVICE_ACCOUNT'),
    clusterId: metaString(metadata, 'CLUSTER_ID'),
    interceptionMode: mode as InterceptionMode,
    generator: metaString(metadata, 'GENERATOR'),
    autoRegisterGroup: metaString(metadata, 'AUTO_REGISTER_GROUP'),
    workloadEntry: metaString(metadata, 'WORKLOAD_ENTRY'),
    healthProbed: hasReadinessProbe(metadata['PROXY_CONFIG']),
    dnsCapture: metaBool(metadata, 'DNS_CAPTURE'),
    dnsAutoAllocate: metaBool(metadata, 'DNS_AUTO_ALLOCATE'),
    meshMtls: metaBool(metadata, 'SDS') && extensions.includes(TLS_TRANSPORT_EXTENSION),
    upstreamProxyProtocol: extensions.includes(UPSTREAM_PROXY_PROTOCOL_SOCKET_NAME),
    locality: { region: locality.region, zone: locality.zone, subZone: locality.subZone },
    metadata,
  };
}

/** The pod name of `<pod>.<namespace>` (the node id's workload id). */
export function podNameOf(proxy: Pick<Proxy, 'id'>): string {
  const dot = proxy.id.indexOf('.');
  return dot > 0 ? proxy.id.slice(0, dot) : proxy.id;
}

/**
 * The proxy as its workload is: the labels and service account the orchestrator holds for its Pod
 * replace what the node metadata claims, so a proxy cannot pick the policies or identity it gets
 * selected by.
 */
export function withWorkload(proxy: Proxy, workload: { labels: Readonly<Record<string, string>>; serviceAccount: string }): Proxy {
  return { ...proxy, labels: { ...workload.labels }, serviceAccount: workload.serviceAccount };
}
