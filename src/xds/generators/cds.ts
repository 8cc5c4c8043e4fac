// CDS: outbound clusters of every visible service port, the sidecar's inbound clusters (not for
// gateways, gateway-clusters.ts, or proxyless clients), BlackHole and Passthrough; pushed when services or non-policy config change (an endpoint change alters no EDS
// cluster, and a STATIC service's endpoints are not in its cluster).
import { ClusterSchema } from '../../gen/envoy/config/cluster/v3/cluster_pb.js';
import { reachesBeyondListeners, type PushTrigger } from '../push-scope.js';
import { TypeUrl } from '../../envoy/types.js';
import { generatorOf, isGrpc, resources, type XdsType } from './context.js';
import { sidecarClusters } from './sidecar.js';
import { isRouter } from './gateway.js';
import { gatewayClusters } from './gateway-clusters.js';

export const cds: XdsType = {
  typeUrl: TypeUrl.Cluster,
  // PeerAuthentication too: auto mTLS follows the destination namespace's mode.
  pushedBy: (t: PushTrigger) => t.source === 'service' || reachesBeyondListeners(t) || (t.source === 'config' && t.kind === 'PeerAuthentication'),
  generator: (ctx) =>
    generatorOf(ctx, (proxy, push) =>
      resources(ClusterSchema, isRouter(proxy) ? gatewayClusters(proxy, push, ctx.opts) : sidecarClusters(proxy, push, !isGrpc(proxy), ctx.opts.cache, ctx.opts.mtls, ctx.opts), (c) => c.name),
    ),
};
