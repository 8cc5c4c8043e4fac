// What an external authorizer answered, whatever its transport (HTTP or gRPC), and the header
// lists of the ext_authz config compiled once. The filter (filters/ext-authz.ts) acts on it.
import type { ListStringMatcher } from '../../gen/envoy/type/matcher/v3/string_pb.js';
import { compileStringMatcher, type Predicate } from '../../envoy/matchers.js';
import type { StreamRequest } from '../../envoy/request.js';
import type { ResponseHeaderMap } from '../../envoy/filter.js';
import type { ClusterManager } from '../clusters.js';

type Pairs = readonly (readonly [string, string])[];

/** Header edits: replace, append, or add only when there is no such header. */
export interface HeaderMutations {
  readonly set: Pairs;
  readonly append: Pairs;
  readonly addIfAbsent: Pairs;
}

export const NO_MUTATIONS: HeaderMutations = { set: [], append: [], addIfAbsent: [] };

export type CheckResult =
  | (HeaderMutations & {
      readonly kind: 'ok';
      /** Request headers removed before the request goes on (the mutations above edit the request). */
      readonly remove: readonly string[];
      /** Edits of the client's response (allowed_client_headers_on_success, OkHttpResponse.response_headers_to_add). */
      readonly response: HeaderMutations;
    })
  | { readonly kind: 'denied'; readonly status: number; readonly body: string; readonly headers: Readonly<Record<string, string[]>> }
  | { readonly kind: 'error'; readonly reason: string };

/** What either way of asking needs: its service config, its timeout, which headers go, the clusters. */
export interface CheckOptions<Service> {
  readonly service: Service;
  readonly timeoutMs: number;
  readonly allowed: Predicate<string>;
  readonly disallowed: Predicate<string>;
  readonly clusters: ClusterManager;
}

/** One way of asking the authorizer (HTTP service or gRPC service). */
export interface Checker {
  check(req: StreamRequest): Promise<CheckResult>;
}

/** A ListStringMatcher as a predicate on header names; absent: `fallback`. */
export function headerNames(list: ListStringMatcher | undefined, field: string, fallback: boolean): Predicate<string> {
  if (!list || list.patterns.length === 0) return () => fallback;
  const tests = list.patterns.map((p, i) => compileStringMatcher(p, `${field}.patterns[${i}]`));
  return (name) => tests.some((t) => t(name));
}

/** The request's headers as the authorizer sees them: pseudo-headers first, then those `allowed`. */
export function checkedHeaders(req: StreamRequest, allowed: Predicate<string>): Map<string, string> {
  const out = new Map<string, string>([
    [':authority', req.authority],
    [':method', req.method],
    [':path', req.path],
    [':scheme', req.scheme],
  ]);
  for (const [name, values] of req.headers.entries()) if (allowed(name)) out.set(name, values.join(','));
  return out;
}

/** Applies an OK answer's header mutations to the request before it goes upstream. */
export function applyOk(req: StreamRequest, ok: Extract<CheckResult, { kind: 'ok' }>): void {
  for (const name of ok.remove) {
    // Envoy refuses to remove pseudo-headers and Host this way.
    if (!name.startsWith(':') && name !== 'host') req.headers.remove(name);
  }
  for (const [k, v] of ok.set) req.headers.set(k, v);
  for (const [k, v] of ok.append) req.headers.add(k, v);
  for (const [k, v] of ok.addIfAbsent) if (!req.headers.has(k)) req.headers.add(k, v);
}

/** The encoder side of an OK answer: its edits of the client's response, if it has any. */
export function responseEdits(m: HeaderMutations): ((headers: ResponseHeaderMap) => void) | undefined {
  if (m.set.length + m.append.length + m.addIfAbsent.length === 0) return undefined;
  return (headers) => {
    for (const [k, v] of m.set) headers[k] = v;
    for (const [k, v] of m.append) {
      const had = headers[k];
      headers[k] = had === undefined ? v : [...(Array.isArray(had) ? had : [had]), v];
    }
    for (const [k, v] of m.addIfAbsent) if (headers[k] === undefined) headers[k] = v;
  };
}
