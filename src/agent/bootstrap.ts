// The proxy's bootstrap: a pure builder of envoy.config.bootstrap.v3.Bootstrap (node, admin, the
// xDS cluster, ADS for listeners and clusters), the MESH_BOOTSTRAP_OVERRIDE merge, its Envoy JSON,
// and `--templateFile` rendering.
import { create, merge, type JsonValue, type MessageInitShape } from '@bufbuild/protobuf';
import { parseYaml } from '../common/lazy-yaml.js';
import { isIP } from 'node:net';
import { BootstrapSchema, type Bootstrap } from '../gen/envoy/config/bootstrap/v3/bootstrap_pb.js';
import { Cluster_DiscoveryType, type ClusterSchema } from '../gen/envoy/config/cluster/v3/cluster_pb.js';
import type { AddressSchema } from '../gen/envoy/config/core/v3/address_pb.js';
import { ApiConfigSource_ApiType, ApiVersion, type ConfigSourceSchema } from '../gen/envoy/config/core/v3/config_source_pb.js';
import { HttpProtocolOptionsSchema } from '../gen/envoy/extensions/upstreams/http/v3/http_protocol_options_pb.js';
import { fromEnvoyJson, pack, toEnvoyJson } from '../envoy/types.js';
import type { ProxyConfig } from './mesh-config.js';
import type { NodeIdentity } from './node.js';

/** The static cluster the proxy reaches its xDS server through (named as the production mesh does). */
export const XDS_CLUSTER = 'xds-grpc';
/** The static cluster of the agent's SDS server (its Unix socket). */
export const SDS_CLUSTER = 'sds-grpc';

export interface BootstrapInputs {
  node: NodeIdentity;
  proxyConfig: ProxyConfig;
  /** host:port of the proxy's xDS server: the agent's xDS proxy, or the discovery address. */
  xdsAddress: string;
  /** --outlierLogPath; empty = no outlier event log. */
  outlierLogPath?: string;
  /** Absolute path of the agent's SDS socket; absent = no workload certificates. */
  sdsSocket?: string;
  /** PILOT_INITIAL_FETCH_TIMEOUT in ms: how long the proxy waits for its first listeners/clusters; 0 = no limit. */
  initialFetchTimeoutMs?: number;
}

/** Splits `host:port` / `[v6]:port`; a malformed address is an error naming it. */
export function splitHostPort(addr: string, what: string): { host: string; port: number } {
  const m = /^(?:\[([^\]]+)\]|([^:[\]]+)):(\d{1,5})$/.exec(addr.trim());
  const port = m ? Number(m[3]) : NaN;
  if (!m || port < 1 || port > 65535) throw new Error(`${what} "${addr}": expected host:port`);
  return { host: (m[1] ?? m[2])!, port };
}

type Address = MessageInitShape<typeof AddressSchema>;

/** A static gRPC cluster of one address (HTTP/2 upstream). */
function grpcCluster(name: string, address: Address, type: Cluster_DiscoveryType): MessageInitShape<typeof ClusterSchema> {
  return {
    name,
    clusterDiscoveryType: { case: 'type', value: type },
    connectTimeout: { seconds: 1n },
    loadAssignment: {
      clusterName: name,
      endpoints: [{ lbEndpoints: [{ hostIdentifier: { case: 'endpoint', value: { address } } }] }],
    },
    // gRPC needs HTTP/2.
    typedExtensionProtocolOptions: {
      'envoy.extensions.upstreams.http.v3.HttpProtocolOptions': pack(HttpProtocolOptionsSchema, {
        upstreamProtocolOptions: { case: 'explicitHttpConfig', value: { protocolConfig: { case: 'http2ProtocolOptions', value: {} } } },
      }),
    },
  };
}

function xdsCluster(addr: string): MessageInitShape<typeof ClusterSchema> {
  const { host, port } = splitHostPort(addr, 'xDS address');
  const address: Address = { address: { case: 'socketAddress', value: { address: host, portSpecifier: { case: 'portValue', value: port } } } };
  // An IP needs no resolution; a name (the discovery Service) is re-resolved as it changes.
  return grpcCluster(XDS_CLUSTER, address, isIP(host) ? Cluster_DiscoveryType.STATIC : Cluster_DiscoveryType.STRICT_DNS);
}

const viaAds = (initialFetchTimeoutMs = 0): MessageInitShape<typeof ConfigSourceSchema> => ({
  configSourceSpecifier: { case: 'ads', value: {} },
  resourceApiVersion: ApiVersion.V3,
  // As Envoy reads it: 0s = wait for the first response without limit.
  initialFetchTimeout: { seconds: BigInt(Math.floor(initialFetchTimeoutMs / 1000)), nanos: (initialFetchTimeoutMs % 1000) * 1_000_000 },
});

/** Pure: the bootstrap for one proxy. */
export function buildBootstrap(i: BootstrapInputs): Bootstrap {
  return create(BootstrapSchema, {
    // SDS tells the discovery server that this proxy has a workload certificate to do mesh mTLS with.
    node: { id: i.node.id, cluster: i.node.cluster, metadata: i.sdsSocket ? { ...i.node.metadata, SDS: 'true' } : i.node.metadata },
    admin: {
      address: { address: { case: 'socketAddress', value: { address: '127.0.0.1', portSpecifier: { case: 'portValue', value: i.proxyConfig.proxyAdminPort } } } },
    },
    staticResources: {
      clusters: [
        xdsCluster(i.xdsAddress),
        ...(i.sdsSocket ? [grpcCluster(SDS_CLUSTER, { address: { case: 'pipe', value: { path: i.sdsSocket } } }, Cluster_DiscoveryType.STATIC)] : []),
      ],
    },
    dynamicResources: {
      adsConfig: {
        apiType: ApiConfigSource_ApiType.GRPC,
        transportApiVersion: ApiVersion.V3,
        setNodeOnFirstMessageOnly: true,
        grpcServices: [{ targetSpecifier: { case: 'envoyGrpc', value: { clusterName: XDS_CLUSTER } } }],
      },
      ldsConfig: viaAds(i.initialFetchTimeoutMs),
      cdsConfig: viaAds(i.initialFetchTimeoutMs),
    },
    ...(i.outlierLogPath ? { clusterManager: { outlierDetection: { eventLogPath: i.outlierLogPath } } } : {}),
  });
}

/**
 * MESH_BOOTSTRAP_OVERRIDE: a bootstrap in Envoy JSON or YAML merged over the generated one with
 * protobuf merge semantics (as the Go mesh's ISTIO_BOOTSTRAP_OVERRIDE): fields it sets replace
 * scalars and merge into messages, lists are appended (static clusters, listeners). Unknown
 * fields or wrong types are an error naming the file.
 */
export function applyBootstrapOverride(base: Bootstrap, text: string, file: string): Bootstrap {
  let doc: unknown;
  try {
    doc = parseYaml(text);
  } catch (e) {
    throw new Error(`MESH_BOOTSTRAP_OVERRIDE ${file}: not valid JSON or YAML: ${(e as Error).message}`);
  }
  if (typeof doc !== 'object' || doc === null || Array.isArray(doc)) throw new Error(`MESH_BOOTSTRAP_OVERRIDE ${file}: expected a bootstrap object`);
  let override: Bootstrap;
  try {
    override = fromEnvoyJson(BootstrapSchema, doc as JsonValue);
  } catch (e) {
    throw new Error(`MESH_BOOTSTRAP_OVERRIDE ${file}: not a valid bootstrap: ${(e as Error).message}`);
  }
  const merged = create(BootstrapSchema);
  merge(BootstrapSchema, merged, base);
  merge(BootstrapSchema, merged, override);
  // Struct is a map in protobuf (merged key by key); the generated type holds it as a plain
  // object, which merge() does not enter.
  if (merged.node && (base.node?.metadata || override.node?.metadata)) merged.node.metadata = { ...base.node?.metadata, ...override.node?.metadata };
  return merged;
}

/** Envoy's JSON of a bootstrap (proto field names, Any as `@type`), as the proxy's -c file. */
export function bootstrapJson(b: Bootstrap): string {
  return JSON.stringify(toEnvoyJson(BootstrapSchema, b), null, 2) + '\n';
}

/**
 * The values a `--templateFile` may use as `{{ .name }}`; inserted as they are (no quoting), except
 * `meta_json_str`, which is the node metadata as a JSON object.
 */
export function templateValues(i: BootstrapInputs): Record<string, string> {
  const xds = splitHostPort(i.xdsAddress, 'xDS address');
  return {
    nodeID: i.node.id,
    cluster: i.node.cluster,
    meta_json_str: JSON.stringify(i.node.metadata),
    admin_port: String(i.proxyConfig.proxyAdminPort),
    xds_address: i.xdsAddress,
    xds_host: xds.host,
    xds_port: String(xds.port),
    discovery_address: i.proxyConfig.discoveryAddress,
    config_path: i.proxyConfig.configPath,
    outlier_log_path: i.outlierLogPath ?? '',
    pod_name: i.node.podName,
    pod_namespace: i.node.namespace,
    instance_ip: i.node.ip,
  };
}

/**
 * Renders `{{ .name }}` placeholders: a small subset of Go templates, enough for a bootstrap file.
 * An unknown name is an error naming the template, line and name (a typo would otherwise produce
 * a bootstrap the proxy rejects far from its cause).
 */
export function renderTemplate(text: string, values: Readonly<Record<string, string>>, file: string): string {
  return text.replace(/\{\{-?\s*\.([A-Za-z_][A-Za-z0-9_]*)\s*-?\}\}/g, (match, name: string, offset: number) => {
    const v = values[name];
    if (v === undefined) {
      const line = text.slice(0, offset).split('\n').length;
      throw new Error(`${file}:${line}: unknown template value ${match}; known: ${Object.keys(values).sort().join(', ')}`);
    }
    return v;
  });
}
