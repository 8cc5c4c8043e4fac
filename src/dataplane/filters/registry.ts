// The HTTP filters of a connection manager, by type URL. Each filter is one file that registers
// itself (`registerHttpFilter`): its config schema, how a config compiles into the per-request
// filter, and its counters. The connection manager looks filters up here; index.ts lists the files.
import type { DescMessage, MessageShape } from '@bufbuild/protobuf';
import type { Any } from '@bufbuild/protobuf/wkt';
import type { HttpFilter } from '../../envoy/filter.js';
import type { JwtAuthnOptions } from '../../envoy/jwt-authn.js';
import type { ClusterManager } from '../clusters.js';
import type { StreamInfo } from '../access-log/record.js';
import type { StatsStore } from '../stats.js';
import type { LocalNode } from '../telemetry/workload-metadata.js';
import { ConfigError } from '../../envoy/config-error.js';
import { typeNameOf } from '../../envoy/types.js';
import { ExtensionRegistry, unpackConfig } from '../extensions.js';

/**
 * Counters of each filter kind by their Envoy stats group (`http.<prefix>.<group>.<stat>`); a
 * filter file adds its own entry (`declare module './registry.js'`).
 */
export interface HttpFilterStatsByGroup {}

/** One filter's counters, for the admin /stats endpoint: `{ name, <group>: counters }`. */
export type FilterStats = {
  [G in keyof HttpFilterStatsByGroup]: { readonly name: string } & { readonly [K in G]: HttpFilterStatsByGroup[G] };
}[keyof HttpFilterStatsByGroup];

/** What the proxy gives every filter it compiles. */
export interface HttpFilterContext {
  readonly jwt?: JwtAuthnOptions;
  /** For filters that call a cluster themselves (ext_authz). */
  readonly clusters?: ClusterManager;
  /** For the telemetry filters (peer metadata, standard metrics). */
  readonly telemetry?: FilterTelemetry;
}

export interface FilterTelemetry {
  readonly node: LocalNode;
  /** The listener's traffic_direction is INBOUND: the proxy serves its own workload's requests. */
  readonly inbound: boolean;
  readonly stats: StatsStore;
}

/** A compiled http_filters entry: the filter run per request (none for the router) and its counters. */
export interface CompiledHttpFilter {
  readonly filter?: HttpFilter;
  readonly stats?: FilterStats;
  /** Told of every stream once it ended, as Envoy's filters that are also access log handlers (the stats filter). */
  readonly streamEnded?: (info: StreamInfo) => void;
}

export interface HttpFilterFactory<Desc extends DescMessage = DescMessage> {
  readonly schema: Desc;
  /** The router: the last filter of every chain, whose work the connection manager ends with. */
  readonly terminal?: boolean;
  compile(config: MessageShape<Desc>, name: string, ctx: HttpFilterContext): CompiledHttpFilter;
}

const registry = new ExtensionRegistry<HttpFilterFactory>();

/**
 * A typed_per_filter_config type a filter honours (HTTPFault for the fault filter, CorsPolicy for
 * CORS): compiled once with the route table, handed to the filter of that name per request.
 */
export interface PerRouteConfigFactory<Desc extends DescMessage = DescMessage> {
  readonly schema: Desc;
  compile(config: MessageShape<Desc>, field: string): unknown;
}

const perRouteRegistry = new ExtensionRegistry<PerRouteConfigFactory>();

export function registerPerRouteConfig<Desc extends DescMessage>(factory: PerRouteConfigFactory<Desc>): void {
  perRouteRegistry.register(factory as unknown as PerRouteConfigFactory);
}

/**
 * Compiles a per-route filter config; a type no filter registered is a ConfigError: such a config
 * could disable or replace a security filter (jwt_authn, rbac), so it is refused, not ignored.
 */
export function compilePerRouteConfig(any: Any, field: string): unknown {
  const factory = perRouteRegistry.of(any.typeUrl);
  if (!factory) throw new ConfigError(field, `per-route configs of type ${typeNameOf(any.typeUrl)} are not supported`);
  return factory.compile(unpackConfig(any, factory.schema, field), field);
}

export function registerHttpFilter<Desc extends DescMessage>(factory: HttpFilterFactory<Desc>): void {
  registry.register(factory as unknown as HttpFilterFactory);
}

/** The registered filter of a type URL (whatever its host part), or undefined. */
export function httpFilterOf(typeUrl: string): HttpFilterFactory | undefined {
  return registry.of(typeUrl);
}

/** Decodes `any` with the factory's schema and compiles it; `field` names the typed_config. */
export function compileHttpFilter(factory: HttpFilterFactory, any: Any, name: string, field: string, ctx: HttpFilterContext): CompiledHttpFilter {
  return factory.compile(unpackConfig(any, factory.schema, field), name, ctx);
}
