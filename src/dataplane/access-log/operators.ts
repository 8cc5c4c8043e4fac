// The command operators of Envoy's format strings (%RESPONSE_CODE%, %REQ(X?Y):N%, ...), each
// compiled once into a function of the stream's record. A value is a string, a number (kept a
// number in typed JSON, as Envoy's) or undefined: empty, `-` in text and null in JSON.
import { hostname } from 'node:os';
import type { Socket } from 'node:net';
import { ConfigError } from '../../envoy/config-error.js';
import type { Command, CommandName, ExtensionCommandName } from '../../envoy/format-commands.js';
import { pathOnly } from '../../envoy/request.js';
import { responseFlagsString } from '../../envoy/response-flags.js';
import { addressString, type StreamInfo } from './record.js';
import { grpcStatus, headerBytes, localCertificate, requestHeader, requestHeaderBytes, responseHeader, tlsSocket, uriSans } from './stream-facts.js';
import { compileStartTime } from './start-time.js';

export type LogValue = string | number | undefined;
export type Operator = (info: StreamInfo) => LogValue;

/** How a command is compiled: its argument and maximum length (checked by format-commands.ts) in, the operator out. */
type OperatorSpec = (arg: string, maxLength: number | undefined) => Operator;

/** A value, or undefined for an empty one (Envoy's unset optional). */
const orEmpty = (v: string | undefined): string | undefined => (v === '' ? undefined : v);

const truncate = (v: string | undefined, max: number | undefined): string | undefined => (v === undefined || max === undefined ? v : v.slice(0, max));

/** `main?alternative` of a header operator, lower-cased. */
function headerNames(arg: string): [string, string | undefined] {
  const names = arg.split('?');
  if (names.length > 2) throw new Error(`More than 1 alternative header specified in token: ${arg}`);
  if (names.some((n) => /[\0\r\n]/.test(n))) throw new Error('Invalid header configuration. Format string contains null or newline.');
  return [names[0]!.toLowerCase(), names[1]?.toLowerCase()];
}



/** REQ, RESP, TRAILER: a header (else its alternative), truncated to the maximum length. */
function header(read: (info: StreamInfo, name: string) => string | undefined): OperatorSpec {
  return (arg, max) => {
    const [main, alt] = headerNames(arg);
    return alt === undefined ? (info) => truncate(read(info, main), max) : (info) => truncate(read(info, main) ?? read(info, alt), max);
  };
}

const plain = (f: Operator): OperatorSpec => () => f;

const HOSTNAME = hostname();

/** Envoy's connection ids: one per downstream connection, given the first time a log names it. */
const connectionIds = new WeakMap<Socket, number>();
let nextConnectionId = 0;
function connectionId(socket: Socket | undefined): number | undefined {
  if (!socket) return undefined;
  let id = connectionIds.get(socket);
  if (id === undefined) connectionIds.set(socket, (id = nextConnectionId++));
  return id;
}

const GRPC_NAMES = ['OK', 'Canceled', 'Unknown', 'InvalidArgument', 'DeadlineExceeded', 'NotFound', 'AlreadyExists', 'PermissionDenied', 'ResourceExhausted', 'FailedPrecondition', 'Aborted', 'OutOfRange', 'Unimplemented', 'Internal', 'Unavailable', 'DataLoss', 'Unauthenticated'];

const GRPC_FORMATS: Readonly<Record<string, (s: number) => LogValue>> = {
  CAMEL_STRING: (s) => GRPC_NAMES[s] ?? String(s),
  SNAKE_STRING: (s) => (GRPC_NAMES[s] ?? String(s)).replace(/(?<=[a-z])([A-Z])/g, '_$1').toUpperCase(),
  NUMBER: (s) => s,
};

/** Every command's implementation (the signatures are format-commands.ts's: the key sets are the same by type). */
const OPERATORS: Readonly<Record<CommandName, OperatorSpec>> = {
  REQ: header(requestHeader),
  RESP: header((info, name) => responseHeader(info.responseHeaders, name)),
  TRAILER: header((info, name) => responseHeader(info.responseTrailers, name)),
  START_TIME: (arg) => {
    const format = compileStartTime(arg);
    return (info) => format(info.startEpochMs);
  },
  PROTOCOL: plain((i) => i.protocol),
  RESPONSE_CODE: plain((i) => i.responseCode),
  RESPONSE_FLAGS: plain((i) => responseFlagsString(i.responseFlags)),
  RESPONSE_CODE_DETAILS: plain((i) => i.responseCodeDetails),
  CONNECTION_TERMINATION_DETAILS: plain((i) => i.connectionTerminationDetails),
  UPSTREAM_TRANSPORT_FAILURE_REASON: plain((i) => i.upstreamTransportFailureReason),
  BYTES_RECEIVED: plain((i) => i.bytesReceived),
  BYTES_SENT: plain((i) => i.bytesSent),
  DURATION: plain((i) => i.durationMs),
  REQUEST_DURATION: plain((i) => i.requestDurationMs),
  RESPONSE_DURATION: plain((i) => i.responseDurationMs),
  RESPONSE_TX_DURATION: plain((i) => i.responseTxDurationMs),
  UPSTREAM_HOST: plain((i) => i.upstreamHost),
  UPSTREAM_CLUSTER: plain((i) => i.upstreamCluster),
  UPSTREAM_CLUSTER_RAW: plain((i) => i.upstreamCluster),
  UPSTREAM_LOCAL_ADDRESS: plain((i) => i.upstreamLocalAddress),
  UPSTREAM_REQUEST_ATTEMPT_COUNT: plain((i) => i.attemptCount),
  DOWNSTREAM_LOCAL_ADDRESS: plain((i) => addressString(i.downstream.local)),
  DOWNSTREAM_LOCAL_ADDRESS_WITHOUT_PORT: plain((i) => i.downstream.local.address),
  DOWNSTREAM_LOCAL_PORT: plain((i) => i.downstream.local.port),
  DOWNSTREAM_REMOTE_ADDRESS: plain((i) => addressString(i.downstream.remote)),
  DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT: plain((i) => i.downstream.remote.address),
  DOWNSTREAM_REMOTE_PORT: plain((i) => i.downstream.remote.port),
  DOWNSTREAM_DIRECT_REMOTE_ADDRESS: plain((i) => addressString(i.downstream.directRemote)),
  DOWNSTREAM_DIRECT_REMOTE_ADDRESS_WITHOUT_PORT: plain((i) => i.downstream.directRemote.address),
  REQUESTED_SERVER_NAME: plain((i) => orEmpty(i.downstream.requestedServerName)),
  ROUTE_NAME: plain((i) => orEmpty(i.routeName)),
  DOWNSTREAM_PEER_URI_SAN: plain((i) => orEmpty(i.downstream.peer?.uriSans.join(','))),
  DOWNSTREAM_PEER_SUBJECT: plain((i) => orEmpty(i.downstream.peer?.subject)),
  DOWNSTREAM_LOCAL_URI_SAN: plain((i) => uriSans(localCertificate(i)?.subjectaltname)),
  DOWNSTREAM_TLS_VERSION: plain((i) => tlsSocket(i)?.getProtocol() ?? undefined),
  HOSTNAME: plain(() => HOSTNAME),
  CONNECTION_ID: plain((i) => connectionId(i.downstream.socket)),
  GRPC_STATUS: (arg) => {
    const format = GRPC_FORMATS[arg || 'CAMEL_STRING'];
    if (!format) throw new Error(`GRPC_STATUS: unknown format ${arg} (CAMEL_STRING, SNAKE_STRING or NUMBER)`);
    return (info) => {
      const s = grpcStatus(info);
      return s === undefined ? undefined : format(s);
    };
  },
  REQUEST_HEADERS_BYTES: plain(requestHeaderBytes),
  RESPONSE_HEADERS_BYTES: plain((i) => headerBytes(i.responseHeaders, i.responseCode === 0 ? 0 : ':status'.length + 3)),
  RESPONSE_TRAILERS_BYTES: plain((i) => headerBytes(i.responseTrailers, 0)),
};

/** Operators of formatter extensions, available only where `formatters` lists the extension. */
const EXTENSION_OPERATORS: Readonly<Record<ExtensionCommandName, OperatorSpec>> = {
  // envoy.formatter.req_without_query: REQ with the query string (and fragment) of a path cut off.
  REQ_WITHOUT_QUERY: header((info, name) => {
    const v = requestHeader(info, name);
    return v === undefined ? undefined : pathOnly(v);
  }),
};

/** The operator of a checked command (format-commands.ts); an argument its implementation refuses is a ConfigError at `field`. */
export function compileOperator(command: Command, field: string): Operator {
  const make = Object.hasOwn(OPERATORS, command.name) ? OPERATORS[command.name as CommandName] : EXTENSION_OPERATORS[command.name as ExtensionCommandName];
  try {
    return make(command.arg ?? '', command.maxLength);
  } catch (e) {
    throw new ConfigError(field, (e as Error).message);
  }
}
