// What an HTTP filter returns to the connection manager: go on to the next filter, or answer the
// request locally (Envoy's sendLocalReply) and stop the chain.
import type { StreamRequest } from './request.js';

export interface LocalReply {
  readonly status: number;
  readonly body: string;
  readonly headers: Readonly<Record<string, string | string[]>>;
  /** Envoy's response code details (%RESPONSE_CODE_DETAILS%), for logs and access logs. */
  readonly details: string;
  /** To a gRPC request, this grpc-status instead of the HTTP status's gRPC equivalent. */
  readonly grpcStatus?: number;
  /** The response flag (response-flags.ts) the reply sets on the stream, for %RESPONSE_FLAGS%. */
  readonly responseFlag?: number;
}

/** Response headers by lower-case name, as an encoder filter edits them. */
export type ResponseHeaderMap = Record<string, string | string[]>;

/**
 * `continue` may carry the filter's encoder side (Envoy's encodeHeaders): it edits the headers of
 * the response this request gets, upstream or local, if it gets past this filter.
 */
export type FilterOutcome =
  | { readonly kind: 'continue'; readonly encodeHeaders?: (headers: ResponseHeaderMap) => void }
  | { readonly kind: 'reply'; readonly reply: LocalReply };

/** The outcome of a filter that lets the request go on without an encoder side: one shared object, not one per request. */
export const CONTINUE: FilterOutcome = Object.freeze({ kind: 'continue' });

/** A decoder filter instance compiled from one http_filters entry. */
export interface HttpFilter {
  readonly name: string;
  /**
   * `perRoute`: the compiled typed_per_filter_config entries under this filter's name of the
   * request's route, most specific first (route, virtual host, route configuration); empty when none.
   */
  decodeHeaders(req: StreamRequest, perRoute: readonly unknown[]): FilterOutcome | Promise<FilterOutcome>;
}
