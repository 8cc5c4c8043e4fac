// The user-facing resource kinds of the mesh, as TypeScript types.
// Field names follow the wire (YAML/JSON) shape exactly so a parsed, validated document can be
// used as these types without conversion. The schemas in ./schema.ts describe the same shapes.

export const SECURITY_GROUP = 'security.mesh.io';
export const NETWORKING_GROUP = 'networking.mesh.io';
export const TELEMETRY_GROUP = 'telemetry.mesh.io';
export const API_VERSIONS = ['v1beta1', 'v1'] as const;
export type ApiVersionName = (typeof API_VERSIONS)[number];

/** Namespace whose policies apply mesh-wide. */
export const ROOT_NAMESPACE = 'mesh-system';
/** Namespace given to a resource that names none, as the orchestrator does. */
export const DEFAULT_NAMESPACE = 'default';

export interface ObjectMeta {
  name: string;
  namespace: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  resourceVersion?: string;
  generation?: number;
  /** Set by the orchestrator; kept so round-trips do not lose it. */
  uid?: string;
  creationTimestamp?: string;
}

export interface Resource<Spec, K extends string = string> {
  apiVersion: string;
  kind: K;
  metadata: ObjectMeta;
  spec: Spec;
}

/** Identity of a resource in every store: re-submitting the same key updates in place. */
export interface ResourceKey {
  kind: Kind;
  namespace: string;
  name: string;
}

// ---------------------------------------------------------------- shared pieces

export interface WorkloadSelector {
  matchLabels?: Record<string, string>;
}

/** Networking kinds select by `labels`, security kinds by `matchLabels` (as production meshes do). */
export interface NetworkingWorkloadSelector {
  labels?: Record<string, string>;
}

export interface Port {
  number: number;
  protocol?: string;
  name?: string;
  targetPort?: number;
}

// ---------------------------------------------------------------- security.mesh.io

export interface JwtHeader {
  name: string;
  prefix?: string;
}

export interface ClaimToHeader {
  header: string;
  claim: string;
}

export interface JwtRule {
  issuer: string;
  audiences?: string[];
  jwksUri?: string;
  /** Inline JWKS document (a JSON string), an alternative to jwksUri. */
  jwks?: string;
  fromHeaders?: JwtHeader[];
  fromParams?: string[];
  fromCookies?: string[];
  outputPayloadToHeader?: string;
  outputClaimToHeaders?: ClaimToHeader[];
  forwardOriginalToken?: boolean;
  /** Claims whose space-separated string value is a list for matching, besides `scope` and `permission`. */
  spaceDelimitedClaims?: string[];
  /** Duration string such as `5s` or `500ms`: JWKS fetch timeout. */
  timeout?: string;
}

export interface RequestAuthenticationSpec {
  selector?: WorkloadSelector;
  jwtRules?: JwtRule[];
}

export const AUTHZ_ACTIONS = ['ALLOW', 'DENY', 'AUDIT', 'CUSTOM'] as const;
export type AuthorizationAction = (typeof AUTHZ_ACTIONS)[number];

export interface Source {
  principals?: string[];
  notPrincipals?: string[];
  requestPrincipals?: string[];
  notRequestPrincipals?: string[];
  namespaces?: string[];
  notNamespaces?: string[];
  ipBlocks?: string[];
  notIpBlocks?: string[];
  remoteIpBlocks?: string[];
  notRemoteIpBlocks?: string[];
}

export interface Operation {
  hosts?: string[];
  notHosts?: string[];
  ports?: string[];
  notPorts?: string[];
  methods?: string[];
  notMethods?: string[];
  paths?: string[];
  notPaths?: string[];
}

export interface Condition {
  key: string;
  values?: string[];
  notValues?: string[];
}

export interface Rule {
  from?: { source: Source }[];
  to?: { operation: Operation }[];
  when?: Condition[];
}

export interface ExtensionProvider {
  name: string;
}

export interface AuthorizationPolicySpec {
  selector?: WorkloadSelector;
  /** Absent means ALLOW. */
  action?: AuthorizationAction;
  /** Only with action CUSTOM. */
  provider?: ExtensionProvider;
  rules?: Rule[];
}

export const MTLS_MODES = ['UNSET', 'DISABLE', 'PERMISSIVE', 'STRICT'] as const;
export type MtlsMode = (typeof MTLS_MODES)[number];

export interface PeerAuthenticationSpec {
  selector?: WorkloadSelector;
  mtls?: { mode?: MtlsMode };
  /** Keyed by port number (as a string, the JSON object key). */
  portLevelMtls?: Record<string, { mode?: MtlsMode }>;
}

// ---------------------------------------------------------------- networking.mesh.io

export const SE_LOCATIONS = ['MESH_EXTERNAL', 'MESH_INTERNAL'] as const;
export const SE_RESOLUTIONS = ['NONE', 'STATIC', 'DNS', 'DNS_ROUND_ROBIN'] as const;

export interface WorkloadEntrySpec {
  address?: string;
  ports?: Record<string, number>;
  labels?: Record<string, string>;
  network?: string;
  locality?: string;
  weight?: number;
  serviceAccount?: string;
}

export interface ServiceEntrySpec {
  hosts: string[];
  addresses?: string[];
  ports?: Port[];
  location?: (typeof SE_LOCATIONS)[number];
  resolution?: (typeof SE_RESOLUTIONS)[number];
  endpoints?: WorkloadEntrySpec[];
  workloadSelector?: NetworkingWorkloadSelector;
  exportTo?: string[];
  subjectAltNames?: string[];
}

export interface HttpHeader {
  name: string;
  value: string;
}

export interface ReadinessProbe {
  initialDelaySeconds?: number;
  timeoutSeconds?: number;
  periodSeconds?: number;
  successThreshold?: number;
  failureThreshold?: number;
  httpGet?: { path?: string; port: number; host?: string; scheme?: string; httpHeaders?: HttpHeader[] };
  tcpSocket?: { host?: string; port: number };
  exec?: { command: string[] };
  grpc?: { port: number; service?: string };
}

export interface WorkloadGroupSpec {
  metadata?: { labels?: Record<string, string>; annotations?: Record<string, string> };
  template: WorkloadEntrySpec;
  probe?: ReadinessProbe;
}

export const CAPTURE_MODES = ['DEFAULT', 'IPTABLES', 'NONE'] as const;
export type CaptureMode = (typeof CAPTURE_MODES)[number];

export interface IngressListener {
  port: Port;
  bind?: string;
  captureMode?: CaptureMode;
  defaultEndpoint?: string;
  /** The inbound cluster's connection pool for this port (DestinationRule connectionPool fields). */
  connectionPool?: OpaqueObject;
}

export interface EgressListener {
  port?: Port;
  bind?: string;
  captureMode?: CaptureMode;
  hosts: string[];
}

export const OUTBOUND_MODES = ['REGISTRY_ONLY', 'ALLOW_ANY'] as const;

export interface SidecarSpec {
  workloadSelector?: NetworkingWorkloadSelector;
  ingress?: IngressListener[];
  egress?: EgressListener[];
  outboundTrafficPolicy?: { mode?: (typeof OUTBOUND_MODES)[number] };
  /** Every inbound cluster's connection pool, unless an ingress listener sets its own. */
  inboundConnectionPool?: OpaqueObject;
}

/** Traffic fields are only structurally checked for now; their semantics come later. */
export type OpaqueObject = Record<string, unknown>;

export interface Subset {
  name: string;
  labels?: Record<string, string>;
  trafficPolicy?: OpaqueObject;
}

export interface DestinationRuleSpec {
  /** Absent or empty: a mesh/namespace-wide rule (PILOT_ENABLE_DESTINATION_RULE_INHERITANCE). */
  host?: string;
  trafficPolicy?: OpaqueObject;
  subsets?: Subset[];
  exportTo?: string[];
  workloadSelector?: NetworkingWorkloadSelector;
}

export interface Delegate {
  name: string;
  namespace?: string;
}

export interface HttpRoute {
  name?: string;
  match?: OpaqueObject[];
  route?: OpaqueObject[];
  delegate?: Delegate;
  [field: string]: unknown;
}

export interface VirtualServiceSpec {
  hosts?: string[];
  gateways?: string[];
  http?: HttpRoute[];
  tcp?: OpaqueObject[];
  tls?: OpaqueObject[];
  exportTo?: string[];
}

/** Gateway server `tls.mode` values (the Go mesh's ServerTLSSettings.TLSmode). */
export const SERVER_TLS_MODES = ['PASSTHROUGH', 'SIMPLE', 'MUTUAL', 'AUTO_PASSTHROUGH', 'ISTIO_MUTUAL', 'OPTIONAL_MUTUAL'] as const;

export interface GatewayServer {
  port: Port;
  hosts: string[];
  bind?: string;
  name?: string;
  tls?: OpaqueObject;
}

export interface GatewaySpec {
  selector?: Record<string, string>;
  servers?: GatewayServer[];
}

/** Telemetry `accessLogging[].match.mode`, `metrics[].overrides[].match.mode`: CLIENT = outbound listeners and gateways, SERVER = inbound. */
export const WORKLOAD_MODES = ['CLIENT', 'SERVER', 'CLIENT_AND_SERVER'] as const;
export type WorkloadMode = (typeof WORKLOAD_MODES)[number];

export interface TelemetryAccessLogging {
  providers?: { name: string }[];
  disabled?: boolean;
  match?: { mode?: WorkloadMode };
  filter?: { expression?: string };
}

/** Telemetry `metrics[].overrides[].match.metric`: the standard metrics (ALL_METRICS: every one). */
export const STANDARD_METRICS = ['ALL_METRICS', 'REQUEST_COUNT', 'REQUEST_DURATION', 'REQUEST_SIZE', 'RESPONSE_SIZE', 'TCP_OPENED_CONNECTIONS', 'TCP_CLOSED_CONNECTIONS', 'TCP_SENT_BYTES', 'TCP_RECEIVED_BYTES', 'GRPC_REQUEST_MESSAGES', 'GRPC_RESPONSE_MESSAGES'] as const;
export type StandardMetric = (typeof STANDARD_METRICS)[number];
export const TAG_OPERATIONS = ['UPSERT', 'REMOVE'] as const;

/** A tag added or changed (UPSERT, the default: `value` is an attribute expression) or removed. */
export interface TagOverride {
  operation?: (typeof TAG_OPERATIONS)[number];
  value?: string;
}

export interface MetricsOverride {
  /** One of `metric` and `customMetric`; neither: every standard metric. */
  match?: { metric?: StandardMetric; customMetric?: string; mode?: WorkloadMode };
  /** Unset leaves what a weaker Telemetry said. */
  disabled?: boolean;
  tagOverrides?: Record<string, TagOverride>;
}

export interface TelemetryMetrics {
  providers?: { name: string }[];
  overrides?: MetricsOverride[];
  /** A duration (`15s`): how often long TCP connections report. */
  reportingInterval?: string;
}

export interface TelemetrySpec {
  selector?: { matchLabels?: Record<string, string> };
  targetRefs?: OpaqueObject[];
  accessLogging?: TelemetryAccessLogging[];
  metrics?: TelemetryMetrics[];
  /** Accepted, not effective yet (reported when read). */
  tracing?: OpaqueObject[];
}

// ---------------------------------------------------------------- the kinds

export interface SpecByKind {
  RequestAuthentication: RequestAuthenticationSpec;
  AuthorizationPolicy: AuthorizationPolicySpec;
  PeerAuthentication: PeerAuthenticationSpec;
  ServiceEntry: ServiceEntrySpec;
  WorkloadEntry: WorkloadEntrySpec;
  WorkloadGroup: WorkloadGroupSpec;
  Sidecar: SidecarSpec;
  DestinationRule: DestinationRuleSpec;
  VirtualService: VirtualServiceSpec;
  Gateway: GatewaySpec;
  Telemetry: TelemetrySpec;
}

export type Kind = keyof SpecByKind;

export const KINDS: readonly Kind[] = [
  'RequestAuthentication',
  'AuthorizationPolicy',
  'PeerAuthentication',
  'ServiceEntry',
  'WorkloadEntry',
  'WorkloadGroup',
  'Sidecar',
  'DestinationRule',
  'VirtualService',
  'Gateway',
  'Telemetry',
];

export const GROUP_OF_KIND: Readonly<Record<Kind, string>> = {
  RequestAuthentication: SECURITY_GROUP,
  AuthorizationPolicy: SECURITY_GROUP,
  PeerAuthentication: SECURITY_GROUP,
  ServiceEntry: NETWORKING_GROUP,
  WorkloadEntry: NETWORKING_GROUP,
  WorkloadGroup: NETWORKING_GROUP,
  Sidecar: NETWORKING_GROUP,
  DestinationRule: NETWORKING_GROUP,
  VirtualService: NETWORKING_GROUP,
  Gateway: NETWORKING_GROUP,
  Telemetry: TELEMETRY_GROUP,
};

export type RequestAuthentication = Resource<RequestAuthenticationSpec, 'RequestAuthentication'>;
export type AuthorizationPolicy = Resource<AuthorizationPolicySpec, 'AuthorizationPolicy'>;
export type PeerAuthentication = Resource<PeerAuthenticationSpec, 'PeerAuthentication'>;
export type ServiceEntry = Resource<ServiceEntrySpec, 'ServiceEntry'>;
export type WorkloadEntry = Resource<WorkloadEntrySpec, 'WorkloadEntry'>;
export type WorkloadGroup = Resource<WorkloadGroupSpec, 'WorkloadGroup'>;
export type Sidecar = Resource<SidecarSpec, 'Sidecar'>;
export type DestinationRule = Resource<DestinationRuleSpec, 'DestinationRule'>;
export type VirtualService = Resource<VirtualServiceSpec, 'VirtualService'>;
export type Gateway = Resource<GatewaySpec, 'Gateway'>;
export type Telemetry = Resource<TelemetrySpec, 'Telemetry'>;

/** A resource of one specific kind, e.g. `ResourceOf<'AuthorizationPolicy'>`. */
export type ResourceOf<K extends Kind> = Resource<SpecByKind[K], K>;

/** Any validated resource; narrow with `resource.kind`. */
export type AnyResource = { [K in Kind]: ResourceOf<K> }[Kind];

export function isKind(value: unknown): value is Kind {
  return typeof value === 'string' && (KINDS as readonly string[]).includes(value);
}

export function keyOf(resource: { kind: Kind; metadata: { namespace: string; name: string } }): ResourceKey {
  return { kind: resource.kind, namespace: resource.metadata.namespace, name: resource.metadata.name };
}

/** `Kind/namespace/name`, the form used in logs and error messages. */
export function formatKey(key: ResourceKey): string {
  return `${key.kind}/${key.namespace}/${key.name}`;
}
