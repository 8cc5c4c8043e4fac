// The standard-metrics HTTP filter (`mesh.stats`, the Go mesh's `istio.stats`): it does nothing to
// a request; once a stream has ended it records the stream's istio_* metrics
// (telemetry/standard-metrics.ts). Who reports follows the listener: inbound, the destination;
// otherwise the source (SERVER_GATEWAY: a waypoint, labelled as a destination).
import { PluginConfigSchema, Reporter, type PluginConfig } from '../../gen/mesh/stats/config_pb.js';
import { ConfigError } from '../../envoy/config-error.js';
import { scope } from '../../common/log.js';
import { compileMetricOverrides } from '../telemetry/metric-overrides.js';
import { StandardMetrics } from '../telemetry/standard-metrics.js';
import { registerHttpFilter, type FilterTelemetry } from './registry.js';
import { registerConnectionGate } from '../listener/network-filters.js';
import type { ClusterManager } from '../clusters.js';
import { localNode } from '../telemetry/workload-metadata.js';
import { durationMs } from '../../common/duration.js';

const log = scope('http');

/** The recorder of one stats filter config on a listener of that direction. */
function recorderOf(config: PluginConfig, name: string, t: FilterTelemetry, clusters: ClusterManager | undefined): StandardMetrics {
  const overrides = compileMetricOverrides(config.metrics);
  const notApplied = [
    ...(overrides?.unevaluable.map((e) => `${name}: a tag value ${e}; recorded as "unknown"`) ?? []),
    ...(config.definitions.length > 0 ? [`${name}.definitions (custom metrics)`] : []),
  ];
  if (notApplied.length > 0) log.warn(`stats filter: accepted but not applied: ${notApplied.join('; ')}`);
  return new StandardMetrics({
    labels: {
      reporter: config.reporter === Reporter.SERVER_GATEWAY ? 'waypoint' : t.inbound ? 'destination' : 'source',
      local: t.node.workload,
      hostFallback: !config.disableHostHeaderFallback,
    },
    node: t.node,
    stats: t.stats,
    overrides,
    clusters,
  });
}

registerHttpFilter({
  schema: PluginConfigSchema,
  compile(config, name, ctx) {
    if (!ctx.telemetry) throw new ConfigError(name, 'the stats filter needs the proxy\'s node and stats store');
    const metrics = recorderOf(config, name, ctx.telemetry, ctx.clusters);
    return { streamEnded: (info) => metrics.http(info) };
  },
});

/** Envoy's default tcp_reporting_duration for the stats filter. */
const TCP_REPORTING_MS = 5000;

// The same filter before a tcp_proxy: it admits every connection and watches it.
registerConnectionGate({
  schema: PluginConfigSchema,
  build(config, ctx) {
    const node = ctx.deps.node ?? localNode('', '', {});
    const metrics = recorderOf(config, ctx.name, { node, inbound: ctx.inbound, stats: ctx.deps.stats }, ctx.deps.clusters);
    const interval = durationMs(config.tcpReportingDuration, TCP_REPORTING_MS);
    return { admit: () => undefined, samples: () => [], watch: (info) => metrics.tcp(info, interval) };
  },
});
