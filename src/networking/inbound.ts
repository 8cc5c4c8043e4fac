// Which ports a proxy receives traffic on, and where its application listens: the Sidecar's
// ingress listeners when it has some, else the ports of the service instances at the proxy's IPs.
import { isIP } from 'node:net';
import type { IngressListener } from '../api/types.js';
import type { Proxy } from '../model/proxy.js';
import type { PushContext } from '../model/push-context.js';
import { portProtocol, type ServiceInstance } from '../model/service.js';
import type { InboundPort } from './listener.js';
import { LOCALHOST, WILDCARD_ADDRESS } from './names.js';
import { mergeTrafficPolicy, type ConnectionPoolSettings, type TrafficPolicy } from './traffic-policy.js';
import { telemetryService, type TelemetryService } from './telemetry-metadata.js';

export interface InboundPorts {
  readonly ports: InboundPort[];
  /** User errors (bad defaultEndpoint, ...) naming the resource and field; those ports are skipped. */
  readonly problems: string[];
  /** Ingress listeners that lose to an earlier one on the same port (pilot_conflict_inbound_listener). */
  readonly conflicts: string[];
}

/**
 * `127.0.0.1:<port>`, `[::1]:<port>`, or `0.0.0.0:<port>` meaning the workload's own IP.
 * Throws a message describing what is expected.
 */
export function parseDefaultEndpoint(value: string, proxy: Proxy): { address: string; port: number } {
  const m = /^(?:\[([^\]]+)\]|([^:]+)):(\d+)$/.exec(value);
  const host = m?.[1] ?? m?.[2];
  const port = Number(m?.[3]);
  if (!m || !host || !isIP(host) || !Number.isInteger(port) || port < 1 || port > 65535) {
    throw new Error(`"${value}" is not <ip>:<port> (e.g. 127.0.0.1:8080; unix sockets are not supported)`);
  }
  return { address: host === WILDCARD_ADDRESS ? (proxy.ipAddresses[0] ?? LOCALHOST) : host, port };
}

/**
 * Where a port without an explicit endpoint sends: under TPROXY, a port reached through capture
 * goes to the connection's own destination (the pod's address), as the Go mesh's inbound clusters
 * (ORIGINAL_DST under its default inbound passthrough policy), so original_src can connect from the
 * client's address, which Linux does not route to loopback; elsewhere, 127.0.0.1. A port with its
 * own bound listener keeps 127.0.0.1: its destination is that listener.
 */
function defaultTarget(proxy: Proxy, port: Omit<InboundPort, 'target'>, targetPort: number): Pick<InboundPort, 'target'> {
  if (proxy.interceptionMode === 'TPROXY' && !bindsOwnListener(port, true)) return {};
  return { target: { address: LOCALHOST, port: targetPort } };
}

/** A pool as the API spells it (validated structurally): the same shape the translation reads. */
const poolOf = (value: unknown): ConnectionPoolSettings | undefined => (value ? (value as ConnectionPoolSettings) : undefined);

/**
 * The services of an inbound cluster's metadata, as the Go mesh's addTelemetryMetadata: those of
 * the instances on the port (the first one's service port only, each host once), none when the
 * first one's service is outside the mesh.
 */
function portServices(instances: readonly ServiceInstance[], push: PushContext): Pick<InboundPort, 'services'> {
  const first = instances[0];
  const primary = first && push.serviceOf(first);
  if (!first || !primary || primary.external) return {};
  const out: TelemetryService[] = [];
  for (const i of instances) {
    const s = i.servicePort.port === first.servicePort.port ? push.serviceOf(i) : undefined;
    if (s && !out.some((x) => x.host === s.hostname)) out.push(telemetryService(s));
  }
  return { services: out };
}

function fromIngress(ingress: readonly IngressListener[], proxy: Proxy, source: string, sidecarPool: ConnectionPoolSettings | undefined, push: PushContext): InboundPorts {
  const ports: InboundPort[] = [];
  const problems: string[] = [];
  const conflicts: string[] = [];
  const seen = new Set<number>();
  ingress.forEach((l, i) => {
    if (seen.has(l.port.number)) {
      conflicts.push(`${source}: spec.ingress[${i}].port.number: ${l.port.number} is already used by an earlier ingress listener`);
      return;
    }
    seen.add(l.port.number);
    try {
      const pool = poolOf(l.connectionPool) ?? sidecarPool;
      // As the Go mesh's findOrCreateService: the service of an instance whose target port is the listener's.
      const instance = push.proxyInstances(proxy).find((i) => i.endpointPort === l.port.number);
      const services = instance ? portServices([instance], push) : {};
      const port = { port: l.port.number, protocol: portProtocol(l.port), ...(l.bind ? { bind: l.bind } : {}), ...(l.captureMode ? { captureMode: l.captureMode } : {}), ...(pool ? { connectionPool: pool } : {}), ...services };
      const target = l.defaultEndpoint ? { target: parseDefaultEndpoint(l.defaultEndpoint, proxy) } : defaultTarget(proxy, port, l.port.targetPort ?? l.port.number);
      ports.push({ ...port, ...target });
    } catch (e) {
      problems.push(`${source}: spec.ingress[${i}].defaultEndpoint: ${(e as Error).message}`);
    }
  });
  return { ports, problems, conflicts };
}

/**
 * Whether an inbound port gets a listener bound on it (else it is a chain of virtualInbound), as
 * the Go mesh decides per ingress listener: captureMode NONE always, DEFAULT (or unset) when the
 * proxy does not capture, IPTABLES never.
 */
export function bindsOwnListener(p: InboundPort, proxyCaptures: boolean): boolean {
  const mode = p.captureMode ?? 'DEFAULT';
  return mode === 'NONE' || (mode === 'DEFAULT' && !proxyCaptures);
}

/**
 * The inbound clusters' connection pools, as the Go mesh's buildInboundClusters takes them: the
 * Sidecar's (an ingress listener's own, else its inboundConnectionPool) replace the pool of the
 * instance's service's DestinationRule (one without workloadSelector, at the service port).
 */
export function inboundPorts(proxy: Proxy, push: PushContext): InboundPorts {
  const scope = push.sidecarScope(proxy);
  const sidecarPool = poolOf(scope.sidecar?.spec.inboundConnectionPool);
  if (scope.ingress.length > 0) {
    const s = scope.sidecar!;
    return fromIngress(scope.ingress, proxy, `Sidecar/${s.metadata.namespace}/${s.metadata.name}`, sidecarPool, push);
  }
  const byPort = new Map<number, ServiceInstance[]>();
  for (const i of push.proxyInstances(proxy)) {
    const list = byPort.get(i.endpointPort);
    if (list) list.push(i);
    else byPort.set(i.endpointPort, [i]);
  }
  // The first instance of a port decides its protocol and pool; all of them its services.
  const ports = [...byPort.values()].map((instances): InboundPort => {
    const i = instances[0]!;
    const rule = push.traffic.destinationRule(proxy, i.hostname, i.namespace, true)?.rule;
    const pool = sidecarPool ?? mergeTrafficPolicy(rule?.spec.trafficPolicy as TrafficPolicy | undefined, undefined, i.servicePort.port).connectionPool;
    const port = { port: i.endpointPort, protocol: i.servicePort.protocol, ...(pool ? { connectionPool: pool } : {}), ...portServices(instances, push) };
    return { ...port, ...defaultTarget(proxy, port, i.endpointPort) };
  });
  return { ports: ports.sort((a, b) => a.port - b.port), problems: [], conflicts: [] };
}
