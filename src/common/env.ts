// The typed registry of every environment variable in the spec (commands.md, Environment variables
// and Limits). Code reads settings only through `setting()`, so a bad value is caught once at
// startup with the variable's name, and `/debug/env` can list the effective values.
import { DurationError, parseDuration, formatDuration, toMillis } from './duration.js';
import { SETTINGS, type Def, type Program, type SettingName, type SettingScope, type SettingType, type TypeOfSetting } from './env-table.js';

export type { Program, SettingName, SettingScope, SettingType } from './env-table.js';

/** Durations are returned in milliseconds, ready for timers; the rest in their natural JS type. */
export type SettingValue<T extends SettingType> = T extends 'Boolean' ? boolean : T extends 'String' ? string : number;

/**
 * Settings that some component reads. Everything else is accepted and reported as "not yet
 * effective" at startup and in --help. test/common/wiring.test.ts keeps this list equal to the set
 * of names passed to `setting()` in src/, so it cannot drift from the code.
 */
export const WIRED_SETTINGS: ReadonlySet<SettingName> = new Set<SettingName>([
  // The discovery server's are read once in cli/discovery-settings.ts and passed to the modules named.
  // agent/sds/workload-certs.ts
  'CA_ADDR',
  'CA_PROVIDER',
  'CA_ROOT_CA',
  'ECC_SIGNATURE_ALGORITHM',
  'PKCS8_KEY',
  'FILE_MOUNTED_CERTS',
  'OUTPUT_CERTS',
  'PROV_CERT',
  'SECRET_GRACE_PERIOD_RATIO',
  'SECRET_TTL',
  'SPIFFE_BUNDLE_ENDPOINTS', // security/federation/: the agent's ROOTCA, pilot-discovery's secured port
  'XDS_AUTH_PROVIDER',
  // security/credentials/setup.ts (credentialName over SDS)
  'MESHD_ENABLE_SDS_SERVER',
  // security/ca/setup.ts
  'AUTHORITY_ENABLE_JITTER_FOR_ROOT_CERT_ROTATOR',
  'AUTHORITY_SELF_SIGNED_CA_CERT_TTL',
  'AUTHORITY_SELF_SIGNED_CA_DIR',
  'AUTHORITY_SELF_SIGNED_CA_RSA_KEY_SIZE',
  'AUTHORITY_SELF_SIGNED_ROOT_CERT_CHECK_INTERVAL',
  'AUTHORITY_SELF_SIGNED_ROOT_CERT_GRACE_PERIOD_PERCENTILE',
  'DEFAULT_WORKLOAD_CERT_TTL',
  'ENABLE_CA_SERVER',
  'EXTERNAL_CA',
  'JWT_POLICY',
  'MAX_WORKLOAD_CERT_TTL',
  'ORCH_SIGNER',
  'PILOT_CERT_PROVIDER',
  'PILOT_ENABLE_XDS_IDENTITY_CHECK',
  'REQUIRE_3P_TOKEN',
  'ROOT_CA_DIR',
  'TOKEN_AUDIENCES',
  'TOKEN_ISSUER',
  'TRUST_DOMAIN',
  'XDS_AUTH',
  'XDS_AUTH_PLAINTEXT',
  // xds/generators/mtls.ts (PeerAuthentication, auto mTLS)
  'PILOT_SIDECAR_ENABLE_INBOUND_TLS_V2',
  'PILOT_SKIP_VALIDATE_TRUST_DOMAIN',
  // webhooks/validation.ts, webhooks/server.ts, config/orchestrator.ts
  'VALIDATION_ENABLED',
  'MESHD_CUSTOM_HOST',
  'PILOT_ENABLE_CRD_VALIDATION',
  // cli/discovery-server.ts (debug/analysis.ts): analysis served, logged, and with status on written to status
  'PILOT_ENABLE_ANALYSIS',
  // cli/discovery-server.ts (status/): status writing and config distribution tracking
  'PILOT_ENABLE_STATUS',
  'PILOT_STATUS_QPS',
  'PILOT_STATUS_BURST',
  'PILOT_STATUS_MAX_WORKERS',
  'PILOT_ENABLE_CONFIG_DISTRIBUTION_TRACKING',
  'PILOT_DISTRIBUTION_HISTORY_RETENTION',
  // config/revision.ts: config, injection and webhook configurations of this revision only
  'REVISION',
  // xds/generators (the sidecar builders)
  'PILOT_ENABLE_HEADLESS_SERVICE_POD_LISTENERS',
  'PILOT_ENABLE_PROTOCOL_SNIFFING_FOR_INBOUND',
  'PILOT_INBOUND_PROTOCOL_DETECTION_TIMEOUT',
  'MESH_DEFAULT_REQUEST_TIMEOUT',
  'PILOT_HTTP10',
  'PILOT_ENABLE_LOOP_BLOCKER',
  'PILOT_SIDECAR_USE_REMOTE_ADDRESS',
  // model/delegate.ts (through PushContext)
  'PILOT_ENABLE_VIRTUAL_SERVICE_DELEGATE',
  // model/destination-rule-inheritance.ts (through PushContext), api/semantic.ts (host-less rules)
  'PILOT_ENABLE_DESTINATION_RULE_INHERITANCE',
  // xds/generators/gateway.ts (router proxies)
  'PILOT_SCOPE_GATEWAY_TO_NAMESPACE',
  // xds/generators/gateway-clusters.ts (router proxies' CDS and EDS)
  'PILOT_FILTER_GATEWAY_CLUSTER_CONFIG',
  // registry/orchestrator/ingress.ts, model/ingress/: the namespace of the Gateways generated from Ingresses
  'ORCH_INGRESS_NS',
  // xds/server.ts, xds/debounce.ts, debug/discovery.ts (ENABLE_DEBUG_ON_HTTP)
  'PILOT_XDS_SEND_TIMEOUT',
  'PILOT_PUSH_THROTTLE',
  'MESH_GPRC_MAXRECVMSGSIZE',
  'MESH_GPRC_MAXSTREAMS',
  'PILOT_DEBOUNCE_AFTER',
  'PILOT_DEBOUNCE_MAX',
  'PILOT_ENABLE_EDS_DEBOUNCE',
  'ENABLE_DEBUG_ON_HTTP',
  // xds/flow-control.ts (via xds/server.ts)
  'PILOT_ENABLE_FLOW_CONTROL',
  'PILOT_FLOW_CONTROL_TIMEOUT',
  // xds/cache.ts, xds/generators
  'PILOT_ENABLE_XDS_CACHE',
  'PILOT_XDS_CACHE_SIZE',
  'PILOT_XDS_CACHE_STATS',
  'PILOT_ENABLE_PROTOCOL_SNIFFING_FOR_OUTBOUND',
  // webhooks/ca-bundle.ts
  'INJECTION_WEBHOOK_CONFIG_NAME',
  'VALIDATION_WEBHOOK_CONFIG_NAME',
  // webhooks/inject.ts
  'ENABLE_LEGACY_FSGROUP_INJECTION',
  'INJECT_ENABLED',
  // registry/orchestrator/controller.ts
  'PILOT_ENABLE_EDS_FOR_HEADLESS_SERVICES',
  'PILOT_USE_ENDPOINT_SLICE',
  'PILOT_ENABLE_ORCH_SELECT_WORKLOAD_ENTRIES',
  // registry/serviceentry.ts (Pods from the orchestrator registry)
  'PILOT_ENABLE_SERVICEENTRY_SELECT_PODS',
  // registry/autoregister.ts
  'PILOT_ENABLE_WORKLOAD_ENTRY_AUTOREGISTRATION',
  'PILOT_ENABLE_WORKLOAD_ENTRY_HEALTHCHECKS',
  'PILOT_WORKLOAD_ENTRY_GRACE_PERIOD',
  // agent/node.ts, agent/agent.ts
  'POD_NAME',
  'INSTANCE_IP',
  'SERVICE_ACCOUNT',
  'CLUSTER_ID',
  'MESH_META_CLUSTER_ID',
  'MESH_META_DNS_CAPTURE',
  'PROXY_CONFIG',
  'PROXY_XDS_VIA_AGENT',
  'TERMINATION_DRAIN_DURATION_SECONDS',
  // agent/app-metrics.ts, agent/app-probes.ts (via agent.ts)
  'MESH_METRICS_ANNOTATIONS',
  'MESH_APP_PROBERS',
  // agent/status.ts (via agent.ts): /quitquitquit
  'ENABLE_ADMIN_ENDPOINTS',
  // agent/bootstrap.ts (via agent.ts)
  'MESH_BOOTSTRAP_OVERRIDE',
  'PILOT_INITIAL_FETCH_TIMEOUT',
  'XDS_ROOT_CA',
  // cli: flag defaults
  'POD_NAMESPACE',
  'DATAPLANE_PORT',
  'INBOUND_CAPTURE_PORT',
  'INBOUND_TUNNEL_PORT',
  'MESH_LOCAL_EXCLUDE_PORTS',
  'MESH_SERVICE_EXCLUDE_CIDR',
  // iptables/system.ts: mesh-iptables' default --proxy-uid
  'PROXY_USER',
]);

export class SettingsError extends Error {
  constructor(readonly problems: string[]) {
    super(problems.join('\n'));
  }
}

const byName = new Map<string, Def>(SETTINGS.map((d) => [d.name, d]));
const values = new Map<string, boolean | string | number>();
let source: NodeJS.ProcessEnv = process.env;
let program: Program | undefined;

function defaultOf(def: Def): string {
  return program === 'discovery' && 'discoveryDefault' in def ? def.discoveryDefault : def.default;
}

const BOOL_TRUE = new Set(['1', 't', 'T', 'TRUE', 'true', 'True']);
const BOOL_FALSE = new Set(['0', 'f', 'F', 'FALSE', 'false', 'False']);

/** Parses a raw value with Go's rules for the declared type; throws a message naming the variable. */
function parse(def: Def, raw: string): boolean | string | number {
  const bad = (expected: string) => new Error(`${def.name}=${JSON.stringify(raw)}: invalid value, expected ${expected}`);
  switch (def.type) {
    case 'String':
      return raw;
    case 'Boolean':
      if (BOOL_TRUE.has(raw)) return true;
      if (BOOL_FALSE.has(raw)) return false;
      throw bad('a Boolean (true or false)');
    case 'Integer':
      if (!/^[+-]?\d+$/.test(raw.trim())) throw bad('an Integer');
      return Number.parseInt(raw, 10);
    case 'Float': {
      const n = Number(raw.trim());
      if (raw.trim() === '' || Number.isNaN(n)) throw bad('a Float');
      return n;
    }
    case 'Duration':
      try {
        return toMillis(parseDuration(raw));
      } catch (e) {
        if (e instanceof DurationError) throw bad('a Duration such as 100ms, 5s or 1m30s');
        throw e;
      }
  }
}

function inScope(def: Def, p: Program): boolean {
  return def.scope === 'D+A' || (def.scope === 'D') === (p === 'discovery');
}

/**
 * Reads every variable of the program's scope once. All bad values are reported together so a
 * user fixes them in one go.
 */
export function loadSettings(p: Program, env: NodeJS.ProcessEnv = process.env): void {
  program = p;
  source = env;
  values.clear();
  const problems: string[] = [];
  for (const def of SETTINGS) {
    if (!inScope(def, p)) continue;
    const raw = env[def.name];
    try {
      values.set(def.name, parse(def, raw ?? defaultOf(def)));
    } catch (e) {
      problems.push((e as Error).message);
    }
  }
  if (problems.length > 0) throw new SettingsError(problems);
}

/** The typed value of a setting: env var if set, else the spec's default. */
export function setting<N extends SettingName>(name: N): SettingValue<TypeOfSetting<N>> {
  let v = values.get(name);
  if (v === undefined) {
    const def = byName.get(name)!;
    v = parse(def, source[name] ?? defaultOf(def));
    values.set(name, v);
  }
  return v as SettingValue<TypeOfSetting<N>>;
}

/**
 * The spec's default of a setting, whatever the environment says: the default of an option that a
 * module takes from its caller (the program reads the setting once and passes it in).
 */
export function settingDefault<N extends SettingName>(name: N): SettingValue<TypeOfSetting<N>> {
  return parse(byName.get(name)!, defaultOf(byName.get(name)!)) as SettingValue<TypeOfSetting<N>>;
}

export interface SettingListing {
  name: string;
  type: SettingType;
  scope: SettingScope;
  value: string;
  default: string;
  set: boolean;
  effective: boolean;
  description: string;
}

function display(def: Def, v: boolean | string | number): string {
  return def.type === 'Duration' ? formatDuration(BigInt(v as number) * 1_000_000n) : String(v);
}

/** Effective values of the program's settings, for /debug/env and the introspection UI. */
export function listSettings(p: Program = program ?? 'discovery'): SettingListing[] {
  return SETTINGS.filter((d) => inScope(d, p)).map((def) => ({
    name: def.name,
    type: def.type,
    scope: def.scope,
    value: display(def, setting(def.name)),
    default: defaultOf(def),
    set: source[def.name] !== undefined,
    effective: WIRED_SETTINGS.has(def.name),
    description: def.description,
  }));
}

/** Names of the program's settings that nothing reads yet, for --help and the startup notice. */
export function ineffectiveSettings(p: Program): string[] {
  return SETTINGS.filter((d) => inScope(d, p) && !WIRED_SETTINGS.has(d.name)).map((d) => d.name);
}

export function isSettingName(name: string): name is SettingName {
  return byName.has(name);
}
