// The proxy's bootstrap: Envoy's Bootstrap message from `-c` (JSON, or YAML for .yaml/.yml) with
// `--config-yaml` merged over it the way Envoy merges (protobuf merge: scalars replaced, messages
// merged, repeated fields appended), then checked for what this proxy needs: the node, the admin
// address, and an ADS config whose gRPC service is a static cluster with an address.
// Every problem is a BootstrapError naming the source and the field.
import { readFileSync } from 'node:fs';
import { create, mergeFromBinary, toBinary, type JsonValue } from '@bufbuild/protobuf';
import { parseYaml } from '../common/lazy-yaml.js';
import { scope } from '../common/log.js';
import { BootstrapSchema, type Bootstrap } from '../gen/envoy/config/bootstrap/v3/bootstrap_pb.js';
import type { Cluster } from '../gen/envoy/config/cluster/v3/cluster_pb.js';
import type { Secret } from '../gen/envoy/extensions/transport_sockets/tls/v3/secret_pb.js';
import { ApiConfigSource_ApiType, type ConfigSource } from '../gen/envoy/config/core/v3/config_source_pb.js';
import { initialFetchTimeoutMs } from './initial-fetch.js';
import { ExtensionSchema, NodeSchema, type Node } from '../gen/envoy/config/core/v3/base_pb.js';
import { TRANSPORT_SOCKET_EXTENSIONS } from './tls/transport-sockets.js';
import { fromEnvoyJson } from '../envoy/types.js';
import { compileCluster, socketAddressOf } from './clusters.js';
import { ConfigError } from '../envoy/config-error.js';

const log = scope('config');

export class BootstrapError extends Error {}

export interface BootstrapOptions {
  /** -c / --config-path; may be empty when --config-yaml holds everything. */
  readonly path: string;
  /** --config-yaml, merged over the file. */
  readonly yaml?: string;
  /** --service-cluster: overrides node.cluster. */
  readonly serviceCluster?: string;
  /** --service-node: overrides node.id. */
  readonly serviceNode?: string;
}

export interface ProxyBootstrap {
  readonly bootstrap: Bootstrap;
  readonly node: Node;
  readonly admin: { readonly host: string; readonly port: number };
  /** host:port of the ADS server (from the static cluster the ads_config names). */
  readonly xdsAddress: string;
  readonly xdsCluster: string;
  readonly staticClusters: readonly Cluster[];
  /** static_resources.secrets, for SdsSecretConfigs without sds_config. */
  readonly staticSecrets: readonly Secret[];
  /**
   * gRPC targets of the static clusters, by name (`host:port`, or `unix:<path>` for a pipe): where
   * an SDS config's envoy_grpc cluster (the agent's `sds-grpc`) is reached.
   */
  readonly grpcTargets: ReadonlyMap<string, string>;
  /** Whether listeners / clusters come over ADS (lds_config / cds_config). */
  readonly lds: boolean;
  readonly cds: boolean;
  /** initial_fetch_timeout of lds_config / cds_config, ms; 0 = wait without limit (initial-fetch.ts). */
  readonly initialFetchTimeoutMs: { readonly lds: number; readonly cds: number };
}

function parseText(text: string, source: string, yaml: boolean): JsonValue {
  try {
    return (yaml ? parseYaml(text) : JSON.parse(text)) as JsonValue;
  } catch (e) {
    throw new BootstrapError(`${source}: not valid ${yaml ? 'YAML' : 'JSON'}: ${(e as Error).message}`);
  }
}

function decode(json: JsonValue, source: string): Bootstrap {
  if (json === null || typeof json !== 'object' || Array.isArray(json)) throw new BootstrapError(`${source}: expected an object (envoy.config.bootstrap.v3.Bootstrap)`);
  try {
    return fromEnvoyJson(BootstrapSchema, json);
  } catch (e) {
    throw new BootstrapError(`${source}: ${(e as Error).message}`);
  }
}

/** Reads, merges and validates the bootstrap; throws BootstrapError. */
export function loadBootstrap(o: BootstrapOptions): ProxyBootstrap {
  if (!o.path && !o.yaml) throw new BootstrapError('no bootstrap: -c/--config-path or --config-yaml is required');
  let b: Bootstrap | undefined;
  if (o.path) {
    let text: string;
    try {
      text = readFileSync(o.path, 'utf8');
    } catch (e) {
      throw new BootstrapError(`cannot read bootstrap ${o.path}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
    }
    b = decode(parseText(text, o.path, /\.ya?ml$/i.test(o.path)), o.path);
  }
  if (o.yaml) {
    const overlay = decode(parseText(o.yaml, '--config-yaml', true), '--config-yaml');
    b = b ? mergeFromBinary(BootstrapSchema, b, toBinary(BootstrapSchema, overlay)) : overlay;
  }
  const source = o.path || '--config-yaml';
  try {
    return validate(b!, o);
  } catch (e) {
    if (e instanceof ConfigError) throw new BootstrapError(`bootstrap ${source}: ${e.message}`);
    throw e;
  }
}

function viaAds(c: ConfigSource | undefined, field: string): boolean {
  if (!c) return false;
  if (c.configSourceSpecifier.case !== 'ads') throw new ConfigError(field, 'only ads is supported as a config source');
  return true;
}

function isPipeCluster(c: Cluster): boolean {
  const lb = c.loadAssignment?.endpoints[0]?.lbEndpoints[0];
  return lb?.hostIdentifier.case === 'endpoint' && lb.hostIdentifier.value.address?.address.case === 'pipe';
}

/** The gRPC target of a static cluster's first endpoint, if it has one. */
function grpcTarget(c: Cluster): string | undefined {
  const lb = c.loadAssignment?.endpoints[0]?.lbEndpoints[0];
  const a = lb?.hostIdentifier.case === 'endpoint' ? lb.hostIdentifier.value.address?.address : undefined;
  if (a?.case === 'pipe') return `unix:${a.value.path}`;
  if (a?.case === 'socketAddress' && a.value.portSpecifier.case === 'portValue') {
    const host = a.value.address.includes(':') ? `[${a.value.address}]` : a.value.address;
    return `${host}:${a.value.portSpecifier.value}`;
  }
  return undefined;
}

function validate(b: Bootstrap, o: BootstrapOptions): ProxyBootstrap {
  if (o.serviceCluster || o.serviceNode) b.node ??= create(NodeSchema);
  if (o.serviceCluster) b.node!.cluster = o.serviceCluster;
  if (o.serviceNode) b.node!.id = o.serviceNode;
  const node = b.node;
  if (!node?.id) throw new ConfigError('node.id', 'required (the proxy identifies itself to the xDS server with it)');
  node.extensions = [...node.extensions, ...TRANSPORT_SOCKET_EXTENSIONS.map((e) => create(ExtensionSchema, e))];
  const admin = socketAddressOf(b.admin?.address, 'admin.address');
  if (b.staticResources?.listeners.length) throw new ConfigError('static_resources.listeners', 'static listeners are not supported; listeners come over LDS');
  const all = b.staticResources?.clusters ?? [];
  // A Unix-socket cluster (the agent's SDS server, sds-grpc) is only a gRPC target (SDS): the
  // cluster manager has no upstreams over pipes, so it is not one of its clusters.
  const staticClusters = all.filter((c) => !isPipeCluster(c));
  for (const c of all) if (isPipeCluster(c)) log.info(`static cluster ${c.name}: a Unix socket cluster, used as a gRPC target (SDS) only`);
  const grpcTargets = new Map(all.flatMap((c) => {
    const t = grpcTarget(c);
    return t ? [[c.name, t] as const] : [];
  }));
  staticClusters.forEach((c) => compileCluster(c, new Map(), `static_resources.clusters[${all.indexOf(c)}]`));
  const ads = b.dynamicResources?.adsConfig;
  if (!ads) throw new ConfigError('dynamic_resources.ads_config', 'required (everything but the bootstrap arrives over ADS)');
  if (ads.apiType !== ApiConfigSource_ApiType.GRPC) {
    throw new ConfigError('dynamic_resources.ads_config.api_type', `${ApiConfigSource_ApiType[ads.apiType]} is not supported; use GRPC (State of the World)`);
  }
  const svc = ads.grpcServices[0];
  if (!svc) throw new ConfigError('dynamic_resources.ads_config.grpc_services', 'one gRPC service is required');
  if (ads.grpcServices.length > 1) log.warn('dynamic_resources.ads_config.grpc_services: only the first service is used');
  let xdsAddress: string;
  let xdsCluster: string;
  const field = 'dynamic_resources.ads_config.grpc_services[0]';
  if (svc.targetSpecifier.case === 'envoyGrpc') {
    xdsCluster = svc.targetSpecifier.value.clusterName;
    const i = staticClusters.findIndex((c) => c.name === xdsCluster);
    if (i < 0) throw new ConfigError(`${field}.envoy_grpc.cluster_name`, `${JSON.stringify(xdsCluster)} is not a cluster of static_resources.clusters`);
    const lb = staticClusters[i]!.loadAssignment?.endpoints[0]?.lbEndpoints[0];
    if (lb?.hostIdentifier.case !== 'endpoint') throw new ConfigError(`static_resources.clusters[${i}].load_assignment`, `the xDS cluster ${xdsCluster} needs an endpoint address`);
    const at = socketAddressOf(lb.hostIdentifier.value.address, `static_resources.clusters[${i}].load_assignment.endpoints[0].lb_endpoints[0].endpoint.address`);
    xdsAddress = at.host.includes(':') ? `[${at.host}]:${at.port}` : `${at.host}:${at.port}`;
    if (staticClusters[i]!.transportSocket) log.warn(`static cluster ${xdsCluster}: transport_socket is not supported yet; the xDS connection is plaintext`);
  } else if (svc.targetSpecifier.case === 'googleGrpc') {
    xdsCluster = '';
    xdsAddress = svc.targetSpecifier.value.targetUri;
    if (!xdsAddress) throw new ConfigError(`${field}.google_grpc.target_uri`, 'required');
  } else {
    throw new ConfigError(field, 'envoy_grpc or google_grpc is required');
  }
  const lds = viaAds(b.dynamicResources?.ldsConfig, 'dynamic_resources.lds_config');
  const cds = viaAds(b.dynamicResources?.cdsConfig, 'dynamic_resources.cds_config');
  if (!lds && !cds) throw new ConfigError('dynamic_resources', 'lds_config or cds_config (ads) is required');
  const fetchTimeouts = { lds: initialFetchTimeoutMs(b.dynamicResources?.ldsConfig), cds: initialFetchTimeoutMs(b.dynamicResources?.cdsConfig) };
  return { bootstrap: b, node, admin, xdsAddress, xdsCluster, staticClusters, staticSecrets: b.staticResources?.secrets ?? [], grpcTargets, lds, cds, initialFetchTimeoutMs: fetchTimeouts };
}
