// Proxyless gRPC (GENERATOR=grpc): a gRPC client asks for the listener `host:port` of its target
// (`xds:///echo.foo.svc.cluster.local:7070`) and gets an api_listener whose HTTP connection manager
// points at a route configuration of the same name; an xDS-enabled gRPC server asks for
// `xds.mesh.io/grpc/lds/inbound/<ip>:<port>` and gets a listener whose routes carry the
// non-forwarding action servers require. Clusters and endpoints are the sidecar ones (EDS over ADS,
// round robin, localities with weights), which gRPC accepts.
import { create } from '@bufbuild/protobuf';
import { TrafficDirection } from '../../gen/envoy/config/core/v3/base_pb.js';
import { ApiListenerSchema } from '../../gen/envoy/config/listener/v3/api_listener_pb.js';
import { ListenerSchema, type Listener } from '../../gen/envoy/config/listener/v3/listener_pb.js';
import { RouteConfigurationSchema, type RouteConfiguration } from '../../gen/envoy/config/route/v3/route_pb.js';
import type { HttpFilter } from '../../gen/envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager_pb.js';
import type { Proxy } from '../../model/proxy.js';
import type { PushContext } from '../../model/push-context.js';
import type { Service } from '../../model/service.js';
import { hcmFilter, httpConnectionManager, socketAddress } from '../../networking/common.js';
import { GRPC_SERVER_LISTENER_PREFIX, inboundClusterName, outboundClusterName } from '../../networking/names.js';
import { serviceDomains, withPorts } from '../../networking/route.js';

export interface GrpcOptions {
  /** Put the route configuration inside the client listener instead of naming it for RDS. */
  readonly inlineRoutes?: boolean;
  /** HTTP filters of xDS-enabled gRPC servers (gRPC supports e.g. rbac, not jwt_authn). */
  readonly serverHttpFilters?: (proxy: Proxy, push: PushContext) => readonly HttpFilter[];
}

interface Target {
  readonly name: string;
  readonly service: Service;
  readonly port: number;
}

/** `host:port` with the host as the client wrote it: FQDN, `<name>.<ns>`, `<name>.<ns>.svc` or `<name>`. */
export function resolveTarget(name: string, proxy: Proxy, push: PushContext): Target | undefined {
  const colon = name.lastIndexOf(':');
  if (colon <= 0) return undefined;
  const host = name.slice(0, colon);
  const port = Number(name.slice(colon + 1));
  if (!Number.isInteger(port) || port <= 0 || port > 65535) return undefined;
  const scope = push.sidecarScope(proxy);
  const dots = host.split('.').length - 1;
  const candidates = [
    host,
    ...(dots === 0 ? [`${host}.${proxy.namespace}.svc.${push.domain}`] : []),
    ...(dots === 1 ? [`${host}.svc.${push.domain}`] : []),
    ...(host.endsWith('.svc') ? [`${host}.${push.domain}`] : []),
  ];
  for (const h of candidates) {
    const service = scope.byHost.get(h);
    if (service && service.ports.some((p) => p.port === port)) return { name, service, port };
  }
  return undefined;
}

function targets(proxy: Proxy, push: PushContext, names: ReadonlySet<string> | undefined): Target[] {
  if (names) return [...names].flatMap((n) => resolveTarget(n, proxy, push) ?? []);
  return push.sidecarScope(proxy).services.flatMap((service) => service.ports.map((p) => ({ name: `${service.hostname}:${p.port}`, service, port: p.port })));
}

function clientRouteConfig(t: Target, proxy: Proxy, push: PushContext): RouteConfiguration {
  const domains = [...new Set([t.name, ...withPorts(serviceDomains(t.service, proxy.namespace, push.domain), t.port)])];
  return create(RouteConfigurationSchema, {
    name: t.name,
    virtualHosts: [
      {
        name: t.name,
        domains,
        routes: [
          {
            name: 'default',
            match: { pathSpecifier: { case: 'prefix', value: '' } },
            action: { case: 'route', value: { clusterSpecifier: { case: 'cluster', value: outboundClusterName(t.port, t.service.hostname) } } },
          },
        ],
      },
    ],
  });
}

/** `<ip>:<port>` or `[<ipv6>]:<port>` after the server listener prefix. */
function parseServerListener(name: string): { address: string; port: number } | undefined {
  const m = /^(?:\[([^\]]+)\]|([^:]+)):(\d+)$/.exec(name.slice(GRPC_SERVER_LISTENER_PREFIX.length));
  const port = Number(m?.[3]);
  if (!m || !Number.isInteger(port) || port <= 0 || port > 65535) return undefined;
  return { address: (m[1] ?? m[2])!, port };
}

function serverListener(name: string, addr: { address: string; port: number }, filters: readonly HttpFilter[]): Listener {
  const cluster = inboundClusterName(addr.port);
  return create(ListenerSchema, {
    name,
    address: socketAddress(addr.address, addr.port),
    trafficDirection: TrafficDirection.INBOUND,
    filterChains: [
      {
        name: cluster,
        filters: [
          hcmFilter(
            cluster,
            {
              inline: {
                name: cluster,
                virtualHosts: [
                  {
                    name: cluster,
                    domains: ['*'],
                    routes: [{ name: 'default', match: { pathSpecifier: { case: 'prefix', value: '/' } }, action: { case: 'nonForwardingAction', value: {} } }],
                  },
                ],
              },
            },
            filters,
          ),
        ],
      },
    ],
  });
}

export function grpcListeners(proxy: Proxy, push: PushContext, names: ReadonlySet<string> | undefined, opts: GrpcOptions = {}): Listener[] {
  const serverNames = [...(names ?? [])].filter((n) => n.startsWith(GRPC_SERVER_LISTENER_PREFIX));
  const servers = serverNames.flatMap((n) => {
    const addr = parseServerListener(n);
    return addr ? [serverListener(n, addr, opts.serverHttpFilters?.(proxy, push) ?? [])] : [];
  });
  const clientNames = names ? new Set([...names].filter((n) => !n.startsWith(GRPC_SERVER_LISTENER_PREFIX))) : undefined;
  const clients = targets(proxy, push, clientNames).map((t) =>
    create(ListenerSchema, {
      name: t.name,
      apiListener: create(ApiListenerSchema, {
        apiListener: httpConnectionManager(t.name, opts.inlineRoutes ? { inline: clientRouteConfig(t, proxy, push) } : { rds: t.name }),
      }),
    }),
  );
  return [...clients, ...servers];
}

export function grpcRoutes(proxy: Proxy, push: PushContext, names: ReadonlySet<string> | undefined): RouteConfiguration[] {
  return targets(proxy, push, names).map((t) => clientRouteConfig(t, proxy, push));
}
