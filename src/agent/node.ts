// The proxy's node identity and metadata (DESIGN.md, wire contracts): what the discovery server
// selects configuration by.
//
// Single variables of the settings registry (POD_NAME, POD_NAMESPACE, INSTANCE_IP, SERVICE_ACCOUNT,
// CLUSTER_ID, MESH_META_CLUSTER_ID, MESH_META_DNS_CAPTURE) are read with setting(), so a bad value is
// reported with the others at startup. The MESH_META_<KEY> / MESH_METAJSON_<KEY> variables are a
// family whose members the user names, so they are read by prefix from the environment given in.
import { networkInterfaces, hostname } from 'node:os';
import type { JsonObject, JsonValue } from '@bufbuild/protobuf';
import { setting } from '../common/env.js';
import { INTERCEPTION_MODES, parseDownwardApiFile, proxyConfigJson, readOptional, ProxyConfigError, type InterceptionMode, type ProxyConfig } from './mesh-config.js';

export const DEFAULT_LABELS_FILE = './etc/mesh/pod/labels';
export const META_PREFIX = 'MESH_META_';
export const METAJSON_PREFIX = 'MESH_METAJSON_';

// `pilot-agent proxy` runs a sidecar, or with `router` a gateway (DESIGN.md, gateway role): the
// node id's first part, one list for the agent and the discovery server that parses it.
export { PROXY_TYPES, type ProxyType } from '../model/proxy.js';
import type { ProxyType } from '../model/proxy.js';

export interface NodeIdentity {
  /** `<sidecar|router>~<ip>~<pod>.<namespace>~<domain>`. */
  readonly id: string;
  /** node.cluster: the service cluster. */
  readonly cluster: string;
  readonly metadata: JsonObject;
  readonly ip: string;
  readonly podName: string;
  readonly namespace: string;
  readonly domain: string;
}

/** The values a node is built from, already read from the environment and files. */
export interface NodeInputs {
  /** Default sidecar. */
  proxyType?: ProxyType;
  podName: string;
  namespace: string;
  /** The workload's IPs, the first one used in node.id. */
  ips: readonly string[];
  serviceAccount: string;
  clusterId: string;
  dnsCapture: boolean;
  labels: Readonly<Record<string, string>>;
  /** --domain; empty = `<namespace>.svc.cluster.local`. */
  domain: string;
  serviceCluster: string;
  proxyConfig: ProxyConfig;
  /** Variables to take MESH_META_* / MESH_METAJSON_* from. */
  env: Readonly<Record<string, string | undefined>>;
}

/** MESH_META_<KEY> as strings, then MESH_METAJSON_<KEY> parsed; a bad JSON value names its variable. */
export function metadataFromEnv(env: Readonly<Record<string, string | undefined>>): JsonObject {
  const out: JsonObject = {};
  const names = Object.keys(env).sort();
  for (const name of names) {
    const v = env[name];
    if (v !== undefined && name.startsWith(META_PREFIX) && name.length > META_PREFIX.length) out[name.slice(META_PREFIX.length)] = v;
  }
  for (const name of names) {
    const v = env[name];
    if (v === undefined || !name.startsWith(METAJSON_PREFIX) || name.length === METAJSON_PREFIX.length) continue;
    try {
      out[name.slice(METAJSON_PREFIX.length)] = JSON.parse(v) as JsonValue;
    } catch (e) {
      throw new ProxyConfigError(`${name}=${JSON.stringify(v)}: invalid JSON: ${(e as Error).message}`);
    }
  }
  return out;
}

function isStringMap(v: JsonValue | undefined): v is Record<string, string> {
  return v !== null && typeof v === 'object' && !Array.isArray(v) && Object.values(v).every((x) => typeof x === 'string');
}

/** The node's interception mode: MESH_META_INTERCEPTION_MODE when set (checked), else ProxyConfig's. */
function interceptionMode(fromEnv: JsonValue | undefined, fromProxyConfig: InterceptionMode): InterceptionMode {
  if (fromEnv === undefined || fromEnv === '') return fromProxyConfig;
  if (typeof fromEnv !== 'string' || !(INTERCEPTION_MODES as readonly string[]).includes(fromEnv)) {
    throw new ProxyConfigError(`${META_PREFIX}INTERCEPTION_MODE=${JSON.stringify(fromEnv)}: expected one of ${INTERCEPTION_MODES.join(', ')}`);
  }
  return fromEnv as InterceptionMode;
}

/** Pure: the node identity from resolved inputs. */
export function buildNodeIdentity(i: NodeInputs): NodeIdentity {
  const ip = i.ips[0] ?? '127.0.0.1';
  const domain = i.domain || `${i.namespace}.svc.cluster.local`;
  const family = metadataFromEnv(i.env);
  // MESH_METAJSON_LABELS may carry labels; the pod's labels file is the authority where both set one.
  const familyLabels = family['LABELS'];
  if (familyLabels !== undefined && !isStringMap(familyLabels)) {
    throw new ProxyConfigError(`${METAJSON_PREFIX}LABELS: expected a JSON object of strings`);
  }
  const metadata: JsonObject = {
    ...family,
    NAME: i.podName,
    NAMESPACE: i.namespace,
    LABELS: { ...(familyLabels ?? {}), ...i.labels },
    INSTANCE_IPS: i.ips.join(','),
    // The injector writes MESH_META_INTERCEPTION_MODE: as in the Go mesh, the variable wins.
    INTERCEPTION_MODE: interceptionMode(family['INTERCEPTION_MODE'], i.proxyConfig.interceptionMode),
    CLUSTER_ID: i.clusterId,
    DNS_CAPTURE: i.dnsCapture ? 'true' : 'false',
    PROXY_CONFIG: proxyConfigJson(i.proxyConfig),
  };
  if (i.serviceAccount) metadata['SERVICE_ACCOUNT'] = i.serviceAccount;
  return {
    id: `${i.proxyType ?? 'sidecar'}~${ip}~${i.podName}.${i.namespace}~${domain}`,
    cluster: i.serviceCluster,
    metadata,
    ip,
    podName: i.podName,
    namespace: i.namespace,
    domain,
  };
}

/** Non-loopback addresses of this host, IPv4 first; what a pod without INSTANCE_IP has. */
export function hostIps(): string[] {
  const all = Object.values(networkInterfaces()).flatMap((l) => l ?? []).filter((a) => !a.internal);
  return [...all.filter((a) => a.family === 'IPv4'), ...all.filter((a) => a.family === 'IPv6')].map((a) => a.address);
}

export interface NodeOptions {
  proxyType?: ProxyType;
  proxyConfig: ProxyConfig;
  /** --domain. */
  domain?: string;
  /** --serviceCluster; empty = proxyConfig.serviceCluster. */
  serviceCluster?: string;
  labelsFile?: string;
  /** Where the MESH_META_* family is read; proxyConfig.proxyMetadata fills what it lacks. */
  env?: Readonly<Record<string, string | undefined>>;
}

/** Reads the settings and the labels file and builds the node identity. */
export async function loadNodeIdentity(opts: NodeOptions): Promise<NodeIdentity> {
  const labelsFile = opts.labelsFile ?? DEFAULT_LABELS_FILE;
  const labelsText = await readOptional(labelsFile);
  const instanceIp = setting('INSTANCE_IP');
  const env = { ...opts.proxyConfig.proxyMetadata, ...(opts.env ?? process.env) };
  // These two are also registry settings (typed, checked at startup); proxyMetadata may set them too.
  const metaCluster = setting('MESH_META_CLUSTER_ID') || env['MESH_META_CLUSTER_ID'];
  const dnsCapture = setting('MESH_META_DNS_CAPTURE') || env['MESH_META_DNS_CAPTURE'] === 'true';
  return buildNodeIdentity({
    ...(opts.proxyType ? { proxyType: opts.proxyType } : {}),
    podName: setting('POD_NAME') || hostname(),
    namespace: setting('POD_NAMESPACE') || 'default',
    ips: instanceIp ? [instanceIp] : hostIps(),
    serviceAccount: setting('SERVICE_ACCOUNT'),
    clusterId: metaCluster || setting('CLUSTER_ID'),
    dnsCapture,
    labels: labelsText === undefined ? {} : parseDownwardApiFile(labelsText, labelsFile),
    domain: opts.domain ?? '',
    serviceCluster: opts.serviceCluster || opts.proxyConfig.serviceCluster,
    proxyConfig: opts.proxyConfig,
    env,
  });
}
