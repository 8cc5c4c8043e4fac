// The syntax of Envoy's format strings (SubstitutionFormatString): literal text, `%%`, and command
// operators `%NAME%`, `%NAME(arg)%`, `%NAME(arg):N%`, each with Envoy's rule for its argument and
// length. Shared by mesh-proxy, which compiles each command into a function of the stream
// (dataplane/access-log/operators.ts), and the discovery server, which checks the mesh config's
// accessLogFormat before any proxy sees it. Errors are Envoy's words.

export class FormatError extends Error {}

export interface CommandSignature {
  /** Whether the command takes a `(...)` argument. */
  readonly params: 'none' | 'optional' | 'required';
  /** Whether it takes a `:N` maximum length. */
  readonly length?: boolean;
}

const PLAIN: CommandSignature = { params: 'none' };
const HEADER: CommandSignature = { params: 'required', length: true };

/** The commands every format may use. */
export const COMMANDS = {
  REQ: HEADER,
  RESP: HEADER,
  TRAILER: HEADER,
  START_TIME: { params: 'optional' },
  PROTOCOL: PLAIN,
  RESPONSE_CODE: PLAIN,
  RESPONSE_FLAGS: PLAIN,
  RESPONSE_CODE_DETAILS: PLAIN,
  CONNECTION_TERMINATION_DETAILS: PLAIN,
  UPSTREAM_TRANSPORT_FAILURE_REASON: PLAIN,
  BYTES_RECEIVED: PLAIN,
  BYTES_SENT: PLAIN,
  DURATION: PLAIN,
  REQUEST_DURATION: PLAIN,
  RESPONSE_DURATION: PLAIN,
  RESPONSE_TX_DURATION: PLAIN,
  UPSTREAM_HOST: PLAIN,
  UPSTREAM_CLUSTER: PLAIN,
  UPSTREAM_CLUSTER_RAW: PLAIN,
  UPSTREAM_LOCAL_ADDRESS: PLAIN,
  UPSTREAM_REQUEST_ATTEMPT_COUNT: PLAIN,
  DOWNSTREAM_LOCAL_ADDRESS: PLAIN,
  DOWNSTREAM_LOCAL_ADDRESS_WITHOUT_PORT: PLAIN,
  DOWNSTREAM_LOCAL_PORT: PLAIN,
  DOWNSTREAM_REMOTE_ADDRESS: PLAIN,
  DOWNSTREAM_REMOTE_ADDRESS_WITHOUT_PORT: PLAIN,
  DOWNSTREAM_REMOTE_PORT: PLAIN,
  DOWNSTREAM_DIRECT_REMOTE_ADDRESS: PLAIN,
  DOWNSTREAM_DIRECT_REMOTE_ADDRESS_WITHOUT_PORT: PLAIN,
  REQUESTED_SERVER_NAME: PLAIN,
  ROUTE_NAME: PLAIN,
  DOWNSTREAM_PEER_URI_SAN: PLAIN,
  DOWNSTREAM_PEER_SUBJECT: PLAIN,
  DOWNSTREAM_LOCAL_URI_SAN: PLAIN,
  DOWNSTREAM_TLS_VERSION: PLAIN,
  HOSTNAME: PLAIN,
  CONNECTION_ID: PLAIN,
  GRPC_STATUS: { params: 'optional' },
  REQUEST_HEADERS_BYTES: PLAIN,
  RESPONSE_HEADERS_BYTES: PLAIN,
  RESPONSE_TRAILERS_BYTES: PLAIN,
} as const satisfies Record<string, CommandSignature>;

/** Commands of formatter extensions: only where the format's `formatters` lists the extension. */
export const EXTENSION_COMMANDS = {
  // envoy.formatter.req_without_query
  REQ_WITHOUT_QUERY: HEADER,
} as const satisfies Record<string, CommandSignature>;

export type CommandName = keyof typeof COMMANDS;
export type ExtensionCommandName = keyof typeof EXTENSION_COMMANDS;

export interface Command {
  readonly name: CommandName | ExtensionCommandName;
  readonly arg: string | undefined;
  readonly maxLength: number | undefined;
}

const COMMAND = /%([A-Z0-9_]+)(?:\(([^)]*)\))?(?::([0-9]+))?%/y;

function signatureOf(name: string, extensions: ReadonlySet<string>): CommandSignature | undefined {
  if (Object.hasOwn(COMMANDS, name)) return COMMANDS[name as CommandName];
  return extensions.has(name) && Object.hasOwn(EXTENSION_COMMANDS, name) ? EXTENSION_COMMANDS[name as ExtensionCommandName] : undefined;
}

/** A command as Envoy checks it: known (extension commands only in `extensions`), with the argument and length it allows. */
function checked(name: string, arg: string | undefined, maxLength: number | undefined, extensions: ReadonlySet<string>): Command {
  const spec = signatureOf(name, extensions);
  if (!spec) throw new FormatError(`Not supported field in StreamInfo: ${name}`);
  if (spec.params === 'none' && (arg !== undefined || maxLength !== undefined)) throw new FormatError(`${name} does not take any parameters or length`);
  if (spec.params === 'required' && !arg) throw new FormatError(`${name} requires parameters`);
  if (!spec.length && maxLength !== undefined) throw new FormatError(`${name} does not allow length to be specified.`);
  return { name: name as Command['name'], arg, maxLength };
}

/** A format string as literal pieces and commands; `%%` is a literal `%`. */
export function parseFormatString(format: string, extensions: ReadonlySet<string> = new Set()): (string | Command)[] {
  const parts: (string | Command)[] = [];
  let literal = '';
  for (let pos = 0; pos < format.length; ) {
    const c = format[pos]!;
    if (c !== '%') {
      literal += c;
      pos++;
      continue;
    }
    if (format[pos + 1] === '%') {
      literal += '%';
      pos += 2;
      continue;
    }
    COMMAND.lastIndex = pos;
    const m = COMMAND.exec(format);
    if (!m) throw new FormatError(`Incorrect configuration: ${format}. Couldn't find valid command at position ${pos}`);
    if (literal) parts.push(literal);
    literal = '';
    parts.push(checked(m[1]!, m[2], m[3] === undefined ? undefined : Number(m[3]), extensions));
    pos += m[0].length;
  }
  if (literal) parts.push(literal);
  return parts;
}
