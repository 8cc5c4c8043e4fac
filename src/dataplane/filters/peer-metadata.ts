// The peer metadata filter (`mesh.metadata_exchange`, the Go mesh's `istio.metadata_exchange`):
// the two sidecars of a request tell each other their workload in the x-envoy-peer-metadata
// headers, for the standard metrics' source_* and destination_* labels. Inbound, it reads the
// client's from the request and answers with its own in the response; outbound, it sends its own
// in the request and reads the server's from the response. Headers read are removed, so the
// application never sees them. Only istio_headers is implemented: baggage (deprecated in the Go
// mesh) and workload_discovery (ambient's workload xDS) are accepted and named in a warning.
import { ConfigSchema, type Config_DiscoveryMethod, type Config_PropagationMethod } from '../../gen/mesh/http/peer_metadata/config_pb.js';
import { CONTINUE, type FilterOutcome, type ResponseHeaderMap } from '../../envoy/filter.js';
import type { StreamRequest } from '../../envoy/request.js';
import { scope } from '../../common/log.js';
import { PEER_METADATA_HEADER, PEER_METADATA_ID_HEADER, peerHeaderValue, peerOfHeader, type WorkloadMetadata } from '../telemetry/workload-metadata.js';
import { registerHttpFilter } from './registry.js';

const log = scope('http');

declare module '../../envoy/request.js' {
  interface StreamRequest {
    /** The workload that sent the request, from its proxy's headers (inbound). */
    downstreamPeer?: WorkloadMetadata;
    /** The workload that answered it, from its proxy's response headers (outbound). */
    upstreamPeer?: WorkloadMetadata;
  }
}

const headersOf = (methods: readonly (Config_DiscoveryMethod | Config_PropagationMethod)[]): boolean => methods.some((m) => m.methodSpecifier.case === 'istioHeaders');

function unapplied(name: string, field: string, methods: readonly Config_DiscoveryMethod[]): string[] {
  return methods.flatMap((m, i) => (m.methodSpecifier.case && m.methodSpecifier.case !== 'istioHeaders' ? [`${name}.${field}[${i}].${m.methodSpecifier.case === 'workloadDiscovery' ? 'workload_discovery' : 'baggage'}`] : []));
}

function headerValue(v: string | string[] | undefined): string | undefined {
  return Array.isArray(v) ? v[0] : v;
}

registerHttpFilter({
  schema: ConfigSchema,
  compile(config, name, ctx) {
    const skipped = [...unapplied(name, 'downstream_discovery', config.downstreamDiscovery), ...unapplied(name, 'upstream_discovery', config.upstreamDiscovery)];
    const skipExternal = [...config.upstreamPropagation, ...config.downstreamPropagation].some((m) => m.methodSpecifier.case === 'istioHeaders' && m.methodSpecifier.value.skipExternalClusters);
    if (skipExternal) skipped.push(`${name}: istio_headers.skip_external_clusters`);
    if (skipped.length > 0) log.warn(`peer metadata filter: accepted but not applied: ${skipped.join(', ')}`);
    const own = ctx.telemetry?.node.workload;
    const ownValue = own ? peerHeaderValue(own, config.additionalLabels) : undefined;
    const ownId = ctx.telemetry?.node.id ?? '';
    const readDownstream = headersOf(config.downstreamDiscovery);
    const answerDownstream = headersOf(config.downstreamPropagation) && ownValue !== undefined;
    const readUpstream = headersOf(config.upstreamDiscovery);
    const sendUpstream = headersOf(config.upstreamPropagation) && ownValue !== undefined;

    /** The client's workload, read and removed (inbound); whether the request came from a mesh proxy. */
    function readClient(req: StreamRequest): boolean {
      const value = req.headers.joined(PEER_METADATA_HEADER);
      const fromMesh = value !== undefined || req.headers.has(PEER_METADATA_ID_HEADER);
      const peer = value === undefined ? undefined : peerOfHeader(value);
      if (peer) req.downstreamPeer = peer;
      req.headers.remove(PEER_METADATA_HEADER);
      req.headers.remove(PEER_METADATA_ID_HEADER);
      return fromMesh;
    }

    /** The server's workload, read and removed from its response (outbound). */
    function readServer(req: StreamRequest, h: ResponseHeaderMap): void {
      const value = headerValue(h[PEER_METADATA_HEADER]);
      const peer = value === undefined ? undefined : peerOfHeader(value);
      if (peer) req.upstreamPeer = peer;
      delete h[PEER_METADATA_HEADER];
      delete h[PEER_METADATA_ID_HEADER];
    }

    return {
      filter: {
        name,
        decodeHeaders(req): FilterOutcome {
          // Only a mesh client hears who answered: a client outside the mesh learns nothing of the workload.
          const answer = readDownstream && readClient(req) && answerDownstream;
          if (sendUpstream) {
            req.headers.set(PEER_METADATA_ID_HEADER, ownId);
            req.headers.set(PEER_METADATA_HEADER, ownValue!);
          }
          if (!answer && !readUpstream) return CONTINUE;
          return {
            kind: 'continue',
            encodeHeaders(h: ResponseHeaderMap) {
              if (readUpstream) readServer(req, h);
              if (answer) {
                h[PEER_METADATA_ID_HEADER] = ownId;
                h[PEER_METADATA_HEADER] = ownValue!;
              }
            },
          };
        },
      },
    };
  },
});
