// The access_log entries of an HCM, a tcp_proxy or a listener compiled once: each logger is
// found by the type URL of its typed_config (the file, stdout and stderr loggers), with its
// filter, its format and its sink. `undefined` when there are none, so that whoever holds the
// result does nothing per stream.
import type { DescMessage, MessageShape } from '@bufbuild/protobuf';
import type { AccessLog } from '../../gen/envoy/config/accesslog/v3/accesslog_pb.js';
import { FileAccessLogSchema, type FileAccessLog } from '../../gen/envoy/extensions/access_loggers/file/v3/file_pb.js';
import { StderrAccessLogSchema, StdoutAccessLogSchema, type StderrAccessLog, type StdoutAccessLog } from '../../gen/envoy/extensions/access_loggers/stream/v3/stream_pb.js';
import { ConfigError } from '../../envoy/config-error.js';
import { typeNameOf } from '../../envoy/types.js';
import { ExtensionRegistry, unpackConfig } from '../extensions.js';
import { compileLogFilter, type LogFilter } from './filters.js';
import { compileSubstitutionFormat, DEFAULT_FORMAT, jsonFormatter, textFormatter, type Formatter } from './formatter.js';
import { fileSink, stderrSink, stdoutSink, type LogSink } from './loggers.js';
import type { StreamInfo } from './record.js';

export interface AccessLogs {
  /** Writes the ended stream's line to every logger whose filter admits it. */
  log(info: StreamInfo): void;
}

interface Logger {
  readonly formatter: Formatter;
  readonly sink: LogSink;
}

interface LoggerFactory<Desc extends DescMessage = DescMessage> {
  readonly schema: Desc;
  build(config: MessageShape<Desc>, field: string): Logger;
}

const defaultFormatter = (field: string): Formatter => textFormatter(DEFAULT_FORMAT, field);

function fileLogger(c: FileAccessLog, field: string): Logger {
  const f = c.accessLogFormat;
  let formatter: Formatter;
  switch (f.case) {
    case 'format':
      formatter = f.value ? textFormatter(f.value, `${field}.format`) : defaultFormatter(field);
      break;
    case 'jsonFormat':
    case 'typedJsonFormat':
      formatter = jsonFormatter(f.value, `${field}.${f.case === 'jsonFormat' ? 'json_format' : 'typed_json_format'}`);
      break;
    case 'logFormat':
      formatter = compileSubstitutionFormat(f.value, `${field}.log_format`);
      break;
    default:
      formatter = defaultFormatter(field);
  }
  return { formatter, sink: fileSink(c.path, `${field}.path`) };
}

function streamLogger(c: StdoutAccessLog | StderrAccessLog, field: string, sink: LogSink): Logger {
  const f = c.accessLogFormat;
  return { formatter: f.case === 'logFormat' ? compileSubstitutionFormat(f.value, `${field}.log_format`) : defaultFormatter(field), sink };
}

const loggers = new ExtensionRegistry<LoggerFactory>();
const register = <Desc extends DescMessage>(f: LoggerFactory<Desc>): void => loggers.register(f as unknown as LoggerFactory);
register({ schema: FileAccessLogSchema, build: fileLogger });
register({ schema: StdoutAccessLogSchema, build: (c, field) => streamLogger(c, field, stdoutSink()) });
register({ schema: StderrAccessLogSchema, build: (c, field) => streamLogger(c, field, stderrSink()) });

function compileAccessLog(l: AccessLog, field: string): Logger & { readonly filter: LogFilter | undefined } {
  const c = l.configType;
  if (c.case !== 'typedConfig') throw new ConfigError(field, 'typed_config is required');
  const factory = loggers.of(c.value.typeUrl);
  if (!factory) throw new ConfigError(`${field}.typed_config`, `access logger type ${typeNameOf(c.value.typeUrl)} (${l.name}) is not supported; use the file, stdout or stderr logger`);
  const filter = l.filter ? compileLogFilter(l.filter, `${field}.filter`) : undefined;
  return { ...factory.build(unpackConfig(c.value, factory.schema, `${field}.typed_config`), `${field}.typed_config`), filter };
}

export function compileAccessLogs(logs: readonly AccessLog[], field = 'access_log'): AccessLogs | undefined {
  if (logs.length === 0) return undefined;
  const compiled = logs.map((l, i) => compileAccessLog(l, `${field}[${i}]`));
  return {
    log(info) {
      for (const c of compiled) if (!c.filter || c.filter(info)) c.sink.write(c.formatter.format(info));
    },
  };
}

/**
 * The access logs and the filters that are access log handlers too, as one: a stream gets its
 * record where either needs it, and every one is told once it ended.
 */
export function withStreamHandlers(logs: AccessLogs | undefined, handlers: readonly ((info: StreamInfo) => void)[]): AccessLogs | undefined {
  if (handlers.length === 0) return logs;
  return {
    log(info) {
      for (const h of handlers) h(info);
      logs?.log(info);
    },
  };
}
