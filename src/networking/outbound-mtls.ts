// Mesh mTLS on outbound clusters, as the Go mesh's auto mTLS: a DestinationRule's ISTIO_MUTUAL
// makes the whole cluster mesh mTLS; without a tls setting, endpoints whose workload has a sidecar
// (endpoint metadata tlsMode=mesh, from the label security.mesh.io/tlsMode) get mesh mTLS and the
// others plaintext, unless the server side says DISABLE, the service is outside the mesh, or auto
// mTLS is off. An explicit DISABLE, SIMPLE or MUTUAL is the rule's own (traffic-policy.ts).
import type { MessageInitShape } from '@bufbuild/protobuf';
import type { ClusterSchema } from '../gen/envoy/config/cluster/v3/cluster_pb.js';
import { isHttp2Protocol, type Service, type ServicePort } from '../model/service.js';
import type { EffectiveMtlsMode } from '../security/mtls/peer-authentication.js';
import { outboundMtlsSocket } from '../security/mtls/tls-context.js';
import { passesThrough, upgradesToH2, type TrafficPolicy } from './traffic-policy.js';
import { rawBufferSocket } from './common.js';

/** The workload label (set by the injector) and its value for workloads with a sidecar. */
export const TLS_MODE_LABEL = 'security.mesh.io/tlsMode';
export const MESH_TLS_MODE = 'mesh';
/** Where Envoy looks for the metadata a transport_socket_match compares. */
export const TRANSPORT_SOCKET_MATCH_METADATA = 'envoy.transport_socket_match';
const TLS_MODE_KEY = 'tlsMode';

type ClusterInit = Exclude<MessageInitShape<typeof ClusterSchema>, { $typeName: string }>;

export interface ClusterMtls {
  /** What the service's servers are inferred to accept (namespace-wide, else mesh-wide PeerAuthentication). */
  readonly serverMode: EffectiveMtlsMode;
  /** SPIFFE ids of the service's workloads (with trust domain aliases): the server certificate's expected SAN. */
  readonly sans: readonly string[];
  /** Mesh config enableAutoMtls. */
  readonly autoMtls: boolean;
  /** Every endpoint has a sidecar: original-destination clusters (no endpoint metadata) use mTLS only then. */
  readonly allEndpointsMesh: boolean;
}

/** The endpoint metadata a transport_socket_match reads, for workloads labelled with a tlsMode. */
export function tlsModeMetadata(tlsMode: string | undefined): { filterMetadata: Record<string, { [k: string]: string }> } | undefined {
  if (!tlsMode || tlsMode === 'disabled') return undefined;
  return { filterMetadata: { [TRANSPORT_SOCKET_MATCH_METADATA]: { [TLS_MODE_KEY]: tlsMode } } };
}

/** The SNI of mesh mTLS: `outbound_.<port>_.<subset>_.<host>`, as the Go mesh names it. */
export function meshMtlsSni(port: number, hostname: string, subset: string): string {
  return `outbound_.${port}_.${subset}_.${hostname}`;
}

/** The cluster fields of mesh mTLS for a port and subset, given the merged DestinationRule policy. */
export function meshMtlsFields(service: Service, port: ServicePort, subset: string, policy: TrafficPolicy, m: ClusterMtls | undefined): Partial<ClusterInit> {
  if (!m) return {};
  const tls = policy.tls;
  const socket = () =>
    outboundMtlsSocket({
      sans: tls?.subjectAltNames?.length ? tls.subjectAltNames : m.sans,
      sni: tls?.sni || meshMtlsSni(port.port, service.hostname, subset),
      http2: isHttp2Protocol(port.protocol) || upgradesToH2(policy),
    });
  if (tls?.mode === 'ISTIO_MUTUAL') return { transportSocket: socket() };
  if (tls?.mode || service.external || !m.autoMtls || m.serverMode === 'DISABLE') return {};
  // To the original destination, no endpoint metadata tells a mesh workload from another.
  if (service.resolution === 'NONE' || passesThrough(policy)) return m.allEndpointsMesh ? { transportSocket: socket() } : {};
  return {
    transportSocketMatches: [
      { name: `tlsMode-${MESH_TLS_MODE}`, match: { [TLS_MODE_KEY]: MESH_TLS_MODE }, transportSocket: socket() },
      { name: 'tlsMode-disabled', match: {}, transportSocket: rawBufferSocket() },
    ],
  };
}
