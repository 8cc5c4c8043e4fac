// What an HTTP filter returns to the connection manager: go on to the next filter, or answer the
// request locally (Envoy's sendLocalReply) and stop the chain.
import type { StreamRequest } from './request.js';

export interface LocalReply {
  readonly status: number;
  readonly body: string;
  readonly headers: Readonly<Record<string, string | string[]>>;
  /** Envoy's response code details (%RESPONSE_CODE_DETAILS%), for logs and access logs. */
  readonly details: string;
}

export type FilterOutcome = { readonly kind: 'continue' } | { readonly kind: 'reply'; readonly reply: LocalReply };

/** A decoder filter instance compiled from one http_filters entry. */
export interface HttpFilter {
  readonly name: string;
  decodeHeaders(req: StreamRequest): FilterOutcome | Promise<FilterOutcome>;
}
