// The Telemetry API's metrics, as the Go mesh's mergeMetrics (pilot/pkg/model/telemetry.go, the
// cases of its telemetry_test.go TestTelemetryFilters), the mesh config's metrics providers (the
// built-in prometheus, defaultProviders.metrics and the install's default of it) and what a user is
// told has no effect.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { MetricsOverride, Telemetry, TelemetryMetrics, TelemetrySpec } from '../../src/api/types.js';
import { parseMeshConfig, MeshConfigError } from '../../src/model/mesh-config.js';
import { applicableTelemetries, telemetryWarnings } from '../../src/model/telemetry.js';
import { mergeMetrics, recordedMetrics, type ProviderMetrics } from '../../src/model/telemetry-metrics.js';
import { readTelemetryProviders } from '../../src/model/telemetry-providers.js';

const ROOT = 'mesh-system';
const PROM = ['prometheus'];

function telemetry(namespace: string, name: string, spec: TelemetrySpec): Telemetry {
  return { apiVersion: 'telemetry.mesh.io/v1', kind: 'Telemetry', metadata: { namespace, name }, spec } as Telemetry;
}

const ALL_ON = { disabled: false, overrides: [] };
const ALL_OFF = { disabled: true, overrides: [] };

const DISABLE_ALL: TelemetryMetrics = { providers: [{ name: 'prometheus' }], overrides: [{ match: { metric: 'ALL_METRICS' }, disabled: true }] };
const REQUEST_COUNT_TAGS: MetricsOverride = { match: { metric: 'REQUEST_COUNT' }, tagOverrides: { remove: { operation: 'REMOVE' }, add: { operation: 'UPSERT', value: 'bar' } } };
const TAGS_ALL: MetricsOverride = { tagOverrides: { remove: { operation: 'REMOVE' }, add: { operation: 'UPSERT', value: 'bar' } } };

/** The standard metrics in the order the Go mesh lists ALL_METRICS: by enum name. */
const ALL_NAMES = ['GRPC_REQUEST_MESSAGES', 'GRPC_RESPONSE_MESSAGES', 'REQUEST_COUNT', 'REQUEST_DURATION', 'REQUEST_SIZE', 'RESPONSE_SIZE', 'TCP_CLOSED_CONNECTIONS', 'TCP_OPENED_CONNECTIONS', 'TCP_RECEIVED_BYTES', 'TCP_SENT_BYTES'];
const REQUEST_COUNT_MERGED = { name: 'REQUEST_COUNT', disabled: false, tags: [{ name: 'add', remove: false, value: 'bar' }, { name: 'remove', remove: true }] };

const one = (merged: ProviderMetrics[]): ProviderMetrics => {
  assert.equal(merged.length, 1, JSON.stringify(merged));
  return merged[0]!;
};

test('no metrics entries: the default providers record everything, unchanged; no defaults, nothing', () => {
  assert.deepEqual(mergeMetrics([], PROM), [{ provider: 'prometheus', client: ALL_ON, server: ALL_ON }]);
  assert.deepEqual(mergeMetrics([], []), []);
  assert.deepEqual(mergeMetrics([{ providers: [{ name: 'prometheus' }] }], []), [{ provider: 'prometheus', client: ALL_ON, server: ALL_ON }], 'a Telemetry naming prometheus turns it on without defaults');
});

test('disable all: ALL_METRICS or no match with disabled turns both sides off; a mode only that side', () => {
  assert.deepEqual(one(mergeMetrics([DISABLE_ALL], PROM)), { provider: 'prometheus', client: ALL_OFF, server: ALL_OFF });
  assert.deepEqual(one(mergeMetrics([{ providers: [{ name: 'prometheus' }], overrides: [{ disabled: true }] }], PROM)), { provider: 'prometheus', client: ALL_OFF, server: ALL_OFF }, 'implicit: no match is every metric');
  const clientOff = one(mergeMetrics([{ overrides: [{ match: { mode: 'CLIENT' }, disabled: true }] }], PROM));
  assert.deepEqual([clientOff.client, clientOff.server], [ALL_OFF, ALL_ON]);
  const serverOff = one(mergeMetrics([{ overrides: [{ match: { metric: 'ALL_METRICS', mode: 'SERVER' }, disabled: true }] }], PROM));
  assert.deepEqual([serverOff.client, serverOff.server], [ALL_ON, ALL_OFF]);
});

test('root disables all, then a namespace: naming the provider alone keeps it off, an override turns it back on', () => {
  assert.deepEqual(one(mergeMetrics([DISABLE_ALL, { providers: [{ name: 'prometheus' }] }], PROM)).client, ALL_OFF, 'disabled-then-empty');
  const reenabled = one(mergeMetrics([DISABLE_ALL, { providers: [{ name: 'prometheus' }], overrides: [{ match: { metric: 'ALL_METRICS' } }] }], PROM));
  assert.deepEqual(reenabled.client, { disabled: false, overrides: ALL_NAMES.map((name) => ({ name, disabled: false, tags: [] })) }, 'disabled-then-reenable');
  assert.deepEqual(reenabled.server, reenabled.client);
  const overridden = one(mergeMetrics([DISABLE_ALL, { providers: [{ name: 'prometheus' }], overrides: [REQUEST_COUNT_TAGS] }], PROM));
  assert.deepEqual(overridden.client, { disabled: false, overrides: [REQUEST_COUNT_MERGED] }, 'disabled-then-overrides');
});

test('tagOverrides merge per metric, later overrides winning tag by tag, in either order', () => {
  const first = one(mergeMetrics([{ overrides: [TAGS_ALL, { match: { metric: 'REQUEST_COUNT' }, tagOverrides: { add: { value: 'add-override' } } }] }], PROM));
  const byName = (m: ProviderMetrics, n: string) => m.client.overrides.find((o) => o.name === n);
  assert.deepEqual(first.client.overrides.map((o) => o.name), ALL_NAMES);
  assert.deepEqual(byName(first, 'REQUEST_COUNT')?.tags, [{ name: 'add', remove: false, value: 'add-override' }, { name: 'remove', remove: true }]);
  assert.deepEqual(byName(first, 'REQUEST_DURATION')?.tags, [{ name: 'add', remove: false, value: 'bar' }, { name: 'remove', remove: true }]);
  const secondary = one(mergeMetrics([{ overrides: [{ match: { metric: 'REQUEST_COUNT' }, tagOverrides: { add: { value: 'add-override' } } }, TAGS_ALL] }], PROM));
  assert.deepEqual(byName(secondary, 'REQUEST_COUNT')?.tags, [{ name: 'add', remove: false, value: 'bar' }, { name: 'remove', remove: true }], 'the later all-metrics override wins');
  const ns = one(mergeMetrics([{ providers: [{ name: 'prometheus' }] }, { overrides: [REQUEST_COUNT_TAGS] }], []));
  assert.deepEqual(ns.client.overrides, [REQUEST_COUNT_MERGED], 'a namespace entry without providers takes the root entry\'s');
});

test('an override per mode and disabled per metric; custom metrics keep their names', () => {
  const m = one(mergeMetrics([{ overrides: [{ match: { metric: 'REQUEST_SIZE', mode: 'SERVER' }, disabled: true }, { match: { customMetric: 'my_metric', mode: 'CLIENT' }, tagOverrides: { team: { value: "'a'" } } }] }], PROM));
  assert.deepEqual(m.server.overrides, [{ name: 'REQUEST_SIZE', disabled: true, tags: [] }]);
  assert.deepEqual(m.client.overrides, [{ name: 'my_metric', disabled: false, tags: [{ name: 'team', remove: false, value: "'a'" }] }]);
  const later = one(mergeMetrics([{ overrides: [{ match: { metric: 'REQUEST_SIZE' }, disabled: true }] }, { overrides: [{ match: { metric: 'REQUEST_SIZE' }, tagOverrides: { x: { value: 'request.host' } } }] }], PROM));
  assert.deepEqual(later.client.overrides, [{ name: 'REQUEST_SIZE', disabled: true, tags: [{ name: 'x', remove: false, value: 'request.host' }] }], 'an override that leaves disabled unset keeps the earlier value');
});

test('providers override the parent: the last entry naming providers decides, earlier providers are ignored', () => {
  const merged = mergeMetrics([{ providers: [{ name: 'prometheus' }], overrides: [REQUEST_COUNT_TAGS] }, { providers: [{ name: 'other' }] }], PROM);
  assert.deepEqual(merged, [{ provider: 'other', client: ALL_ON, server: ALL_ON }]);
  const outOfScope = mergeMetrics([{ providers: [{ name: 'a' }], overrides: [{ disabled: true }] }, { providers: [{ name: 'b' }, { name: 'a' }] }, { providers: [{ name: 'b' }] }], []);
  assert.deepEqual(outOfScope, [{ provider: 'b', client: ALL_ON, server: ALL_ON }], 'a, out of scope at the end, is not configured at all');
});

test('reportingInterval: the strongest entry that sets one', () => {
  assert.equal(one(mergeMetrics([{ providers: [{ name: 'prometheus' }], reportingInterval: '15s' }], [])).reportingInterval, '15s');
  assert.equal(one(mergeMetrics([{ reportingInterval: '15s' }, { reportingInterval: '10s' }, {}], PROM)).reportingInterval, '10s');
  assert.equal(one(mergeMetrics([{}], PROM)).reportingInterval, undefined);
});

test('the Telemetries of a proxy: root, namespace and selecting ones, weakest first', () => {
  const all = [telemetry(ROOT, 'mesh', { metrics: [DISABLE_ALL] }), telemetry('app', 'ns', { metrics: [{ overrides: [REQUEST_COUNT_TAGS] }] }), telemetry('app', 'web', { selector: { matchLabels: { app: 'web' } }, metrics: [{ overrides: [{ match: { mode: 'SERVER' }, disabled: true }] }] })];
  const providers = readTelemetryProviders({});
  const web = recordedMetrics(applicableTelemetries(all, { namespace: 'app', labels: { app: 'web' } }, ROOT), providers);
  assert.deepEqual([web[0]?.client, web[0]?.server], [{ disabled: false, overrides: [REQUEST_COUNT_MERGED] }, ALL_OFF]);
  const other = recordedMetrics(applicableTelemetries(all, { namespace: 'other', labels: {} }, ROOT), providers);
  assert.deepEqual(other[0]?.client, ALL_OFF, 'another namespace has the mesh-wide Telemetry only');
});

test('recordedMetrics: prometheus providers only (looked up case-insensitively), sorted by name', () => {
  const providers = parseMeshConfig('extensionProviders:\n- name: zz-prom\n  prometheus: {}\n- name: als\n  envoyHttpAls: { service: als.x.svc.cluster.local, port: 9000 }\n', 'm').telemetryProviders;
  const t = telemetry('app', 'ns', { metrics: [{ providers: [{ name: 'zz-prom' }, { name: 'Prometheus' }, { name: 'stackdriver' }, { name: 'als' }, { name: 'nope' }] }] });
  assert.deepEqual(recordedMetrics([t], providers).map((m) => m.provider), ['Prometheus', 'zz-prom']);
});

test('mesh config: the built-in prometheus, defaultProviders.metrics and its default when the document sets no defaultProviders', () => {
  const metrics = (text: string) => parseMeshConfig(text, 'm').telemetryProviders;
  assert.deepEqual(metrics('').defaultMetrics, ['prometheus'], 'as the Go install renders defaultProviders.metrics: [prometheus]');
  assert.deepEqual(metrics('defaultProviders: {}\n').defaultMetrics, ['prometheus'], 'an empty defaultProviders is none, as the install template tests it');
  assert.deepEqual(metrics('defaultProviders: { accessLogging: [envoy] }\n').defaultMetrics, [], 'any defaultProviders replaces the install\'s');
  assert.deepEqual(metrics('defaultProviders: { metrics: [] }\n').defaultMetrics, []);
  assert.equal(metrics('').providerKinds.get('prometheus'), 'prometheus');
  assert.equal(metrics('extensionProviders:\n- name: prometheus\n  stackdriver: {}\n').providerKinds.get('prometheus'), 'stackdriver', 'a provider of that name replaces the built-in one');
  assert.deepEqual(parseMeshConfig('extensionProviders:\n- name: prom\n  prometheus: {}\n', 'm').notEffective, [], 'a prometheus provider is effective');
  assert.deepEqual(parseMeshConfig('defaultProviders: { metrics: [nope, stackdriver, prometheus] }\n', 'm').notEffective, ['defaultProviders.metrics: "nope" (no extension provider has this name)', 'defaultProviders.metrics: "stackdriver" (stackdriver: only prometheus providers record metrics)']);
  assert.throws(() => parseMeshConfig('extensionProviders:\n- name: prom\n  prometheus: { port: 9090 }\n', 'mesh.yaml'), (e: Error) => e instanceof MeshConfigError && e.message === 'mesh.yaml: extensionProviders[0].prometheus.port: unknown field (a prometheus provider takes no settings)');
  assert.throws(() => parseMeshConfig('defaultProviders: { metrics: prometheus }\n', 'mesh.yaml'), /mesh\.yaml: defaultProviders\.metrics: expected a list of provider names/);
});

test('warnings when read: unknown and non-prometheus providers, entries without provider, tag values mesh-proxy cannot evaluate', () => {
  const t = telemetry('app', 'ns', {
    metrics: [
      { providers: [{ name: 'prometheus' }, { name: 'nope' }, { name: 'stackdriver' }] },
      { overrides: [{ tagOverrides: { ok: { value: "request.headers['x-user']" }, literal: { value: "'fixed'" }, gone: { operation: 'REMOVE' }, cel: { value: "request.host + ':' + string(destination.port)" } } }] },
    ],
  });
  const [unknown, kind, cel, ...rest] = telemetryWarnings(t, readTelemetryProviders({}));
  assert.equal(unknown, 'Telemetry/app/ns: spec.metrics[0].providers[1]: no extension provider named "nope" in the mesh config (no metrics are recorded for it)');
  assert.equal(kind, 'Telemetry/app/ns: spec.metrics[0].providers[2]: provider "stackdriver" (stackdriver) is not effective: only prometheus providers record metrics');
  // The parser's own words say what is wrong (envoy/attribute-expression.ts); the rest is ours.
  assert.match(cel ?? '', /^Telemetry\/app\/ns: spec\.metrics\[1\]\.overrides\[0\]\.tagOverrides\.cel\.value: mesh-proxy cannot evaluate "request\.host \+ ':' \+ string\(destination\.port\)" \(.+\): the tag is recorded as "unknown"$/);
  assert.deepEqual(rest, [], 'attributes, literals and removed tags are fine');
  const noDefault = telemetry('app', 'ns', { metrics: [{ overrides: [{ disabled: true }] }] });
  assert.deepEqual(telemetryWarnings(noDefault, readTelemetryProviders({})), [], 'the default provider takes it');
  assert.deepEqual(telemetryWarnings(noDefault, readTelemetryProviders({ defaultProviders: { accessLogging: ['envoy'] } })), ["Telemetry/app/ns: spec.metrics[0] names no provider and the mesh config's defaultProviders.metrics names none: it has no effect"]);
  const unrecorded = telemetry('app', 'ns', { metrics: [{ overrides: [{ match: { customMetric: 'my_metric' }, disabled: true }, { match: { metric: 'GRPC_REQUEST_MESSAGES' }, disabled: true }] }] });
  assert.deepEqual(telemetryWarnings(unrecorded, readTelemetryProviders({})), [
    'Telemetry/app/ns: spec.metrics[0].overrides[0].match.customMetric "my_metric" is not effective: mesh-proxy records the standard metrics only',
    'Telemetry/app/ns: spec.metrics[0].overrides[1].match.metric GRPC_REQUEST_MESSAGES is not effective: mesh-proxy does not count gRPC messages (istio_request_messages_total, istio_response_messages_total)',
  ]);
});
