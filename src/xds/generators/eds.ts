// EDS: the load assignments of the proxy's EDS clusters; the only type an endpoint change pushes.
import { ClusterLoadAssignmentSchema } from '../../gen/envoy/config/endpoint/v3/endpoint_pb.js';
import { reachesBeyondListeners, type PushTrigger } from '../push-scope.js';
import { TypeUrl } from '../../envoy/types.js';
import { generatorOf, resources, type XdsType } from './context.js';
import { clusterLoadAssignments } from './sidecar-endpoints.js';
import { isRouter } from './gateway.js';
import { gatewayLoadAssignments } from './gateway-clusters.js';

export const eds: XdsType = {
  typeUrl: TypeUrl.ClusterLoadAssignment,
  pushedBy: (t: PushTrigger) => t.source === 'service' || t.source === 'endpoints' || reachesBeyondListeners(t),
  generator: (ctx) =>
    generatorOf(ctx, (proxy, push, names) =>
      resources(ClusterLoadAssignmentSchema, isRouter(proxy) ? gatewayLoadAssignments(proxy, push, names, ctx.opts) : clusterLoadAssignments(proxy, push, names, ctx.opts.cache, ctx.opts.localityLb), (c) => c.clusterName),
    ),
};
