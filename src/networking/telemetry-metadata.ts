// The services a cluster is for, in its metadata, as the Go mesh's addTelemetryMetadata puts them
// under `filter_metadata.istio.services`: the stats filter labels requests with
// destination_service (host) and destination_service_name (name) from the first. Ours is
// `filter_metadata.mesh.services` (our names where the Go mesh says istio, as `mesh.alpn`), with the
// same entries: {host, name, namespace}.
import type { JsonObject } from '@bufbuild/protobuf';
import { ORCHESTRATOR_REGISTRY, type Service } from '../model/service.js';

/** The filter metadata namespace of the mesh's own cluster metadata (the Go mesh's `istio`). */
const MESH_METADATA_KEY = 'mesh';

export interface TelemetryService {
  readonly host: string;
  /** The service's short name: an orchestrator Service's name, else (a ServiceEntry's host) the host, as the Go mesh names them. */
  readonly name: string;
  readonly namespace: string;
}

/** The orchestrator's services come with `source: Service/<namespace>/<name>`. */
function shortName(s: Service): string {
  if (s.registry === ORCHESTRATOR_REGISTRY && s.source?.startsWith('Service/')) return s.source.slice(s.source.lastIndexOf('/') + 1);
  return s.hostname;
}

export function telemetryService(s: Service): TelemetryService {
  return { host: s.hostname, name: shortName(s), namespace: s.namespace };
}

/** A cluster's `metadata` field for the services it is for; none without services. */
export function servicesMetadata(services: readonly TelemetryService[]): { metadata?: { filterMetadata: Record<string, JsonObject> } } {
  if (services.length === 0) return {};
  return { metadata: { filterMetadata: { [MESH_METADATA_KEY]: { services: services.map((s) => ({ host: s.host, name: s.name, namespace: s.namespace })) } } } };
}
