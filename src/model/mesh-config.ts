// The discovery server's mesh config file (`--meshConfig`): the fields it applies, read purely
// from the file's text. `pathNormalization`, the ext_authz `extensionProviders`, `enableAutoMtls`,
// `trustDomain`, `trustDomainAliases`, `localityLbSetting`, the Ingress fields (`ingressControllerMode`, `ingressClass`,
// `ingressSelector`, `ingressService`), the access log fields (mesh-access-log.ts) and the traffic
// defaults (mesh-traffic-defaults.ts) are effective; the other fields are reported so that the
// program can say they are not.
import { parse as parseYaml, YAMLParseError } from 'yaml';
import { PATH_NORMALIZATIONS, type PathNormalization } from '../networking/common.js';
import { ExtensionProviderError, parseExtensionProviders, type ExtensionProviders } from './extension-providers.js';
import { DEFAULT_INGRESS_SETTINGS, INGRESS_CONTROLLER_MODES, type IngressControllerMode, type IngressSettings } from './ingress/class.js';
import { DEFAULT_LOCALITY_LB, type LocalityLbSetting } from '../networking/locality-lb.js';
import type { TcpKeepaliveSettings } from '../networking/traffic-policy.js';
import { DurationError, parseDuration } from '../common/duration.js';
import { ROOT_NAMESPACE } from '../api/types.js';
import { checkNamespace } from '../api/syntax.js';
import { ACCESS_LOG_FIELDS, AccessLogSettingsError, readAccessLog, type MeshAccessLog } from './mesh-access-log.js';
import { readTelemetryProviders, type TelemetryProviders } from './telemetry-providers.js';
import { readTrafficDefaults, TRAFFIC_DEFAULT_FIELDS, TrafficDefaultsError, type MeshTrafficDefaults } from './mesh-traffic-defaults.js';

export class MeshConfigError extends Error {}

export interface MeshConfig {
  /** `pathNormalization.normalization`; DEFAULT and an absent field are BASE. */
  readonly pathNormalization: PathNormalization;
  /** `extensionProviders`: the external authorizers of CUSTOM AuthorizationPolicies. */
  readonly extensionProviders: ExtensionProviders;
  /** `enableAutoMtls` (default true): clients use mesh mTLS to endpoints with a sidecar unless a DestinationRule says otherwise. */
  readonly enableAutoMtls: boolean;
  /**
   * `trustDomain`: the mesh's trust domain (the CA's issued identities, SAN checks, principals);
   * unset: the discovery server's TRUST_DOMAIN (default cluster.local).
   */
  readonly trustDomain?: string;
  /** `trustDomainAliases`: other trust domains that name the same workloads (SAN checks, AuthorizationPolicy principals). */
  readonly trustDomainAliases: readonly string[];
  /** `localityLbSetting` (default enabled): locality failover for DestinationRules with outlier detection that set none of their own. */
  readonly localityLbSetting: LocalityLbSetting;
  /** Which orchestrator Ingresses are translated, and the gateway their Gateways select (model/ingress/). */
  readonly ingress: IngressSettings;
  /** `h2UpgradePolicy: UPGRADE` (default DO_NOT_UPGRADE): outbound clusters of HTTP ports speak HTTP/2 unless a DestinationRule says otherwise. */
  readonly h2Upgrade: boolean;
  /** `tcpKeepalive`: every sidecar and gateway cluster's TCP keepalive, under a DestinationRule's (as the Go mesh's applyTCPKeepalive). */
  readonly tcpKeepalive?: TcpKeepaliveSettings;
  /** `accessLogFile` and its format: every proxy's access logs; unset: none. */
  readonly accessLog?: MeshAccessLog;
  /** The providers Telemetry resources name (access loggers, metrics), and `defaultProviders.accessLogging`/`metrics`. */
  readonly telemetryProviders: TelemetryProviders;
  /** `rootNamespace` (default mesh-system): the namespace whose policies, Sidecar and rules apply mesh-wide. */
  readonly rootNamespace: string;
  /** `outboundTrafficPolicy`, `connectTimeout`, `defaultHttpRetryPolicy`: what applies where resources say nothing. */
  readonly traffic: MeshTrafficDefaults;
  /** Top-level fields present in the file that have no effect yet. */
  readonly notEffective: readonly string[];
}

export const DEFAULT_MESH_CONFIG: MeshConfig = { pathNormalization: 'BASE', extensionProviders: { authorizers: new Map(), notEffective: [] }, enableAutoMtls: true, trustDomainAliases: [], localityLbSetting: DEFAULT_LOCALITY_LB, ingress: DEFAULT_INGRESS_SETTINGS, h2Upgrade: false, rootNamespace: ROOT_NAMESPACE, traffic: {}, telemetryProviders: readTelemetryProviders({}), notEffective: [] };

const EFFECTIVE_FIELDS = new Set(['pathNormalization', 'extensionProviders', 'enableAutoMtls', 'trustDomain', 'trustDomainAliases', 'localityLbSetting', 'ingressControllerMode', 'ingressClass', 'ingressSelector', 'ingressService', 'h2UpgradePolicy', 'tcpKeepalive', 'rootNamespace', ...ACCESS_LOG_FIELDS, ...TRAFFIC_DEFAULT_FIELDS]);

const H2_UPGRADE_POLICIES = ['DO_NOT_UPGRADE', 'UPGRADE'];

function readRootNamespace(doc: Record<string, unknown>, file: string): string {
  const v = doc['rootNamespace'] ?? ROOT_NAMESPACE;
  const problem = typeof v === 'string' ? checkNamespace(v) : `expected a namespace name, got ${JSON.stringify(v)}`;
  if (problem) throw new MeshConfigError(`${file}: rootNamespace: ${problem}`);
  return v as string;
}

function readH2Upgrade(doc: Record<string, unknown>, file: string): boolean {
  const v = doc['h2UpgradePolicy'] ?? 'DO_NOT_UPGRADE';
  if (typeof v !== 'string' || !H2_UPGRADE_POLICIES.includes(v)) throw new MeshConfigError(`${file}: h2UpgradePolicy: ${JSON.stringify(v)} is not one of ${H2_UPGRADE_POLICIES.join(', ')}`);
  return v === 'UPGRADE';
}

const tcpKeepaliveField = (k: TcpKeepaliveSettings | undefined): Pick<MeshConfig, 'tcpKeepalive'> => (k ? { tcpKeepalive: k } : {});

/** `tcpKeepalive: {probes, time, interval}`: a count and two durations (`600s`, `1m`), each optional. */
function readTcpKeepalive(doc: Record<string, unknown>, file: string): TcpKeepaliveSettings | undefined {
  const v = doc['tcpKeepalive'];
  if (v === undefined || v === null) return undefined;
  if (!isRecord(v)) throw new MeshConfigError(`${file}: tcpKeepalive: expected a mapping with probes, time and interval`);
  const unknown = Object.keys(v).filter((k) => !['probes', 'time', 'interval'].includes(k));
  if (unknown.length > 0) throw new MeshConfigError(`${file}: tcpKeepalive: unknown field ${unknown.join(', ')} (expected probes, time, interval)`);
  const probes = v['probes'];
  if (probes !== undefined && (typeof probes !== 'number' || !Number.isInteger(probes) || probes < 0)) throw new MeshConfigError(`${file}: tcpKeepalive.probes: ${JSON.stringify(probes)} is not a non-negative integer`);
  const durationField = (k: 'time' | 'interval'): string | undefined => {
    const d = v[k];
    if (d === undefined) return undefined;
    const bad = () => new MeshConfigError(`${file}: tcpKeepalive.${k}: ${JSON.stringify(d)} is not a positive duration such as 600s or 1m`);
    if (typeof d !== 'string') throw bad();
    try {
      if (parseDuration(d) <= 0n) throw bad();
    } catch (e) {
      if (e instanceof DurationError) throw bad();
      throw e;
    }
    return d;
  };
  const time = durationField('time');
  const interval = durationField('interval');
  return { ...(probes !== undefined ? { probes } : {}), ...(time ? { time } : {}), ...(interval ? { interval } : {}) };
}

function readIngressFields(doc: Record<string, unknown>, file: string): IngressSettings {
  const mode = doc['ingressControllerMode'] ?? DEFAULT_INGRESS_SETTINGS.mode;
  if (typeof mode !== 'string' || !(INGRESS_CONTROLLER_MODES as readonly string[]).includes(mode)) {
    throw new MeshConfigError(`${file}: ingressControllerMode: ${JSON.stringify(mode)} is not one of ${INGRESS_CONTROLLER_MODES.join(', ')}`);
  }
  const text = (field: 'ingressClass' | 'ingressSelector' | 'ingressService'): string => {
    const v = doc[field] ?? DEFAULT_INGRESS_SETTINGS[field];
    if (typeof v !== 'string') throw new MeshConfigError(`${file}: ${field}: expected a string, got ${JSON.stringify(v)}`);
    return v;
  };
  return { mode: mode as IngressControllerMode, ingressClass: text('ingressClass'), ingressSelector: text('ingressSelector'), ingressService: text('ingressService') };
}

/** A SPIFFE trust domain name: lower-case letters, digits, `.`, `-` and `_`. */
const TRUST_DOMAIN = /^[a-z0-9._-]+$/;

function readMtlsFields(doc: Record<string, unknown>, file: string): Pick<MeshConfig, 'enableAutoMtls' | 'trustDomain' | 'trustDomainAliases'> {
  const trustDomain = doc['trustDomain'];
  if (trustDomain !== undefined && (typeof trustDomain !== 'string' || !TRUST_DOMAIN.test(trustDomain))) {
    throw new MeshConfigError(`${file}: trustDomain: expected a SPIFFE trust domain name (lower-case letters, digits, ".", "-", "_"), got ${JSON.stringify(trustDomain)}`);
  }
  const auto = doc['enableAutoMtls'] ?? true;
  if (typeof auto !== 'boolean') throw new MeshConfigError(`${file}: enableAutoMtls: expected true or false, got ${JSON.stringify(auto)}`);
  const aliases = doc['trustDomainAliases'] ?? [];
  if (!Array.isArray(aliases) || aliases.some((a) => typeof a !== 'string' || a === '' || a.includes('/'))) {
    throw new MeshConfigError(`${file}: trustDomainAliases: expected a list of trust domain names (no "/"), got ${JSON.stringify(aliases)}`);
  }
  return { enableAutoMtls: auto, ...(trustDomain !== undefined ? { trustDomain } : {}), trustDomainAliases: aliases as string[] };
}

/** `localityLbSetting`: enabled, failover, failoverPriority, distribute (each entry's shares adding up to 100). */
function readLocalityLb(doc: Record<string, unknown>, file: string): LocalityLbSetting {
  const v = doc['localityLbSetting'];
  if (v === undefined || v === null) return DEFAULT_LOCALITY_LB;
  const fail = (field: string, expected: string, got: unknown) => new MeshConfigError(`${file}: localityLbSetting${field}: expected ${expected}, got ${JSON.stringify(got)}`);
  if (!isRecord(v)) throw fail('', 'a mapping', v);
  const unknown = Object.keys(v).filter((k) => !['enabled', 'failover', 'failoverPriority', 'distribute'].includes(k));
  if (unknown.length > 0) throw new MeshConfigError(`${file}: localityLbSetting.${unknown[0]}: unknown field (expected enabled, failover, failoverPriority, distribute)`);
  const enabled = v['enabled'] ?? true;
  if (typeof enabled !== 'boolean') throw fail('.enabled', 'true or false', enabled);
  const failover = v['failover'] ?? [];
  if (!Array.isArray(failover)) throw fail('.failover', 'a list of {from, to}', failover);
  const pairs = failover.map((f: unknown, i) => {
    if (!isRecord(f) || typeof f['from'] !== 'string' || typeof f['to'] !== 'string' || !f['from'] || !f['to'] || f['from'] === f['to']) throw fail(`.failover[${i}]`, 'two different regions, {from, to}', f);
    return { from: f['from'], to: f['to'] };
  });
  const labels = v['failoverPriority'] ?? [];
  if (!Array.isArray(labels) || labels.some((l) => typeof l !== 'string' || l === '')) throw fail('.failoverPriority', 'a list of label names', labels);
  const distribute = v['distribute'] ?? [];
  if (!Array.isArray(distribute)) throw fail('.distribute', 'a list of {from, to}', distribute);
  const shares = distribute.map((d: unknown, i) => {
    const to = isRecord(d) ? d['to'] : undefined;
    const weights = isRecord(to) ? Object.values(to) : [];
    if (!isRecord(d) || typeof d['from'] !== 'string' || !d['from'] || !isRecord(to) || weights.some((w) => !Number.isInteger(w) || (w as number) < 0)) {
      throw fail(`.distribute[${i}]`, '{from: <locality>, to: {<locality>: <percent>}}', d);
    }
    const total = (weights as number[]).reduce((a, b) => a + b, 0);
    if (total !== 100) throw new MeshConfigError(`${file}: localityLbSetting.distribute[${i}].to: the shares must add up to 100, got ${total}`);
    return { from: d['from'], to: to as Record<string, number> };
  });
  if (shares.length > 0 && pairs.length > 0) throw new MeshConfigError(`${file}: localityLbSetting: distribute and failover cannot both be set`);
  return {
    enabled,
    ...(pairs.length > 0 ? { failover: pairs } : {}),
    ...(labels.length > 0 ? { failoverPriority: labels as string[] } : {}),
    ...(shares.length > 0 ? { distribute: shares } : {}),
  };
}

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Parses the mesh config YAML; errors name the file, the field and what is expected. */
export function parseMeshConfig(text: string, file: string): MeshConfig {
  let doc: unknown;
  try {
    doc = parseYaml(text);
  } catch (e) {
    if (e instanceof YAMLParseError) throw new MeshConfigError(`${file}: not valid YAML: ${e.message}`);
    throw e;
  }
  if (doc === null || doc === undefined) return DEFAULT_MESH_CONFIG;
  if (!isRecord(doc)) throw new MeshConfigError(`${file}: expected a mapping of mesh config fields`);
  const pn = doc['pathNormalization'];
  let pathNormalization: PathNormalization = 'BASE';
  if (pn !== undefined && pn !== null) {
    if (!isRecord(pn)) throw new MeshConfigError(`${file}: pathNormalization: expected a mapping with "normalization"`);
    const mode = pn['normalization'];
    if (mode !== undefined && mode !== 'DEFAULT') {
      if (typeof mode !== 'string' || !(PATH_NORMALIZATIONS as readonly string[]).includes(mode)) {
        throw new MeshConfigError(`${file}: pathNormalization.normalization: ${JSON.stringify(mode)} is not one of DEFAULT, ${PATH_NORMALIZATIONS.join(', ')}`);
      }
      pathNormalization = mode as PathNormalization;
    }
  }
  let extensionProviders: ExtensionProviders;
  try {
    extensionProviders = parseExtensionProviders(doc['extensionProviders']);
  } catch (e) {
    if (e instanceof ExtensionProviderError) throw new MeshConfigError(`${file}: ${e.message}`);
    throw e;
  }
  let accessLog: MeshAccessLog | undefined;
  let traffic: MeshTrafficDefaults;
  let telemetryProviders: TelemetryProviders;
  try {
    accessLog = readAccessLog(doc);
    telemetryProviders = readTelemetryProviders(doc);
    traffic = readTrafficDefaults(doc);
  } catch (e) {
    if (e instanceof AccessLogSettingsError || e instanceof TrafficDefaultsError) throw new MeshConfigError(`${file}: ${e.message}`);
    throw e;
  }
  const notEffective = Object.keys(doc).filter((k) => !EFFECTIVE_FIELDS.has(k)).sort();
  notEffective.push(...extensionProviders.notEffective.map((p) => `extensionProviders: ${p}`), ...telemetryProviders.notEffective);
  return { pathNormalization, extensionProviders, ...readMtlsFields(doc, file), localityLbSetting: readLocalityLb(doc, file), ingress: readIngressFields(doc, file), h2Upgrade: readH2Upgrade(doc, file), ...tcpKeepaliveField(readTcpKeepalive(doc, file)), ...(accessLog ? { accessLog } : {}), rootNamespace: readRootNamespace(doc, file), traffic, telemetryProviders, notEffective };
}
