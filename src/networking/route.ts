// RDS: an outbound route configuration per HTTP port, a virtual host per service with every name a
// client may use for it (FQDN, short names by namespace, VIPs, each with and without the port), and
// the inline route of inbound HTTP chains.
import { create } from '@bufbuild/protobuf';
import { RouteConfigurationSchema, type RouteConfiguration } from '../gen/envoy/config/route/v3/route_pb.js';
import type { VirtualHostSchema } from '../gen/envoy/config/route/v3/route_components_pb.js';
import type { MessageInitShape } from '@bufbuild/protobuf';
import type { OutboundTrafficMode } from '../model/push-context.js';
import type { Service } from '../model/service.js';
import { outboundClusterName, outboundRouteName, PASSTHROUGH_CLUSTER } from './names.js';

type VirtualHostInit = MessageInitShape<typeof VirtualHostSchema>;

export interface OutboundRouteOptions {
  /** `--domain`, e.g. `cluster.local`. */
  readonly domain: string;
  /** The proxy's namespace: bare service names resolve only there. */
  readonly proxyNamespace: string;
  readonly outboundTrafficPolicy: OutboundTrafficMode;
}

/**
 * Every authority a client may use for `service` on `port`: the host, and for in-mesh services
 * (`<name>.<ns>.svc.<domain>`) `<name>.<ns>.svc`, `<name>.<ns>`, and `<name>` from the same
 * namespace; plus the service's VIPs. Each with and without `:<port>`.
 */
export function serviceDomains(service: Service, port: number, proxyNamespace: string, domain: string): string[] {
  const names = [service.hostname];
  const suffix = `.svc.${domain}`;
  if (service.hostname.endsWith(suffix)) {
    const short = service.hostname.slice(0, -suffix.length);
    const dot = short.indexOf('.');
    if (dot > 0) {
      const ns = short.slice(dot + 1);
      names.push(`${short}.svc`, short);
      if (ns === proxyNamespace) names.push(short.slice(0, dot));
    }
  }
  names.push(...service.addresses.filter((a) => !a.includes('/')));
  return names.flatMap((n) => [n, `${n}:${port}`]);
}

function routeTo(cluster: string): VirtualHostInit['routes'] {
  return [
    {
      name: 'default',
      match: { pathSpecifier: { case: 'prefix', value: '/' } },
      // No route timeout: long-lived streams (gRPC, websockets) must not be cut at Envoy's 15s default.
      action: { case: 'route', value: { clusterSpecifier: { case: 'cluster', value: cluster }, timeout: { seconds: 0n } } },
    },
  ];
}

function catchAll(mode: OutboundTrafficMode): VirtualHostInit {
  if (mode === 'ALLOW_ANY') return { name: 'allow_any', domains: ['*'], routes: routeTo(PASSTHROUGH_CLUSTER) };
  return {
    name: 'block_all',
    domains: ['*'],
    routes: [{ name: 'block_all', match: { pathSpecifier: { case: 'prefix', value: '/' } }, action: { case: 'directResponse', value: { status: 502 } } }],
  };
}

/**
 * The route configuration named `<port>`: one virtual host per service having that port, then the
 * catch-all (`allow_any` to PassthroughCluster, or `block_all` answering 502). A domain already
 * claimed by an earlier service is not repeated (Envoy rejects duplicates); services are expected
 * sorted, so the outcome is stable.
 */
export function buildOutboundRouteConfig(port: number, services: readonly Service[], opts: OutboundRouteOptions): RouteConfiguration {
  const claimed = new Set<string>();
  const hosts: VirtualHostInit[] = [];
  for (const s of services) {
    const domains = serviceDomains(s, port, opts.proxyNamespace, opts.domain).filter((d) => !claimed.has(d));
    if (domains.length === 0) continue;
    domains.forEach((d) => claimed.add(d));
    hosts.push({ name: `${s.hostname}:${port}`, domains, routes: routeTo(outboundClusterName(port, s.hostname)) });
  }
  hosts.push(catchAll(opts.outboundTrafficPolicy));
  return create(RouteConfigurationSchema, { name: outboundRouteName(port), virtualHosts: hosts, validateClusters: false });
}

/** The inline route of an inbound HTTP chain: everything to the local application's cluster. */
export function buildInboundRouteConfig(name: string, cluster: string): RouteConfiguration {
  return create(RouteConfigurationSchema, {
    name,
    virtualHosts: [{ name: `inbound|http|${name}`, domains: ['*'], routes: routeTo(cluster) }],
    validateClusters: false,
  });
}
