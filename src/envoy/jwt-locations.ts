// Where jwt_authn finds tokens: headers (after a prefix), query parameters and cookies, each
// location with the issuers whose providers look there, as Envoy's extractor does.
import type { StreamRequest } from './request.js';

export type LocationSpec =
  | { kind: 'header'; name: string; prefix: string }
  | { kind: 'param'; name: string }
  | { kind: 'cookie'; name: string };

/** A token found in a request, with the issuers whose providers look there. */
export interface FoundToken {
  readonly token: string;
  readonly issuerAllowed: (iss: string) => boolean;
  readonly remove: (req: StreamRequest) => void;
}

/** What the extractor reads of a provider. */
export interface TokenSource {
  readonly issuer: string;
  readonly locations: readonly LocationSpec[];
  readonly forwardPayloadHeader: string;
  readonly claimToHeaders: readonly { readonly header: string }[];
}

function parseCookies(header: string | undefined): Map<string, string> {
  const out = new Map<string, string>();
  for (const part of (header ?? '').split(';')) {
    const eq = part.indexOf('=');
    if (eq < 0) continue;
    const k = part.slice(0, eq).trim();
    let v = part.slice(eq + 1).trim();
    if (v.length >= 2 && v.startsWith('"') && v.endsWith('"')) v = v.slice(1, -1);
    if (!out.has(k)) out.set(k, v);
  }
  return out;
}

/** A run of base64url characters and dots: what a token is made of (one native scan of the token, not a test per character). */
const TOKEN_RUN = /[A-Za-z0-9_.-]+/g;

/**
 * After the prefix, the token is the first run of base64url characters and dots (Envoy's
 * extractJWT): leading junk is skipped and the token stops at whitespace, `=` padding or any other
 * character, so `Bearer a.b.c d.e.f` carries `a.b.c` only. Without such a run, the whole value.
 */
function afterPrefix(value: string, prefix: string): string | undefined {
  if (!prefix) return value;
  const pos = value.indexOf(prefix);
  if (pos < 0) return undefined;
  TOKEN_RUN.lastIndex = pos + prefix.length;
  const run = TOKEN_RUN.exec(value);
  return run ? run[0] : value;
}

function removeQueryParam(path: string, name: string): string {
  const q = path.indexOf('?');
  if (q < 0) return path;
  const params = new URLSearchParams(path.slice(q + 1));
  params.delete(name);
  const rest = params.toString();
  return rest ? `${path.slice(0, q)}?${rest}` : path.slice(0, q);
}

/** A token location with its issuers; what a found token's issuerAllowed and remove do is fixed per location, made once. */
interface Location {
  readonly spec: LocationSpec;
  readonly issuers: Set<string>;
  any: boolean;
  readonly issuerAllowed: (iss: string) => boolean;
  readonly remove: (req: StreamRequest) => void;
  /** A header location's token in a value (afterPrefix), the last value's answer kept. */
  readonly headerToken: (value: string) => FoundToken | undefined;
}

function location(spec: LocationSpec): Location {
  // A client repeats its header: the same value gives back the same found token (the same token
  // string, which the token cache then finds by identity, see jwt-cache.ts) without a scan.
  let lastValue: string | undefined;
  let lastFound: FoundToken | undefined;
  const loc: Location = {
    spec,
    issuers: new Set(),
    any: false,
    headerToken: (value) => {
      if (value !== lastValue) {
        const token = afterPrefix(value, spec.kind === 'header' ? spec.prefix : '');
        lastFound = token === undefined ? undefined : { token, issuerAllowed: loc.issuerAllowed, remove: loc.remove };
        lastValue = value;
      }
      return lastFound;
    },
    issuerAllowed: (iss) => loc.any || loc.issuers.has(iss),
    remove:
      spec.kind === 'header'
        ? (r) => r.headers.remove(spec.name)
        : spec.kind === 'param'
          ? (r) => (r.path = removeQueryParam(r.path, spec.name))
          : // Envoy leaves a cookie token in place even when forward is false.
            () => undefined,
  };
  return loc;
}

/** The token locations of a set of providers, each with the issuers that use it. */
export class Extractor {
  private readonly specs = new Map<string, Location>();
  private readonly ordered: readonly Location[];
  readonly sanitize: readonly string[];

  constructor(providers: readonly TokenSource[]) {
    const sanitize: string[] = [];
    for (const p of providers) {
      for (const spec of p.locations) {
        const key = `${spec.kind}\0${spec.name}\0${spec.kind === 'header' ? spec.prefix : ''}`;
        let entry = this.specs.get(key);
        if (!entry) this.specs.set(key, (entry = location(spec)));
        // A provider without an issuer accepts tokens of any issuer at its locations.
        if (p.issuer === '') entry.any = true;
        else entry.issuers.add(p.issuer);
      }
      if (p.forwardPayloadHeader) sanitize.push(p.forwardPayloadHeader);
      for (const c of p.claimToHeaders) sanitize.push(c.header);
    }
    this.sanitize = sanitize;
    const rank = { header: 0, param: 1, cookie: 2 } as const;
    this.ordered = [...this.specs.entries()].sort(([a, x], [b, y]) => rank[x.spec.kind] - rank[y.spec.kind] || (a < b ? -1 : a > b ? 1 : 0)).map(([, e]) => e);
  }

  /**
   * Every token the request carries, in Envoy's order: headers, then query parameters, then
   * cookies, each kind by location name; a header's values in the order received.
   */
  extract(req: StreamRequest): readonly FoundToken[] {
    let out: FoundToken[] | undefined;
    let params: URLSearchParams | undefined;
    let cookies: Map<string, string> | undefined;
    for (const { spec, issuerAllowed, remove, headerToken } of this.ordered) {
      if (spec.kind === 'header') {
        for (const v of req.headers.values(spec.name)) {
          const found = headerToken(v);
          if (found) out = added(out, found);
        }
      } else if (spec.kind === 'param') {
        // Most requests have no query: no parameters to parse.
        const q = req.path.indexOf('?');
        if (q < 0) continue;
        params ??= new URLSearchParams(req.path.slice(q + 1));
        const v = params.get(spec.name);
        if (v !== null) out = added(out, { token: v, issuerAllowed, remove });
      } else {
        cookies ??= parseCookies(req.headers.joined('cookie'));
        const v = cookies.get(spec.name);
        if (v !== undefined) out = added(out, { token: v, issuerAllowed, remove });
      }
    }
    return out ?? NO_TOKENS;
  }
}

const NO_TOKENS: readonly FoundToken[] = Object.freeze([]);

/**
 * A list of found tokens with `t` added, made at the first token and as long as it needs to be:
 * most requests carry one token or none, and an empty array's first push reserves 17 places.
 */
function added(out: FoundToken[] | undefined, t: FoundToken): FoundToken[] {
  if (out === undefined) return [t];
  out.push(t);
  return out;
}
