// Mesh mTLS for one proxy from a PushContext: the PeerAuthentication modes of its inbound ports and
// the auto mTLS inputs of its outbound clusters. The builders (networking/inbound-mtls.ts,
// networking/outbound-mtls.ts, security/mtls/) stay pure; this module only gathers their inputs.
import type { Proxy } from '../../model/proxy.js';
import type { PushContext } from '../../model/push-context.js';
import type { Service, ServiceInstance } from '../../model/service.js';
import type { InboundMtlsOptions } from '../../networking/inbound-mtls.js';
import { MESH_TLS_MODE, TLS_MODE_LABEL, type ClusterMtls } from '../../networking/outbound-mtls.js';
import { namespaceMtlsMode, workloadMtls, type WorkloadMtls } from '../../security/mtls/peer-authentication.js';
import { expandWithAliases, trustDomainsForValidation, type TrustDomains } from '../../security/mtls/trust-domain.js';
import { spiffeId, workloadIdentity } from '../../security/spiffe.js';

export interface MeshMtlsSettings extends TrustDomains {
  /** Mesh config enableAutoMtls (default true). */
  readonly autoMtls: boolean;
  /** PILOT_SIDECAR_ENABLE_INBOUND_TLS_V2. */
  readonly inboundTlsV2: boolean;
}

/** The proxy's PeerAuthentication modes and how its inbound chains terminate mTLS. */
export function inboundMtls(proxy: Proxy, push: PushContext, s: MeshMtlsSettings): { modes: WorkloadMtls; options: InboundMtlsOptions } {
  const modes = workloadMtls(proxy, push.policiesFor('PeerAuthentication', proxy), push.rootNamespace);
  const tls = proxy.meshMtls ? { tls: { trustDomains: trustDomainsForValidation(s), tlsV2: s.inboundTlsV2 } } : {};
  return { modes, options: { mode: modes.mode, ...tls } };
}

const hasSidecar = (i: ServiceInstance) => i.labels[TLS_MODE_LABEL] === MESH_TLS_MODE;

/**
 * The SPIFFE ids of the service accounts of the instances with a sidecar (the others are reached
 * in plaintext), sorted, with the trust domain aliases.
 */
export function serviceSans(instances: readonly ServiceInstance[], s: TrustDomains): string[] {
  const ids = new Set(instances.filter(hasSidecar).map((i) => spiffeId(workloadIdentity(s.trustDomain, i.namespace, i.serviceAccount))));
  return expandWithAliases([...ids].sort(), s.aliases);
}

/** Auto mTLS inputs of a service's clusters; undefined for a proxy without a workload certificate. */
export function clusterMtls(proxy: Proxy, push: PushContext, service: Service, instances: readonly ServiceInstance[], s: MeshMtlsSettings): ClusterMtls | undefined {
  if (!proxy.meshMtls) return undefined;
  const policies = [...push.policiesInNamespace('PeerAuthentication', push.rootNamespace), ...(service.namespace === push.rootNamespace ? [] : push.policiesInNamespace('PeerAuthentication', service.namespace))];
  return {
    serverMode: namespaceMtlsMode(service.namespace, policies, push.rootNamespace),
    sans: serviceSans(instances, s),
    autoMtls: s.autoMtls,
    allEndpointsMesh: instances.length > 0 && instances.every(hasSidecar),
  };
}
