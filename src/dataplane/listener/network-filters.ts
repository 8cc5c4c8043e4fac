// The network filters a filter chain may end with, by type URL: each registers itself (one file,
// one `registerNetworkFilter`) and turns its typed config into the chain that serves connections.
import type { DescMessage, MessageShape } from '@bufbuild/protobuf';
import { anyUnpack, type Any } from '@bufbuild/protobuf/wkt';
import { ConfigError } from '../../envoy/config-error.js';
import type { JwtAuthnOptions } from '../../envoy/jwt-authn.js';
import { TYPE_URL_PREFIX, typeNameOf, typeUrlOf } from '../../envoy/types.js';
import type { ClusterManager } from '../clusters.js';
import type { CompiledChainMatch } from '../filter-chain-match.js';
import type { RouteTable } from '../route-table.js';
import type { StatsStore } from '../stats.js';
import type { Chain, ListenerCounters } from './chain.js';

/** What the compiled chains of a listener reach: upstreams, route tables, stats. */
export interface ChainDeps {
  readonly clusters: ClusterManager;
  /** RDS: the current route table of that name. */
  readonly routes: (name: string) => RouteTable | undefined;
  readonly jwt?: JwtAuthnOptions;
  readonly stats: StatsStore;
}

/** One filter chain being compiled. */
export interface NetworkFilterContext {
  readonly name: string;
  readonly match: CompiledChainMatch;
  /** Path of the filter's typed_config, for ConfigErrors. */
  readonly field: string;
  readonly listenerPort: number;
  readonly counters: ListenerCounters;
  readonly deps: ChainDeps;
}

export interface NetworkFilter<Desc extends DescMessage = DescMessage> {
  readonly schema: Desc;
  build(config: MessageShape<Desc>, ctx: NetworkFilterContext): Chain;
}

const registry = new Map<string, NetworkFilter>();

export function registerNetworkFilter<Desc extends DescMessage>(filter: NetworkFilter<Desc>): void {
  registry.set(typeUrlOf(filter.schema), filter as unknown as NetworkFilter);
}

/** The registered filter of a type URL (whatever its host part), or undefined. */
export function networkFilterOf(typeUrl: string): NetworkFilter | undefined {
  return registry.get(TYPE_URL_PREFIX + typeNameOf(typeUrl));
}

/** Decodes `any` with the filter's schema and builds its chain. */
export function buildNetworkFilter(filter: NetworkFilter, any: Any, ctx: NetworkFilterContext): Chain {
  const config = anyUnpack(any, filter.schema);
  if (!config) throw new ConfigError(ctx.field, `cannot decode ${any.typeUrl}`);
  return filter.build(config, ctx);
}
