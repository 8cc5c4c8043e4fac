// jwt_authn's verified tokens, one cache per provider of a compiled config: a new config (new
// keys) compiles new providers with empty caches, so no entry outlives the JWKS it was verified
// with. Like Envoy's, an LRU of jwt_cache_config.jwt_cache_size tokens whose entries go with their
// `exp` (plus the clock skew); `nbf`, audiences and the rest are checked at each use by the filter.
import type { JsonObject } from '@bufbuild/protobuf';
import { LRUCache } from 'lru-cache';
import type { Jwt } from './jwt-token.js';

export interface CachedJwt {
  readonly jwt: Jwt;
  /** The payload as payload_in_metadata carries it, normalized once per token; shared by the requests, as the payload itself always was. */
  metadataPayload?: JsonObject;
}

export class JwtCache {
  /** Absent when jwt_cache_size is 0 (no cache). */
  private readonly lru: LRUCache<string, CachedJwt> | undefined;
  /**
   * The token last found, apart: a client repeats its token, and the extractor hands back the same
   * string for the same header value, so a repeat costs a comparison, not hashing the whole token.
   * It is always the most recently used entry (any `set` forgets it), so skipping the LRU's
   * recency update on this path changes no eviction.
   */
  private last: { readonly token: string; readonly entry: CachedJwt } | undefined;

  constructor(
    max: number,
    private readonly skew: number,
  ) {
    this.lru = max > 0 ? new LRUCache({ max }) : undefined;
  }

  /** The token's entry, unless absent or expired at `now` (unix seconds; an expired one is dropped). */
  get(token: string, now: number): CachedJwt | undefined {
    const entry = this.last?.token === token ? this.last.entry : this.lru?.get(token);
    if (entry === undefined) return undefined;
    const exp = entry.jwt.exp;
    if (exp !== 0 && now > exp + this.skew) {
      this.lru?.delete(token);
      this.last = undefined;
      return undefined;
    }
    if (this.last?.entry !== entry) this.last = { token, entry };
    return entry;
  }

  /** Keeps a verified token, evicting the least recently used beyond the size. */
  set(token: string, jwt: Jwt): CachedJwt {
    const entry: CachedJwt = { jwt };
    this.lru?.set(token, entry);
    this.last = undefined;
    return entry;
  }
}
