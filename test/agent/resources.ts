// Small Envoy resources for the agent's xDS tests.
import type { Any } from '@bufbuild/protobuf/wkt';
import { ClusterSchema, Cluster_DiscoveryType } from '../../src/gen/envoy/config/cluster/v3/cluster_pb.js';
import { ListenerSchema } from '../../src/gen/envoy/config/listener/v3/listener_pb.js';
import { RouteConfigurationSchema } from '../../src/gen/envoy/config/route/v3/route_pb.js';
import { ClusterLoadAssignmentSchema } from '../../src/gen/envoy/config/endpoint/v3/endpoint_pb.js';
import { HttpConnectionManagerSchema } from '../../src/gen/envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager_pb.js';
import { ApiVersion } from '../../src/gen/envoy/config/core/v3/config_source_pb.js';
import { pack } from '../../src/envoy/types.js';

export function edsCluster(name: string): Any {
  return pack(ClusterSchema, {
    name,
    clusterDiscoveryType: { case: 'type', value: Cluster_DiscoveryType.EDS },
    edsClusterConfig: { edsConfig: { configSourceSpecifier: { case: 'ads', value: {} }, resourceApiVersion: ApiVersion.V3 } },
  });
}

/** A listener whose HTTP connection manager takes its routes from RDS `route`. */
export function rdsListener(name: string, route: string, port = 8080): Any {
  const hcm = pack(HttpConnectionManagerSchema, {
    statPrefix: name,
    routeSpecifier: { case: 'rds', value: { routeConfigName: route, configSource: { configSourceSpecifier: { case: 'ads', value: {} }, resourceApiVersion: ApiVersion.V3 } } },
  });
  return pack(ListenerSchema, {
    name,
    address: { address: { case: 'socketAddress', value: { address: '0.0.0.0', portSpecifier: { case: 'portValue', value: port } } } },
    filterChains: [{ filters: [{ name: 'envoy.filters.network.http_connection_manager', configType: { case: 'typedConfig', value: hcm } }] }],
  });
}

export function route(name: string): Any {
  return pack(RouteConfigurationSchema, { name });
}

export function endpoints(cluster: string): Any {
  return pack(ClusterLoadAssignmentSchema, { clusterName: cluster });
}
