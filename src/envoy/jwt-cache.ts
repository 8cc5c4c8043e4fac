// jwt_authn's verified tokens, one cache per provider of a compiled config: a new config (new
// keys) compiles new providers with empty caches, so no entry outlives the JWKS it was verified
// with. Like Envoy's, an LRU of jwt_cache_config.jwt_cache_size tokens whose entries go with their
// `exp` (plus the clock skew); `nbf`, audiences and the rest are checked at each use by the filter.
import type { JsonObject } from '@bufbuild/protobuf';
import type { Jwt } from './jwt-token.js';

export interface CachedJwt {
  readonly jwt: Jwt;
  /** The payload as payload_in_metadata carries it, normalized once per token; shared by the requests, as the payload itself always was. */
  metadataPayload?: JsonObject;
}

export class JwtCache {
  private readonly entries = new Map<string, CachedJwt>();
  /**
   * The token last found, apart: a client repeats its token, and the extractor hands back the same
   * string for the same header value, so a repeat costs a comparison, not hashing the whole token.
   */
  private last: { readonly token: string; readonly entry: CachedJwt } | undefined;

  constructor(
    private readonly max: number,
    private readonly skew: number,
  ) {}

  /** The token's entry, unless absent or expired at `now` (unix seconds; an expired one is dropped). */
  get(token: string, now: number): CachedJwt | undefined {
    let entry: CachedJwt | undefined;
    if (this.last !== undefined && this.last.token === token) entry = this.last.entry;
    else {
      entry = this.entries.get(token);
      if (entry === undefined) return undefined;
      // Map order is the eviction order: a hit moves to the end.
      this.entries.delete(token);
      this.entries.set(token, entry);
      this.last = { token, entry };
    }
    const exp = entry.jwt.exp;
    if (exp !== 0 && now > exp + this.skew) {
      this.entries.delete(token);
      this.last = undefined;
      return undefined;
    }
    return entry;
  }

  /** Keeps a verified token, evicting the least recently used beyond the size (0: no cache). */
  set(token: string, jwt: Jwt): CachedJwt {
    const entry: CachedJwt = { jwt };
    if (this.max <= 0) return entry;
    this.entries.delete(token);
    if (this.entries.size >= this.max) this.entries.delete(this.entries.keys().next().value!);
    this.entries.set(token, entry);
    // The remembered token may have been evicted, or is no longer the most recent.
    this.last = undefined;
    return entry;
  }
}
