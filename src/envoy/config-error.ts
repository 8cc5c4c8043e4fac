// The one error a config compiler throws: the xDS client turns it into a NACK whose error_detail
// is this message, and keeps serving the last good config.
import { isFieldSet, type DescMessage, type MessageShape } from '@bufbuild/protobuf';

/** A config the proxy cannot apply; `field` is the path of the offending field in the message. */
export class ConfigError extends Error {
  constructor(
    readonly field: string,
    detail: string,
  ) {
    super(`${field}: ${detail}`);
    this.name = 'ConfigError';
  }

  /** The detail after `field: `, as it was given. */
  get detail(): string {
    return this.message.slice(this.field.length + 2);
  }
}

/**
 * `e` with its field path prefixed by the resource it belongs to (a listener, a route
 * configuration), so the NACK names the whole path; any other error is returned as it is.
 */
export function withinResource(prefix: string, e: unknown): unknown {
  if (!(e instanceof ConfigError)) return e;
  return new ConfigError(`${prefix}.${e.field}`, e.detail);
}

/**
 * Fields of `msg` that are set although the proxy does not apply them yet; logged (never silently
 * dropped) by the compilers. Names are the .proto's, as the operator wrote them.
 */
export function unappliedFields<Desc extends DescMessage>(schema: Desc, msg: MessageShape<Desc>, localNames: readonly string[]): string[] {
  const out: string[] = [];
  for (const n of localNames) {
    const f = schema.field[n];
    if (f && isFieldSet(msg, f)) out.push(f.name);
  }
  return out;
}
