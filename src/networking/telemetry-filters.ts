// The standard metrics' filters of a listener class, as the Go mesh builds them
// (pilot/pkg/model/telemetry.go buildHTTPTelemetryFilter, buildTCPTelemetryFilter,
// generateStatsConfig; pilot/pkg/xds/filters/filters.go's metadata exchange filters): the peer
// metadata filter that goes first in every connection manager, a stats filter per recording
// provider right before the router, and the same stats config as a network filter before the TCP
// proxies. Our names where the Go mesh says istio (`mesh.stats`, `mesh.metadata_exchange`, as
// `mesh.alpn`); the metrics they record keep the Go mesh's names (istio_requests_total, ...).
import { create, type MessageInitShape } from '@bufbuild/protobuf';
import { FilterSchema, type Filter } from '../gen/envoy/config/listener/v3/listener_components_pb.js';
import { HttpFilterSchema, type HttpFilter } from '../gen/envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager_pb.js';
import { ConfigSchema as PeerMetadataSchema } from '../gen/mesh/http/peer_metadata/config_pb.js';
import { PluginConfigSchema } from '../gen/mesh/stats/config_pb.js';
import { pack } from '../envoy/types.js';
import { METADATA_EXCHANGE_FILTER_NAME, STATS_FILTER_NAME } from '../envoy/names.js';
import type { ProviderMetrics } from '../model/telemetry-metrics.js';
import { duration } from './common.js';

/** The Go mesh's networking.ListenerClass: which side's metrics apply and how peers are learnt. */
export type ListenerClass = 'sidecar-inbound' | 'sidecar-outbound' | 'gateway';

/** A listener class's telemetry filters; the builders place them. */
export interface ListenerTelemetry {
  /** First in every connection manager, before the security filters (their failures are still labelled with the peer). */
  readonly metadataExchange: HttpFilter;
  /** Before the router, after fault and CORS; none when the class records no metrics. */
  readonly httpStats: readonly HttpFilter[];
  /** Before tcp_proxy on TCP chains, after the network rbac filters. */
  readonly tcpStats: readonly Filter[];
}

/**
 * The standard metrics' Prometheus names without the `istio_` prefix, as the Go mesh's
 * metricToPrometheusMetric; a custom metric keeps its own name.
 */
const PROMETHEUS_NAMES: Readonly<Record<string, string>> = {
  REQUEST_COUNT: 'requests_total',
  REQUEST_DURATION: 'request_duration_milliseconds',
  REQUEST_SIZE: 'request_bytes',
  RESPONSE_SIZE: 'response_bytes',
  TCP_OPENED_CONNECTIONS: 'tcp_connections_opened_total',
  TCP_CLOSED_CONNECTIONS: 'tcp_connections_closed_total',
  TCP_SENT_BYTES: 'tcp_sent_bytes_total',
  TCP_RECEIVED_BYTES: 'tcp_received_bytes_total',
  GRPC_REQUEST_MESSAGES: 'request_messages_total',
  GRPC_RESPONSE_MESSAGES: 'response_messages_total',
};

type PeerMetadataInit = MessageInitShape<typeof PeerMetadataSchema>;
type StatsInit = MessageInitShape<typeof PluginConfigSchema>;

/**
 * Peers tell each other who they are in the x-envoy-peer-metadata headers: an inbound sidecar
 * reads the client's from the request and answers with its own; outbound sidecars and gateways
 * send theirs with the request and read the server's from the response. The Go mesh also asks
 * its ambient workload xDS (workload_discovery); this mesh has none.
 */
const HEADERS = [{ methodSpecifier: { case: 'istioHeaders' as const, value: {} } }];
const INBOUND_PEERS: PeerMetadataInit = { downstreamDiscovery: HEADERS, downstreamPropagation: HEADERS };
const OUTBOUND_PEERS: PeerMetadataInit = { upstreamDiscovery: HEADERS, upstreamPropagation: HEADERS };

function metadataExchangeFilter(cls: ListenerClass): HttpFilter {
  const config = pack(PeerMetadataSchema, cls === 'sidecar-inbound' ? INBOUND_PEERS : OUTBOUND_PEERS);
  return create(HttpFilterSchema, { name: METADATA_EXCHANGE_FILTER_NAME, configType: { case: 'typedConfig', value: config } });
}

/**
 * Go's generateStatsConfig: the side's overrides as metric configs; undefined when the side's
 * metrics are off. Inbound sidecars and gateways do not take destination_service from the Host
 * header when the cluster names no service (the Go mesh's disableHostHeaderFallback).
 */
function statsConfig(cls: ListenerClass, m: ProviderMetrics): StatsInit | undefined {
  const side = cls === 'sidecar-inbound' ? m.server : m.client;
  if (side.disabled) return undefined;
  return {
    disableHostHeaderFallback: cls !== 'sidecar-outbound',
    ...(m.reportingInterval !== undefined ? { tcpReportingDuration: duration(m.reportingInterval) } : {}),
    metrics: side.overrides.map((o) => ({
      name: PROMETHEUS_NAMES[o.name] ?? o.name,
      drop: o.disabled,
      tagsToRemove: o.tags.flatMap((t) => (t.remove ? [t.name] : [])),
      dimensions: Object.fromEntries(o.tags.flatMap((t) => (t.remove ? [] : [[t.name, t.value]]))),
    })),
  };
}

/** The filters of a class for the providers that record (model/telemetry-metrics.ts recordedMetrics). */
export function listenerTelemetry(cls: ListenerClass, recorded: readonly ProviderMetrics[]): ListenerTelemetry {
  const configs = recorded.flatMap((m) => {
    const c = statsConfig(cls, m);
    return c ? [c] : [];
  });
  return {
    metadataExchange: metadataExchangeFilter(cls),
    httpStats: configs.map((c) => create(HttpFilterSchema, { name: STATS_FILTER_NAME, configType: { case: 'typedConfig', value: pack(PluginConfigSchema, c) } })),
    tcpStats: configs.map((c) => create(FilterSchema, { name: STATS_FILTER_NAME, configType: { case: 'typedConfig', value: pack(PluginConfigSchema, c) } })),
  };
}

/** A connection manager's filters: metadata exchange, `filters` in order, then the stats filters (the router follows). */
export function withHttpTelemetry(t: ListenerTelemetry | undefined, filters: readonly HttpFilter[]): HttpFilter[] {
  return t ? [t.metadataExchange, ...filters, ...t.httpStats] : [...filters];
}

/** A TCP chain's filters: `filters` (network rbac), the stats filters, then `proxy` (tcp_proxy). */
export function withTcpTelemetry(t: ListenerTelemetry | undefined, filters: readonly Filter[], proxy: Filter): Filter[] {
  return [...filters, ...(t?.tcpStats ?? []), proxy];
}
