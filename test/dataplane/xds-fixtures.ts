// A real ADS server (src/xds/server.ts) serving whatever resources a test sets, plus builders of
// the Envoy messages the proxy tests send and a bootstrap file pointing at the server.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type RequestListener } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { create, type MessageInitShape } from '@bufbuild/protobuf';
import type { Any } from '@bufbuild/protobuf/wkt';
import { Cluster_DiscoveryType, Cluster_LbPolicy, ClusterSchema } from '../../src/gen/envoy/config/cluster/v3/cluster_pb.js';
import { TrafficDirection } from '../../src/gen/envoy/config/core/v3/base_pb.js';
import type { HttpProtocolOptionsSchema } from '../../src/gen/envoy/config/core/v3/protocol_pb.js';
import type { AccessLogSchema } from '../../src/gen/envoy/config/accesslog/v3/accesslog_pb.js';
import { ClusterLoadAssignmentSchema } from '../../src/gen/envoy/config/endpoint/v3/endpoint_pb.js';
import type { FilterChain, FilterChainSchema } from '../../src/gen/envoy/config/listener/v3/listener_components_pb.js';
import { ListenerSchema, type Listener } from '../../src/gen/envoy/config/listener/v3/listener_pb.js';
import { RBAC_Action, type PolicySchema } from '../../src/gen/envoy/config/rbac/v3/rbac_pb.js';
import { RouteConfigurationSchema } from '../../src/gen/envoy/config/route/v3/route_pb.js';
import type { RetryPolicySchema } from '../../src/gen/envoy/config/route/v3/route_components_pb.js';
import { JwtAuthenticationSchema, type JwtAuthentication } from '../../src/gen/envoy/extensions/filters/http/jwt_authn/v3/config_pb.js';
import { RBACSchema } from '../../src/gen/envoy/extensions/filters/http/rbac/v3/rbac_pb.js';
import { RouterSchema } from '../../src/gen/envoy/extensions/filters/http/router/v3/router_pb.js';
import { HttpConnectionManagerSchema } from '../../src/gen/envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager_pb.js';
import { TcpProxySchema } from '../../src/gen/envoy/extensions/filters/network/tcp_proxy/v3/tcp_proxy_pb.js';
import { loadBootstrap } from '../../src/dataplane/bootstrap.js';
import { MeshProxy } from '../../src/dataplane/proxy.js';
import type { XdsResource } from '../../src/xds/generator.js';
import { XdsServer } from '../../src/xds/server.js';
import { pack, TypeUrl } from '../../src/envoy/types.js';
import { eventually } from '../helpers/proc.js';

type PolicyInit = MessageInitShape<typeof PolicySchema>;
type ChainInit = Exclude<MessageInitShape<typeof FilterChainSchema>, FilterChain>;
type ListenerInit = Exclude<MessageInitShape<typeof ListenerSchema>, Listener>;
type ClusterInit = Exclude<MessageInitShape<typeof ClusterSchema>, { $typeName: string }>;
type RetryInit = Exclude<MessageInitShape<typeof RetryPolicySchema>, { $typeName: string }>;
/** An access_log entry of an HCM, tcp_proxy or listener (access-log-fixtures.ts builds them). */
export type AccessLogInit = Exclude<MessageInitShape<typeof AccessLogSchema>, { $typeName: string }>;

/** An ADS server whose resources per type are whatever the test last set. */
/** A resource as the fixture ADS server serves it: its name and packed message. */
export interface FixtureResource {
  readonly name: string;
  readonly any: Any;
}

export class FixtureAds {
  readonly server: XdsServer;
  private readonly state = new Map<string, XdsResource[]>();
  port = 0;

  constructor() {
    const generators = new Map(
      [TypeUrl.Listener, TypeUrl.Cluster, TypeUrl.RouteConfiguration, TypeUrl.ClusterLoadAssignment, TypeUrl.Secret].map((t) => [t, { generate: () => this.state.get(t) ?? [] }] as const),
    );
    this.server = new XdsServer({ generators, sendTimeoutMs: 0 });
  }

  async listen(port = 0): Promise<this> {
    this.port = await this.server.listen(`127.0.0.1:${port}`);
    return this;
  }

  /** Replaces the resources of a type (named by `name` / `cluster_name`). */
  set(typeUrl: string, resources: readonly FixtureResource[]): void {
    this.state.set(typeUrl, resources.map((r) => ({ name: r.name, resource: r.any })));
  }

  push(...types: string[]): Promise<void> {
    return this.server.pushAll({ reason: 'test', types: new Set(types) });
  }

  close(): void {
    this.server.close();
  }
}

const socketAddress = (host: string, port: number) => ({ address: { case: 'socketAddress' as const, value: { address: host, portSpecifier: { case: 'portValue' as const, value: port } } } });

export function listener(name: string, port: number, filterChains: ChainInit[], extra: Partial<ListenerInit> = {}) {
  return { name, any: pack(ListenerSchema, { name, address: socketAddress('127.0.0.1', port), trafficDirection: TrafficDirection.INBOUND, filterChains, ...extra }) };
}

export interface HcmOptions {
  readonly rds?: string;
  /** Inline route to this cluster when no rds. */
  readonly cluster?: string;
  readonly jwt?: JwtAuthentication;
  readonly policies?: Record<string, PolicyInit>;
  /** Extra http filters placed before the router (e.g. an unknown type, to be refused). */
  readonly extraFilters?: Array<{ name: string; any: Any }>;
  readonly statPrefix?: string;
  /** The HCM's server_name (the `server` header of responses): tells configs apart. */
  readonly serverName?: string;
  /** initial_fetch_timeout of the RDS config source; unset as the discovery server leaves it. */
  readonly rdsInitialFetchTimeout?: { seconds: bigint; nanos?: number };
  /** The HCM's common_http_protocol_options (idle timeout, requests per connection, ...). */
  readonly common?: MessageInitShape<typeof HttpProtocolOptionsSchema>;
  /** The inline route's retry policy. */
  readonly retry?: RetryInit;
  /** The HCM's stream timeouts. */
  readonly timeouts?: Pick<MessageInitShape<typeof HttpConnectionManagerSchema>, 'streamIdleTimeout' | 'requestTimeout' | 'requestHeadersTimeout'>;
  /** The upgrade types the HCM's upgrade_configs enable (e.g. websocket, as the discovery server's HCMs). */
  readonly upgrades?: readonly string[];
  /** The HCM's access_log entries. */
  readonly accessLog?: readonly AccessLogInit[];
}

/** A route table sending everything to `cluster`, with the route's retry policy when given. */
export function routeConfig(name: string, cluster: string, retry?: RetryInit) {
  const action = { clusterSpecifier: { case: 'cluster' as const, value: cluster }, ...(retry ? { retryPolicy: retry } : {}) };
  return {
    name,
    virtualHosts: [{ name: 'all', domains: ['*'], routes: [{ match: { pathSpecifier: { case: 'prefix' as const, value: '/' } }, action: { case: 'route' as const, value: action } }] }],
  };
}

export function routeResource(name: string, cluster: string) {
  return { name, any: pack(RouteConfigurationSchema, routeConfig(name, cluster)) };
}

type RouteInit = NonNullable<NonNullable<MessageInitShape<typeof RouteConfigurationSchema>['virtualHosts']>[number]['routes']>[number];

/** A route configuration resource: one virtual host for every domain, with these routes. */
export function routesResource(name: string, routes: RouteInit[]) {
  return { name, any: pack(RouteConfigurationSchema, { name, virtualHosts: [{ name: 'all', domains: ['*'], routes }] }) };
}

/** A filter chain as the discovery server emits it: HCM with jwt_authn -> rbac -> router. */
export function hcmChain(o: HcmOptions, extra: Partial<ChainInit> = {}): ChainInit {
  const httpFilters = [];
  if (o.jwt) httpFilters.push({ name: 'envoy.filters.http.jwt_authn', configType: { case: 'typedConfig' as const, value: pack(JwtAuthenticationSchema, o.jwt) } });
  if (o.policies) httpFilters.push({ name: 'envoy.filters.http.rbac', configType: { case: 'typedConfig' as const, value: pack(RBACSchema, { rules: { action: RBAC_Action.ALLOW, policies: o.policies } }) } });
  for (const f of o.extraFilters ?? []) httpFilters.push({ name: f.name, configType: { case: 'typedConfig' as const, value: f.any } });
  httpFilters.push({ name: 'envoy.filters.http.router', configType: { case: 'typedConfig' as const, value: pack(RouterSchema, {}) } });
  const hcm = pack(HttpConnectionManagerSchema, {
    statPrefix: o.statPrefix ?? 'inbound_test',
    serverName: o.serverName ?? '',
    routeSpecifier: o.rds
      ? { case: 'rds', value: { routeConfigName: o.rds, configSource: { configSourceSpecifier: { case: 'ads', value: {} }, ...(o.rdsInitialFetchTimeout ? { initialFetchTimeout: o.rdsInitialFetchTimeout } : {}) } } }
      : { case: 'routeConfig', value: routeConfig('inline', o.cluster ?? 'app', o.retry) },
    httpFilters,
    ...(o.common ? { commonHttpProtocolOptions: o.common } : {}),
    ...(o.upgrades ? { upgradeConfigs: o.upgrades.map((upgradeType) => ({ upgradeType })) } : {}),
    ...(o.accessLog ? { accessLog: [...o.accessLog] } : {}),
    ...o.timeouts,
  });
  return { filters: [{ name: 'envoy.filters.network.http_connection_manager', configType: { case: 'typedConfig', value: hcm } }], ...extra };
}

/** A tcp_proxy chain to `cluster`; `tcp` adds fields to the TcpProxy (e.g. access_log). */
export function tcpChain(cluster: string, extra: Partial<ChainInit> = {}, tcp: Partial<Exclude<MessageInitShape<typeof TcpProxySchema>, { $typeName: string }>> = {}): ChainInit {
  return { filters: [{ name: 'envoy.filters.network.tcp_proxy', configType: { case: 'typedConfig', value: pack(TcpProxySchema, { statPrefix: 'tcp_test', clusterSpecifier: { case: 'cluster', value: cluster }, ...tcp }) } }], ...extra };
}

function assignment(name: string, ports: readonly number[]) {
  return { clusterName: name, endpoints: [{ lbEndpoints: ports.map((p) => ({ hostIdentifier: { case: 'endpoint' as const, value: { address: socketAddress('127.0.0.1', p) } } })) }] };
}

/** A STATIC cluster of 127.0.0.1 ports; `extra` adds fields (e.g. a transport socket). */
export function staticCluster(name: string, ports: readonly number[], extra: Partial<ClusterInit> = {}) {
  return {
    name,
    any: pack(ClusterSchema, { name, clusterDiscoveryType: { case: 'type', value: Cluster_DiscoveryType.STATIC }, lbPolicy: Cluster_LbPolicy.ROUND_ROBIN, connectTimeout: { seconds: 1n }, loadAssignment: assignment(name, ports), ...extra }),
  };
}

export function edsCluster(name: string) {
  return {
    name,
    any: pack(ClusterSchema, { name, clusterDiscoveryType: { case: 'type', value: Cluster_DiscoveryType.EDS }, connectTimeout: { seconds: 1n }, edsClusterConfig: { edsConfig: { configSourceSpecifier: { case: 'ads', value: {} } } } }),
  };
}

export function endpoints(name: string, ports: readonly number[]) {
  return { name, any: pack(ClusterLoadAssignmentSchema, create(ClusterLoadAssignmentSchema, assignment(name, ports))) };
}

/** The bootstrap the agent writes, as Envoy JSON, pointing at an ADS server on 127.0.0.1. */
export function bootstrapJson(xdsPort: number, adminPort: number): object {
  return {
    node: { id: 'sidecar~127.0.0.1~app-1.default~default.svc.cluster.local', cluster: 'app.default', metadata: { NAMESPACE: 'default' } },
    admin: { address: { socket_address: { address: '127.0.0.1', port_value: adminPort } } },
    static_resources: {
      clusters: [
        {
          name: 'xds-grpc',
          type: 'STATIC',
          connect_timeout: '1s',
          load_assignment: { cluster_name: 'xds-grpc', endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: '127.0.0.1', port_value: xdsPort } } } }] }] },
        },
      ],
    },
    dynamic_resources: {
      ads_config: { api_type: 'GRPC', transport_api_version: 'V3', grpc_services: [{ envoy_grpc: { cluster_name: 'xds-grpc' } }] },
      lds_config: { ads: {}, resource_api_version: 'V3' },
      cds_config: { ads: {}, resource_api_version: 'V3' },
    },
  };
}

export function writeBootstrap(dir: string, xdsPort: number, adminPort: number): string {
  const file = join(dir, 'bootstrap.json');
  writeFileSync(file, JSON.stringify(bootstrapJson(xdsPort, adminPort), null, 2));
  return file;
}

/** The port the proxy's listener `name` is bound to (asserting that it is). */
export function boundPort(proxy: MeshProxy, name: string): number {
  const l = proxy.listeners.info().find((i) => i.name === name);
  assert.ok(l?.bound, `listener ${name} is bound`);
  return l.bound.port;
}

/**
 * A proxy of its own temporary directory whose ADS server gives it `clusters` and `listeners`,
 * started once every listener is bound; `stop` ends the proxy and the ADS server and removes the
 * directory.
 */
export async function startFixtureProxy(clusters: readonly FixtureResource[], listeners: readonly FixtureResource[]): Promise<{ proxy: MeshProxy; stop(): Promise<void> }> {
  const dir = mkdtempSync(join(tmpdir(), 'mesh-fixture-proxy-'));
  const ads = await new FixtureAds().listen();
  ads.set(TypeUrl.Cluster, [...clusters]);
  ads.set(TypeUrl.Listener, [...listeners]);
  const proxy = await startBoundProxy(dir, ads.port, listeners.length);
  return {
    proxy,
    async stop() {
      await proxy.stop(0);
      ads.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A proxy on the fixture ADS at `adsPort` (no admin port), started, once `listeners` of its listeners are bound. */
export async function startBoundProxy(dir: string, adsPort: number, listeners: number, drainTimeMs = 1_000): Promise<MeshProxy> {
  const proxy = new MeshProxy({ bootstrap: loadBootstrap({ path: writeBootstrap(dir, adsPort, 0) }), drainTimeMs, initialBackoffMs: 50 });
  await proxy.start();
  await eventually(() => assert.equal(proxy.listeners.info().filter((l) => l.bound).length, listeners), 10_000);
  return proxy;
}

/**
 * The ground of a test that runs mesh-proxy: a temporary directory, an app on loopback answering
 * with `handler`, and an ADS server giving the cluster `app` for it; `close` ends all three.
 */
export async function appBehindAds(prefix: string, handler: RequestListener): Promise<{ dir: string; ads: FixtureAds; close(): void }> {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  const app = createServer(handler);
  await new Promise<void>((r) => app.listen(0, '127.0.0.1', r));
  const ads = await new FixtureAds().listen();
  ads.set(TypeUrl.Cluster, [staticCluster('app', [(app.address() as AddressInfo).port])]);
  return {
    dir,
    ads,
    close() {
      ads.close();
      app.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
