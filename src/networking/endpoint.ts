// EDS: a ClusterLoadAssignment per cluster, endpoints grouped by priority and locality. Locality weights are the
// sum of their endpoints' weights: Envoy uses them only with locality-weighted balancing, but gRPC
// clients drop a locality that has none.
import { create } from '@bufbuild/protobuf';
import { ClusterLoadAssignmentSchema, type ClusterLoadAssignment } from '../gen/envoy/config/endpoint/v3/endpoint_pb.js';
import { localityString, type Locality } from '../model/service.js';
import { socketAddress } from './common.js';
import { tlsModeMetadata } from './outbound-mtls.js';
import { distributedWeights, type LocalityDistribute } from './locality-lb.js';

/** What an endpoint contributes to a load assignment. */
export interface EndpointInput {
  readonly address: string;
  readonly port: number;
  readonly locality: Locality;
  readonly weight: number;
  /** The workload's security.mesh.io/tlsMode label: `mesh` when it has a sidecar (auto mTLS). */
  readonly tlsMode?: string;
  /** EDS priority (locality failover, locality-lb.ts); 0 when absent. */
  readonly priority?: number;
}

export function buildLoadAssignment(clusterName: string, endpoints: readonly EndpointInput[]): ClusterLoadAssignment {
  const byLocality = new Map<string, { locality: Locality; priority: number; endpoints: EndpointInput[] }>();
  const seen = new Set<string>();
  for (const e of endpoints) {
    // The same workload reached through two registries is one endpoint (gRPC rejects duplicates).
    const id = `${e.address}:${e.port}`;
    if (seen.has(id)) continue;
    seen.add(id);
    const priority = e.priority ?? 0;
    const key = `${priority} ${localityString(e.locality)}`;
    let group = byLocality.get(key);
    if (!group) byLocality.set(key, (group = { locality: e.locality, priority, endpoints: [] }));
    group.endpoints.push(e);
  }
  // Priorities first, then localities in code-unit order.
  const order = (g: { locality: Locality; priority: number }) => localityString(g.locality);
  const groups = [...byLocality.values()].sort((a, b) => a.priority - b.priority || (order(a) < order(b) ? -1 : order(a) > order(b) ? 1 : 0));
  return create(ClusterLoadAssignmentSchema, {
    clusterName,
    endpoints: groups.map((g) => ({
      locality: { region: g.locality.region, zone: g.locality.zone, subZone: g.locality.subZone },
      ...(g.priority > 0 ? { priority: g.priority } : {}),
      loadBalancingWeight: g.endpoints.reduce((sum, e) => sum + e.weight, 0),
      lbEndpoints: g.endpoints.map((e) => {
        const metadata = tlsModeMetadata(e.tlsMode);
        return { hostIdentifier: { case: 'endpoint' as const, value: { address: socketAddress(e.address, e.port) } }, loadBalancingWeight: e.weight, ...(metadata ? { metadata } : {}) };
      }),
    })),
  });
}

/**
 * The assignment as a client under locality `distribute` gets it (locality-lb.ts): each locality's
 * weight its share, the endpoints of localities no `to` names left out (as the Go mesh, which keeps
 * the emptied locality). Unchanged when no entry is for this client.
 */
export function withDistributedWeights(cla: ClusterLoadAssignment, client: Locality, distribute: readonly LocalityDistribute[]): ClusterLoadAssignment {
  const groups = cla.endpoints.map((g) => ({ locality: { region: g.locality?.region ?? '', zone: g.locality?.zone ?? '', subZone: g.locality?.subZone ?? '' }, weight: g.loadBalancingWeight ?? 0 }));
  const weights = distributedWeights(client, groups, distribute);
  if (!weights) return cla;
  return create(ClusterLoadAssignmentSchema, {
    ...cla,
    endpoints: cla.endpoints.map((g, i) => (weights[i] === 0 ? { ...g, lbEndpoints: [] } : { ...g, loadBalancingWeight: weights[i] })),
  });
}
