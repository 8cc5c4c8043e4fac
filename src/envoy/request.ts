// The request as the HTTP filters see it: Envoy's header map (pseudo-headers included), the
// connection's addresses and peer identity, and the dynamic metadata filters write for each other.
// `RequestView` is read-only so that evaluators (RBAC, route matching) can also run outside the
// proxy, e.g. in a control-plane "explain" endpoint fed with `requestView()`.
import { lowerCase } from '../common/lower-case.js';
import { normalizeIp, type DynamicMetadata, type HeaderGetter } from './matchers.js';

export interface Address {
  readonly address: string;
  readonly port: number;
}

/** A connection's destination; `restored` when a use_original_dst listener read it from SO_ORIGINAL_DST. */
export interface Destination extends Address {
  readonly restored?: boolean;
}

/** The verified client certificate of an mTLS connection. */
export interface PeerIdentity {
  readonly uriSans: readonly string[];
  readonly dnsSans: readonly string[];
  readonly subject: string;
}

export interface RequestView {
  readonly method: string;
  /** :path as received, query included. */
  readonly path: string;
  readonly authority: string;
  readonly scheme: string;
  /** All values of a header joined with ','; pseudo-headers :method, :path, :authority, :scheme too. */
  readonly header: HeaderGetter;
  /** The downstream connection's peer (RBAC direct_remote_ip / source_ip). */
  readonly source: Address;
  /** The client address after x-forwarded-for processing (RBAC remote_ip). */
  readonly remote: Address;
  /** The connection's original destination when restored, else its local address. */
  readonly destination: Destination;
  /** SNI of a TLS connection, '' otherwise. */
  readonly requestedServerName: string;
  /** Present only on a TLS connection with a verified client certificate. */
  readonly peer?: PeerIdentity;
  readonly metadata: DynamicMetadata;
  /**
   * A connection, not a request (the network rbac filter): there are no headers or path, and the
   * HTTP-only matchers (header, url_path, uri_template) never match, as in Envoy's network filter.
   */
  readonly connectionOnly?: boolean;
}

/**
 * Where a request target's query or fragment begins (its first `?` or `#`), -1 if it has neither.
 * Two scans rather than a regular expression, whose search allocates on every request.
 */
export function queryStart(path: string): number {
  const q = path.indexOf('?');
  const h = path.indexOf('#');
  return q < 0 ? h : h < 0 ? q : Math.min(q, h);
}

/** The path without query string and fragment, which is what path matchers see. */
export function pathOnly(path: string): string {
  const end = queryStart(path);
  return end < 0 ? path : path.slice(0, end);
}

/**
 * A request's headers as a multimap with lower-case names. Filters may change them (jwt_authn
 * removes a forwarded token, adds claim headers); the router forwards what is left.
 */
export class RequestHeaders {
  private readonly map = new Map<string, string[]>();

  constructor(init?: Iterable<readonly [string, string | readonly string[] | undefined]>) {
    for (const [k, v] of init ?? []) {
      if (v === undefined) continue;
      for (const one of typeof v === 'string' ? [v] : v) this.add(k, one);
    }
  }

  values(name: string): readonly string[] {
    return this.map.get(lowerCase(name)) ?? [];
  }

  joined(name: string): string | undefined {
    const v = this.map.get(lowerCase(name));
    // join allocates even for one value, which is what most headers have.
    return v === undefined ? undefined : v.length === 1 ? v[0] : v.join(',');
  }

  has(name: string): boolean {
    return this.map.has(lowerCase(name));
  }

  add(name: string, value: string): void {
    const key = lowerCase(name);
    const cur = this.map.get(key);
    if (cur) cur.push(value);
    else this.map.set(key, [value]);
  }

  set(name: string, value: string): void {
    this.map.set(lowerCase(name), [value]);
  }

  remove(name: string): void {
    this.map.delete(lowerCase(name));
  }

  entries(): IterableIterator<[string, string[]]> {
    return this.map.entries();
  }

  /** The headers as one object, a header with one value as a string (what a request is sent with). */
  toRecord(): Record<string, string | string[]> {
    const out: Record<string, string | string[]> = {};
    // forEach rather than entries(): no [name, values] pair made per header.
    this.map.forEach((v, k) => (out[k] = v.length === 1 ? v[0]! : v));
    return out;
  }
}

/** An upstream HTTP protocol, as the ALPN override filter names them. */
export type UpstreamProtocol = 'http/1.0' | 'http/1.1' | 'h2';

export type AlpnOverride = ReadonlyMap<UpstreamProtocol, readonly string[]>;

/** A request in flight through the filter chain: mutable headers and path, and the metadata. */
export class StreamRequest implements RequestView {
  readonly metadata: DynamicMetadata = {};
  /**
   * The ALPN the upstream mesh-mTLS connection offers, by upstream protocol (set by the `mesh.alpn`
   * filter, read by the router); unset: the cluster's own.
   */
  alpnOverride?: AlpnOverride;
  /** The request came over HTTP/2 (a cluster with use_downstream_protocol_config speaks HTTP/2 to its upstream then). */
  downstreamH2 = false;
  private getter?: HeaderGetter;

  /** Made on first use: most requests are routed and authorized without a header matcher. */
  get header(): HeaderGetter {
    return (this.getter ??= (name) => {
      switch (name) {
        case ':method':
          return this.method;
        case ':path':
          return this.path;
        case ':authority':
        case 'host':
          return this.authority;
        case ':scheme':
          return this.scheme;
        default:
          return this.headers.joined(name);
      }
    });
  }

  constructor(
    public method: string,
    public path: string,
    public authority: string,
    public scheme: string,
    readonly headers: RequestHeaders,
    readonly source: Address,
    readonly remote: Address,
    readonly destination: Destination,
    readonly requestedServerName = '',
    readonly peer?: PeerIdentity,
  ) {}
}

export interface RequestViewInit {
  method?: string;
  path?: string;
  authority?: string;
  scheme?: string;
  headers?: Record<string, string | readonly string[]>;
  source?: Address;
  remote?: Address;
  destination?: Destination;
  requestedServerName?: string;
  peer?: PeerIdentity;
  metadata?: DynamicMetadata;
}

const NOWHERE: Address = { address: '0.0.0.0', port: 0 };
const normalAddress = (a: Address): Address => ({ address: normalizeIp(a.address), port: a.port });

/** The connection-level view a network filter evaluates: addresses, SNI and peer identity only. */
export function connectionView(init: Pick<RequestViewInit, 'source' | 'destination' | 'requestedServerName' | 'peer'>): RequestView {
  const source = normalAddress(init.source ?? NOWHERE);
  return {
    method: '',
    path: '',
    authority: '',
    scheme: '',
    header: () => undefined,
    source,
    remote: source,
    destination: init.destination ?? NOWHERE,
    requestedServerName: init.requestedServerName ?? '',
    ...(init.peer ? { peer: init.peer } : {}),
    metadata: {},
    connectionOnly: true,
  };
}


/** A request view from plain data, for evaluators run outside the proxy (tests, explain). */
export function requestView(init: RequestViewInit): StreamRequest {
  const source = normalAddress(init.source ?? NOWHERE);
  const req = new StreamRequest(
    init.method ?? 'GET',
    init.path ?? '/',
    init.authority ?? '',
    init.scheme ?? 'http',
    new RequestHeaders(Object.entries(init.headers ?? {})),
    source,
    init.remote ? normalAddress(init.remote) : source,
    init.destination ?? NOWHERE,
    init.requestedServerName ?? '',
    init.peer,
  );
  Object.assign(req.metadata, init.metadata ?? {});
  return req;
}
