// A Telemetry's `metrics`, as the Go mesh's validateTelemetryMetrics and its CRD rules: a match
// names a standard metric or a custom one, not both; a tag set (UPSERT, the default operation)
// needs a value and a removed one has none; reportingInterval is a duration of at least 1ms. Tag
// values are not checked here: what mesh-proxy cannot evaluate is reported when the resource is
// read (model/telemetry.ts), since the Go mesh accepts any CEL expression.
import { parseDuration } from '../common/duration.js';
import { joinPath } from './errors.js';
import { asRecord, type Fields } from './values.js';

const MIN_REPORTING_INTERVAL_NS = 1_000_000n;

function reportingInterval(value: unknown, at: string, add: (path: string, message: string) => void): void {
  if (typeof value !== 'string') return;
  let ns: bigint | undefined;
  try {
    ns = parseDuration(value);
  } catch {
    // reported below with what is expected
  }
  if (ns === undefined || ns < MIN_REPORTING_INTERVAL_NS) add(at, `invalid duration ${JSON.stringify(value)}; expected a duration of at least 1ms, such as 15s`);
}

function tagOverrides(value: unknown, at: string, add: (path: string, message: string) => void): void {
  for (const [name, body] of Object.entries(asRecord(value) ?? {})) {
    const tag = asRecord(body);
    if (!tag) continue;
    const where = joinPath(at, name);
    const hasValue = typeof tag['value'] === 'string' && tag['value'] !== '';
    if (tag['operation'] === 'REMOVE') {
      if (tag['value'] !== undefined) add(`${where}.value`, 'may only be set when operation is UPSERT');
    } else if (!hasValue) {
      add(`${where}.value`, 'required when operation is UPSERT (the default): the tag\'s value, e.g. request.headers[\'x-user\']');
    }
  }
}

export function telemetryMetrics(spec: Fields, path: string, add: (path: string, message: string) => void): void {
  const metrics = Array.isArray(spec['metrics']) ? spec['metrics'] : [];
  metrics.forEach((item, i) => {
    const entry = asRecord(item);
    if (!entry) return;
    const at = joinPath(`${path}.metrics`, i);
    reportingInterval(entry['reportingInterval'], `${at}.reportingInterval`, add);
    const overrides = Array.isArray(entry['overrides']) ? entry['overrides'] : [];
    overrides.forEach((o, j) => {
      const override = asRecord(o);
      if (!override) return;
      const oat = joinPath(`${at}.overrides`, j);
      const match = asRecord(override['match']);
      if (match && match['metric'] !== undefined && match['customMetric'] !== undefined) add(`${oat}.match`, 'only one of metric or customMetric can be set');
      tagOverrides(override['tagOverrides'], `${oat}.tagOverrides`, add);
    });
  });
}
