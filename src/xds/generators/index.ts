// The xDS server's ResourceGenerators for LDS, RDS, CDS and EDS, backed by the current PushContext.
// A proxy whose node metadata says GENERATOR=grpc gets the proxyless gRPC shapes for LDS and RDS.
import { status } from '@grpc/grpc-js';
import { anyPack, type Any } from '@bufbuild/protobuf/wkt';
import type { DescMessage, MessageShape } from '@bufbuild/protobuf';
import { ClusterSchema } from '../../gen/envoy/config/cluster/v3/cluster_pb.js';
import { ClusterLoadAssignmentSchema } from '../../gen/envoy/config/endpoint/v3/endpoint_pb.js';
import { ListenerSchema } from '../../gen/envoy/config/listener/v3/listener_pb.js';
import { RouteConfigurationSchema } from '../../gen/envoy/config/route/v3/route_pb.js';
import { setting } from '../../common/env.js';
import { scope } from '../../common/log.js';
import { gauge } from '../../common/metrics.js';
import type { ListenerConflict } from '../../networking/listener.js';
import { parseProxy, ProxyParseError, type Proxy } from '../../model/proxy.js';
import type { PushContext } from '../../model/push-context.js';
import { XdsStreamError, type GenerateRequest, type ProxyInfo, type ResourceGenerator, type XdsResource } from '../generator.js';
import { XdsCache } from '../cache.js';
import { TypeUrl } from '../types.js';
import { grpcListeners, grpcRoutes, type GrpcOptions } from './grpc.js';
import { clusterLoadAssignments, sidecarClusters, sidecarListeners, sidecarRoutes, type SidecarOptions } from './sidecar.js';

const log = scope('model');

export interface MeshGeneratorOptions extends SidecarOptions, GrpcOptions {
  /** The current snapshot; read on every generate, so a push only has to replace it. */
  readonly pushContext: () => PushContext;
}

const proxies = new WeakMap<ProxyInfo, Proxy>();

/** Where a parsed proxy's identity is checked against the orchestrator (its Pod); identity when unset. */
let workloadIdentity: (proxy: Proxy) => Proxy = (proxy) => proxy;

/** Installs the function that replaces what a proxy claims (labels, service account) by what its workload is. */
export function setWorkloadIdentity(resolve: (proxy: Proxy) => Proxy): void {
  workloadIdentity = resolve;
}

/**
 * The model's view of a connected proxy (parsed once per stream). Throws XdsStreamError
 * INVALID_ARGUMENT for a malformed node: call it from the server's `onConnect` to refuse the stream.
 */
export function proxyOf(info: ProxyInfo): Proxy {
  let proxy = proxies.get(info);
  if (!proxy) {
    try {
      proxy = workloadIdentity(parseProxy(info.id, info.metadata));
    } catch (e) {
      if (e instanceof ProxyParseError) throw new XdsStreamError(status.INVALID_ARGUMENT, e.message);
      throw e;
    }
    proxies.set(info, proxy);
  }
  return proxy;
}

// Messages shared between proxies (see the memo in ./sidecar.ts) are serialized once.
const packed = new WeakMap<object, XdsResource>();

function resources<Desc extends DescMessage>(schema: Desc, messages: readonly MessageShape<Desc>[], nameOf: (m: MessageShape<Desc>) => string): XdsResource[] {
  return messages.map((m) => {
    let r = packed.get(m);
    if (!r) packed.set(m, (r = { name: nameOf(m), resource: anyPack(schema, m) as Any }));
    return r;
  });
}

/** Calls `report` once per distinct key per PushContext, with how many distinct keys it has seen. */
function oncePerPush(current: () => PushContext, report: (key: string, distinct: number) => void): (key: string) => void {
  let version = '';
  let seen = new Set<string>();
  return (key) => {
    const v = current().version;
    if (v !== version) {
      version = v;
      seen = new Set();
    }
    if (seen.has(key)) return;
    seen.add(key);
    report(key, seen.size);
  };
}

const CONFLICT_GAUGES = {
  http_over_tcp: () => gauge('pilot_conflict_outbound_listener_http_over_current_tcp'),
  tcp_over_http: () => gauge('pilot_conflict_outbound_listener_tcp_over_current_http'),
  tcp_over_tcp: () => gauge('pilot_conflict_outbound_listener_tcp_over_current_tcp'),
} as const;

/**
 * Distinct outbound listener conflicts of the current snapshot, per kind, into their gauges, each
 * logged once. `observe()` runs on every LDS generation: the first one of a new snapshot zeroes the
 * gauges, so conflicts that are gone stop being counted.
 */
class ConflictRecorder {
  private version = '';
  private readonly byKind: Record<ListenerConflict['kind'], (key: string) => void>;
  /** An ingress listener that lost its port to an earlier one, counted distinct per snapshot. */
  readonly inbound: (key: string) => void;

  constructor(private readonly current: () => PushContext) {
    this.inbound = oncePerPush(current, (key, n) => {
      gauge('pilot_conflict_inbound_listener').set(n);
      log.warn(`inbound listener conflict: ${key}`);
    });
    this.byKind = {
      http_over_tcp: this.counter('http_over_tcp'),
      tcp_over_http: this.counter('tcp_over_http'),
      tcp_over_tcp: this.counter('tcp_over_tcp'),
    };
  }

  observe(): void {
    const v = this.current().version;
    if (v === this.version) return;
    this.version = v;
    Object.values(CONFLICT_GAUGES).forEach((g) => g().set(0));
    gauge('pilot_conflict_inbound_listener').set(0);
  }



  record(c: ListenerConflict): void {
    this.byKind[c.kind](`${c.service} loses ${c.listener} (${c.kind.replaceAll('_', ' ')})`);
  }

  private counter(kind: ListenerConflict['kind']): (key: string) => void {
    return oncePerPush(this.current, (key, n) => {
      CONFLICT_GAUGES[kind]().set(n);
      log.warn(`outbound listener conflict: ${key}`);
    });
  }
}

export function createMeshGenerators(options: MeshGeneratorOptions): Map<string, ResourceGenerator> {
  const conflicts = new ConflictRecorder(options.pushContext);
  const opts: MeshGeneratorOptions = {
    inboundSniffing: setting('PILOT_ENABLE_PROTOCOL_SNIFFING_FOR_INBOUND'),
    outboundSniffing: setting('PILOT_ENABLE_PROTOCOL_SNIFFING_FOR_OUTBOUND'),
    detectionTimeout: setting('PILOT_INBOUND_PROTOCOL_DETECTION_TIMEOUT') / 1000,
    onProblem: oncePerPush(options.pushContext, (message) => log.warn(message)),
    onConflict: (c) => conflicts.record(c),
    onInboundConflict: (c) => conflicts.inbound(c),
    cache: new XdsCache(),
    ...options,
  };
  const gen =
    (build: (proxy: Proxy, push: PushContext, names: ReadonlySet<string> | undefined) => XdsResource[]): ResourceGenerator => ({
      generate: (req: GenerateRequest) => build(proxyOf(req.proxy), opts.pushContext(), req.subscription.wildcard ? undefined : req.subscription.names),
    });
  const isGrpc = (p: Proxy): boolean => p.generator === 'grpc';
  return new Map<string, ResourceGenerator>([
    [
      TypeUrl.Listener,
      gen((proxy, push, names) => {
        conflicts.observe();
        return resources(ListenerSchema, isGrpc(proxy) ? grpcListeners(proxy, push, names, opts) : sidecarListeners(proxy, push, opts), (l) => l.name);
      }),
    ],
    [
      TypeUrl.RouteConfiguration,
      gen((proxy, push, names) =>
        resources(RouteConfigurationSchema, isGrpc(proxy) ? grpcRoutes(proxy, push, names) : sidecarRoutes(proxy, push, names, opts.outboundSniffing, opts.cache), (r) => r.name),
      ),
    ],
    [TypeUrl.Cluster, gen((proxy, push) => resources(ClusterSchema, sidecarClusters(proxy, push, !isGrpc(proxy), opts.cache), (c) => c.name))],
    [TypeUrl.ClusterLoadAssignment, gen((proxy, push, names) => resources(ClusterLoadAssignmentSchema, clusterLoadAssignments(proxy, push, names, opts.cache), (c) => c.clusterName))],
  ]);
}
