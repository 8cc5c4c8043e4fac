// The standard labels of one request or connection, with the Go mesh's stats filter's rules: who
// reports (the client's sidecar: source; the server's: destination), this proxy's own workload on
// its side, the peer's on the other (its metadata exchange headers, its certificate's namespace),
// the destination service (the upstream cluster's `mesh.services` metadata, else the Host header
// where the fallback is on), `unknown` for what is not known. Pure.
import type { WorkloadMetadata } from './workload-metadata.js';

export type Reporter = 'source' | 'destination' | 'waypoint';

export type Labels = [name: string, value: string][];

export interface LabelContext {
  readonly reporter: Reporter;
  readonly local: WorkloadMetadata;
  /** The Host header stands in for the destination service (off on inbound listeners and gateways). */
  readonly hostFallback: boolean;
}

/** The service of an upstream cluster, from its `mesh.services[0]` metadata. */
export interface ClusterService {
  readonly host: string;
  readonly name?: string;
}

/** What the labels are computed from. */
export interface StreamFacts {
  /** The workload at the other end, from the metadata exchange. */
  readonly peer: WorkloadMetadata | undefined;
  /** The request's :authority (HTTP). */
  readonly authority?: string;
  readonly routeName?: string;
  readonly clusterName?: string;
  readonly clusterService?: ClusterService;
  /** The peer's and this proxy's certificate URI SANs on the connection: the downstream one when serving, the upstream one as a client. */
  readonly peerSan: string;
  readonly localSan: string;
  readonly protocol: 'http' | 'grpc' | 'tcp';
  readonly responseCode?: number;
  /** A gRPC request's status; undefined: none (the label is empty). */
  readonly grpcStatus?: number;
  readonly responseFlags: string;
}

const UNKNOWN = 'unknown';
const PASSTHROUGH = new Set(['BlackHoleCluster', 'PassthroughCluster', 'InboundPassthroughCluster', 'InboundPassthroughClusterIpv4', 'InboundPassthroughClusterIpv6']);

const or = (v: string | undefined, fallback: string): string => (v ? v : fallback);

/** The namespace of a SPIFFE id: `<domain>/ns/<namespace>/sa/<account>`. */
export function namespaceOfPrincipal(principal: string): string | undefined {
  const at = principal.indexOf('/ns/');
  if (at < 0) return undefined;
  const rest = principal.slice(at + 4);
  const end = rest.indexOf('/');
  return end < 0 ? rest : rest.slice(0, end);
}

/** destination_service and destination_service_name, before their fallbacks. */
function destinationService(ctx: LabelContext, f: StreamFacts): { host: string; name: string } {
  let host = '';
  let name = '';
  if (ctx.hostFallback && f.authority) host = name = f.authority;
  if (f.routeName === 'block_all') name = 'BlackHoleCluster';
  else if (f.routeName === 'allow_any') name = 'PassthroughCluster';
  else if (f.clusterName && PASSTHROUGH.has(f.clusterName)) name = f.clusterName;
  else if (f.clusterService) {
    host = f.clusterService.host;
    name = f.clusterService.name ?? host.split('.')[0]!;
  }
  return { host, name };
}

function serverSide(ctx: LabelContext, f: StreamFacts, peerNamespace: string, service: { host: string; name: string }): Labels {
  const { peer, local } = { peer: f.peer, local: ctx.local };
  return [
    ['source_workload', or(peer?.workload, UNKNOWN)],
    ['source_canonical_service', or(peer?.canonicalName, UNKNOWN)],
    ['source_canonical_revision', or(peer?.canonicalRevision, 'latest')],
    ['source_workload_namespace', or(peerNamespace, UNKNOWN)],
    ['source_principal', or(f.peerSan, UNKNOWN)],
    ['source_app', or(peer?.app, UNKNOWN)],
    ['source_version', or(peer?.version, UNKNOWN)],
    ['source_cluster', or(peer?.cluster, UNKNOWN)],
    ['destination_workload', local.workload],
    ['destination_workload_namespace', local.namespace],
    ['destination_principal', or(f.localSan, UNKNOWN)],
    ['destination_app', local.app],
    ['destination_version', local.version],
    ['destination_service', or(service.host, local.canonicalName)],
    ['destination_canonical_service', local.canonicalName],
    ['destination_canonical_revision', local.canonicalRevision],
    ['destination_service_name', or(service.name, local.canonicalName)],
    ['destination_service_namespace', local.namespace],
    ['destination_cluster', local.cluster],
  ];
}

function clientSide(ctx: LabelContext, f: StreamFacts, peerNamespace: string, service: { host: string; name: string }): Labels {
  const { peer, local } = { peer: f.peer, local: ctx.local };
  return [
    ['source_workload', local.workload],
    ['source_canonical_service', local.canonicalName],
    ['source_canonical_revision', local.canonicalRevision],
    ['source_workload_namespace', local.namespace],
    ['source_principal', or(f.localSan, UNKNOWN)],
    ['source_app', local.app],
    ['source_version', local.version],
    ['source_cluster', local.cluster],
    ['destination_workload', or(peer?.workload, UNKNOWN)],
    ['destination_workload_namespace', or(peerNamespace, UNKNOWN)],
    ['destination_principal', or(f.peerSan, UNKNOWN)],
    ['destination_app', or(peer?.app, UNKNOWN)],
    ['destination_version', or(peer?.version, UNKNOWN)],
    ['destination_service', or(service.host, UNKNOWN)],
    ['destination_canonical_service', or(peer?.canonicalName, UNKNOWN)],
    ['destination_canonical_revision', or(peer?.canonicalRevision, 'latest')],
    ['destination_service_name', or(service.name, UNKNOWN)],
    ['destination_service_namespace', or(peerNamespace, UNKNOWN)],
    ['destination_cluster', or(peer?.cluster, UNKNOWN)],
  ];
}

/** Every standard label of a stream, in the Go mesh's order. */
export function standardLabels(ctx: LabelContext, f: StreamFacts): Labels {
  const peerNamespace = (f.peerSan ? namespaceOfPrincipal(f.peerSan) : undefined) || f.peer?.namespace || '';
  const service = destinationService(ctx, f);
  const serving = ctx.reporter !== 'source';
  const labels: Labels = [['reporter', ctx.reporter], ...(serving ? serverSide : clientSide)(ctx, f, peerNamespace, service)];
  labels.push(['request_protocol', f.protocol]);
  if (f.protocol !== 'tcp') {
    labels.push(['response_code', String(f.responseCode ?? 0)]);
    labels.push(['grpc_response_status', f.grpcStatus === undefined ? '' : String(f.grpcStatus)]);
  }
  labels.push(['response_flags', f.responseFlags]);
  // Only the serving side knows both certificates of the connection it was given.
  labels.push(['connection_security_policy', serving ? (f.peerSan && f.localSan ? 'mutual_tls' : 'none') : UNKNOWN]);
  return labels;
}
