// The discovery server's options: what `pilot-discovery discovery` reads from its flags and the
// mesh config (src/cli/pilot-discovery.ts) and hands to DiscoveryServer.
import type { OrchestratorSourceOptions } from '../config/orchestrator.js';
import type { TcpKeepaliveSettings } from '../networking/traffic-policy.js';
import type { MeshAccessLog } from '../model/mesh-access-log.js';
import type { TelemetryProviders } from '../model/telemetry-providers.js';
import type { MeshTrafficDefaults } from '../model/mesh-traffic-defaults.js';
import type { IngressSettings } from '../model/ingress/class.js';
import type { ExtensionProviders } from '../model/extension-providers.js';
import type { PathNormalization } from '../networking/common.js';
import type { LocalityLbSetting } from '../networking/locality-lb.js';
import type { BundleEndpoint } from '../security/federation/bundle-format.js';
import type { SecurityPlugin } from '../security/plugins.js';
import type { ElectionTimings } from '../registry/orchestrator/leader-election.js';

export interface DiscoveryOptions {
  httpAddr: string;
  monitoringAddr: string;
  grpcAddr: string;
  /** --secureGRPCAddr: TLS xDS and the CA; undefined or empty = not served. */
  secureGrpcAddr?: string;
  /** --namespace: the serving certificate is for meshd.<namespace>.svc. */
  namespace?: string;
  /** SPIFFE_BUNDLE_ENDPOINTS, parsed: trust domains whose clients the secured port accepts. */
  bundleEndpoints?: readonly BundleEndpoint[];
  httpsAddr: string;
  /** --configDir: files replace the orchestrator as the config source. */
  configDir?: string;
  orchestrator: OrchestratorSourceOptions;
  registries: readonly string[];
  domain: string;
  clusterId: string;
  keepaliveIntervalMs: number;
  keepaliveTimeoutMs: number;
  maxConnectionAgeMs: number;
  tlsCertFile?: string;
  tlsKeyFile?: string;
  /** --profile: serve /debug/pprof/ on the HTTP debug address. */
  profile?: boolean;
  /** The injection template file (a mounted ConfigMap); default INJECTION_TEMPLATE_FILE when it exists, else the built-in template. */
  injectionTemplate?: string;
  /** Mesh config pathNormalization of every HTTP connection manager; default BASE. */
  pathNormalization?: PathNormalization;
  /** Mesh config localityLbSetting; the mesh default (enabled) when absent. */
  localityLbSetting?: LocalityLbSetting;
  /** Mesh config h2UpgradePolicy UPGRADE. */
  h2Upgrade?: boolean;
  /** Mesh config tcpKeepalive. */
  tcpKeepalive?: TcpKeepaliveSettings;
  /** Mesh config accessLogFile and its format; unset: no access logs but those Telemetries configure. */
  accessLog?: MeshAccessLog;
  /** Mesh config extensionProviders and defaultProviders for Telemetry resources (access loggers, metrics); default the built-in `envoy` and `prometheus`, metrics on. */
  telemetryProviders?: TelemetryProviders;
  /** Mesh config rootNamespace: mesh-wide policies, Sidecar and rules; default mesh-system. */
  rootNamespace?: string;
  /** Mesh config outboundTrafficPolicy, connectTimeout, defaultHttpRetryPolicy; unset: the Go mesh's defaults. */
  meshTraffic?: MeshTrafficDefaults;
  /** Mesh config extensionProviders: the authorizers of CUSTOM AuthorizationPolicies. */
  extensionProviders?: ExtensionProviders;
  /** --plugins; default all of them. */
  plugins?: ReadonlySet<SecurityPlugin>;
  /** Mesh config enableAutoMtls (default true), trustDomain (default: TRUST_DOMAIN) and trustDomainAliases (default none). */
  meshMtls?: { autoMtls: boolean; trustDomain?: string; trustDomainAliases: readonly string[] };
  /** Mesh config ingressControllerMode, ingressClass, ingressSelector, ingressService; default the mesh's defaults. */
  ingress?: IngressSettings;
  /** Leader election timings; default the Go mesh's (tests only). */
  leaderElection?: ElectionTimings;
}

/** Where the deployment mounts the injection template ConfigMap. */
export const INJECTION_TEMPLATE_FILE = '/var/lib/mesh/inject/template.yaml';
