// The listener compiler: a Listener message compiled into an ActiveListener (its filter chains
// with their matches, the listener filters' inspection, its counters). Binding and serving are the
// listener manager's; this only reads the message (a ConfigError names what it cannot honour).
import type { Any } from '@bufbuild/protobuf/wkt';
import { durationMs } from '../../common/duration.js';
import { scope } from '../../common/log.js';
import { TrafficDirection } from '../../gen/envoy/config/core/v3/base_pb.js';
import { ListenerSchema, type Listener } from '../../gen/envoy/config/listener/v3/listener_pb.js';
import type { FilterChain } from '../../gen/envoy/config/listener/v3/listener_components_pb.js';
import { ConfigError, unappliedFields, withinResource } from '../../envoy/config-error.js';
import { typeNameOf } from '../../envoy/types.js';
import { socketAddressOf } from '../clusters.js';
import { compileChainMatch, selectChain, type ConnectionFacts } from '../filter-chain-match.js';
import { originalDstUnavailable } from '../original-dst.js';
import { statName, type StatName } from '../stats.js';
import type { Chain, ListenerCounters } from './chain.js';
import { compileDownstreamTransport } from '../tls/transport-sockets.js';
import type { SecretRef } from '../tls/secrets.js';
import { listenerFilterOf, type ListenerFilterNeeds } from './listener-filters.js';
import { buildNetworkFilter, connectionGateOf, networkFilterOf, type ChainDeps, type ConnectionGate, type NetworkFilterContext } from './network-filters.js';
import type { Inspection } from './sniffers.js';
import { compileAccessLogs, type AccessLogs } from '../access-log/access-logs.js';
// The network filters this proxy runs; each registers itself.
import './http-hosting.js';
import './network-rbac.js';
import './tcp-proxy.js';

const log = scope('conn_handler');

/** Envoy's default listener_filters_timeout. */
const DEFAULT_INSPECT_TIMEOUT_MS = 15_000;

const UNAPPLIED_LISTENER = [
  'additionalAddresses', 'perConnectionBufferLimitBytes', 'socketOptions', 'tcpBacklogSize', 'connectionBalanceConfig',
  'enableReusePort', 'udpListenerConfig', 'apiListener', 'freebind', 'tcpFastOpenQueueLength',
  'maxConnectionsToAcceptPerSocketEvent', 'drainType',
];

export interface ListenerCompileDeps extends ChainDeps {
  /** This process's worker index, for the per-worker listener stats (0: the main process). */
  readonly workerIndex?: number;
}

/** A compiled listener: its chains, counters and the socket it is served on. */
export class ActiveListener {
  constructor(
    readonly name: string,
    readonly message: Listener,
    readonly address: { host: string; port: number },
    readonly bind: boolean,
    readonly chains: readonly Chain[],
    readonly defaultChain: Chain | undefined,
    readonly inspection: Inspection,
    readonly counters: ListenerCounters,
    /** The listener's access logs: a line for each connection no filter chain matched. */
    readonly accessLogs: AccessLogs | undefined,
    /** original_src's SO_MARK when the listener has that filter: its connections' upstreams bind the client's address. */
    readonly originalSrcMark?: number,
  ) {}

  get inbound(): boolean {
    return this.message.trafficDirection === TrafficDirection.INBOUND;
  }

  allChains(): Chain[] {
    return [...this.chains, ...(this.defaultChain ? [this.defaultChain] : [])];
  }

  /** The secrets its TLS chains need (listener warming waits for the dynamic ones). */
  secretRefs(): SecretRef[] {
    return this.allChains().flatMap((c) => c.transport?.refs ?? []);
  }

  select(f: ConnectionFacts): Chain | undefined {
    return selectChain(this.chains, f) ?? this.defaultChain;
  }
}

/** What the listener's filters ask for; a filter type this proxy does not run is a ConfigError. */
function listenerFilterNeeds(l: Listener): ListenerFilterNeeds {
  const needs: ListenerFilterNeeds = { http: false, tls: false };
  l.listenerFilters.forEach((f, i) => {
    const c = f.configType;
    if (c.case !== 'typedConfig') throw new ConfigError(`listener_filters[${i}]`, 'typed_config is required');
    const filter = listenerFilterOf(c.value.typeUrl);
    if (!filter) throw new ConfigError(`listener_filters[${i}].typed_config`, `listener filter type ${typeNameOf(c.value.typeUrl)} is not supported`);
    filter.apply(needs, c.value, `listener_filters[${i}].typed_config`);
  });
  return needs;
}

export function compileListener(l: Listener, deps: ListenerCompileDeps): ActiveListener {
  if (!l.name) throw new ConfigError('name', 'a listener name is required');
  if (l.filterChainMatcher) throw new ConfigError('filter_chain_matcher', 'the matcher API is not supported; use filter_chain_match');
  const address = socketAddressOf(l.address, 'address');
  const unapplied = unappliedFields(ListenerSchema, l, UNAPPLIED_LISTENER);
  if (unapplied.length > 0) log.warn(`listener ${l.name}: accepted but not applied yet: ${unapplied.join(', ')}`);
  const needs = listenerFilterNeeds(l);
  const noOriginalDst = l.useOriginalDst ? originalDstUnavailable() : undefined;
  if (noOriginalDst) log.warn(`listener ${l.name}: use_original_dst without SO_ORIGINAL_DST (${noOriginalDst}); its connections are not handed to other listeners`);
  const inspection: Inspection = {
    http: needs.http,
    tls: needs.tls,
    timeoutMs: durationMs(l.listenerFiltersTimeout, DEFAULT_INSPECT_TIMEOUT_MS),
    continueOnTimeout: l.continueOnListenerFiltersTimeout,
  };
  const tag = { name: 'envoy_listener_address', value: listenerStatName(address) };
  const c = (stat: string) => deps.stats.counter(statName('listener', stat, tag));
  const counters: ListenerCounters = {
    address: tag.value,
    cx: c('downstream_cx_total'),
    workerCx: deps.stats.counter(workerStatName(tag.value, deps.workerIndex ?? 0, 'downstream_cx_total')),
    noChain: c('no_filter_chain_match'),
    rq: c('downstream_rq_total'),
    rqClass: [1, 2, 3, 4, 5].map((k) => c(`downstream_rq_${k}xx`)),
  };
  const inbound = l.trafficDirection === TrafficDirection.INBOUND;
  const seen = new Map<string, string>();
  const chains = l.filterChains.map((fc, i) => {
    const field = `filter_chains[${i}]`;
    const chain = compileChain(fc, field, address.port, counters, deps, inbound);
    const other = seen.get(chain.match.key);
    if (other !== undefined) throw new ConfigError(`${field}.filter_chain_match`, `matches the same connections as ${other}`);
    seen.set(chain.match.key, field);
    return chain;
  });
  const defaultChain = l.defaultFilterChain ? compileChain(l.defaultFilterChain, 'default_filter_chain', address.port, counters, deps, inbound) : undefined;
  if (chains.length === 0 && !defaultChain) throw new ConfigError('filter_chains', 'at least one filter chain (or a default filter chain) is required');
  const accessLogs = compileAccessLogs(l.accessLog);
  return new ActiveListener(l.name, l, address, l.bindToPort ?? true, chains, defaultChain, inspection, counters, accessLogs, needs.originalSrcMark);
}

function compileChain(fc: FilterChain, field: string, port: number, counters: ListenerCounters, deps: ChainDeps, inbound: boolean): Chain {
  const match = compileChainMatch(fc.filterChainMatch, `${field}.filter_chain_match`);
  const name = fc.name || field;
  const transport = fc.transportSocket ? compileDownstreamTransport(fc.transportSocket, `${field}.transport_socket`, counters.address, deps) : undefined;
  if (fc.filters.length === 0) throw new ConfigError(`${field}.filters`, 'at least one network filter is required');
  const last = fc.filters.length - 1;
  const ctxOf = (i: number): NetworkFilterContext => ({ name, match, field: `filters[${i}].typed_config`, listenerPort: port, inbound, counters, deps });
  const configOf = (i: number): Any => {
    const c = fc.filters[i]!.configType;
    if (c.case !== 'typedConfig') throw new ConfigError(`${field}.filters[${i}]`, 'typed_config is required');
    return c.value;
  };
  // Every filter but the last is a gate (network rbac); the last one serves the connection.
  const gates = fc.filters.slice(0, last).map((f, i): ConnectionGate => {
    const config = configOf(i);
    const gate = connectionGateOf(config.typeUrl);
    if (!gate) {
      const terminal = networkFilterOf(config.typeUrl) !== undefined;
      throw new ConfigError(`${field}.filters[${i}]${terminal ? '' : '.typed_config'}`, terminal ? `${f.name} is a terminal filter and must be the last one` : `network filter type ${typeNameOf(config.typeUrl)} is not supported`);
    }
    try {
      return buildNetworkFilter(gate, config, ctxOf(i));
    } catch (e) {
      throw withinResource(`${field}.filters[${i}].typed_config`, e);
    }
  });
  const config = configOf(last);
  const filter = networkFilterOf(config.typeUrl);
  if (!filter) {
    const gate = connectionGateOf(config.typeUrl) !== undefined;
    throw new ConfigError(`${field}.filters[${last}]${gate ? '' : '.typed_config'}`, gate ? `${fc.filters[last]!.name} is not a terminal filter: a chain must end with one (tcp_proxy, http_connection_manager)` : `network filter type ${typeNameOf(config.typeUrl)} is not supported`);
  }
  try {
    const chain = buildNetworkFilter(filter, config, ctxOf(last));
    if (transport) chain.transport = transport;
    chain.gates = gates;
    return chain;
  } catch (e) {
    throw withinResource(`${field}.filters[${last}].typed_config`, e);
  }
}

/** A per-worker listener stat, tagged with the listener address and the worker id as Envoy does. */
function workerStatName(address: string, worker: number, stat: string): StatName {
  return {
    name: `listener.${address}.worker_${worker}.${stat}`,
    prom: `envoy_listener_worker_${stat}`,
    labels: { envoy_listener_address: address, envoy_worker_id: String(worker) },
  };
}

/** Envoy's listener stat name: the address with `_` before the port. */
export function listenerStatName(a: { host: string; port: number }): string {
  return `${a.host}_${a.port}`;
}
