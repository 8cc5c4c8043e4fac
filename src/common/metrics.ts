// The registry of every metric in the spec (commands.md, Events), with the spec's names and scopes.
// Types map to Prometheus as Sum/Count -> counter, LastValue -> gauge, Distribution -> histogram.
// Each program exposes exactly the metrics of its scope; `counter()`/`gauge()`/`histogram()` hand
// components the single instance of a metric, whichever program they run in.
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { Program } from './env.js';

type MetricType = 'Sum' | 'Count' | 'LastValue' | 'Distribution';
type MetricScope = 'D' | 'A' | 'D+A';

interface MetricDef {
  readonly name: string;
  readonly type: MetricType;
  readonly scope: MetricScope;
  readonly help: string;
  readonly labels?: readonly string[];
}

const METRICS = [
  { name: 'auto_registration_deletes_total', type: 'Sum', scope: 'D+A', help: 'auto registrations cleaned up by the periodic timer' },
  { name: 'auto_registration_errors_total', type: 'Sum', scope: 'D+A', help: 'auto registration errors' },
  { name: 'auto_registration_success_total', type: 'Sum', scope: 'D+A', help: 'successful auto registrations' },
  { name: 'auto_registration_unregister_total', type: 'Sum', scope: 'D+A', help: 'unregistrations' },
  { name: 'auto_registration_updates_total', type: 'Sum', scope: 'D+A', help: 'auto registration updates' },
  { name: 'authority_server_authentication_failure_count', type: 'Sum', scope: 'D', help: 'authentication failures' },
  { name: 'authority_server_cert_chain_expiry_timestamp', type: 'LastValue', scope: 'D', help: 'unix seconds when the cert chain expires; negative = expired' },
  { name: 'authority_server_csr_count', type: 'Sum', scope: 'D', help: 'CSRs received' },
  { name: 'authority_server_csr_parsing_err_count', type: 'Sum', scope: 'D', help: 'CSR parsing errors' },
  { name: 'authority_server_csr_sign_err_count', type: 'Sum', scope: 'D', help: 'CSR signing errors' },
  { name: 'authority_server_id_extraction_err_count', type: 'Sum', scope: 'D', help: 'errors extracting the ID from a CSR' },
  { name: 'authority_server_root_cert_expiry_timestamp', type: 'LastValue', scope: 'D', help: 'unix seconds when the root cert expires; negative = expired' },
  { name: 'authority_server_success_cert_issuance_count', type: 'Sum', scope: 'D', help: 'successful certificate issuances' },
  { name: 'endpoint_no_pod', type: 'LastValue', scope: 'D+A', help: 'endpoints without an associated pod' },
  { name: 'proxy_connection_terminations', type: 'Sum', scope: 'A', help: 'connection errors from the proxy' },
  { name: 'validator_runtime_processor_event_span_duration_milliseconds', type: 'Distribution', scope: 'D', help: 'duration between incoming events' },
  { name: 'validator_runtime_processor_events_processed_total', type: 'Count', scope: 'D', help: 'events processed' },
  { name: 'validator_runtime_processor_snapshot_events_total', type: 'Distribution', scope: 'D', help: 'events per snapshot' },
  { name: 'validator_runtime_processor_snapshot_lifetime_duration_milliseconds', type: 'Distribution', scope: 'D', help: 'duration of each snapshot' },
  { name: 'validator_runtime_processor_snapshots_published_total', type: 'Count', scope: 'D', help: 'snapshots published' },
  { name: 'validator_runtime_state_type_instances_total', type: 'LastValue', scope: 'D', help: 'type instances per type URL', labels: ['collection'] },
  { name: 'validator_runtime_strategy_on_change_total', type: 'Count', scope: 'D', help: "calls of the strategy's onChange" },
  { name: 'validator_runtime_strategy_timer_max_time_reached_total', type: 'Count', scope: 'D', help: 'times the max time was reached' },
  { name: 'validator_runtime_strategy_timer_quiesce_reached_total', type: 'Count', scope: 'D', help: 'times a quiesce was reached' },
  { name: 'validator_runtime_strategy_timer_resets_total', type: 'Count', scope: 'D', help: 'timer resets' },
  { name: 'validator_source_orch_dynamic_converter_failure_total', type: 'Count', scope: 'D', help: 'failed conversions by a dynamic source' },
  { name: 'validator_source_orch_dynamic_converter_success_total', type: 'Count', scope: 'D', help: 'successful conversions by a dynamic source' },
  { name: 'validator_source_orch_event_error_total', type: 'Count', scope: 'D', help: 'errors handling a source event' },
  { name: 'validator_source_orch_event_success_total', type: 'Count', scope: 'D', help: 'source events handled successfully' },
  { name: 'validator_validation_config_delete_error', type: 'Count', scope: 'D+A', help: 'webhook configuration delete errors' },
  { name: 'validator_validation_config_load', type: 'Count', scope: 'D+A', help: 'webhook configuration (re)loads' },
  { name: 'validator_validation_config_load_error', type: 'Count', scope: 'D+A', help: 'webhook configuration (re)load errors' },
  { name: 'validator_validation_config_update_error', type: 'Count', scope: 'D+A', help: 'webhook configuration update errors' },
  { name: 'validator_validation_config_updates', type: 'Count', scope: 'D+A', help: 'webhook configuration updates' },
  { name: 'validator_validation_failed', type: 'Sum', scope: 'D', help: 'resource validation failed', labels: ['group', 'version', 'resource', 'reason'] },
  { name: 'validator_validation_http_error', type: 'Sum', scope: 'D', help: 'validation HTTP serve errors', labels: ['status'] },
  { name: 'validator_validation_passed', type: 'Sum', scope: 'D', help: 'resource is valid', labels: ['group', 'version', 'resource'] },
  { name: 'mesh_build', type: 'LastValue', scope: 'D+A', help: 'component build info', labels: ['component', 'version'] },
  { name: 'meshd_connection_failures', type: 'Sum', scope: 'A', help: 'connection failures to the discovery server' },
  { name: 'meshd_connection_terminations', type: 'Sum', scope: 'A', help: 'connection errors to the discovery server' },
  { name: 'num_failed_outgoing_requests', type: 'Sum', scope: 'D+A', help: 'failed outgoing requests (token exchange server, CA, etc.)', labels: ['request_type'] },
  { name: 'num_file_secret_failures_total', type: 'Sum', scope: 'D+A', help: 'secret generation failures for files' },
  { name: 'num_file_watcher_failures_total', type: 'Sum', scope: 'D+A', help: 'file watcher failures to add watchers' },
  { name: 'num_outgoing_requests', type: 'Sum', scope: 'D+A', help: 'total outgoing requests', labels: ['request_type'] },
  { name: 'num_outgoing_retries', type: 'Sum', scope: 'D+A', help: 'outgoing retry requests', labels: ['request_type'] },
  { name: 'outgoing_latency', type: 'Sum', scope: 'D+A', help: 'latency of outgoing requests in milliseconds', labels: ['request_type'] },
  { name: 'pilot_conflict_inbound_listener', type: 'LastValue', scope: 'D+A', help: 'conflicting inbound listeners' },
  { name: 'pilot_conflict_outbound_listener_http_over_current_tcp', type: 'LastValue', scope: 'D+A', help: 'wildcard http listeners conflicting with the current wildcard tcp listener' },
  { name: 'pilot_conflict_outbound_listener_tcp_over_current_http', type: 'LastValue', scope: 'D+A', help: 'wildcard tcp listeners conflicting with the current wildcard http listener' },
  { name: 'pilot_conflict_outbound_listener_tcp_over_current_tcp', type: 'LastValue', scope: 'D+A', help: 'tcp listeners conflicting with the current tcp listener' },
  { name: 'pilot_destrule_subsets', type: 'LastValue', scope: 'D+A', help: 'duplicate subsets across destination rules for one host' },
  { name: 'pilot_duplicate_envoy_clusters', type: 'LastValue', scope: 'D+A', help: 'duplicate clusters from service entries with the same hostname' },
  { name: 'pilot_eds_no_instances', type: 'LastValue', scope: 'D+A', help: 'clusters without instances' },
  { name: 'pilot_endpoint_not_ready', type: 'LastValue', scope: 'D+A', help: 'endpoints found unready' },
  { name: 'pilot_inbound_updates', type: 'Sum', scope: 'D+A', help: 'updates received by pilot', labels: ['type'] },
  { name: 'pilot_invalid_out_listeners', type: 'LastValue', scope: 'D+A', help: 'invalid outbound listeners' },
  { name: 'pilot_jwks_resolver_network_fetch_fail_total', type: 'Sum', scope: 'D+A', help: 'failed network fetches by the JWKS resolver' },
  { name: 'pilot_jwks_resolver_network_fetch_success_total', type: 'Sum', scope: 'D+A', help: 'successful network fetches by the JWKS resolver' },
  { name: 'pilot_orch_cfg_events', type: 'Sum', scope: 'D+A', help: 'events from orchestrator config', labels: ['type', 'event'] },
  { name: 'pilot_orch_endpoints_pending_pod', type: 'LastValue', scope: 'D+A', help: 'endpoints with no corresponding pods currently' },
  { name: 'pilot_orch_endpoints_with_no_pods', type: 'Sum', scope: 'D+A', help: 'endpoints without corresponding pods' },
  { name: 'pilot_orch_object_errors', type: 'LastValue', scope: 'D+A', help: 'errors converting orchestrator CRDs', labels: ['kind'] },
  { name: 'pilot_orch_reg_events', type: 'Sum', scope: 'D+A', help: 'events from the orchestrator registry', labels: ['type', 'event'] },
  { name: 'pilot_no_ip', type: 'LastValue', scope: 'D+A', help: 'pods not found in the endpoint table, possibly invalid' },
  { name: 'pilot_proxy_convergence_time', type: 'Distribution', scope: 'D+A', help: 'seconds from config change to a proxy receiving all configuration' },
  { name: 'pilot_proxy_queue_time', type: 'Distribution', scope: 'D+A', help: 'seconds a proxy waits in the push queue' },
  { name: 'pilot_push_triggers', type: 'Sum', scope: 'D+A', help: 'pushes triggered, labeled by reason', labels: ['type'] },
  { name: 'pilot_services', type: 'LastValue', scope: 'D+A', help: 'services known to pilot' },
  { name: 'pilot_total_orch_object_errors', type: 'Sum', scope: 'D+A', help: 'total errors converting orchestrator CRDs', labels: ['kind'] },
  { name: 'pilot_total_rejected_configs', type: 'Sum', scope: 'D+A', help: 'configs rejected or ignored', labels: ['kind'] },
  { name: 'pilot_total_xds_internal_errors', type: 'Sum', scope: 'D+A', help: 'internal XDS errors' },
  { name: 'pilot_total_xds_rejects', type: 'Sum', scope: 'D+A', help: 'XDS responses rejected by a proxy', labels: ['type'] },
  { name: 'pilot_virt_services', type: 'LastValue', scope: 'D+A', help: 'virtual services known' },
  { name: 'pilot_vservice_dup_domain', type: 'LastValue', scope: 'D+A', help: 'virtual services with duplicate domains' },
  { name: 'pilot_xds', type: 'LastValue', scope: 'D+A', help: 'endpoints connected to this pilot using XDS' },
  { name: 'pilot_xds_cds_reject', type: 'LastValue', scope: 'D+A', help: 'CDS configs rejected' },
  { name: 'pilot_xds_delayed_push_timeouts_total', type: 'Sum', scope: 'D+A', help: 'delayed XDS pushes that timed out', labels: ['type'] },
  { name: 'pilot_xds_delayed_pushes_total', type: 'Sum', scope: 'D+A', help: 'delayed XDS pushes', labels: ['type'] },
  { name: 'pilot_xds_eds_reject', type: 'LastValue', scope: 'D+A', help: 'EDS rejected' },
  { name: 'pilot_xds_expired_nonce', type: 'Sum', scope: 'D+A', help: 'XDS requests with an expired nonce', labels: ['type'] },
  { name: 'pilot_xds_lds_reject', type: 'LastValue', scope: 'D+A', help: 'LDS rejected' },
  { name: 'pilot_xds_push_context_errors', type: 'Sum', scope: 'D+A', help: 'errors (timeouts) initiating push context' },
  { name: 'pilot_xds_push_time', type: 'Distribution', scope: 'D+A', help: 'seconds to push lds, rds, cds and eds', labels: ['type'] },
  { name: 'pilot_xds_pushes', type: 'Sum', scope: 'D+A', help: 'build and send errors for lds, rds, cds and eds', labels: ['type'] },
  { name: 'pilot_xds_rds_reject', type: 'LastValue', scope: 'D+A', help: 'RDS rejected' },
  { name: 'pilot_xds_send_time', type: 'Distribution', scope: 'D+A', help: 'seconds to send generated configuration' },
  { name: 'pilot_xds_write_timeout', type: 'Sum', scope: 'D+A', help: 'XDS response write timeouts' },
  { name: 'scrape_failures_total', type: 'Sum', scope: 'D+A', help: 'failed scrapes', labels: ['type'] },
  { name: 'scrapes_total', type: 'Sum', scope: 'D+A', help: 'scrapes' },
  { name: 'sidecar_injection_failure_total', type: 'Sum', scope: 'D', help: 'failed injection requests' },
  { name: 'sidecar_injection_requests_total', type: 'Sum', scope: 'D', help: 'injection requests' },
  { name: 'sidecar_injection_skip_total', type: 'Sum', scope: 'D', help: 'skipped injection requests', labels: ['type'] },
  { name: 'sidecar_injection_success_total', type: 'Sum', scope: 'D', help: 'successful injection requests' },
  { name: 'startup_duration_seconds', type: 'LastValue', scope: 'D+A', help: 'seconds from process start to ready' },
  // The spec types these two Sum, but they go down as streams end or catch up (the Go mesh decrements
  // them): exposed as gauges, see docs/identity.md.
  { name: 'total_active_connections', type: 'LastValue', scope: 'A', help: 'active SDS connections' },
  { name: 'total_push_errors', type: 'Sum', scope: 'A', help: 'failed SDS pushes' },
  { name: 'total_pushes', type: 'Sum', scope: 'A', help: 'SDS pushes' },
  { name: 'total_secret_update_failures', type: 'Sum', scope: 'A', help: 'dynamic secret update failures reported by the proxy' },
  { name: 'total_stale_connections', type: 'LastValue', scope: 'A', help: 'stale SDS connections' },
  { name: 'wasm_cache_entries', type: 'LastValue', scope: 'A', help: 'Wasm remote fetch cache entries' },
  { name: 'wasm_cache_lookup_count', type: 'Sum', scope: 'A', help: 'Wasm remote fetch cache lookups' },
  { name: 'wasm_config_conversion_count', type: 'Sum', scope: 'A', help: 'Wasm config conversions and results (success, no remote load, marshal failure, remote fetch failure, missing remote fetch hint)', labels: ['result'] },
  { name: 'wasm_config_conversion_duration', type: 'Distribution', scope: 'A', help: 'milliseconds spent converting remote load in Wasm config' },
  { name: 'wasm_remote_fetch_count', type: 'Sum', scope: 'A', help: 'Wasm remote fetches and results (success, download failure, checksum mismatch)', labels: ['result'] },
  { name: 'xds_cache_evictions', type: 'Sum', scope: 'D+A', help: 'XDS cache evictions' },
  { name: 'xds_cache_reads', type: 'Sum', scope: 'D+A', help: 'XDS cache reads', labels: ['type'] },
  { name: 'xds_cache_size', type: 'LastValue', scope: 'D+A', help: 'current XDS cache size' },
] as const satisfies readonly MetricDef[];

type Def = (typeof METRICS)[number];
export type MetricName = Def['name'];
type NamesOf<T extends MetricType> = Extract<Def, { type: T }>['name'];
export type CounterName = NamesOf<'Sum' | 'Count'>;
export type GaugeName = NamesOf<'LastValue'>;
export type HistogramName = NamesOf<'Distribution'>;

/**
 * Metrics some component records. The others are exported at zero with "(not yet effective)" in
 * their HELP text and named at startup (COMPATIBILITY_METRICS apart). test/common/wiring.test.ts keeps this list equal to the
 * names passed to counter()/gauge()/histogram() in src/.
 */
export const WIRED_METRICS: ReadonlySet<MetricName> = new Set<MetricName>([
  // security/ca/service.ts, security/ca/authority.ts
  'authority_server_authentication_failure_count',
  'authority_server_cert_chain_expiry_timestamp',
  'authority_server_csr_count',
  'authority_server_csr_parsing_err_count',
  'authority_server_csr_sign_err_count',
  'authority_server_id_extraction_err_count',
  'authority_server_root_cert_expiry_timestamp',
  'authority_server_success_cert_issuance_count',
  // agent/sds/server.ts, agent/sds/secret-manager.ts, agent/sds/ca-client.ts
  'num_failed_outgoing_requests',
  'num_file_secret_failures_total',
  'num_outgoing_requests',
  'outgoing_latency',
  'total_active_connections',
  'total_push_errors',
  'total_pushes',
  'total_secret_update_failures',
  'total_stale_connections',
  // config/file.ts, config/orchestrator.ts, webhooks/validation.ts
  'pilot_total_rejected_configs',
  'pilot_orch_cfg_events',
  'pilot_orch_object_errors',
  'pilot_total_orch_object_errors',
  'validator_validation_passed',
  'validator_validation_failed',
  'validator_validation_http_error',
  // webhooks/ca-bundle.ts
  'validator_validation_config_load',
  'validator_validation_config_load_error',
  'validator_validation_config_update_error',
  'validator_validation_config_updates',
  // webhooks/inject.ts
  'sidecar_injection_failure_total',
  'sidecar_injection_requests_total',
  'sidecar_injection_skip_total',
  'sidecar_injection_success_total',
  // registry/orchestrator/controller.ts
  'endpoint_no_pod',
  'pilot_endpoint_not_ready',
  'pilot_no_ip',
  'pilot_orch_endpoints_pending_pod',
  'pilot_orch_endpoints_with_no_pods',
  'pilot_orch_reg_events',
  // security/authn/jwks-resolver.ts
  'pilot_jwks_resolver_network_fetch_fail_total',
  'pilot_jwks_resolver_network_fetch_success_total',
  // agent/xds-proxy.ts
  'meshd_connection_failures',
  'meshd_connection_terminations',
  // agent/sts/token-exchange.ts
  'num_failed_outgoing_requests',
  'num_outgoing_requests',
  'num_outgoing_retries',
  'outgoing_latency',
  // agent/status.ts
  'scrape_failures_total',
  'scrapes_total',
  // cli/discovery-server.ts
  'mesh_build',
  'startup_duration_seconds',
  'pilot_xds_push_context_errors',
  // xds/debounce.ts
  'pilot_inbound_updates',
  'pilot_push_triggers',
  // xds/server.ts
  'pilot_xds',
  'pilot_xds_pushes',
  'pilot_xds_push_time',
  'pilot_xds_send_time',
  'pilot_total_xds_rejects',
  'pilot_xds_lds_reject',
  'pilot_xds_rds_reject',
  'pilot_xds_cds_reject',
  'pilot_xds_eds_reject',
  'pilot_xds_expired_nonce',
  'pilot_total_xds_internal_errors',
  'pilot_xds_write_timeout',
  // xds/flow-control.ts
  'pilot_xds_delayed_pushes_total',
  'pilot_xds_delayed_push_timeouts_total',
  'pilot_proxy_queue_time',
  'pilot_proxy_convergence_time',
  // model/push-context.ts, registry/serviceentry.ts
  'pilot_services',
  'pilot_virt_services',
  'pilot_destrule_subsets',
  'pilot_vservice_dup_domain',
  'pilot_eds_no_instances',
  'pilot_duplicate_envoy_clusters',
  // xds/cache.ts
  'xds_cache_reads',
  'xds_cache_evictions',
  'xds_cache_size',
  // registry/autoregister.ts
  'auto_registration_success_total',
  'auto_registration_updates_total',
  'auto_registration_unregister_total',
  'auto_registration_deletes_total',
  'auto_registration_errors_total',
  // xds/generators/context.ts
  'pilot_conflict_outbound_listener_http_over_current_tcp',
  'pilot_conflict_outbound_listener_tcp_over_current_http',
  'pilot_conflict_outbound_listener_tcp_over_current_tcp',
  'pilot_conflict_inbound_listener',
  // debug/analysis.ts (PILOT_ENABLE_ANALYSIS)
  'validator_runtime_processor_event_span_duration_milliseconds',
  'validator_runtime_processor_events_processed_total',
  'validator_runtime_processor_snapshot_events_total',
  'validator_runtime_processor_snapshot_lifetime_duration_milliseconds',
  'validator_runtime_processor_snapshots_published_total',
  'validator_runtime_state_type_instances_total',
  'validator_runtime_strategy_on_change_total',
  'validator_runtime_strategy_timer_max_time_reached_total',
  'validator_runtime_strategy_timer_quiesce_reached_total',
  'validator_runtime_strategy_timer_resets_total',
  'validator_source_orch_dynamic_converter_failure_total',
  'validator_source_orch_dynamic_converter_success_total',
  'validator_source_orch_event_error_total',
  'validator_source_orch_event_success_total',
]);

/**
 * Metrics the spec names that the Go mesh declares but never records, and neither do we: exported at
 * zero for dashboards that expect them, with the reason in their HELP text; not "not yet effective",
 * since nothing is to record them.
 */
export const COMPATIBILITY_METRICS: ReadonlyMap<MetricName, string> = new Map<MetricName, string>([
  // The Go mesh's validation controller deleted its configuration on shutdown until 1.6; from 1.7 the
  // metric stayed declared with no caller, until it was dropped. Our discovery server deletes no
  // webhook configuration (a tag or a revision is removed by whoever installed it).
  ['validator_validation_config_delete_error', 'the discovery server never deletes a webhook configuration'],
]);

// Seconds-valued distributions get latency buckets; the rest count things or milliseconds.
const SECONDS_BUCKETS = [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 3, 5, 10, 20, 30];
const MS_BUCKETS = [1, 5, 10, 50, 100, 500, 1000, 5000, 10000, 30000];
const COUNT_BUCKETS = [0, 1, 2, 5, 10, 20, 50, 100, 500, 1000];

function bucketsFor(def: Def): number[] {
  if (def.name.endsWith('_milliseconds') || def.name.endsWith('_duration')) return MS_BUCKETS;
  if (def.help.startsWith('seconds') || def.name.endsWith('_time')) return SECONDS_BUCKETS;
  return COUNT_BUCKETS;
}

function helpOf(def: Def): string {
  if (WIRED_METRICS.has(def.name)) return def.help;
  const compatibility = COMPATIBILITY_METRICS.get(def.name);
  return compatibility ? `${def.help} (declared for compatibility with the Go mesh, never recorded: ${compatibility})` : `${def.help} (not yet effective)`;
}

const instances = new Map<string, Counter<string> | Gauge<string> | Histogram<string>>();

function create(def: Def): Counter<string> | Gauge<string> | Histogram<string> {
  const common = { name: def.name, help: helpOf(def), labelNames: 'labels' in def ? [...def.labels] : [], registers: [] };
  switch (def.type) {
    case 'Sum':
    case 'Count':
      return new Counter(common);
    case 'LastValue':
      return new Gauge(common);
    case 'Distribution':
      return new Histogram({ ...common, buckets: bucketsFor(def) });
  }
}

function instance(name: MetricName): Counter<string> | Gauge<string> | Histogram<string> {
  let m = instances.get(name);
  if (!m) {
    m = create(METRICS.find((d) => d.name === name)!);
    instances.set(name, m);
  }
  return m;
}

export function counter(name: CounterName): Counter<string> {
  return instance(name) as Counter<string>;
}

export function gauge(name: GaugeName): Gauge<string> {
  return instance(name) as Gauge<string>;
}

export function histogram(name: HistogramName): Histogram<string> {
  return instance(name) as Histogram<string>;
}

function inScope(def: Def, p: Program): boolean {
  return def.scope === 'D+A' || (def.scope === 'D') === (p === 'discovery');
}

/** A Prometheus registry holding exactly the program's metrics. */
export function programRegistry(p: Program): Registry {
  const reg = new Registry();
  for (const def of METRICS) if (inScope(def, p)) reg.registerMetric(instance(def.name));
  return reg;
}

export function ineffectiveMetrics(p: Program): string[] {
  return METRICS.filter((d) => inScope(d, p) && !WIRED_METRICS.has(d.name) && !COMPATIBILITY_METRICS.has(d.name)).map((d) => d.name);
}

export function metricNames(p: Program): string[] {
  return METRICS.filter((d) => inScope(d, p)).map((d) => d.name);
}
