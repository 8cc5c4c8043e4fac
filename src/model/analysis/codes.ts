// The analysis message codes. Numbers follow the Go mesh's IST0xxx codes where one has the same
// meaning (MSH0101 ~ IST0101, ...), under our own prefix; MSH02xx are ours, without a Go analogue.
export const CODES = {
  ReferencedResourceNotFound: { code: 'MSH0101', level: 'Error', help: 'a resource refers to another (a subset, a gateway workload) that does not exist' },
  ConflictingMeshGatewayVirtualServiceHosts: { code: 'MSH0109', level: 'Error', help: 'several VirtualServices bound to the mesh define the same host; which one applies is undefined' },
  ConflictingPeerAuthentications: { code: 'MSH0113', level: 'Error', help: 'several PeerAuthentications apply at the same level to the same workloads' },
  NoMatchingWorkloadsFound: { code: 'MSH0127', level: 'Warning', help: 'a policy or Sidecar selector matches no workload' },
  ConflictingTelemetryWorkloadSelectors: { code: 'MSH0159', level: 'Error', help: 'several Telemetries select the same workload; the order they merge in is not plain from the config' },
  MultipleTelemetriesWithoutWorkloadSelectors: { code: 'MSH0160', level: 'Error', help: 'several Telemetries in a namespace have no selector; only the oldest applies' },
  DestinationRuleDisablesStrictMtls: { code: 'MSH0202', level: 'Warning', help: 'a DestinationRule disables TLS to a host whose namespace requires mutual TLS (PeerAuthentication STRICT)' },
  UntrustedRequestPrincipalIssuer: { code: 'MSH0201', level: 'Warning', help: "an AuthorizationPolicy's requestPrincipals names an issuer no RequestAuthentication trusts, so the rule can never match" },
} as const satisfies Record<string, { code: string; level: 'Error' | 'Warning' | 'Info'; help: string }>;

export type CodeName = keyof typeof CODES;
