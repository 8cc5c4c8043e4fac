// Mesh config access logs (accessLogFile, accessLogEncoding, accessLogFormat, disableEnvoyListenerLog)
// as the Go mesh builds them: the file logger's config for each encoding, pinned against the Go
// mesh's default formats; then where a sidecar's and a gateway's listeners carry it (every
// connection manager and TCP proxy, and the listeners taking connections no chain may match, for NR).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { JsonValue } from '@bufbuild/protobuf';
import { AccessLogSchema, type AccessLog } from '../../src/gen/envoy/config/accesslog/v3/accesslog_pb.js';
import type { Listener } from '../../src/gen/envoy/config/listener/v3/listener_pb.js';
import { HttpConnectionManagerSchema } from '../../src/gen/envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager_pb.js';
import { TcpProxySchema } from '../../src/gen/envoy/extensions/filters/network/tcp_proxy/v3/tcp_proxy_pb.js';
import { toEnvoyJson, unpack } from '../../src/envoy/types.js';
import { HCM_FILTER_NAME, TCP_PROXY_FILTER_NAME } from '../../src/envoy/names.js';
import { setScopeLevel } from '../../src/common/log.js';
import { parseMeshConfig } from '../../src/model/mesh-config.js';
import type { MeshAccessLog } from '../../src/model/mesh-access-log.js';
import { parseProxy } from '../../src/model/proxy.js';
import { meshAccessLogs } from '../../src/networking/access-log.js';
import { readTelemetryProviders } from '../../src/model/telemetry-providers.js';
import type { AccessLogging } from '../../src/xds/generators/access-logs.js';
import { sidecarListeners } from '../../src/xds/generators/sidecar.js';
import { gatewayListeners } from '../../src/xds/generators/gateway.js';
import { goldenCases } from '../helpers/golden.js';
import { MESH, pushOf, sidecarProxy, validated } from './fixtures.js';

setScopeLevel('model', 'error');

// The Go mesh's default text format, written out here so that a change to ours shows.
const GO_DEFAULT_TEXT =
  '[%START_TIME%] "%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% %PROTOCOL%" %RESPONSE_CODE% %RESPONSE_FLAGS% %RESPONSE_CODE_DETAILS% %CONNECTION_TERMINATION_DETAILS% ' +
  '"%UPSTREAM_TRANSPORT_FAILURE_REASON%" %BYTES_RECEIVED% %BYTES_SENT% %DURATION% %RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)% "%REQ(X-FORWARDED-FOR)%" "%REQ(USER-AGENT)%" ' +
  '"%REQ(X-REQUEST-ID)%" "%REQ(:AUTHORITY)%" "%UPSTREAM_HOST%" %UPSTREAM_CLUSTER_RAW% %UPSTREAM_LOCAL_ADDRESS% %DOWNSTREAM_LOCAL_ADDRESS% %DOWNSTREAM_REMOTE_ADDRESS% ' +
  '%REQUESTED_SERVER_NAME% %ROUTE_NAME%\n';

const FILE_LOG_TYPE = 'type.googleapis.com/envoy.extensions.access_loggers.file.v3.FileAccessLog';

function settings(yaml: string): MeshAccessLog {
  const mesh = parseMeshConfig(yaml, 'mesh.yaml');
  assert.deepEqual(mesh.notEffective, [], 'the access log fields are effective');
  return mesh.accessLog!;
}

const json = (logs: readonly AccessLog[]): JsonValue[] => logs.map((l) => toEnvoyJson(AccessLogSchema, l));

test('accessLogFile with the default TEXT encoding: a file logger with the Go mesh default format, inline', () => {
  const logs = meshAccessLogs(settings('accessLogFile: /dev/stdout\n'));
  const expected = { name: 'envoy.access_loggers.file', typed_config: { '@type': FILE_LOG_TYPE, path: '/dev/stdout', log_format: { text_format_source: { inline_string: GO_DEFAULT_TEXT } } } };
  assert.deepEqual(json(logs.http), [expected]);
  assert.deepEqual(json(logs.tcp), [expected]);
  assert.deepEqual(json(logs.listener), [{ ...expected, filter: { response_flag_filter: { flags: ['NR'] } } }], 'listeners log only the connections no chain took');
});

test('a TEXT accessLogFormat gets its newline; REQ_WITHOUT_QUERY brings its formatter, as the Go mesh adds it', () => {
  const [plain] = json(meshAccessLogs(settings('accessLogFile: /var/log/mesh.log\naccessLogFormat: "%RESPONSE_CODE% %REQ(:PATH)%"\n')).http) as [{ typed_config: JsonValue }];
  assert.deepEqual(plain.typed_config, { '@type': FILE_LOG_TYPE, path: '/var/log/mesh.log', log_format: { text_format_source: { inline_string: '%RESPONSE_CODE% %REQ(:PATH)%\n' } } });
  const [stripped] = json(meshAccessLogs(settings('accessLogFile: /dev/stdout\naccessLogFormat: "%REQ_WITHOUT_QUERY(:PATH)%\\n"\n')).http) as [{ typed_config: { log_format: JsonValue } }];
  assert.deepEqual(stripped.typed_config.log_format, {
    text_format_source: { inline_string: '%REQ_WITHOUT_QUERY(:PATH)%\n' },
    formatters: [{ name: 'envoy.formatter.req_without_query', typed_config: { '@type': 'type.googleapis.com/envoy.extensions.formatter.req_without_query.v3.ReqWithoutQuery' } }],
  });
});

test('JSON encoding: the Go mesh default fields, or the accessLogFormat object; properties not sorted', () => {
  const [dflt] = json(meshAccessLogs(settings('accessLogFile: /dev/stdout\naccessLogEncoding: JSON\n')).http) as [{ typed_config: { log_format: { json_format: Record<string, string>; json_format_options: JsonValue } } }];
  const fields = dflt.typed_config.log_format.json_format;
  assert.deepEqual(Object.keys(fields).sort(), [
    'authority', 'bytes_received', 'bytes_sent', 'connection_termination_details', 'downstream_local_address', 'downstream_remote_address', 'duration', 'method', 'path',
    'protocol', 'request_id', 'requested_server_name', 'response_code', 'response_code_details', 'response_flags', 'route_name', 'start_time', 'upstream_cluster', 'upstream_host',
    'upstream_local_address', 'upstream_service_time', 'upstream_transport_failure_reason', 'user_agent', 'x_forwarded_for',
  ]);
  assert.equal(fields['path'], '%REQ(X-ENVOY-ORIGINAL-PATH?:PATH)%');
  assert.equal(fields['upstream_cluster'], '%UPSTREAM_CLUSTER_RAW%');
  assert.equal(fields['upstream_service_time'], '%RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)%');
  // An empty JsonFormatOptions (sort_properties false) prints as nothing.
  assert.deepEqual(dflt.typed_config.log_format.json_format_options, {});
  const custom = settings('accessLogFile: /dev/stdout\naccessLogEncoding: JSON\naccessLogFormat: \'{"code": "%RESPONSE_CODE%", "peer": {"ip": "%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%"}}\'\n');
  const [mine] = json(meshAccessLogs(custom).http) as [{ typed_config: { log_format: { json_format: JsonValue } } }];
  assert.deepEqual(mine.typed_config.log_format.json_format, { code: '%RESPONSE_CODE%', peer: { ip: '%DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT%' } });
});

test('no accessLogFile (or an empty one): no access logs; disableEnvoyListenerLog keeps the listeners quiet', () => {
  assert.equal(parseMeshConfig('accessLogEncoding: JSON\n', 'mesh.yaml').accessLog, undefined);
  assert.equal(parseMeshConfig('accessLogFile: ""\n', 'mesh.yaml').accessLog, undefined);
  const quiet = meshAccessLogs(settings('accessLogFile: /dev/stdout\ndisableEnvoyListenerLog: true\n'));
  assert.equal(quiet.http.length, 1);
  assert.deepEqual(quiet.listener, []);
});

test('bad access log fields refuse the mesh config, naming the field and what is expected', () => {
  const refused = (yaml: string, message: RegExp) => assert.throws(() => parseMeshConfig(yaml, 'mesh.yaml'), message);
  refused('accessLogFile: 7\n', /^Error: mesh\.yaml: accessLogFile: expected a file path such as \/dev\/stdout, got 7$/);
  refused('accessLogFile: /dev/stdout\naccessLogEncoding: XML\n', /^Error: mesh\.yaml: accessLogEncoding: "XML" is not one of TEXT, JSON$/);
  refused('accessLogFile: /dev/stdout\naccessLogFormat: [a]\n', /^Error: mesh\.yaml: accessLogFormat: expected a string/);
  refused('accessLogFile: /dev/stdout\naccessLogEncoding: JSON\naccessLogFormat: "{code: 1"\n', /^Error: mesh\.yaml: accessLogFormat: not valid JSON for accessLogEncoding JSON: /);
  refused('accessLogFile: /dev/stdout\naccessLogEncoding: JSON\naccessLogFormat: "[1, 2]"\n', /^Error: mesh\.yaml: accessLogFormat: expected a JSON object of log fields for accessLogEncoding JSON, got \[1, 2\]$/);
  // A command the proxies would refuse refuses the mesh config, in Envoy's words, rather than every listener of every proxy.
  refused('accessLogFile: /dev/stdout\naccessLogFormat: "%RESPONSE_CODE% %METADATA(ROUTE:istio)%"\n', /^Error: mesh\.yaml: accessLogFormat: Not supported field in StreamInfo: METADATA$/);
  refused('accessLogFile: /dev/stdout\naccessLogFormat: "%REQ%"\n', /^Error: mesh\.yaml: accessLogFormat: REQ requires parameters$/);
  refused('accessLogFile: /dev/stdout\naccessLogFormat: "100% sure"\n', /^Error: mesh\.yaml: accessLogFormat: Incorrect configuration: 100% sure\. Couldn't find valid command at position 3$/);
  refused('accessLogFile: /dev/stdout\naccessLogEncoding: JSON\naccessLogFormat: \'{"a": {"b": "%DURATION(x)%"}}\'\n', /^Error: mesh\.yaml: accessLogFormat: DURATION does not take any parameters or length$/);
  refused('accessLogFile: /dev/stdout\ndisableEnvoyListenerLog: "yes"\n', /^Error: mesh\.yaml: disableEnvoyListenerLog: expected true or false, got "yes"$/);
});

/** Every listener's own access logs, and those of each connection manager and TCP proxy in its chains, by listener. */
function placements(listeners: readonly Listener[]): Record<string, { listener: number; filters: string[] }> {
  return Object.fromEntries(
    listeners.map((l) => {
      const filters = l.filterChains.flatMap((c) =>
        c.filters.flatMap((f) => {
          if (f.configType.case !== 'typedConfig') return [];
          if (f.name === HCM_FILTER_NAME) return [`${c.name} hcm ${unpack(f.configType.value, HttpConnectionManagerSchema).accessLog.length}`];
          if (f.name === TCP_PROXY_FILTER_NAME) return [`${c.name} tcp ${unpack(f.configType.value, TcpProxySchema).accessLog.length}`];
          return [];
        }),
      );
      return [l.name, { listener: l.accessLog.length, filters }];
    }),
  );
}

const LOGS: AccessLogging = { mesh: settings('accessLogFile: /dev/stdout\n'), providers: readTelemetryProviders({}) };

test('a captured sidecar: every connection manager and TCP proxy logs, and virtualInbound and virtualOutbound log NR connections', () => {
  const push = pushOf(MESH);
  const proxy = sidecarProxy('10.0.0.1', 'echo-1', 'foo', { LABELS: { app: 'echo' } });
  const logged = placements(sidecarListeners(proxy, push, { accessLogging: LOGS }));
  assert.deepEqual(logged, {
    virtualOutbound: { listener: 1, filters: ['virtualOutbound-blackhole tcp 0', 'virtualOutbound-catchall-tcp tcp 1'] },
    virtualInbound: {
      listener: 1,
      filters: ['0.0.0.0_7070 hcm 1', '0.0.0.0_8080 hcm 1', 'virtualInbound-blackhole tcp 0', 'virtualInbound-ipv4-passthrough tcp 1', 'virtualInbound-ipv6-passthrough tcp 1'],
    },
    '0.0.0.0_443': { listener: 0, filters: ['0.0.0.0_443 tcp 1'] },
    '10.96.0.20_5432': { listener: 0, filters: ['10.96.0.20_5432 tcp 1'] },
    '0.0.0.0_80': { listener: 0, filters: ['0.0.0.0_80 hcm 1'] },
    '0.0.0.0_7070': { listener: 0, filters: ['0.0.0.0_7070 hcm 1'] },
  });
  // A push of its own: within one push the listeners are memoized without the (server-wide) logs in their key.
  const without = placements(sidecarListeners(proxy, pushOf(MESH)));
  assert.ok(Object.values(without).every((l) => l.listener === 0 && l.filters.every((f) => f.endsWith(' 0'))), 'without accessLogFile nothing logs');
});

test('a gateway: its connection managers, TCP proxies and listeners log as a sidecar does', () => {
  const cases = goldenCases('test/networking/testdata/gateway');
  const router = parseProxy('router~10.0.0.60~ingress-1.ingress~ingress.svc.cluster.local', { NAMESPACE: 'ingress', LABELS: { app: 'ingress' } });
  for (const name of ['http-hosts', 'tcp', 'auto-passthrough']) {
    const c = cases.find((g) => g.name === name)!;
    const logged = placements(gatewayListeners(router, pushOf(validated(c.name, c.documents)), { accessLogging: LOGS }));
    assert.ok(Object.keys(logged).length > 0, `${name}: the gateway has listeners`);
    for (const [listener, l] of Object.entries(logged)) {
      assert.equal(l.listener, 1, `${name} ${listener}: the listener logs NR connections`);
      assert.ok(l.filters.length > 0 && l.filters.every((f) => f.endsWith(' 1')), `${name} ${listener}: ${l.filters.join(', ')}`);
    }
  }
});
