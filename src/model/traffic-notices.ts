// What of a DestinationRule or VirtualService the translation does not honour yet, as sentences
// naming the resource and the field ("VirtualService default/reviews: http[0].tcp is not effective
// yet"). Pure: PushContext logs them once per change. The shapes below list what networking/
// translates; anything else a resource sets is reported, so nothing is silently ignored.
import type { DestinationRule, VirtualService } from '../api/types.js';
import { asRecord } from '../api/values.js';
import { boundToMesh } from './traffic.js';

/** A field translated whole (leaf), or the translated fields of an object (arrays: of each element). */
type Shape = true | { readonly [field: string]: Shape };

const STRING_MATCH: Shape = { exact: true, prefix: true, regex: true };
const DESTINATION: Shape = { host: true, subset: true, port: { number: true } };
const PERCENT: Shape = { value: true };
const HEADER_OPS: Shape = { set: true, add: true, remove: true };

const LB: Shape = {
  simple: true,
  localityLbSetting: { enabled: true, failover: { from: true, to: true }, failoverPriority: true, distribute: { from: true, to: true } },
  consistentHash: { httpHeaderName: true, httpCookie: { name: true, path: true, ttl: true, attributes: { name: true, value: true } }, useSourceIp: true, httpQueryParameterName: true, minimumRingSize: true, ringHash: { minimumRingSize: true }, maglev: { tableSize: true } },
  warmup: { duration: true, minimumPercent: true, aggression: true },
  warmupDurationSecs: true,
};
const POLICY_FIELDS = {
  loadBalancer: LB,
  connectionPool: {
    tcp: { maxConnections: true, connectTimeout: true, idleTimeout: true, maxConnectionDuration: true, tcpKeepalive: { probes: true, time: true, interval: true } },
    http: { http1MaxPendingRequests: true, http2MaxRequests: true, maxRequestsPerConnection: true, maxRetries: true, idleTimeout: true, h2UpgradePolicy: true, useClientProtocol: true, maxConcurrentStreams: true },
  },
  outlierDetection: {
    consecutive5xxErrors: true,
    consecutiveGatewayErrors: true,
    interval: true,
    baseEjectionTime: true,
    maxEjectionPercent: true,
    minHealthPercent: true,
    splitExternalLocalOriginErrors: true,
    consecutiveLocalOriginFailures: true,
  },
  tls: { mode: true, clientCertificate: true, privateKey: true, caCertificates: true, caCrl: true, credentialName: true, insecureSkipVerify: true, subjectAltNames: true, sni: true },
} as const;
// proxyProtocol, tunnel and retryBudget are the policy's own: the API's port-level settings have none of them.
const TRAFFIC_POLICY: Shape = { ...POLICY_FIELDS, proxyProtocol: { version: true }, tunnel: { protocol: true, targetHost: true, targetPort: true }, retryBudget: { percent: true, minRetryConcurrency: true }, portLevelSettings: { port: { number: true }, ...POLICY_FIELDS } };

const DESTINATION_RULE: Shape = {
  host: true,
  trafficPolicy: TRAFFIC_POLICY,
  subsets: { name: true, labels: true, trafficPolicy: TRAFFIC_POLICY },
  exportTo: true,
  workloadSelector: true,
};

const HTTP_ROUTE: Shape = {
  name: true,
  match: {
    name: true,
    uri: STRING_MATCH,
    scheme: STRING_MATCH,
    method: STRING_MATCH,
    authority: STRING_MATCH,
    headers: true,
    withoutHeaders: true,
    queryParams: true,
    ignoreUriCase: true,
    port: true,
    sourceLabels: true,
    sourceNamespace: true,
    gateways: true,
    statPrefix: true,
  },
  route: { destination: DESTINATION, weight: true, headers: { request: HEADER_OPS, response: HEADER_OPS } },
  redirect: { uri: true, authority: true, port: true, derivePort: true, scheme: true, redirectCode: true },
  directResponse: { status: true, body: { string: true, bytes: true } },
  rewrite: { uri: true, authority: true, uriRegexRewrite: { match: true, rewrite: true } },
  timeout: true,
  retries: { attempts: true, perTryTimeout: true, retryOn: true, retryRemoteLocalities: true, retryIgnorePreviousHosts: true, backoff: true },
  fault: { delay: { fixedDelay: true, percentage: PERCENT, percent: true }, abort: { httpStatus: true, grpcStatus: true, percentage: PERCENT } },
  mirror: DESTINATION,
  mirrorPercentage: PERCENT,
  mirrorPercent: true,
  mirrors: { destination: DESTINATION, percentage: PERCENT },
  headers: { request: HEADER_OPS, response: HEADER_OPS },
  corsPolicy: { allowOrigins: STRING_MATCH, allowOrigin: true, allowMethods: true, allowHeaders: true, exposeHeaders: true, maxAge: true, allowCredentials: true, unmatchedPreflights: true },
  delegate: { name: true, namespace: true },
};

const L4_MATCH = { destinationSubnets: true, port: true, sourceLabels: true, sourceNamespace: true, gateways: true } as const;
const L4_ROUTE: Shape = { destination: DESTINATION, weight: true };
const TCP_ROUTE: Shape = { match: L4_MATCH, route: L4_ROUTE };
const TLS_ROUTE: Shape = { match: { ...L4_MATCH, sniHosts: true }, route: L4_ROUTE };

const VIRTUAL_SERVICE: Shape = { hosts: true, gateways: true, exportTo: true, http: HTTP_ROUTE, tcp: TCP_ROUTE, tls: TLS_ROUTE };

/** Paths under `value` that `shape` does not cover. */
function untranslated(value: unknown, shape: Shape, path: string): string[] {
  if (shape === true || value === null || typeof value !== 'object') return [];
  if (Array.isArray(value)) return value.flatMap((v, i) => untranslated(v, shape, `${path}[${i}]`));
  return Object.entries(value as Record<string, unknown>).flatMap(([k, v]) => {
    const p = path ? `${path}.${k}` : k;
    const sub = shape[k];
    return sub === undefined ? [p] : untranslated(v, sub, p);
  });
}

const SUPPORTED_LB = new Set(['ROUND_ROBIN', 'LEAST_REQUEST', 'LEAST_CONN', 'RANDOM', 'UNSPECIFIED', 'PASSTHROUGH']);

/** Values of translated fields that are not honoured (a balancer or TLS mode the translation lacks). */
function unsupportedValues(spec: unknown, path = ''): string[] {
  if (spec === null || typeof spec !== 'object') return [];
  if (Array.isArray(spec)) return spec.flatMap((v, i) => unsupportedValues(v, `${path}[${i}]`));
  const out: string[] = [];
  for (const [k, v] of Object.entries(spec as Record<string, unknown>)) {
    const p = path ? `${path}.${k}` : k;
    if (k === 'simple' && typeof v === 'string' && !SUPPORTED_LB.has(v)) out.push(`${p} ${v} is not effective yet`);
    else if (k === 'tls' && v !== null && typeof v === 'object') out.push(...clientTlsNotices(v as Record<string, unknown>, p));
    else out.push(...unsupportedValues(v, p));
  }
  return out;
}

/**
 * What of a rule's `tls` applies only in part: `credentialName` is read by gateways only (as the Go
 * mesh, which does not give sidecars the credential), a CRL means nothing when the server is not
 * verified, insecureSkipVerify and credentialName mean nothing for the mesh's own mTLS. Without
 * caCertificates the server is verified against the system roots, its SANs and CRL checked.
 */
function clientTlsNotices(tls: Record<string, unknown>, path: string): string[] {
  const mode = typeof tls['mode'] === 'string' ? tls['mode'] : 'DISABLE';
  const originates = mode === 'SIMPLE' || mode === 'MUTUAL';
  const out: string[] = [];
  if (!originates) {
    for (const k of ['credentialName', 'insecureSkipVerify', 'caCrl']) if (tls[k] !== undefined && tls[k] !== false && tls[k] !== '') out.push(`${path}.${k} has no effect with mode ${mode}`);
    return out;
  }
  const credential = typeof tls['credentialName'] === 'string' && tls['credentialName'] !== '';
  if (credential) {
    out.push(`${path}.credentialName applies on gateways only: sidecars originate ${mode} TLS without it, from the file fields (the Go mesh gives sidecars no TLS from this rule)`);
  }
  if (tls['insecureSkipVerify'] === true && tls['caCrl']) out.push(`${path}.caCrl has no effect with insecureSkipVerify`);
  return out;
}

/** The rule's trafficPolicy and each subset's, with their paths. */
function policiesOf(dr: DestinationRule): [string, unknown][] {
  return [['trafficPolicy', dr.spec.trafficPolicy], ...(dr.spec.subsets ?? []).map((s, i): [string, unknown] => [`subsets[${i}].trafficPolicy`, s.trafficPolicy])];
}

/** Locality failover set where no outlier detection is: inert, as in the Go mesh, so said. */
function failoverNotices(dr: DestinationRule): string[] {
  const policies = policiesOf(dr);
  const anyOutlier = policies.some(([, p]) => asRecord(p)?.['outlierDetection'] !== undefined);
  return policies.flatMap(([path, p]) => {
    const setting = asRecord(asRecord(asRecord(p)?.['loadBalancer'])?.['localityLbSetting']);
    // distribute sets weights, which need no outlier detection.
    if (!setting || setting['enabled'] === false || setting['distribute'] !== undefined || anyOutlier) return [];
    return [`${path}.loadBalancer.localityLbSetting has no effect without outlierDetection: a proxy never finds the nearer endpoints unhealthy, so it never fails over`];
  });
}

/**
 * The TCP proxy's connection limits come from the rule's top-level trafficPolicy only (as the Go
 * mesh's); a port's or subset's reach the HTTP connection pools and nothing else.
 */
function tcpLimitNotices(dr: DestinationRule): string[] {
  const tcpOf = (p: unknown) => asRecord(asRecord(asRecord(p)?.['connectionPool'])?.['tcp']);
  const nested: [string, unknown][] = [
    ...((dr.spec.trafficPolicy?.portLevelSettings ?? []) as unknown[]).map((p, i): [string, unknown] => [`trafficPolicy.portLevelSettings[${i}]`, p]),
    ...(dr.spec.subsets ?? []).map((s, i): [string, unknown] => [`subsets[${i}].trafficPolicy`, s.trafficPolicy]),
  ];
  const out: string[] = [];
  for (const [path, p] of nested) {
    const tcp = tcpOf(p);
    for (const k of ['idleTimeout', 'maxConnectionDuration']) {
      if (tcp?.[k] !== undefined) out.push(`${path}.connectionPool.tcp.${k} does not reach TCP-proxied connections: they take the top-level trafficPolicy's, as in the Go mesh (HTTP connection pools take this one)`);
    }
  }
  return out;
}

/**
 * A policy's proxyProtocol skips the ports it has portLevelSettings for: there the Go mesh's policy
 * is the port-level one, which has no proxyProtocol.
 */
function proxyProtocolNotices(dr: DestinationRule): string[] {
  return policiesOf(dr).flatMap(([path, p]) => {
    const policy = asRecord(p);
    if (policy?.['proxyProtocol'] === undefined || !Array.isArray(policy['portLevelSettings'])) return [];
    const ports = policy['portLevelSettings'].map((s) => asRecord(asRecord(s)?.['port'])?.['number']).filter((n) => n !== undefined);
    return ports.map((n) => `${path}.proxyProtocol does not reach port ${String(n)}: its portLevelSettings entry is the whole policy there, as in the Go mesh`);
  });
}

export function destinationRuleNotices(dr: DestinationRule): string[] {
  const name = `DestinationRule ${dr.metadata.namespace}/${dr.metadata.name}`;
  const fields = untranslated(dr.spec, DESTINATION_RULE, '').map((p) => `${p} is not effective yet`);
  const tp = { trafficPolicy: dr.spec.trafficPolicy, subsets: dr.spec.subsets };
  return [...fields, ...unsupportedValues(tp), ...failoverNotices(dr), ...tcpLimitNotices(dr), ...proxyProtocolNotices(dr)].map((m) => `${name}: ${m}`);
}

export function virtualServiceNotices(vs: VirtualService): string[] {
  const name = `VirtualService ${vs.metadata.namespace}/${vs.metadata.name}`;
  // tcp and tls routes of a VirtualService bound only to Gateways are checked against what gateways translate (gateway.ts gatewayRouteNotices).
  const l4 = (p: string) => boundToMesh(vs) || !/^(tcp|tls)(\[|$)/.test(p);
  const fields = untranslated(vs.spec, VIRTUAL_SERVICE, '').filter(l4).map((p) => `${p} is not effective yet`);
  return fields.map((m) => `${name}: ${m}`);
}
