// The discovery server's settings, read once here at the program's edge and passed to the modules
// as options (the modules themselves only know the spec's defaults).
import { setting } from '../common/env.js';
import type { XdsCacheOptions } from '../xds/cache.js';
import type { DebounceOptions } from '../xds/debounce.js';
import type { XdsServerOptions } from '../xds/server.js';

export interface DiscoverySettings {
  readonly xds: Pick<XdsServerOptions, 'sendTimeoutMs' | 'pushThrottle' | 'maxRecvMsgSize' | 'maxStreams' | 'flowControl'>;
  readonly debounce: DebounceOptions;
  readonly cache: XdsCacheOptions;
  readonly inboundSniffing: boolean;
  readonly outboundSniffing: boolean;
  /** Seconds. */
  readonly detectionTimeout: number;
  /** MESH_DEFAULT_REQUEST_TIMEOUT, seconds; 0 = none. */
  readonly defaultRequestTimeout: number;
  /** PILOT_HTTP10. */
  readonly http10: boolean;
  /** MESHD_ENABLE_SDS_SERVER, and the PILOT_ENABLE_XDS_IDENTITY_CHECK it needs. */
  readonly sdsServer: { readonly enabled: boolean; readonly identityCheck: boolean };
  /** PILOT_ENABLE_VIRTUAL_SERVICE_DELEGATE. */
  readonly traffic: { readonly virtualServiceDelegate: boolean; readonly destinationRuleInheritance: boolean };
  /** PILOT_SCOPE_GATEWAY_TO_NAMESPACE. */
  readonly scopeGatewayToNamespace: boolean;
  /** PILOT_FILTER_GATEWAY_CLUSTER_CONFIG. */
  readonly filterGatewayClusters: boolean;
  /** PILOT_ENABLE_LOOP_BLOCKER. */
  readonly loopBlocker: boolean;
  /** PILOT_SIDECAR_USE_REMOTE_ADDRESS. */
  readonly sidecarUseRemoteAddress: boolean;
  readonly debugOnHttp: boolean;
  /** ENABLE_ADMIN_ENDPOINTS: /debug/force_disconnect. */
  readonly adminEndpoints: boolean;
  readonly crdValidation: boolean;
  readonly autoRegistration: { readonly enabled: boolean; readonly gracePeriodMs: number };
  /** PILOT_ENABLE_WORKLOAD_ENTRY_HEALTHCHECKS. */
  readonly workloadHealthChecks: boolean;
  readonly validationWebhook: boolean;
  readonly webhookCustomHost: string;
  /** PILOT_ENABLE_ANALYSIS. */
  readonly analysis: boolean;
  readonly injection: { readonly enabled: boolean; readonly legacyFsGroup: boolean };
  /** The webhook configurations whose caBundle the server keeps (see webhooks/ca-bundle.ts). */
  readonly webhookConfigs: { readonly namespace: string; readonly injection: string; readonly validation: string };
  readonly orchestratorRegistry: {
    readonly edsForHeadless: boolean;
    readonly useEndpointSlices: boolean;
    readonly selectWorkloadEntries: boolean;
    /** PILOT_ENABLE_HEADLESS_SERVICE_POD_LISTENERS: also read by the listener generator. */
    readonly headlessPodListeners: boolean;
  };
  /** PILOT_ENABLE_SERVICEENTRY_SELECT_PODS (with the orchestrator registry). */
  readonly serviceEntrySelectsPods: boolean;
  /** REVISION: the control plane's revision ('' = default; config/revision.ts). */
  readonly revision: string;
  /** PILOT_ENABLE_STATUS and its pacing; distribution tracking (status/). */
  readonly status: { readonly enabled: boolean; readonly qps: number; readonly burst: number; readonly workers: number; readonly distribution: boolean; readonly retentionMs: number };
  /** ORCH_INGRESS_NS: the namespace of the Gateways generated from Ingresses; '' = the discovery server's namespace. */
  readonly ingressNamespace: string;
  /** Mesh mTLS settings from the environment (mesh config adds auto mTLS and the aliases). */
  readonly mtls: { readonly trustDomain: string; readonly skipValidation: boolean; readonly inboundTlsV2: boolean };
}

export function discoverySettings(): DiscoverySettings {
  return {
    xds: {
      sendTimeoutMs: setting('PILOT_XDS_SEND_TIMEOUT'),
      pushThrottle: setting('PILOT_PUSH_THROTTLE'),
      maxRecvMsgSize: setting('MESH_GPRC_MAXRECVMSGSIZE'),
      maxStreams: setting('MESH_GPRC_MAXSTREAMS'),
      flowControl: { enabled: setting('PILOT_ENABLE_FLOW_CONTROL'), timeoutMs: setting('PILOT_FLOW_CONTROL_TIMEOUT') },
    },
    debounce: { afterMs: setting('PILOT_DEBOUNCE_AFTER'), maxMs: setting('PILOT_DEBOUNCE_MAX'), edsDebounce: setting('PILOT_ENABLE_EDS_DEBOUNCE') },
    cache: { enabled: setting('PILOT_ENABLE_XDS_CACHE'), size: setting('PILOT_XDS_CACHE_SIZE'), stats: setting('PILOT_XDS_CACHE_STATS') },
    inboundSniffing: setting('PILOT_ENABLE_PROTOCOL_SNIFFING_FOR_INBOUND'),
    outboundSniffing: setting('PILOT_ENABLE_PROTOCOL_SNIFFING_FOR_OUTBOUND'),
    detectionTimeout: setting('PILOT_INBOUND_PROTOCOL_DETECTION_TIMEOUT') / 1000,
    defaultRequestTimeout: setting('MESH_DEFAULT_REQUEST_TIMEOUT') / 1000,
    http10: setting('PILOT_HTTP10'),
    sdsServer: { enabled: setting('MESHD_ENABLE_SDS_SERVER'), identityCheck: setting('PILOT_ENABLE_XDS_IDENTITY_CHECK') },
    traffic: { virtualServiceDelegate: setting('PILOT_ENABLE_VIRTUAL_SERVICE_DELEGATE'), destinationRuleInheritance: setting('PILOT_ENABLE_DESTINATION_RULE_INHERITANCE') },
    scopeGatewayToNamespace: setting('PILOT_SCOPE_GATEWAY_TO_NAMESPACE'),
    filterGatewayClusters: setting('PILOT_FILTER_GATEWAY_CLUSTER_CONFIG'),
    loopBlocker: setting('PILOT_ENABLE_LOOP_BLOCKER'),
    sidecarUseRemoteAddress: setting('PILOT_SIDECAR_USE_REMOTE_ADDRESS'),
    debugOnHttp: setting('ENABLE_DEBUG_ON_HTTP'),
    adminEndpoints: setting('ENABLE_ADMIN_ENDPOINTS'),
    crdValidation: setting('PILOT_ENABLE_CRD_VALIDATION'),
    autoRegistration: { enabled: setting('PILOT_ENABLE_WORKLOAD_ENTRY_AUTOREGISTRATION'), gracePeriodMs: setting('PILOT_WORKLOAD_ENTRY_GRACE_PERIOD') },
    workloadHealthChecks: setting('PILOT_ENABLE_WORKLOAD_ENTRY_HEALTHCHECKS'),
    validationWebhook: setting('VALIDATION_ENABLED'),
    webhookCustomHost: setting('MESHD_CUSTOM_HOST'),
    analysis: setting('PILOT_ENABLE_ANALYSIS'),
    injection: { enabled: setting('INJECT_ENABLED'), legacyFsGroup: setting('ENABLE_LEGACY_FSGROUP_INJECTION') },
    webhookConfigs: { namespace: setting('POD_NAMESPACE'), injection: setting('INJECTION_WEBHOOK_CONFIG_NAME'), validation: setting('VALIDATION_WEBHOOK_CONFIG_NAME') },
    orchestratorRegistry: {
      edsForHeadless: setting('PILOT_ENABLE_EDS_FOR_HEADLESS_SERVICES'),
      useEndpointSlices: setting('PILOT_USE_ENDPOINT_SLICE'),
      selectWorkloadEntries: setting('PILOT_ENABLE_ORCH_SELECT_WORKLOAD_ENTRIES'),
      headlessPodListeners: setting('PILOT_ENABLE_HEADLESS_SERVICE_POD_LISTENERS'),
    },
    serviceEntrySelectsPods: setting('PILOT_ENABLE_SERVICEENTRY_SELECT_PODS'),
    revision: setting('REVISION'),
    status: {
      enabled: setting('PILOT_ENABLE_STATUS'),
      qps: setting('PILOT_STATUS_QPS'),
      burst: setting('PILOT_STATUS_BURST'),
      workers: setting('PILOT_STATUS_MAX_WORKERS'),
      distribution: setting('PILOT_ENABLE_CONFIG_DISTRIBUTION_TRACKING'),
      retentionMs: setting('PILOT_DISTRIBUTION_HISTORY_RETENTION'),
    },
    ingressNamespace: setting('ORCH_INGRESS_NS'),
    mtls: { trustDomain: setting('TRUST_DOMAIN'), skipValidation: setting('PILOT_SKIP_VALIDATE_TRUST_DOMAIN'), inboundTlsV2: setting('PILOT_SIDECAR_ENABLE_INBOUND_TLS_V2') },
  };
}
