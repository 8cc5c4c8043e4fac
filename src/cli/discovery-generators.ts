// The discovery server's generator options: what its settings (environment variables) and mesh
// config say every proxy's resources are built with, and the live parts (snapshot, security
// filters, credentials) the generators read from the server.
import type { PushContext } from '../model/push-context.js';
import type { TelemetryProviders } from '../model/telemetry-providers.js';
import type { MeshTrafficDefaults } from '../model/mesh-traffic-defaults.js';
import { XdsCache } from '../xds/cache.js';
import type { ProxyInfo } from '../xds/generator.js';
import type { MeshGeneratorOptions, ProxyModels } from '../xds/generators/index.js';
import type { MeshMtlsSettings } from '../xds/generators/mtls.js';
import type { CredentialStore } from '../security/credentials/store.js';
import type { ProxySecurity } from './discovery-security.js';
import type { DiscoveryOptions } from './discovery-options.js';
import type { DiscoverySettings } from './discovery-settings.js';

export interface GeneratorSources {
  readonly pushContext: () => PushContext;
  readonly proxies: ProxyModels;
  readonly security: ProxySecurity;
  readonly mtls: MeshMtlsSettings;
  readonly telemetryProviders: TelemetryProviders;
  readonly credentials?: { readonly store: CredentialStore; readonly verified: (info: ProxyInfo) => boolean };
}

export function meshGeneratorOptions(opts: DiscoveryOptions, settings: DiscoverySettings, src: GeneratorSources): MeshGeneratorOptions {
  const meshTraffic: MeshTrafficDefaults = opts.meshTraffic ?? {};
  return {
    pushContext: src.pushContext,
    proxies: src.proxies,
    inboundHttpFilters: (proxy, push) => src.security.httpFilters(proxy, push),
    inboundNetworkFilters: (proxy, push) => src.security.networkFilters(proxy, push),
    serverHttpFilters: (proxy, push) => src.security.grpcServerFilters(proxy, push),
    inboundSniffing: settings.inboundSniffing,
    outboundSniffing: settings.outboundSniffing,
    headlessPodListeners: settings.orchestratorRegistry.headlessPodListeners,
    detectionTimeout: settings.detectionTimeout,
    defaultRequestTimeout: settings.defaultRequestTimeout,
    http10: settings.http10,
    loopBlocker: settings.loopBlocker,
    sidecarUseRemoteAddress: settings.sidecarUseRemoteAddress,
    scopeGatewayToNamespace: settings.scopeGatewayToNamespace,
    filterGatewayClusters: settings.filterGatewayClusters,
    ...(opts.pathNormalization ? { pathNormalization: opts.pathNormalization } : {}),
    ...(opts.localityLbSetting ? { localityLb: opts.localityLbSetting } : {}),
    ...(opts.h2Upgrade ? { h2Upgrade: true } : {}),
    ...(opts.tcpKeepalive ? { tcpKeepalive: opts.tcpKeepalive } : {}),
    accessLogging: { ...(opts.accessLog ? { mesh: opts.accessLog } : {}), providers: src.telemetryProviders },
    metrics: src.telemetryProviders,
    ...(meshTraffic.connectTimeout !== undefined ? { connectTimeout: meshTraffic.connectTimeout } : {}),
    ...(meshTraffic.defaultHttpRetryPolicy ? { defaultHttpRetryPolicy: meshTraffic.defaultHttpRetryPolicy } : {}),
    mtls: src.mtls,
    ...(src.credentials ? { credentials: src.credentials } : {}),
    cache: new XdsCache(settings.cache),
  };
}
