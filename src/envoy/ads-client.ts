// An ADS client (State of the World) with the generated Envoy types: what the data-plane proxy uses
// to get its configuration. The stream is a gRPC call on node:http2 (grpc-call.ts).
//
// - Subscribes to listeners and clusters as wildcards, then to the routes and endpoints they name
//   (RDS names from HttpConnectionManager.rds, EDS names from EDS clusters), as Envoy does.
// - Every response goes to the consumer's handler with the complete set of that type the client
//   would hold after it. Returning normally ACKs; throwing NACKs with the error as error_detail and
//   keeps the last accepted set and version.
// - A broken stream is re-opened with exponential backoff; the accepted resources stay, and the
//   new stream starts from the versions and names held, so the server can skip unchanged content.
import { EventEmitter } from 'node:events';
import { create, type Message, type MessageInitShape } from '@bufbuild/protobuf';
import type { Any } from '@bufbuild/protobuf/wkt';
import { AggregatedDiscoveryService } from '../gen/envoy/service/discovery/v3/ads_pb.js';
import { SecretDiscoveryService } from '../gen/envoy/service/secret/v3/sds_pb.js';
import { DiscoveryRequestSchema, type DiscoveryResponse, type DiscoveryResponseSchema } from '../gen/envoy/service/discovery/v3/discovery_pb.js';
import { NodeSchema } from '../gen/envoy/config/core/v3/base_pb.js';
import type { ConfigSource } from '../gen/envoy/config/core/v3/config_source_pb.js';
import { ListenerSchema, type Listener } from '../gen/envoy/config/listener/v3/listener_pb.js';
import { ClusterSchema, Cluster_DiscoveryType, type Cluster } from '../gen/envoy/config/cluster/v3/cluster_pb.js';
import { HttpConnectionManagerSchema } from '../gen/envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager_pb.js';
import { scope } from '../common/log.js';
import { GrpcChannel, type GrpcCall } from './grpc-call.js';
import { isWildcardType, shortTypeName, TypeUrl, typeUrlOf, unpack, unpackAny } from './types.js';

const log = scope('adsc');

/** gRPC status INVALID_ARGUMENT, the code a NACK's error_detail carries. */
const INVALID_ARGUMENT = 3;

/** Exponential backoff: initial, doubling up to max, with up to 10 % jitter so agents spread out. */
export class Backoff {
  private attempt = 0;

  constructor(
    private readonly initialMs = 200,
    private readonly maxMs = 30_000,
  ) {}

  next(): number {
    const base = Math.min(this.maxMs, this.initialMs * 2 ** Math.min(this.attempt, 30));
    this.attempt++;
    return Math.round(base * (1 + Math.random() * 0.1));
  }

  reset(): void {
    this.attempt = 0;
  }
}

export interface AdsResource {
  readonly name: string;
  readonly any: Any;
  /** The decoded resource (Listener, Cluster, ...). */
  readonly message: Message;
}

export interface AdsUpdate {
  readonly typeUrl: string;
  readonly version: string;
  /** The whole set of this type after the update, by name. */
  readonly resources: ReadonlyMap<string, AdsResource>;
}

/**
 * Thrown by a consumer that applied part of an update (Envoy's LDS applies the listeners it can):
 * the client NACKs with the message, but holds `applied`, what serves now, so that the names it
 * follows (routes of the applied listeners) match it; the accepted version stays the old one.
 */
export class PartiallyApplied extends Error {
  constructor(
    message: string,
    readonly applied: ReadonlyMap<string, AdsResource>,
    /** The resources of the update that were not applied. */
    readonly failed: ReadonlySet<string>,
  ) {
    super(message);
    this.name = 'PartiallyApplied';
  }
}

/** Applies an update; throw (or reject) to NACK it with the error's message. */
export type AdsHandler = (update: AdsUpdate) => void | Promise<void>;

export interface AdsClientOptions {
  /** The ADS server: host:port, or unix:<path>. */
  address: string;
  node: MessageInitShape<typeof NodeSchema>;
  onUpdate: AdsHandler;
  /** Wildcard types subscribed at start; default clusters then listeners. */
  wildcardTypes?: readonly string[];
  /** Subscribe to the routes and endpoints that listeners and clusters name; default true. */
  followDependencies?: boolean;
  initialBackoffMs?: number;
  maxBackoffMs?: number;
  /** The service: ADS (default), or SDS's StreamSecrets (same protocol, one type) on an SDS server. */
  service?: 'ads' | 'sds';
}

export interface AdsClientEvents {
  /** A stream got its first response. */
  connected: [];
  /** A stream ended; `established` = it had received a response. */
  disconnected: [error: string, established: boolean];
  ack: [typeUrl: string, version: string];
  nack: [typeUrl: string, version: string, error: string];
}

type DiscoveryCall = GrpcCall<typeof DiscoveryRequestSchema, typeof DiscoveryResponseSchema>;

interface TypeState {
  wildcard: boolean;
  names: Set<string>;
  /** Last accepted version ("" before any). */
  version: string;
  /** Nonce of the last response on the current stream. */
  nonce: string;
  accepted: Map<string, AdsResource>;
}

/** Envoy's order: clusters before endpoints, listeners before routes. */
const REQUEST_ORDER: readonly string[] = [TypeUrl.Cluster, TypeUrl.ClusterLoadAssignment, TypeUrl.Listener, TypeUrl.RouteConfiguration];

/** Sort key of a type URL in that order (other types last). */
export function requestRank(t: string): number {
  const i = REQUEST_ORDER.indexOf(t);
  return i < 0 ? REQUEST_ORDER.length : i;
}

/** A resource's name: `name`, or `cluster_name` for ClusterLoadAssignment. */
function resourceName(msg: Message): string {
  const m = msg as unknown as { name?: unknown; clusterName?: unknown };
  if (typeof m.name === 'string' && m.name !== '') return m.name;
  if (typeof m.clusterName === 'string' && m.clusterName !== '') return m.clusterName;
  throw new Error(`${msg.$typeName} resource without a name`);
}

/** Route configuration names the listeners' HTTP connection managers fetch over RDS. */
export function routeNames(listeners: Iterable<Listener>): Set<string> {
  return new Set(rdsConfigSources(listeners).keys());
}

/** Each RDS name the listeners' HTTP connection managers carry, with the config sources naming it. */
export function rdsConfigSources(listeners: Iterable<Listener>): Map<string, (ConfigSource | undefined)[]> {
  const out = new Map<string, (ConfigSource | undefined)[]>();
  for (const l of listeners) {
    const chains = [...l.filterChains, ...(l.defaultFilterChain ? [l.defaultFilterChain] : [])];
    for (const chain of chains) {
      for (const f of chain.filters) {
        if (f.configType.case !== 'typedConfig' || f.configType.value.typeUrl !== typeUrlOf(HttpConnectionManagerSchema)) continue;
        const hcm = unpack(f.configType.value, HttpConnectionManagerSchema);
        if (hcm.routeSpecifier.case !== 'rds' || !hcm.routeSpecifier.value.routeConfigName) continue;
        const name = hcm.routeSpecifier.value.routeConfigName;
        out.set(name, [...(out.get(name) ?? []), hcm.routeSpecifier.value.configSource]);
      }
    }
  }
  return out;
}

/** ClusterLoadAssignment names the EDS clusters fetch. */
export function endpointNames(clusters: Iterable<Cluster>): Set<string> {
  const out = new Set<string>();
  for (const c of clusters) {
    if (c.clusterDiscoveryType.case === 'type' && c.clusterDiscoveryType.value === Cluster_DiscoveryType.EDS) {
      out.add(c.edsClusterConfig?.serviceName || c.name);
    }
  }
  return out;
}

function messages<T>(state: TypeState | undefined, typeName: string): T[] {
  return [...(state?.accepted.values() ?? [])].filter((r) => r.message.$typeName === typeName).map((r) => r.message as unknown as T);
}

export class AdsClient extends EventEmitter<AdsClientEvents> {
  private readonly channel: GrpcChannel;
  private readonly states = new Map<string, TypeState>();
  private readonly backoff: Backoff;
  private call?: DiscoveryCall;
  private retryTimer?: NodeJS.Timeout;
  private closed = false;
  /** Responses are handled one at a time, in order, so ACKs keep the stream's order. */
  private queue: Promise<void> = Promise.resolve();

  constructor(private readonly opts: AdsClientOptions) {
    super();
    this.channel = new GrpcChannel(opts.address);
    this.backoff = new Backoff(opts.initialBackoffMs, opts.maxBackoffMs);
    for (const t of opts.wildcardTypes ?? [TypeUrl.Cluster, TypeUrl.Listener]) this.stateOf(t).wildcard = true;
  }

  start(): void {
    this.connect();
  }

  close(): void {
    this.closed = true;
    clearTimeout(this.retryTimer);
    this.call?.cancel();
    this.channel.close();
  }

  /** Subscribes to exactly these names of a named type (replacing the previous set). */
  watch(typeUrl: string, names: Iterable<string>): void {
    const s = this.stateOf(typeUrl);
    const next = new Set(names);
    // Unchanged names send nothing; in particular a type nobody named yet is never requested.
    if (!s.wildcard && sameSet(next, s.names)) return;
    s.wildcard = false;
    s.names = next;
    for (const n of [...s.accepted.keys()]) if (!next.has(n)) s.accepted.delete(n);
    this.sendRequest(typeUrl);
  }

  /** The accepted resources of a type. */
  resources(typeUrl: string): ReadonlyMap<string, AdsResource> {
    return this.states.get(typeUrl)?.accepted ?? new Map();
  }

  /** The accepted version of a type ("" before any). */
  version(typeUrl: string): string {
    return this.states.get(typeUrl)?.version ?? '';
  }

  private stateOf(typeUrl: string): TypeState {
    let s = this.states.get(typeUrl);
    if (!s) this.states.set(typeUrl, (s = { wildcard: false, names: new Set(), version: '', nonce: '', accepted: new Map() }));
    return s;
  }

  private connect(): void {
    if (this.closed) return;
    const method = this.opts.service === 'sds' ? SecretDiscoveryService.method.streamSecrets : AggregatedDiscoveryService.method.streamAggregatedResources;
    const call: DiscoveryCall = this.channel.call(method);
    this.call = call;
    let established = false;
    let ended = false;
    let first = true;
    const end = (why: string) => {
      if (ended || this.call !== call) return;
      ended = true;
      this.call = undefined;
      this.queue = Promise.resolve();
      for (const s of this.states.values()) s.nonce = '';
      this.emit('disconnected', why, established);
      if (this.closed) return;
      const delay = this.backoff.next();
      log.warn(`${this.opts.service === 'sds' ? 'SDS' : 'ADS'} stream to ${this.opts.address} ended (${why}); reconnecting in ${delay}ms`);
      this.retryTimer = setTimeout(() => this.connect(), delay);
    };
    call.on('message', (res) => {
      if (!established) {
        established = true;
        this.backoff.reset();
        this.emit('connected');
      }
      this.queue = this.queue
        .then(() => (this.call === call ? this.onResponse(res) : undefined))
        .catch((e: unknown) => log.error(`handling a ${shortTypeName(res.typeUrl)} response failed: ${(e as Error).message}`));
    });
    call.on('end', (s) => end(s.code === 0 ? 'stream closed by the server' : `${s.code} ${s.details}`));
    // Resume from what is held: versions and names, no nonce (nonces belong to the old stream).
    const types = [...this.states.keys()].sort((a, b) => requestRank(a) - requestRank(b));
    for (const t of types) {
      const s = this.states.get(t)!;
      if (!s.wildcard && s.names.size === 0) continue;
      this.write({ typeUrl: t, versionInfo: s.version, resourceNames: s.wildcard ? [] : [...s.names] }, first);
      first = false;
    }
    if (first) log.warn('ADS stream opened with nothing to subscribe to');
  }

  private write(init: MessageInitShape<typeof DiscoveryRequestSchema>, withNode = false): void {
    if (!this.call) return;
    const req = create(DiscoveryRequestSchema, init);
    if (withNode) req.node = create(NodeSchema, this.opts.node);
    this.call.write(req);
  }

  private sendRequest(typeUrl: string, errorDetail?: string): void {
    const s = this.stateOf(typeUrl);
    this.write({
      typeUrl,
      versionInfo: s.version,
      responseNonce: s.nonce,
      resourceNames: s.wildcard ? [] : [...s.names],
      ...(errorDetail !== undefined ? { errorDetail: { code: INVALID_ARGUMENT, message: errorDetail } } : {}),
    });
  }

  /** Decodes, hands to the consumer, then ACKs or NACKs. */
  private async onResponse(res: DiscoveryResponse): Promise<void> {
    const s = this.stateOf(res.typeUrl);
    s.nonce = res.nonce;
    const type = shortTypeName(res.typeUrl);
    let next: Map<string, AdsResource>;
    try {
      next = this.nextSet(s, res);
      await this.opts.onUpdate({ typeUrl: res.typeUrl, version: res.versionInfo, resources: next });
    } catch (e) {
      const why = e instanceof Error ? e.message : String(e);
      log.warn(`rejected ${type} version ${res.versionInfo} (nonce ${res.nonce}): ${why}`);
      if (e instanceof PartiallyApplied) s.accepted = new Map(e.applied);
      this.sendRequest(res.typeUrl, why);
      this.emit('nack', res.typeUrl, res.versionInfo, why);
      if (e instanceof PartiallyApplied && (this.opts.followDependencies ?? true)) this.followDependencies(res.typeUrl);
      return;
    }
    s.accepted = next;
    s.version = res.versionInfo;
    this.sendRequest(res.typeUrl);
    log.debug(`accepted ${type} version ${res.versionInfo}: ${next.size} resources`);
    this.emit('ack', res.typeUrl, res.versionInfo);
    if (this.opts.followDependencies ?? true) this.followDependencies(res.typeUrl);
  }

  /**
   * The set after a response: for wildcard types (listeners, clusters) the response is the whole
   * state; for named types a response need only carry what changed, so it merges into what is held.
   */
  private nextSet(s: TypeState, res: DiscoveryResponse): Map<string, AdsResource> {
    const next = isWildcardType(res.typeUrl) || s.wildcard ? new Map<string, AdsResource>() : new Map(s.accepted);
    for (const any of res.resources) {
      if (any.typeUrl !== res.typeUrl) throw new Error(`resource of type ${any.typeUrl} in a ${res.typeUrl} response`);
      const message = unpackAny(any);
      const name = resourceName(message);
      if (!s.wildcard && !s.names.has(name)) continue;
      next.set(name, { name, any, message });
    }
    return next;
  }

  private followDependencies(typeUrl: string): void {
    if (typeUrl === TypeUrl.Listener) {
      this.watch(TypeUrl.RouteConfiguration, routeNames(messages<Listener>(this.states.get(typeUrl), ListenerSchema.typeName)));
    } else if (typeUrl === TypeUrl.Cluster) {
      this.watch(TypeUrl.ClusterLoadAssignment, endpointNames(messages<Cluster>(this.states.get(typeUrl), ClusterSchema.typeName)));
    }
  }
}

function sameSet(a: ReadonlySet<string>, b: ReadonlySet<string>): boolean {
  return a.size === b.size && [...a].every((x) => b.has(x));
}
