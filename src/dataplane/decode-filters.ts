// The request side of a connection manager's HTTP filters: each filter's decodeHeaders in order,
// and the encoder sides of the filters a request passed, which edit whatever response follows,
// the last filter's first (Envoy's encoder order). Synchronous while the filters answer
// synchronously (jwt_authn, rbac): a request waits for a later turn only from the first filter
// that answers with a promise (ext_authz, a fault delay). A request whose filters all continue
// without an encoder side allocates nothing here.
import type { FilterOutcome, HttpFilter, LocalReply, ResponseHeaderMap } from '../envoy/filter.js';
import type { StreamRequest } from '../envoy/request.js';
import type { CompiledRoute } from './route-table.js';

const NO_PER_ROUTE: readonly unknown[] = [];

type Reply = (r: LocalReply) => void;

/** The encoder sides of the filters a request passed, made at the first one. */
export class Encoders {
  private readonly list: ((h: ResponseHeaderMap) => void)[] = [];

  constructor(private readonly plainReply: Reply) {}

  add(encode: (h: ResponseHeaderMap) => void): void {
    this.list.push(encode);
  }

  /** Edits a response's headers, the last filter's encoder side first. */
  readonly encode = (h: ResponseHeaderMap): void => {
    for (let i = this.list.length - 1; i >= 0; i--) this.list[i]!(h);
  };

  /** A local reply, its headers edited by the encoder sides. */
  readonly reply = (r: LocalReply): void => {
    const headers = { ...r.headers };
    this.encode(headers);
    this.plainReply({ ...r, headers });
  };
}

/** What follows the filters once they all let the request through. */
export type AfterFilters<T> = (sreq: StreamRequest, route: CompiledRoute | undefined, reply: Reply, encoders: Encoders | undefined) => T | undefined;

/**
 * Runs `filters` from index `first` on (`encoders`: the encoder sides collected before it), then
 * `then`; undefined once a filter answered the request (through `reply`, its headers edited by
 * the encoder sides collected before that filter).
 */
export function decodeFrom<T>(
  filters: readonly HttpFilter[],
  first: number,
  sreq: StreamRequest,
  route: CompiledRoute | undefined,
  reply: Reply,
  encoders: Encoders | undefined,
  then: AfterFilters<T>,
): T | undefined | Promise<T | undefined> {
  for (let i = first; i < filters.length; i++) {
    const f = filters[i]!;
    const outcome = f.decodeHeaders(sreq, route?.perFilter.get(f.name) ?? NO_PER_ROUTE);
    if (outcome instanceof Promise) {
      return outcome.then((o) => {
        const next = passed(o, reply, encoders);
        return next === false ? undefined : decodeFrom(filters, i + 1, sreq, route, reply, next, then);
      });
    }
    const next = passed(outcome, reply, encoders);
    if (next === false) return undefined;
    encoders = next;
  }
  return then(sreq, route, reply, encoders);
}

/** After a filter's outcome: false once it answered, else the encoder sides so far, its own added. */
function passed(outcome: FilterOutcome, reply: Reply, encoders: Encoders | undefined): Encoders | undefined | false {
  if (outcome.kind === 'reply') {
    (encoders ? encoders.reply : reply)(outcome.reply);
    return false;
  }
  if (!outcome.encodeHeaders) return encoders;
  const e = encoders ?? new Encoders(reply);
  e.add(outcome.encodeHeaders);
  return e;
}
