// RDS: the outbound route configurations a proxy names (per port for sidecars, per `host:port`
// target for proxyless gRPC clients), pushed when services or non-policy config change.
import { RouteConfigurationSchema } from '../../gen/envoy/config/route/v3/route_pb.js';
import { reachesBeyondListeners, type PushTrigger } from '../push-scope.js';
import { TypeUrl } from '../../envoy/types.js';
import { generatorOf, isGrpc, resources, type XdsType } from './context.js';
import { grpcRoutes } from './grpc.js';
import { routeDefaults, sidecarRoutes } from './sidecar.js';
import { gatewayRoutes, isRouter } from './gateway.js';
import { packRouteConfiguration } from './route-packing.js';

export const rds: XdsType = {
  typeUrl: TypeUrl.RouteConfiguration,
  pushedBy: (t: PushTrigger) => t.source === 'service' || reachesBeyondListeners(t),
  generator: (ctx) =>
    generatorOf(ctx, (proxy, push, names) =>
      resources(
        RouteConfigurationSchema,
        isGrpc(proxy) ? grpcRoutes(proxy, push, names) : isRouter(proxy) ? gatewayRoutes(proxy, push, names, ctx.opts) : sidecarRoutes(proxy, push, names, ctx.opts.outboundSniffing, ctx.opts.cache, routeDefaults(ctx.opts)),
        (r) => r.name,
        packRouteConfiguration,
      ),
    ),
};
