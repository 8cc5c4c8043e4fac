// LDS: the proxy's listeners (sidecar, or the proxyless gRPC client and server listeners) and the
// changes that may alter them. Listeners carry the inbound security filters, so besides everything
// that changes services they are pushed for every policy change and every new JWKS.
import { ListenerSchema } from '../../gen/envoy/config/listener/v3/listener_pb.js';
import { isMeshConfigChange, type PushTrigger } from '../push-scope.js';
import { TypeUrl } from '../../envoy/types.js';
import { generatorOf, isGrpc, resources, type XdsType } from './context.js';
import { grpcListeners } from './grpc.js';
import { sidecarListeners } from './sidecar.js';
import { gatewayListeners, isRouter } from './gateway.js';

export const lds: XdsType = {
  typeUrl: TypeUrl.Listener,
  pushedBy: (t: PushTrigger) => t.source === 'service' || t.source === 'jwks' || isMeshConfigChange(t),
  generator: (ctx) =>
    generatorOf(ctx, (proxy, push, names) => {
      ctx.conflicts.observe();
      const listeners = isGrpc(proxy) ? grpcListeners(proxy, push, names, ctx.opts) : isRouter(proxy) ? gatewayListeners(proxy, push, ctx.opts) : sidecarListeners(proxy, push, ctx.opts);
      return resources(ListenerSchema, listeners, (l) => l.name);
    }),
};
