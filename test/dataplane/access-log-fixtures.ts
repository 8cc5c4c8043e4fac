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

/** The Go mesh's default formats (accessLogEncoding TEXT and JSON), as the discovery server sends them (pinned in test/networking/access-log.test.ts). */
export { DEFAULT_TEXT_FORMAT as MESH_TEXT_FORMAT, DEFAULT_JSON_FORMAT as MESH_JSON_FORMAT } from '../../src/networking/access-log.js';

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
