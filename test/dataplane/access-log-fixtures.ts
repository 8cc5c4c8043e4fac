// access_log entries as the discovery server writes them (the file and stdout loggers, text or
// JSON formats, filters), and reading what the proxy wrote to a log file.
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import type { JsonObject, MessageInitShape } from '@bufbuild/protobuf';
import type { AccessLogFilterSchema } from '../../src/gen/envoy/config/accesslog/v3/accesslog_pb.js';
import { FileAccessLogSchema } from '../../src/gen/envoy/extensions/access_loggers/file/v3/file_pb.js';
import { StdoutAccessLogSchema } from '../../src/gen/envoy/extensions/access_loggers/stream/v3/stream_pb.js';
import { pack } from '../../src/envoy/types.js';
import { eventually } from '../helpers/proc.js';
import type { AccessLogInit } from './xds-fixtures.js';

/** The Go mesh's default text format (meshConfig accessLogFile with no accessLogFormat). */
export const MESH_TEXT_FORMAT =
  '[%START_TIME%] "%REQ(:METHOD)% %REQ(X-ENVOY-ORIGINAL-PATH?:PATH)% %PROTOCOL%" %RESPONSE_CODE% %RESPONSE_FLAGS% %RESPONSE_CODE_DETAILS% %CONNECTION_TERMINATION_DETAILS% ' +
  '"%UPSTREAM_TRANSPORT_FAILURE_REASON%" %BYTES_RECEIVED% %BYTES_SENT% %DURATION% %RESP(X-ENVOY-UPSTREAM-SERVICE-TIME)% "%REQ(X-FORWARDED-FOR)%" "%REQ(USER-AGENT)%" "%REQ(X-REQUEST-ID)%" ' +
  '"%REQ(:AUTHORITY)%" "%UPSTREAM_HOST%" %UPSTREAM_CLUSTER_RAW% %UPSTREAM_LOCAL_ADDRESS% %DOWNSTREAM_LOCAL_ADDRESS% %DOWNSTREAM_REMOTE_ADDRESS% %REQUESTED_SERVER_NAME% %ROUTE_NAME%\n';

/** The Go mesh's default JSON format (accessLogEncoding JSON). */
export const MESH_JSON_FORMAT: JsonObject = {
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

type FilterInit = MessageInitShape<typeof AccessLogFilterSchema>;

export type LogFormat = { readonly text: string } | { readonly json: JsonObject } | undefined;

function logFormat(format: LogFormat) {
  if (!format) return {};
  const value = 'text' in format ? { format: { case: 'textFormatSource' as const, value: { specifier: { case: 'inlineString' as const, value: format.text } } } } : { format: { case: 'jsonFormat' as const, value: format.json } };
  return { accessLogFormat: { case: 'logFormat' as const, value } };
}

/** envoy.access_loggers.file to `path`, with this format (none: Envoy's default) and filter. */
export function fileLog(path: string, format?: LogFormat, filter?: FilterInit): AccessLogInit {
  return { name: 'envoy.access_loggers.file', configType: { case: 'typedConfig', value: pack(FileAccessLogSchema, { path, ...logFormat(format) }) }, ...(filter ? { filter } : {}) };
}

/** envoy.access_loggers.stdout, with this format. */
export function stdoutLog(format?: LogFormat): AccessLogInit {
  return { name: 'envoy.access_loggers.stdout', configType: { case: 'typedConfig', value: pack(StdoutAccessLogSchema, logFormat(format)) } };
}

/** The lines of a log file once it has at least `n` (waiting for the proxy's flush). */
export function logLines(path: string, n: number, timeoutMs = 10_000): Promise<string[]> {
  return eventually(() => {
    const lines = existsSync(path) ? readFileSync(path, 'utf8').split('\n').filter(Boolean) : [];
    assert.ok(lines.length >= n, `${path}: ${lines.length} of ${n} lines`);
    return lines;
  }, timeoutMs);
}
