// The network filters of a filter chain, by type URL: each registers itself (one file, one
// `registerNetworkFilter` or `registerConnectionGate`). The terminal filter a chain ends with turns
// its typed config into the chain that serves connections; the filters before it are gates that
// decide, once the connection is established, whether it reaches the terminal filter at all.
import type { DescMessage, MessageShape } from '@bufbuild/protobuf';
import type { Socket } from 'node:net';
import type { Any } from '@bufbuild/protobuf/wkt';
import type { JwtAuthnOptions } from '../../envoy/jwt-authn.js';
import type { ClusterManager } from '../clusters.js';
import { ExtensionRegistry, unpackConfig } from '../extensions.js';
import type { CompiledChainMatch } from '../filter-chain-match.js';
import type { RouteTable } from '../route-table.js';
import type { StatSample, StatsStore } from '../stats.js';
import type { SecretManager } from '../tls/secrets.js';
import type { Chain, ListenerCounters } from './chain.js';
import type { LocalNode } from '../telemetry/workload-metadata.js';
import type { StreamInfo } from '../access-log/record.js';

/** What the compiled chains of a listener reach: upstreams, route tables, stats. */
export interface ChainDeps {
  readonly clusters: ClusterManager;
  /** RDS: the current route table of that name. */
  readonly routes: (name: string) => RouteTable | undefined;
  readonly jwt?: JwtAuthnOptions;
  readonly stats: StatsStore;
  /** The proxy's secrets, for the chains' TLS transport sockets. */
  readonly secrets?: SecretManager;
  /** This proxy's node, for the telemetry filters (the standard metrics' own labels, the metadata exchange). */
  readonly node?: LocalNode;
}

/** One filter chain being compiled. */
export interface NetworkFilterContext {
  readonly name: string;
  readonly match: CompiledChainMatch;
  /** Path of the filter's typed_config, for ConfigErrors. */
  readonly field: string;
  readonly listenerPort: number;
  /** The listener's traffic_direction is INBOUND. */
  readonly inbound: boolean;
  readonly counters: ListenerCounters;
  readonly deps: ChainDeps;
}

/** A network filter's config schema and what its config compiles into for one chain. */
export interface NetworkFilterFactory<Out, Desc extends DescMessage = DescMessage> {
  readonly schema: Desc;
  build(config: MessageShape<Desc>, ctx: NetworkFilterContext): Out;
}

/** A terminal filter: it serves the chain's connections. */
export type NetworkFilter<Desc extends DescMessage = DescMessage> = NetworkFilterFactory<Chain, Desc>;

const registry = new ExtensionRegistry<NetworkFilter>();

export function registerNetworkFilter<Desc extends DescMessage>(filter: NetworkFilter<Desc>): void {
  registry.register(filter as unknown as NetworkFilter);
}

/** The registered filter of a type URL (whatever its host part), or undefined. */
export function networkFilterOf(typeUrl: string): NetworkFilter | undefined {
  return registry.of(typeUrl);
}

/** Decodes `any` with the filter's schema and builds it (a terminal filter's chain, or a gate). */
export function buildNetworkFilter<Out>(filter: NetworkFilterFactory<Out>, any: Any, ctx: NetworkFilterContext): Out {
  return filter.build(unpackConfig(any, filter.schema, ctx.field), ctx);
}

/** A compiled non-terminal filter (network rbac): asked once per connection, before the terminal filter. */
export interface ConnectionGate {
  /**
   * Why the connection is refused, in Envoy's words (its connection termination details), or
   * undefined when it is admitted. A refused connection is closed, nothing read from it or sent
   * to an upstream.
   */
  admit(socket: Socket): string | undefined;
  /** The gate's counters, for /stats. */
  samples(): StatSample[];
  /** A filter that watches the chain's admitted connections (the stats filter): one watch per connection. */
  watch?(info: StreamInfo): ConnectionWatch;
}

/** What a watching filter is told of one tcp_proxy connection: its record carries cluster, flags and bytes. */
export interface ConnectionWatch {
  /** The upstream connection is up. */
  connected(): void;
  /** Every reportIntervalMs while open: the bytes so far. */
  report(): void;
  closed(): void;
  readonly reportIntervalMs: number;
}

export type ConnectionGateFilter<Desc extends DescMessage = DescMessage> = NetworkFilterFactory<ConnectionGate, Desc>;

const gates = new ExtensionRegistry<ConnectionGateFilter>();

export function registerConnectionGate<Desc extends DescMessage>(filter: ConnectionGateFilter<Desc>): void {
  gates.register(filter as unknown as ConnectionGateFilter);
}

/** The registered gate of a type URL, or undefined. */
export function connectionGateOf(typeUrl: string): ConnectionGateFilter | undefined {
  return gates.of(typeUrl);
}
