// What every xDS type module shares: the options and snapshot of the mesh's generators, the model's
// view of a connected proxy, packing built messages into resources, and the conflict gauges. A type
// module (lds.ts, rds.ts, cds.ts, eds.ts) turns this context into its ResourceGenerator.
import { status } from '@grpc/grpc-js';
import { anyPack, type Any } from '@bufbuild/protobuf/wkt';
import type { DescMessage, MessageShape } from '@bufbuild/protobuf';
import { scope } from '../../common/log.js';
import { gauge } from '../../common/metrics.js';
import type { ListenerConflict } from '../../networking/listener.js';
import { parseProxy, ProxyParseError, type Proxy } from '../../model/proxy.js';
import { EMPTY_LOCALITY } from '../../model/service.js';
import type { PushContext } from '../../model/push-context.js';
import { XdsStreamError, type GenerateRequest, type ProxyInfo, type ResourceGenerator, type XdsResource } from '../generator.js';
import { packOnce, type XdsCache } from '../cache.js';
import type { PushScoped } from '../push-scope.js';
import type { GrpcOptions } from './grpc.js';
import type { SidecarOptions } from './sidecar.js';
import type { GatewayOptions } from './gateway.js';
import type { CredentialStore } from '../../security/credentials/store.js';

const log = scope('model');

export interface MeshGeneratorOptions extends SidecarOptions, GrpcOptions, GatewayOptions {
  /** The current snapshot; read on every generate, so a push only has to replace it. */
  readonly pushContext: () => PushContext;
  /**
   * The credentialName secrets SDS serves (MESHD_ENABLE_SDS_SERVER), none when absent; only to
   * streams whose namespace the identity check verified.
   */
  readonly credentials?: { readonly store: CredentialStore; readonly verified: (info: ProxyInfo) => boolean };
  /** The server's view of its proxies, shared with its other users (debug, security); one of its own when absent. */
  readonly proxies?: ProxyModels;
}

/** The options with their defaults filled in, and the recorders every type shares. */
export interface MeshContext {
  readonly opts: MeshGeneratorOptions & { readonly cache: XdsCache; readonly proxies: ProxyModels };
  readonly conflicts: ConflictRecorder;
}

/**
 * One served xDS type: its type URL, its push scope rule (PushScoped.pushedBy) and its generator.
 * A new type is a module exporting one of these plus its line in ./index.ts.
 */
export interface XdsType extends PushScoped {
  generator(ctx: MeshContext): ResourceGenerator;
}

/**
 * The model's view of the connected proxies of one discovery server: each stream's node parsed once,
 * with what it claims (labels, service account) replaced by what its workload is when the server
 * knows the workload (the orchestrator's Pod).
 */
export class ProxyModels {
  private readonly parsed = new WeakMap<ProxyInfo, Proxy>();

  constructor(private readonly workloadIdentity: (proxy: Proxy) => Proxy = (proxy) => proxy) {}

  /**
   * The proxy of a stream. Throws XdsStreamError INVALID_ARGUMENT for a malformed node: call it from
   * the server's `onConnect` to refuse the stream.
   */
  of(info: ProxyInfo): Proxy {
    let proxy = this.parsed.get(info);
    if (!proxy) {
      try {
        proxy = this.workloadIdentity(parseProxy(info.id, info.metadata, info.node.extensions.map((e) => e.name), info.node.locality ?? EMPTY_LOCALITY));
      } catch (e) {
        if (e instanceof ProxyParseError) throw new XdsStreamError(status.INVALID_ARGUMENT, e.message);
        throw e;
      }
      this.parsed.set(info, proxy);
    }
    return proxy;
  }
}

const packedLists = new WeakMap<readonly object[], readonly XdsResource[]>();

/**
 * Built messages as resources; messages shared between proxies are packed once (see packOnce), and
 * a list shared between proxies (memoized per scope, subscription, ...) becomes one list of
 * resources, which the server then filters and interns once (ResourceSets.forSubscription). A list
 * given here must not change afterwards. `pack` is anyPack unless the type packs from shared parts.
 */
export function resources<Desc extends DescMessage>(
  schema: Desc,
  messages: readonly MessageShape<Desc>[],
  nameOf: (m: MessageShape<Desc>) => string,
  pack: (m: MessageShape<Desc>) => Any = (m) => anyPack(schema, m),
): readonly XdsResource[] {
  let list = packedLists.get(messages);
  if (!list) {
    list = messages.map((m) => packOnce(m, () => ({ name: nameOf(m), resource: pack(m) })));
    packedLists.set(messages, list);
  }
  return list;
}

/** A generator from a build of (proxy, snapshot, subscribed names or undefined for wildcard). */
export function generatorOf(
  ctx: MeshContext,
  build: (proxy: Proxy, push: PushContext, names: ReadonlySet<string> | undefined) => readonly XdsResource[],
): ResourceGenerator {
  return {
    generate: (req: GenerateRequest) => build(ctx.opts.proxies.of(req.proxy), ctx.opts.pushContext(), req.subscription.wildcard ? undefined : req.subscription.names),
  };
}

/** Whether the proxy asked for the proxyless gRPC shapes (node metadata GENERATOR=grpc). */
export function isGrpc(p: Proxy): boolean {
  return p.generator === 'grpc';
}

/** Calls `report` once per distinct key per PushContext, with how many distinct keys it has seen. */
export function oncePerPush(current: () => PushContext, report: (key: string, distinct: number) => void): (key: string) => void {
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
export class ConflictRecorder {
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
