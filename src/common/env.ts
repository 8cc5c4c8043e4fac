// The typed registry of every environment variable in the spec (commands.md, Environment variables
// and Limits). Code reads settings only through `setting()`, so a bad value is caught once at
// startup with the variable's name, and `/debug/env` can list the effective values.
import { DurationError, parseDuration, formatDuration, toMillis } from './duration.js';

export type SettingType = 'String' | 'Boolean' | 'Integer' | 'Float' | 'Duration';
/** D = discovery, A = agent, D+A = both (the spec's scope column). */
export type SettingScope = 'D' | 'A' | 'D+A';
export type Program = 'discovery' | 'agent';

interface SettingDef {
  readonly name: string;
  readonly type: SettingType;
  readonly default: string;
  readonly scope: SettingScope;
  readonly description: string;
  /** POD_NAMESPACE defaults differently for the discovery server. */
  readonly discoveryDefault?: string;
}

const SETTINGS = [
  { name: 'AUDIENCE', type: 'String', default: '', scope: 'D', description: 'expected audience in tokens' },
  { name: 'AUTHORITY_ENABLE_JITTER_FOR_ROOT_CERT_ROTATOR', type: 'Boolean', default: 'true', scope: 'D', description: 'jitter before starting the root cert rotator, below the check interval' },
  { name: 'AUTHORITY_SELF_SIGNED_CA_CERT_TTL', type: 'Duration', default: '87600h0m0s', scope: 'D', description: 'TTL of self-signed CA root cert' },
  { name: 'AUTHORITY_SELF_SIGNED_CA_DIR', type: 'String', default: '', scope: 'D', description: 'directory keeping the self-signed CA (ca-cert.pem, ca-key.pem, root-cert.pem) so a restart keeps the root; empty = memory only (ours)' },
  { name: 'AUTHORITY_SELF_SIGNED_CA_RSA_KEY_SIZE', type: 'Integer', default: '2048', scope: 'D', description: 'RSA key size of self-signed CA certs' },
  { name: 'AUTHORITY_SELF_SIGNED_ROOT_CERT_CHECK_INTERVAL', type: 'Duration', default: '1h0m0s', scope: 'D', description: 'root cert expiry check and rotation interval; zero or negative disables; suggested above 10 minutes' },
  { name: 'AUTHORITY_SELF_SIGNED_ROOT_CERT_GRACE_PERIOD_PERCENTILE', type: 'Integer', default: '20', scope: 'D', description: 'grace period percentile of self-signed root cert' },
  { name: 'CA_ADDR', type: 'String', default: '', scope: 'A', description: 'address of the certificate provider; defaults to the discovery address' },
  { name: 'CA_PROVIDER', type: 'String', default: 'Authority', scope: 'A', description: 'authentication provider name' },
  { name: 'CA_ROOT_CA', type: 'String', default: '', scope: 'A', description: 'root CA expected on the CA connection' },
  { name: 'CLUSTER_ID', type: 'String', default: 'Orchestrator', scope: 'D+A', description: 'cluster and registry of this instance' },
  { name: 'CREDENTIAL_FETCHER_TYPE', type: 'String', default: '', scope: 'A', description: 'credential fetcher type; CloudComputeEngine is supported' },
  { name: 'CREDENTIAL_IDENTITY_PROVIDER', type: 'String', default: 'CloudComputeEngine', scope: 'A', description: 'credential identity provider' },
  { name: 'DEFAULT_WORKLOAD_CERT_TTL', type: 'Duration', default: '24h0m0s', scope: 'D', description: 'default workload cert TTL' },
  { name: 'ECC_SIGNATURE_ALGORITHM', type: 'String', default: '', scope: 'A', description: 'ECC signature algorithm for generated private keys' },
  { name: 'ENABLE_ADMIN_ENDPOINTS', type: 'Boolean', default: 'false', scope: 'D+A', description: 'expose dangerous admin endpoints on the debug interface; not for production' },
  { name: 'ENABLE_CA_SERVER', type: 'Boolean', default: 'true', scope: 'D+A', description: 'false = no CA server in the discovery server' },
  { name: 'ENABLE_DEBUG_ON_HTTP', type: 'Boolean', default: 'true', scope: 'D+A', description: 'false = debug interface not on HTTP' },
  { name: 'ENABLE_LEGACY_FSGROUP_INJECTION', type: 'Boolean', default: 'true', scope: 'D+A', description: 'set pod fsGroup to 1337 on injection (orchestrator 1.18 and older unless JWT_POLICY is first-party-jwt)' },
  { name: 'ENABLE_WASM_TELEMETRY', type: 'Boolean', default: 'false', scope: 'D+A', description: 'Wasm-based telemetry' },
  { name: 'PROXY_USER', type: 'String', default: 'mesh-proxy', scope: 'A', description: 'proxy username' },
  { name: 'EXTERNAL_CA', type: 'String', default: '', scope: 'D', description: 'external CA integration type: MESHD_RA_ORCHESTRATOR_API or MESHD_RA_MESH_API' },
  { name: 'EXTERNAL_MESHD', type: 'Boolean', default: 'false', scope: 'D+A', description: 'one discovery server controls remote clusters including CA' },
  { name: 'FILE_MOUNTED_CERTS', type: 'Boolean', default: 'false', scope: 'A', description: 'no description given' },
  { name: 'CLOUD_METADATA', type: 'String', default: '', scope: 'A', description: 'pipe-separated PROJECT_ID|PROJECT_NUMBER|CLUSTER_NAME|CLUSTER_ZONE' },
  { name: 'CLOUD_CLUSTER_URL', type: 'String', default: '', scope: 'A', description: 'URL of the managed cluster' },
  { name: 'INJECTION_WEBHOOK_CONFIG_NAME', type: 'String', default: 'mesh-sidecar-injector', scope: 'D+A', description: 'mutating webhook configuration to patch when the CLI tool is not used' },
  { name: 'INJECT_ENABLED', type: 'Boolean', default: 'true', scope: 'D', description: 'enable mutating webhook handler' },
  { name: 'INSTANCE_IP', type: 'String', default: '', scope: 'A', description: 'no description given' },
  { name: 'MESHD_CUSTOM_HOST', type: 'String', default: '', scope: 'D+A', description: 'custom host name the server cert is signed for' },
  { name: 'MESHD_ENABLE_SDS_SERVER', type: 'Boolean', default: 'true', scope: 'D+A', description: 'serve SDS for credentialName secrets; needs PILOT_ENABLE_XDS_IDENTITY_CHECK=true' },
  { name: 'MESH_AGENT_ENABLE_WASM_REMOTE_LOAD_CONVERSION', type: 'Boolean', default: 'true', scope: 'D+A', description: 'agent intercepts ECDS updates, downloads the Wasm module and replaces remote load with the local file' },
  { name: 'MESH_BOOTSTRAP', type: 'String', default: '', scope: 'A', description: 'no description given' },
  { name: 'MESH_BOOTSTRAP_OVERRIDE', type: 'String', default: '', scope: 'A', description: 'no description given' },
  { name: 'MESH_DEFAULT_REQUEST_TIMEOUT', type: 'Duration', default: '0s', scope: 'D+A', description: 'default HTTP and gRPC request time-out' },
  { name: 'MESH_GPRC_MAXRECVMSGSIZE', type: 'Integer', default: '4194304', scope: 'D+A', description: 'max gRPC receive buffer, bytes' },
  { name: 'MESH_GPRC_MAXSTREAMS', type: 'Integer', default: '100000', scope: 'D+A', description: 'max concurrent gRPC streams' },
  { name: 'MESH_APP_PROBERS', type: 'String', default: '', scope: 'A', description: 'no description given' },
  { name: 'MESH_META_CLUSTER_ID', type: 'String', default: '', scope: 'A', description: 'no description given' },
  { name: 'MESH_META_DNS_CAPTURE', type: 'Boolean', default: 'false', scope: 'A', description: 'capture outgoing DNS on port 53 and redirect to the agent on :15053' },
  { name: 'MESH_METRICS_ANNOTATIONS', type: 'String', default: '', scope: 'D+A', description: 'no description given' },
  { name: 'JWT_POLICY', type: 'String', default: 'third-party-jwt', scope: 'D+A', description: 'JWT validation policy' },
  { name: 'JWT_RULE', type: 'String', default: '', scope: 'D', description: 'JWT rule used by discovery authentication' },
  { name: 'ORCH_INGRESS_NS', type: 'String', default: '', scope: 'D+A', description: 'no description given' },
  { name: 'ORCH_SIGNER', type: 'String', default: '', scope: 'D', description: 'orchestrator CA signer type; valid from orchestrator 1.18' },
  { name: 'ORCHESTRATOR_SERVICE_HOST', type: 'String', default: '', scope: 'D', description: 'orchestrator service host; set automatically in-cluster' },
  { name: 'K_REVISION', type: 'String', default: '', scope: 'D+A', description: 'serverless platform revision (SERVERLESS_REVISION), set when running there' },
  { name: 'MAX_WORKLOAD_CERT_TTL', type: 'Duration', default: '2160h0m0s', scope: 'D', description: 'max workload cert TTL' },
  { name: 'OUTPUT_CERTS', type: 'String', default: '', scope: 'A', description: 'output directory for key and cert; empty = not saved; required for VMs using provisioning certs' },
  { name: 'PILOT_ALLOW_METADATA_CERTS_DR_MUTUAL_TLS', type: 'Boolean', default: 'false', scope: 'D+A', description: 'metadata certs override DestinationRule certs in mutual TLS; migration only' },
  { name: 'PILOT_CERT_PROVIDER', type: 'String', default: 'meshd', scope: 'D+A', description: 'provider of the DNS cert' },
  { name: 'PILOT_DEBOUNCE_AFTER', type: 'Duration', default: '100ms', scope: 'D+A', description: 'debounce delay; pushes wait until no change within it, up to PILOT_DEBOUNCE_MAX' },
  { name: 'PILOT_DEBOUNCE_MAX', type: 'Duration', default: '10s', scope: 'D+A', description: 'max debounce wait' },
  { name: 'PILOT_DISTRIBUTION_HISTORY_RETENTION', type: 'Duration', default: '1m0s', scope: 'D+A', description: 'retention of old distributed config versions' },
  { name: 'PILOT_ENABLED_SERVICE_APIS', type: 'Boolean', default: 'true', scope: 'D+A', description: 'support for orchestrator service-API resources (CRDs must be installed)' },
  { name: 'PILOT_ENABLE_ANALYSIS', type: 'Boolean', default: 'false', scope: 'D+A', description: 'run analyzers and write errors to the Status field' },
  { name: 'PILOT_ENABLE_CONFIG_DISTRIBUTION_TRACKING', type: 'Boolean', default: 'true', scope: 'D+A', description: 'meaningful nonces per config message; debug interface shows which proxy has which config' },
  { name: 'PILOT_ENABLE_CRD_VALIDATION', type: 'Boolean', default: 'false', scope: 'D+A', description: 'validate CRDs read from the cache, for deployments without the validator component' },
  { name: 'PILOT_ENABLE_CROSS_CLUSTER_WORKLOAD_ENTRY', type: 'Boolean', default: 'false', scope: 'D+A', description: 'read WorkloadEntry from other clusters' },
  { name: 'PILOT_ENABLE_DESTINATION_RULE_INHERITANCE', type: 'Boolean', default: 'false', scope: 'D+A', description: 'workload-specific DestinationRules inherit mesh and namespace rules' },
  { name: 'PILOT_ENABLE_EDS_DEBOUNCE', type: 'Boolean', default: 'true', scope: 'D+A', description: 'include EDS pushes in debouncing' },
  { name: 'PILOT_ENABLE_EDS_FOR_HEADLESS_SERVICES', type: 'Boolean', default: 'false', scope: 'D+A', description: 'send headless service endpoints over EDS' },
  { name: 'PILOT_ENABLE_FLOW_CONTROL', type: 'Boolean', default: 'false', scope: 'D+A', description: 'wait for completion of a receive before a push' },
  { name: 'PILOT_ENABLE_HEADLESS_SERVICE_POD_LISTENERS', type: 'Boolean', default: 'true', scope: 'D+A', description: 'outbound listener per pod of a headless service; disable for many pods' },
  { name: 'PILOT_ENABLE_ISTIO_TAGS', type: 'Boolean', default: 'true', scope: 'D+A', description: 'trace spans include mesh-specific tags' },
  { name: 'PILOT_ENABLE_ORCH_SELECT_WORKLOAD_ENTRIES', type: 'Boolean', default: 'true', scope: 'D+A', description: 'services with selectors select workload entries with matching labels' },
  { name: 'PILOT_ENABLE_LOOP_BLOCKER', type: 'Boolean', default: 'true', scope: 'D+A', description: 'block traffic directly to ports 15001/15006 to prevent loops' },
  { name: 'PILOT_ENABLE_MYSQL_FILTER', type: 'Boolean', default: 'false', scope: 'D+A', description: 'inject proxy.filters.network.mysql_proxy' },
  { name: 'PILOT_ENABLE_PROTOCOL_SNIFFING_FOR_INBOUND', type: 'Boolean', default: 'true', scope: 'D+A', description: 'sniff protocol on inbound listeners with unspecified or unsupported protocol' },
  { name: 'PILOT_ENABLE_PROTOCOL_SNIFFING_FOR_OUTBOUND', type: 'Boolean', default: 'true', scope: 'D+A', description: 'same for outbound listeners' },
  { name: 'PILOT_ENABLE_REDIS_FILTER', type: 'Boolean', default: 'false', scope: 'D+A', description: 'inject proxy.filters.network.redis_proxy' },
  { name: 'PILOT_ENABLE_SERVICEENTRY_SELECT_PODS', type: 'Boolean', default: 'true', scope: 'D+A', description: 'service entries with selectors select pods' },
  { name: 'PILOT_ENABLE_STATUS', type: 'Boolean', default: 'false', scope: 'D+A', description: 'update CRD Status with reconciliation status' },
  { name: 'PILOT_ENABLE_THRIFT_FILTER', type: 'Boolean', default: 'false', scope: 'D+A', description: 'inject proxy.filters.network.thrift_proxy' },
  { name: 'PILOT_ENABLE_VIRTUAL_SERVICE_DELEGATE', type: 'Boolean', default: 'true', scope: 'D+A', description: 'false = no virtualService delegate support' },
  { name: 'PILOT_ENABLE_WORKLOAD_ENTRY_AUTOREGISTRATION', type: 'Boolean', default: 'true', scope: 'D+A', description: 'auto-register WorkloadEntries from WorkloadGroups on XDS connection' },
  { name: 'PILOT_ENABLE_WORKLOAD_ENTRY_HEALTHCHECKS', type: 'Boolean', default: 'true', scope: 'D+A', description: 'health checks of WorkloadEntries per WorkloadGroup' },
  { name: 'PILOT_ENABLE_XDS_CACHE', type: 'Boolean', default: 'true', scope: 'D+A', description: 'cache XDS responses' },
  { name: 'PILOT_ENABLE_XDS_IDENTITY_CHECK', type: 'Boolean', default: 'true', scope: 'D+A', description: 'authorize XDS clients for their namespaces' },
  { name: 'PILOT_ENDPOINT_TELEMETRY_LABEL', type: 'Boolean', default: 'true', scope: 'D+A', description: 'add telemetry metadata to Endpoint resources' },
  { name: 'PILOT_FILTER_GATEWAY_CLUSTER_CONFIG', type: 'Boolean', default: 'false', scope: 'D+A', description: 'no description given' },
  { name: 'PILOT_FLOW_CONTROL_TIMEOUT', type: 'Duration', default: '15s', scope: 'D+A', description: 'max push delay; needs PILOT_ENABLE_FLOW_CONTROL' },
  { name: 'PILOT_HTTP10', type: 'Boolean', default: 'false', scope: 'D+A', description: 'HTTP 1.0 in outbound HTTP listeners' },
  { name: 'PILOT_INBOUND_PROTOCOL_DETECTION_TIMEOUT', type: 'Duration', default: '1s', scope: 'D+A', description: 'inbound protocol detection time-out' },
  { name: 'PILOT_INITIAL_FETCH_TIMEOUT', type: 'Duration', default: '0s', scope: 'D+A', description: 'initial_fetch_timeout for config; proxy proceeds when reached' },
  { name: 'PILOT_PUSH_THROTTLE', type: 'Integer', default: '100', scope: 'D+A', description: 'concurrent pushes allowed' },
  { name: 'PILOT_SCOPE_GATEWAY_TO_NAMESPACE', type: 'Boolean', default: 'false', scope: 'D+A', description: 'gateway workload selects only same-namespace gateway resources' },
  { name: 'PILOT_SIDECAR_ENABLE_INBOUND_TLS_V2', type: 'Boolean', default: 'true', scope: 'D+A', description: 'TLS 1.2 and strong ciphers on server side' },
  { name: 'PILOT_SIDECAR_USE_REMOTE_ADDRESS', type: 'Boolean', default: 'false', scope: 'D+A', description: 'useRemoteAddress true for sidecar outbound listeners' },
  { name: 'PILOT_SKIP_VALIDATE_TRUST_DOMAIN', type: 'Boolean', default: 'false', scope: 'D+A', description: 'skip same-trust-domain check with mTLS' },
  { name: 'PILOT_STATUS_BURST', type: 'Integer', default: '500', scope: 'D+A', description: 'status update burst' },
  { name: 'PILOT_STATUS_MAX_WORKERS', type: 'Integer', default: '100', scope: 'D+A', description: 'workers keeping status current' },
  { name: 'PILOT_STATUS_QPS', type: 'Float', default: '100', scope: 'D+A', description: 'status update QPS' },
  { name: 'PILOT_TRACE_SAMPLING', type: 'Float', default: '1', scope: 'D+A', description: 'mesh-wide trace sampling percent' },
  { name: 'PILOT_USE_ENDPOINT_SLICE', type: 'Boolean', default: 'false', scope: 'D+A', description: 'use EndpointSlices instead of Endpoints (mutually exclusive)' },
  { name: 'PILOT_WORKLOAD_ENTRY_GRACE_PERIOD', type: 'Duration', default: '10s', scope: 'D+A', description: 'disconnect grace before WorkloadEntry cleanup' },
  { name: 'PILOT_XDS_CACHE_SIZE', type: 'Integer', default: '20000', scope: 'D+A', description: 'max XDS cache entries' },
  { name: 'PILOT_XDS_CACHE_STATS', type: 'Boolean', default: 'false', scope: 'D+A', description: 'collect cache efficiency metrics' },
  { name: 'PILOT_XDS_SEND_TIMEOUT', type: 'Duration', default: '5s', scope: 'D+A', description: 'XDS send time-out' },
  { name: 'PKCS8_KEY', type: 'Boolean', default: 'false', scope: 'A', description: 'generate PKCS#8 private keys' },
  { name: 'POD_NAME', type: 'String', default: '', scope: 'D+A', description: 'no description given' },
  { name: 'POD_NAMESPACE', type: 'String', default: '', scope: 'D+A', description: 'namespace of the pod (discovery defaults to mesh-system)', discoveryDefault: 'mesh-system' },
  { name: 'PROV_CERT', type: 'String', default: '', scope: 'A', description: 'directory of provisioned certs, for VMs' },
  { name: 'PROXY_CONFIG', type: 'String', default: '', scope: 'A', description: 'proxy configuration; set by injection, gateways use file mounts' },
  { name: 'PROXY_XDS_VIA_AGENT', type: 'Boolean', default: 'true', scope: 'A', description: 'proxy sends XDS through the agent' },
  { name: 'REQUIRE_3P_TOKEN', type: 'Boolean', default: 'false', scope: 'D+A', description: 'reject default orchestrator tokens without audience' },
  { name: 'REVISION', type: 'String', default: '', scope: 'D', description: 'no description given' },
  { name: 'ROOT_CA_DIR', type: 'String', default: './etc/cacerts', scope: 'D', description: 'local or mounted CA root' },
  { name: 'SECRET_GRACE_PERIOD_RATIO', type: 'Float', default: '0.5', scope: 'A', description: 'cert rotation grace ratio' },
  { name: 'SECRET_TTL', type: 'Duration', default: '24h0m0s', scope: 'A', description: 'cert lifetime requested' },
  { name: 'SERVICE_ACCOUNT', type: 'String', default: '', scope: 'A', description: 'service account name' },
  { name: 'SPIFFE_BUNDLE_ENDPOINTS', type: 'String', default: '', scope: 'D+A', description: 'trust-domain to bundle-endpoint mappings' },
  { name: 'TERMINATION_DRAIN_DURATION_SECONDS', type: 'Integer', default: '5', scope: 'D+A', description: 'drain wait on shutdown' },
  { name: 'TOKEN_AUDIENCES', type: 'String', default: 'mesh-ca', scope: 'D+A', description: 'accepted token audiences, comma-separated' },
  { name: 'TOKEN_ISSUER', type: 'String', default: '', scope: 'D', description: 'OIDC token issuer used to check tokens' },
  { name: 'TRUST_DOMAIN', type: 'String', default: 'cluster.local', scope: 'A', description: 'trust domain for SPIFFE certs' },
  { name: 'USE_REMOTE_CERTS', type: 'Boolean', default: 'false', scope: 'D', description: 'load CA certs from a remote cluster (external discovery server)' },
  { name: 'VALIDATION_ENABLED', type: 'Boolean', default: 'true', scope: 'D', description: 'enable config validation handler' },
  { name: 'VALIDATION_WEBHOOK_CONFIG_NAME', type: 'String', default: 'meshd-${namespace}', scope: 'D', description: 'validating webhook configuration to patch; empty skips patching' },
  { name: 'XDS_AUTH', type: 'Boolean', default: 'true', scope: 'D+A', description: 'authenticate XDS clients' },
  { name: 'XDS_AUTH_PLAINTEXT', type: 'Boolean', default: 'false', scope: 'D+A', description: 'authenticate plaintext requests' },
  { name: 'XDS_AUTH_PROVIDER', type: 'String', default: '', scope: 'A', description: 'provider for XDS auth' },
  { name: 'XDS_ROOT_CA', type: 'String', default: '', scope: 'A', description: 'root CA expected on the XDS connection' },
  // Variables the spec names as flag defaults rather than in its variable table.
  { name: 'DATAPLANE_PORT', type: 'String', default: '15001', scope: 'A', description: 'default of mesh-iptables --dataplane-port' },
  { name: 'INBOUND_CAPTURE_PORT', type: 'String', default: '15006', scope: 'A', description: 'default of mesh-iptables --inbound-capture-port' },
  { name: 'INBOUND_TUNNEL_PORT', type: 'String', default: '15008', scope: 'A', description: 'default of mesh-iptables --inbound-tunnel-port' },
  { name: 'MESH_LOCAL_EXCLUDE_PORTS', type: 'String', default: '', scope: 'A', description: 'default of mesh-iptables --mesh-local-exclude-ports' },
  { name: 'MESH_SERVICE_EXCLUDE_CIDR', type: 'String', default: '', scope: 'A', description: 'default of mesh-iptables --mesh-service-exclude-cidr' },
] as const satisfies readonly SettingDef[];

type Def = (typeof SETTINGS)[number];
export type SettingName = Def['name'];
type TypeOfSetting<N extends SettingName> = Extract<Def, { name: N }>['type'];
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
