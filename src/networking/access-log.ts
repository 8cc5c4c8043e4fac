// Access logs from the mesh config (accessLogFile, accessLogEncoding, accessLogFormat), as the Go
// mesh's FileAccessLogFromMeshConfig builds them: one file logger for every connection manager
// and TCP proxy, and the same logger on the listeners that take connections no chain may match,
// filtered to those (response flag NR) unless disableEnvoyListenerLog. Pure: settings in, Envoy
// AccessLog messages out.
import { create, type JsonObject, type MessageInitShape } from '@bufbuild/protobuf';
import { AccessLogSchema, type AccessLog } from '../gen/envoy/config/accesslog/v3/accesslog_pb.js';
import { FileAccessLogSchema } from '../gen/envoy/extensions/access_loggers/file/v3/file_pb.js';
import { ReqWithoutQuerySchema } from '../gen/envoy/extensions/formatter/req_without_query/v3/req_without_query_pb.js';
import type { SubstitutionFormatStringSchema } from '../gen/envoy/config/core/v3/substitution_format_string_pb.js';
import { pack } from '../envoy/types.js';
import type { MeshAccessLog } from '../model/mesh-access-log.js';
import type { FileLogSettings } from '../model/telemetry-providers.js';

export const FILE_ACCESS_LOG_NAME = 'envoy.access_loggers.file';
const REQ_WITHOUT_QUERY_FORMATTER = 'envoy.formatter.req_without_query';

/** The loggers of each place a proxy logs: connection managers, TCP proxies, listeners (no matching chain). */
export interface AccessLogs {
  readonly http: readonly AccessLog[];
  readonly tcp: readonly AccessLog[];
  readonly listener: readonly AccessLog[];
}

/** The operators of the Go mesh's default text format, in its order (quoted where it quotes them). */
const DEFAULT_TEXT_FIELDS = [
  '[%START_TIME%]',
  '"%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% %PROTOCOL%"',
  '%RESPONSE_CODE%',
  '%RESPONSE_FLAGS%',
  '%RESPONSE_CODE_DETAILS%',
  '%CONNECTION_TERMINATION_DETAILS%',
  '"%UPSTREAM_TRANSPORT_FAILURE_REASON%"',
  '%BYTES_RECEIVED%',
  '%BYTES_SENT%',
  '%DURATION%',
  '%RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)%',
  '"%REQ(X-FORWARDED-FOR)%"',
  '"%REQ(USER-AGENT)%"',
  '"%REQ(X-REQUEST-ID)%"',
  '"%REQ(:AUTHORITY)%"',
  '"%UPSTREAM_HOST%"',
  '%UPSTREAM_CLUSTER_RAW%',
  '%UPSTREAM_LOCAL_ADDRESS%',
  '%DOWNSTREAM_LOCAL_ADDRESS%',
  '%DOWNSTREAM_REMOTE_ADDRESS%',
  '%REQUESTED_SERVER_NAME%',
  '%ROUTE_NAME%',
];

/** The Go mesh's default text format (accessLogEncoding TEXT without accessLogFormat). */
export const DEFAULT_TEXT_FORMAT = `${DEFAULT_TEXT_FIELDS.join(' ')}\n`;

/** The Go mesh's default JSON fields (accessLogEncoding JSON without accessLogFormat). */
export const DEFAULT_JSON_FORMAT: JsonObject = {
  start_time: '%START_TIME%',
  route_name: '%ROUTE_NAME%',
  method: '%REQ(:METHOD)%',
  path: '%REQ(X-ENVOY-ORIGINAL-PATH?:PATH)%',
  protocol: '%PROTOCOL%',
  response_code: '%RESPONSE_CODE%',
  response_flags: '%RESPONSE_FLAGS%',
  response_code_details: '%RESPONSE_CODE_DETAILS%',
  connection_termination_details: '%CONNECTION_TERMINATION_DETAILS%',
  bytes_received: '%BYTES_RECEIVED%',
  bytes_sent: '%BYTES_SENT%',
  duration: '%DURATION%',
  upstream_service_time: '%RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)%',
  x_forwarded_for: '%REQ(X-FORWARDED-FOR)%',
  user_agent: '%REQ(USER-AGENT)%',
  request_id: '%REQ(X-REQUEST-ID)%',
  authority: '%REQ(:AUTHORITY)%',
  upstream_host: '%UPSTREAM_HOST%',
  upstream_cluster: '%UPSTREAM_CLUSTER_RAW%',
  upstream_local_address: '%UPSTREAM_LOCAL_ADDRESS%',
  downstream_local_address: '%DOWNSTREAM_LOCAL_ADDRESS%',
  downstream_remote_address: '%DOWNSTREAM_REMOTE_ADDRESS%',
  requested_server_name: '%REQUESTED_SERVER_NAME%',
  upstream_transport_failure_reason: '%UPSTREAM_TRANSPORT_FAILURE_REASON%',
};

type LogFormat = MessageInitShape<typeof SubstitutionFormatStringSchema>;

/** REQ_WITHOUT_QUERY is an extension operator in Envoy: the format names its formatter, as the Go mesh adds it. */
function formatters(text: string): Pick<LogFormat, 'formatters'> {
  return text.includes('%REQ_WITHOUT_QUERY(') ? { formatters: [{ name: REQ_WITHOUT_QUERY_FORMATTER, typedConfig: pack(ReqWithoutQuerySchema, {}) }] } : {};
}

function logFormat(s: FileLogSettings): LogFormat {
  if (s.encoding === 'JSON') {
    const json = s.json ?? DEFAULT_JSON_FORMAT;
    return { format: { case: 'jsonFormat', value: json }, jsonFormatOptions: { sortProperties: false }, ...formatters(JSON.stringify(json)) };
  }
  const text = s.text ?? DEFAULT_TEXT_FORMAT;
  return { format: { case: 'textFormatSource', value: { specifier: { case: 'inlineString', value: text } } }, ...formatters(text) };
}

/** One file logger; `noChain`: only the connections no filter chain takes (a listener's log). */
function fileAccessLog(s: FileLogSettings, noChain = false): AccessLog {
  const typedConfig = pack(FileAccessLogSchema, { path: s.path, accessLogFormat: { case: 'logFormat', value: logFormat(s) } });
  return create(AccessLogSchema, { name: FILE_ACCESS_LOG_NAME, configType: { case: 'typedConfig', value: typedConfig }, ...(noChain ? { filter: { filterSpecifier: { case: 'responseFlagFilter', value: { flags: ['NR'] } } } } : {}) });
}

/** The access logs of every proxy under these settings. */
export function meshAccessLogs(s: MeshAccessLog): AccessLogs {
  const file = fileAccessLog(s);
  return { http: [file], tcp: [file], listener: s.listenerLog ? [fileAccessLog(s, true)] : [] };
}

/**
 * The access logs of one side of a proxy under the Telemetry API (model/telemetry.ts): `files`
 * undefined means no Telemetry configures it, and the mesh config's logs apply (as the Go mesh's
 * setHTTPAccessLog falls back); otherwise one logger per provider, on listeners NR-filtered
 * unless disableEnvoyListenerLog (the Go mesh's setListenerAccessLog).
 */
export function sideAccessLogs(files: readonly { readonly file: FileLogSettings }[] | undefined, mesh: MeshAccessLog | undefined, listenerLog: boolean): AccessLogs | undefined {
  if (!files) return mesh ? meshAccessLogs(mesh) : undefined;
  const logs = files.map((f) => fileAccessLog(f.file));
  return { http: logs, tcp: logs, listener: listenerLog ? files.map((f) => fileAccessLog(f.file, true)) : [] };
}

/** The access_log field of a connection manager or TCP proxy (`place`) under `logs`; none: nothing set. */
export function accessLogField(logs: AccessLogs | undefined, place: keyof AccessLogs): { accessLog?: AccessLog[] } {
  const list = logs?.[place];
  return list?.length ? { accessLog: [...list] } : {};
}
