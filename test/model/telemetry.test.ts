// The Telemetry API's access logging, as the Go mesh's Telemetries.AccessLogging and mergeLogs
// (pilot/pkg/model/telemetry.go) and its file providers (telemetry_logging.go): which Telemetries
// apply to a proxy, how their entries merge per side, the built-in "envoy" provider, the
// fallback to the mesh config's accessLogFile, and what a user is told is not effective.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { JsonValue } from '@bufbuild/protobuf';
import { AccessLogSchema } from '../../src/gen/envoy/config/accesslog/v3/accesslog_pb.js';
import { toEnvoyJson } from '../../src/envoy/types.js';
import type { Telemetry, TelemetrySpec } from '../../src/api/types.js';
import { parseMeshConfig, MeshConfigError } from '../../src/model/mesh-config.js';
import { applicableTelemetries, telemetryFileLoggers, telemetryWarnings, type LogSide } from '../../src/model/telemetry.js';
import type { FileAccessLogProvider } from '../../src/model/telemetry-providers.js';
import { DEFAULT_TEXT_FORMAT, sideAccessLogs, type AccessLogs } from '../../src/networking/access-log.js';

const ROOT = 'mesh-system';

function telemetry(namespace: string, name: string, spec: TelemetrySpec, creationTimestamp?: string): Telemetry {
  return { apiVersion: 'telemetry.mesh.io/v1', kind: 'Telemetry', metadata: { namespace, name, ...(creationTimestamp ? { creationTimestamp } : {}) }, spec } as Telemetry;
}

const PROVIDERS = `
extensionProviders:
- name: text-file
  envoyFileAccessLog: { path: /var/log/text.log, logFormat: { text: "%RESPONSE_CODE% %REQ(:PATH)%" } }
- name: json-file
  envoyFileAccessLog: { path: /var/log/json.log, logFormat: { labels: { code: "%RESPONSE_CODE%" } } }
- name: plain
  envoyFileAccessLog: { path: /var/log/plain.log }
- name: als
  envoyHttpAls: { service: als.mesh-system.svc.cluster.local, port: 9000 }
`;

const mesh = (extra = '') => parseMeshConfig(PROVIDERS + extra, 'mesh.yaml');

/** The paths a proxy in `ns` with `labels` logs to on `side`; undefined: the mesh config decides. */
function paths(all: Telemetry[], side: LogSide, extra = '', ns = 'app', labels: Record<string, string> = { app: 'web' }): string[] | undefined {
  const m = mesh(extra);
  return telemetryFileLoggers(applicableTelemetries(all, { namespace: ns, labels }, ROOT), m.telemetryProviders, side)?.map((p) => p.file.path);
}

test('scope: the root namespace is mesh-wide, a namespace overrides it, a selecting Telemetry overrides both', () => {
  const root = telemetry(ROOT, 'mesh', { accessLogging: [{ providers: [{ name: 'plain' }] }] });
  const ns = telemetry('app', 'ns', { accessLogging: [{ providers: [{ name: 'text-file' }] }] });
  const web = telemetry('app', 'web', { selector: { matchLabels: { app: 'web' } }, accessLogging: [{ providers: [{ name: 'json-file' }] }] });
  assert.deepEqual(paths([root], 'CLIENT'), ['/var/log/plain.log']);
  assert.deepEqual(paths([root, ns], 'CLIENT'), ['/var/log/text.log']);
  assert.deepEqual(paths([root, ns, web], 'SERVER'), ['/var/log/json.log']);
  assert.deepEqual(paths([root, ns, web], 'SERVER', '', 'app', { app: 'db' }), ['/var/log/text.log'], 'the selector does not match db');
  assert.deepEqual(paths([ns, web], 'CLIENT', '', 'other'), undefined, "another namespace's Telemetries do not apply");
  const rootSelecting = telemetry(ROOT, 'sel', { selector: { matchLabels: { app: 'web' } }, accessLogging: [{ providers: [{ name: 'json-file' }] }] });
  assert.deepEqual(paths([rootSelecting], 'CLIENT'), undefined, "a root namespace selector only selects the root namespace's workloads");
});

test('scope: of two selector-less Telemetries in a namespace the oldest applies', () => {
  const older = telemetry('app', 'b', { accessLogging: [{ providers: [{ name: 'plain' }] }] }, '2026-01-01T00:00:00Z');
  const newer = telemetry('app', 'a', { accessLogging: [{ providers: [{ name: 'text-file' }] }] }, '2026-02-01T00:00:00Z');
  assert.deepEqual(paths([newer, older], 'CLIENT'), ['/var/log/plain.log']);
});

test('match.mode: CLIENT entries log outbound (and gateways), SERVER inbound, absent both', () => {
  const t = telemetry('app', 'ns', { accessLogging: [{ providers: [{ name: 'plain' }], match: { mode: 'CLIENT' } }, { providers: [{ name: 'text-file' }], match: { mode: 'SERVER' } }] });
  assert.deepEqual(paths([t], 'CLIENT'), ['/var/log/plain.log']);
  assert.deepEqual(paths([t], 'SERVER'), ['/var/log/text.log']);
  const both = telemetry('app', 'ns', { accessLogging: [{ providers: [{ name: 'plain' }, { name: 'json-file' }] }] });
  assert.deepEqual(paths([both], 'SERVER'), ['/var/log/json.log', '/var/log/plain.log'], 'sorted by provider name');
});

test('disabled: a narrower Telemetry turns the mesh-wide providers off, for one side only', () => {
  const root = telemetry(ROOT, 'mesh', { accessLogging: [{ providers: [{ name: 'plain' }] }] });
  const off = telemetry('app', 'quiet', { selector: { matchLabels: { app: 'web' } }, accessLogging: [{ disabled: true, match: { mode: 'SERVER' } }] });
  assert.deepEqual(paths([root, off], 'SERVER'), [], 'an empty provider list inherits the parent entry: plain, disabled');
  assert.deepEqual(paths([root, off], 'CLIENT'), ['/var/log/plain.log']);
  assert.deepEqual(paths([root, off], 'SERVER', 'accessLogFile: /dev/stdout\n'), [], 'explicitly disabled: the mesh config file does not come back');
});

test('defaultProviders.accessLogging applies without any Telemetry, and to entries naming no provider', () => {
  assert.deepEqual(paths([], 'CLIENT', 'defaultProviders: { accessLogging: [plain] }\n'), ['/var/log/plain.log']);
  const t = telemetry('app', 'ns', { accessLogging: [{ match: { mode: 'CLIENT' } }] });
  assert.deepEqual(paths([t], 'CLIENT', 'defaultProviders: { accessLogging: [text-file] }\n'), ['/var/log/text.log']);
  assert.equal(paths([], 'CLIENT'), undefined, 'no Telemetry and no default: the mesh config decides');
});

function fileProvider(m: ReturnType<typeof mesh>, name: string): FileAccessLogProvider {
  const p = m.telemetryProviders.accessLoggers.get(name);
  assert.equal(p?.kind, 'envoyFileAccessLog');
  return p as FileAccessLogProvider;
}

const json = (logs: readonly AccessLogs[] | undefined): JsonValue => (logs ?? []).flatMap((l) => l.http.map((a) => toEnvoyJson(AccessLogSchema, a)));

test('mesh config interaction: accessLogFile applies where no Telemetry configures a side, never beside a Telemetry logger', () => {
  const m = mesh('accessLogFile: /dev/stderr\n');
  const only = telemetry('app', 'ns', { accessLogging: [{ providers: [{ name: 'plain' }], match: { mode: 'CLIENT' } }] });
  const ts = applicableTelemetries([only], { namespace: 'app', labels: {} }, ROOT);
  const side = (s: LogSide) => sideAccessLogs(telemetryFileLoggers(ts, m.telemetryProviders, s), m.accessLog, m.telemetryProviders.listenerLog);
  const pathOf = (s: LogSide) => (json([side(s)!]) as { typed_config: { path: string } }[]).map((l) => l.typed_config.path);
  assert.deepEqual(pathOf('CLIENT'), ['/var/log/plain.log']);
  assert.deepEqual(pathOf('SERVER'), ['/dev/stderr'], 'SERVER is not configured by the Telemetry: the mesh config logger');
  assert.deepEqual(side('CLIENT')!.listener.length, 1, 'listeners log no-chain connections with the Telemetry logger');
  const unknownOnly = telemetry('app', 'ns', { accessLogging: [{ providers: [{ name: 'nope' }] }] });
  assert.deepEqual(paths([unknownOnly], 'CLIENT'), undefined, 'an unknown provider configures nothing (reported when read)');
  assert.deepEqual(paths([telemetry('app', 'ns', { accessLogging: [{ providers: [{ name: 'als' }] }] })], 'CLIENT', 'accessLogFile: /dev/stdout\n'), [], 'an ALS provider replaces the mesh file, as in the Go mesh, but writes nothing here');
});

test('providers: formats of text, labels, none; the built-in "envoy" writes /dev/stdout in the mesh config format', () => {
  const m = mesh('accessLogEncoding: JSON\n');
  const fmt = (name: string) => (json([sideAccessLogs([fileProvider(m, name)], undefined, false)!]) as { typed_config: { path: string; log_format: JsonValue } }[])[0]!.typed_config;
  assert.deepEqual(fmt('text-file').log_format, { text_format_source: { inline_string: '%RESPONSE_CODE% %REQ(:PATH)%\n' } });
  assert.deepEqual(fmt('json-file').log_format, { json_format: { code: '%RESPONSE_CODE%' }, json_format_options: {} });
  assert.deepEqual(fmt('plain').log_format, { text_format_source: { inline_string: DEFAULT_TEXT_FORMAT } }, 'no logFormat: the default text format, whatever accessLogEncoding says');
  const envoy = fmt('envoy');
  assert.equal(envoy.path, '/dev/stdout');
  assert.ok(Object.hasOwn(envoy.log_format as object, 'json_format'), 'the built-in provider takes accessLogEncoding JSON');
  const own = parseMeshConfig('extensionProviders:\n- name: envoy\n  envoyFileAccessLog: { path: /tmp/envoy.log }\n', 'm').telemetryProviders.accessLoggers.get('envoy');
  assert.equal(own?.kind === 'envoyFileAccessLog' && own.file.path, '/tmp/envoy.log', 'a provider named envoy replaces the built-in one');
});

test('bad provider bodies stop the mesh config with the field named', () => {
  assert.throws(() => parseMeshConfig('extensionProviders:\n- name: f\n  envoyFileAccessLog: { paht: /x }\n', 'mesh.yaml'), (e: Error) => e instanceof MeshConfigError && /mesh\.yaml: extensionProviders\[0\]\.envoyFileAccessLog\.paht: unknown field/.test(e.message));
  assert.throws(() => parseMeshConfig('extensionProviders:\n- name: f\n  envoyFileAccessLog: { logFormat: { text: "%NOPE%" } }\n', 'mesh.yaml'), /extensionProviders\[0\]\.envoyFileAccessLog\.logFormat\.text: /);
  assert.deepEqual(mesh().notEffective, ['extensionProviders: als (envoyHttpAls)']);
  assert.deepEqual(parseMeshConfig('defaultProviders: { metrics: [prometheus], tracing: [zipkin] }\n', 'm').notEffective, ['defaultProviders.tracing'], 'metrics are effective, tracing is not');
});

test('warnings when read: filters, unknown and non-file providers, tracing, targetRefs', () => {
  const t = telemetry('app', 'ns', {
    accessLogging: [{ providers: [{ name: 'nope' }, { name: 'als' }, { name: 'plain' }], filter: { expression: 'response.code >= 400' } }],
    metrics: [{ providers: [{ name: 'prometheus' }] }],
    tracing: [{ randomSamplingPercentage: 10 }],
    targetRefs: [{ kind: 'Gateway', name: 'gw' }],
  });
  const w = telemetryWarnings(t, mesh().telemetryProviders);
  assert.equal(w.length, 5, w.join('\n'));
  for (const part of ['targetRefs is not effective', 'spec.tracing is not effective', 'spec.accessLogging[0].filter.expression is not effective', 'providers[0]: no access log provider named "nope"', 'providers[1]: provider "als" (envoyHttpAls) is not effective']) {
    assert.ok(w.some((l) => l.startsWith('Telemetry/app/ns: ') && l.includes(part)), part);
  }
  assert.deepEqual(paths([t], 'CLIENT'), undefined, 'a Telemetry with targetRefs applies to no sidecar');
  const filtered = telemetry('app', 'ns', { accessLogging: [{ providers: [{ name: 'plain' }], filter: { expression: 'response.code >= 400' } }] });
  assert.deepEqual(paths([filtered], 'CLIENT'), ['/var/log/plain.log'], 'the filter is dropped, the logger kept');
});

test('warnings when read: an entry naming no provider, without defaultProviders, has no effect (the Go mesh analyzer InvalidTelemetryProvider)', () => {
  const t = telemetry('app', 'ns', { accessLogging: [{ match: { mode: 'SERVER' } }, { disabled: true }] });
  assert.deepEqual(telemetryWarnings(t, mesh().telemetryProviders), ['Telemetry/app/ns: spec.accessLogging[0] names no provider and the mesh config has no defaultProviders.accessLogging: it has no effect']);
  assert.deepEqual(telemetryWarnings(t, mesh('defaultProviders: { accessLogging: [plain] }\n').telemetryProviders), [], 'with default providers it turns them on');
  assert.deepEqual(paths([t], 'SERVER'), undefined, 'and indeed the mesh config decides');
});
