// The stats filter's `metrics` overrides compiled once (the Go mesh's stats filter's rules): a
// metric dropped, standard labels removed or given another value, labels added; for one metric
// (by its name without `istio_`) or, without a name, for all. Values are attribute expressions
// (src/envoy/attribute-expression.ts); one mesh-proxy cannot evaluate, or that finds nothing,
// records `unknown`, as Envoy records an expression that fails.
import { AttributeExpressionError, evaluateAttribute, parseAttributeExpression, type AttributeExpression, type AttributeSource } from '../../envoy/attribute-expression.js';
import type { MetricConfig } from '../../gen/mesh/stats/config_pb.js';
import type { Labels } from './standard-labels.js';

export const STANDARD_METRICS = [
  'requests_total',
  'request_duration_milliseconds',
  'request_bytes',
  'response_bytes',
  'request_messages_total',
  'response_messages_total',
  'tcp_connections_opened_total',
  'tcp_connections_closed_total',
  'tcp_sent_bytes_total',
  'tcp_received_bytes_total',
] as const;
export type StandardMetric = (typeof STANDARD_METRICS)[number];

export const STANDARD_LABELS: ReadonlySet<string> = new Set([
  'reporter', 'source_workload', 'source_workload_namespace', 'source_principal', 'source_app', 'source_version',
  'source_canonical_service', 'source_canonical_revision', 'source_cluster', 'destination_workload',
  'destination_workload_namespace', 'destination_principal', 'destination_app', 'destination_version',
  'destination_service', 'destination_service_name', 'destination_service_namespace', 'destination_canonical_service',
  'destination_canonical_revision', 'destination_cluster', 'request_protocol', 'response_flags',
  'connection_security_policy', 'response_code', 'grpc_response_status',
]);

/** undefined: an expression mesh-proxy does not evaluate (the label is `unknown`). */
type Value = AttributeExpression | undefined;

interface MetricRules {
  /** Standard label -> its new value, or null: removed. */
  readonly replaced: Map<string, Value | null>;
  readonly added: [string, Value][];
}

export interface MetricOverrides {
  /** The labels a metric is recorded with, or undefined when it is dropped. */
  labels(metric: StandardMetric, standard: Labels, source: AttributeSource): Labels | undefined;
  /** Expressions that did not parse, for the filter's warning. */
  readonly unevaluable: readonly string[];
  /** Some label is an attribute of the stream: each stream's labels are its own. */
  readonly dynamic: boolean;
}

const isStandard = (name: string): name is StandardMetric => (STANDARD_METRICS as readonly string[]).includes(name);

export function compileMetricOverrides(metrics: readonly MetricConfig[]): MetricOverrides | undefined {
  if (metrics.length === 0) return undefined;
  const dropped = new Set<StandardMetric>();
  const rules = new Map<StandardMetric, MetricRules>();
  const unevaluable: string[] = [];
  const rulesOf = (m: StandardMetric): MetricRules => {
    let r = rules.get(m);
    if (!r) rules.set(m, (r = { replaced: new Map(), added: [] }));
    return r;
  };
  const parse = (text: string): Value => {
    try {
      return parseAttributeExpression(text);
    } catch (e) {
      if (!(e instanceof AttributeExpressionError)) throw e;
      unevaluable.push(`${JSON.stringify(text)}: ${e.message}`);
      return undefined;
    }
  };
  for (const m of metrics) {
    // A name that is no standard metric (a custom one, which this proxy does not define) changes nothing.
    const targets: StandardMetric[] = m.name === '' ? [...STANDARD_METRICS] : isStandard(m.name) ? [m.name] : [];
    if (m.drop) {
      if (m.name !== '') targets.forEach((t) => dropped.add(t));
      continue;
    }
    for (const tag of m.tagsToRemove) if (STANDARD_LABELS.has(tag)) targets.forEach((t) => rulesOf(t).replaced.set(tag, null));
    for (const tag of Object.keys(m.dimensions).sort()) {
      const value = parse(m.dimensions[tag]!);
      for (const t of targets) {
        if (STANDARD_LABELS.has(tag)) rulesOf(t).replaced.set(tag, value);
        else rulesOf(t).added.push([tag, value]);
      }
    }
  }
  const values = [...rules.values()].flatMap((r) => [...r.replaced.values(), ...r.added.map(([, v]) => v)]);
  const dynamic = values.some((v) => v !== null && v !== undefined && v.kind === 'attribute');
  const evaluate = (v: Value, source: AttributeSource): string => (v ? (evaluateAttribute(v, source) ?? 'unknown') : 'unknown');
  return {
    unevaluable,
    dynamic,
    labels(metric, standard, source) {
      if (dropped.has(metric)) return undefined;
      const r = rules.get(metric);
      if (!r) return standard;
      const out: Labels = [];
      for (const [name, value] of standard) {
        if (!r.replaced.has(name)) out.push([name, value]);
        else {
          const v = r.replaced.get(name);
          if (v !== null) out.push([name, evaluate(v, source)]);
        }
      }
      for (const [name, v] of r.added) out.push([name, evaluate(v, source)]);
      return out;
    },
  };
}
