// The jwt_authn HTTP filter: a JwtAuthentication message compiled once into a checker with
// Envoy's semantics (token locations, requirement trees, status strings, 401/403 replies).
//
// Per request: the first rule whose match holds selects a requirement; the requirement's
// verifiers extract tokens and authenticate them against the provider's inlined JWKS. Verified
// tokens are cached per provider (bounded LRU, until they expire), so a repeated token costs a map
// lookup and the time/audience checks, not a signature check.
import type { JsonValue } from '@bufbuild/protobuf';
import { scope } from '../common/log.js';
import type {
  JwtAuthentication,
  JwtProvider,
  JwtRequirement,
} from '../gen/envoy/extensions/filters/http/jwt_authn/v3/config_pb.js';
import { ConfigError } from './config-error.js';
import type { StreamRequest } from './request.js';
import { compileRouteMatch } from './route-match.js';
import { CONTINUE, type FilterOutcome, type LocalReply } from './filter.js';
import type { CachedJwt } from './jwt-cache.js';
import { Extractor, type FoundToken } from './jwt-locations.js';
import { keyFits, parseJwt, JwtStatus, type Jwt } from './jwt-token.js';
import { verifyJws } from './jws-verify.js';
import { JWT_AUTHN_FILTER_NAME } from './names.js';
import { audienceSet, audiencesAllowed, claimValue, compileProvider, normalizePayload, type Provider } from './jwt-provider.js';

const log = scope('jwt');

/** Unknown kids reported through onUnknownKid per compiled config, at most. */
const MAX_REPORTED_KIDS = 64;
/** Envoy caps the URL it puts in the realm. */
const MAX_REALM_PATH = 256;

export interface JwtAuthnOptions {
  /** Unix seconds; injectable so tests can move the clock instead of waiting. */
  now?: () => number;
  /**
   * Called when a token names a `kid` that the provider's inlined JWKS lacks (the request gets a
   * 401). The agent uses it to ask the discovery server to refetch that issuer's JWKS; it fires at
   * most once per (issuer, kid) per compiled config, and a new config comes with new keys.
   */
  onUnknownKid?: (issuer: string, kid: string) => void;
}

/** Counters, named as Envoy's jwt_authn stats. */
export interface JwtAuthnStats {
  allowed: number;
  denied: number;
  jwt_cache_hit: number;
  jwt_cache_miss: number;
  /** Signature checks actually performed (not an Envoy stat: what the cache saves). */
  signature_verifications: number;
}

interface Context {
  readonly req: StreamRequest;
  readonly payloads: Record<string, JsonValue>;
  /** Whether `payloads` has an entry (rather than listing its keys to find out). */
  payloaded?: boolean;
  /** Signature results of this request, by provider and token (made on the first signature check). */
  verified?: Map<string, JwtStatus>;
}

type Verifier = (ctx: Context) => JwtStatus;

export interface CompiledJwtAuthn {
  readonly stats: JwtAuthnStats;
  /** Runs the filter: continue (payload in req.metadata) or a 401/403 local reply. */
  decodeHeaders(req: StreamRequest): FilterOutcome;
}

/** Compiles a JwtAuthentication config; throws ConfigError for what the proxy cannot honour. */
export function compileJwtAuthn(config: JwtAuthentication, opts: JwtAuthnOptions = {}): CompiledJwtAuthn {
  const now = opts.now ?? (() => Math.floor(Date.now() / 1000));
  const stats: JwtAuthnStats = { allowed: 0, denied: 0, jwt_cache_hit: 0, jwt_cache_miss: 0, signature_verifications: 0 };
  const reportedKids = new Set<string>();

  if (config.filterStateRules) throw new ConfigError('filter_state_rules', 'not supported');

  const providers = new Map<string, Provider>();
  for (const name of Object.keys(config.providers).sort()) {
    providers.set(name, compileProvider(name, config.providers[name] as JwtProvider));
  }
  const allProviders = [...providers.values()];
  const byIssuer = (iss: string): Provider | undefined =>
    allProviders.find((p) => p.issuer === iss) ?? allProviders.find((p) => p.issuer === '');

  function verifySignature(p: Provider, jwt: Jwt): JwtStatus {
    if (!p.keys) return JwtStatus.JwksNoValidKeys;
    let fitted = false;
    const signingInput = `${jwt.headerB64}.${jwt.payloadB64}`;
    const signature = Buffer.from(jwt.signatureB64, 'base64url');
    for (const k of p.keys) {
      if (!keyFits(k, jwt)) continue;
      fitted = true;
      stats.signature_verifications++;
      // A failed check tries the next fitting key, as Envoy does.
      if (verifyJws(jwt.alg, k.key, jwt.header, signingInput, signature)) return JwtStatus.Ok;
    }
    if (fitted) return JwtStatus.JwtVerificationFail;
    if (jwt.kid !== undefined && !p.kids.has(jwt.kid) && opts.onUnknownKid) {
      // Kids are attacker-chosen: report each once, and only so many per config.
      const key = `${p.issuer}\0${jwt.kid}`;
      if (!reportedKids.has(key) && reportedKids.size < MAX_REPORTED_KIDS) {
        reportedKids.add(key);
        log.info(`token kid ${JSON.stringify(jwt.kid)} is not in the JWKS of issuer ${JSON.stringify(p.issuer)}; asking for a refetch`);
        try {
          opts.onUnknownKid(p.issuer, jwt.kid);
        } catch (e) {
          log.warn(`onUnknownKid failed: ${(e as Error).message}`);
        }
      }
    }
    return JwtStatus.JwksKidAlgMismatch;
  }

  function onGoodJwt(p: Provider, entry: CachedJwt, found: FoundToken, ctx: Context): void {
    const { jwt } = entry;
    const { req } = ctx;
    if (p.forwardPayloadHeader) {
      const b64 = jwt.payloadB64;
      req.headers.add(p.forwardPayloadHeader, p.padForwardPayloadHeader ? b64.padEnd(Math.ceil(b64.length / 4) * 4, '=') : b64);
    }
    for (const { header, claim } of p.claimToHeaders) {
      const v = claimValue(jwt.payload, claim);
      if (v !== undefined) req.headers.add(header, v);
    }
    if (!p.forward) found.remove(req);
    if (p.headerInMetadata) {
      ctx.payloads[p.headerInMetadata] = jwt.header;
      ctx.payloaded = true;
    }
    if (p.payloadInMetadata) {
      ctx.payloads[p.payloadInMetadata] = entry.metadataPayload ??= normalizePayload(jwt.payload, p.spaceDelimitedClaims);
      ctx.payloaded = true;
    }
  }

  /** Envoy's authenticator: every token found must pass unless failures are allowed. */
  function authenticator(fixed: Provider | undefined, extractor: Extractor, audiences: ReadonlySet<string> | undefined, allowFailed: boolean, allowMissing: boolean): Verifier {
    return (ctx) => {
      for (const h of extractor.sanitize) ctx.req.headers.remove(h);
      const tokens = extractor.extract(ctx.req);
      if (tokens.length === 0) return allowFailed || allowMissing ? JwtStatus.Ok : JwtStatus.JwtMissed;
      let status: JwtStatus = JwtStatus.Ok;
      // Every token must verify; like Envoy, the last extracted is verified first, so the payload
      // left in metadata (what RBAC sees) is that of the FIRST token: a second `Authorization`
      // value or an `access_token` parameter cannot lend the request another identity.
      for (let i = tokens.length - 1; i >= 0; i--) {
        status = authenticateOne(fixed, tokens[i]!, audiences, ctx);
        if (status !== JwtStatus.Ok && !allowFailed && !allowMissing) return status;
      }
      return allowFailed ? JwtStatus.Ok : status;
    };
  }

  function authenticateOne(fixed: Provider | undefined, found: FoundToken, audiences: ReadonlySet<string> | undefined, ctx: Context): JwtStatus {
    const t = now();
    let entry: CachedJwt | undefined;
    if (fixed) {
      entry = fixed.cache.get(found.token, t);
      if (entry) stats.jwt_cache_hit++;
      else stats.jwt_cache_miss++;
    }
    let jwt: Jwt;
    if (entry) jwt = entry.jwt;
    else {
      const parsed = parseJwt(found.token);
      if (typeof parsed === 'string') return parsed;
      jwt = parsed;
    }
    if (!found.issuerAllowed(jwt.iss)) return JwtStatus.JwtUnknownIssuer;
    const p = fixed ?? byIssuer(jwt.iss);
    if (!p) return JwtStatus.JwtUnknownIssuer;
    if (!fixed) {
      // Unlike Envoy, a bypass requirement (allow_missing) uses the issuer's cache too.
      entry = p.cache.get(found.token, t);
      if (entry) {
        stats.jwt_cache_hit++;
        jwt = entry.jwt;
      } else stats.jwt_cache_miss++;
    }
    if (jwt.nbf !== 0 && t < jwt.nbf - p.clockSkew) return JwtStatus.JwtNotYetValid;
    if (jwt.exp !== 0 && t > jwt.exp + p.clockSkew) return JwtStatus.JwtExpired;
    if (p.subject && !p.subject(typeof jwt.payload.sub === 'string' ? jwt.payload.sub : '')) return JwtStatus.JwtVerificationFail;
    if (p.maxLifetime !== undefined && (jwt.exp === 0 || jwt.exp - t >= p.maxLifetime)) return JwtStatus.JwtExpired;
    if (!audiencesAllowed(audiences ?? p.audiences, jwt.audiences)) return JwtStatus.JwtAudienceNotAllowed;
    if (!entry) {
      // requires_any may meet the same token twice (its provider, then allow_missing): check once.
      const memoKey = `${p.name}\0${found.token}`;
      const verified = (ctx.verified ??= new Map());
      let s = verified.get(memoKey);
      if (s === undefined) {
        s = verifySignature(p, jwt);
        verified.set(memoKey, s);
      }
      if (s !== JwtStatus.Ok) return s;
      entry = p.cache.set(found.token, jwt);
    }
    onGoodJwt(p, entry, found, ctx);
    return JwtStatus.Ok;
  }

  function provider(name: string, field: string): Provider {
    const p = providers.get(name);
    if (!p) throw new ConfigError(field, `provider ${JSON.stringify(name)} is not configured`);
    return p;
  }

  function compileRequirement(r: JwtRequirement | undefined, field: string): Verifier {
    const rt = r?.requiresType ?? { case: undefined };
    switch (rt.case) {
      case undefined:
        return () => JwtStatus.Ok;
      case 'providerName': {
        const p = provider(rt.value, `${field}.provider_name`);
        return authenticator(p, new Extractor([p]), undefined, false, false);
      }
      case 'providerAndAudiences': {
        const p = provider(rt.value.providerName, `${field}.provider_and_audiences.provider_name`);
        return authenticator(p, new Extractor([p]), audienceSet(rt.value.audiences), false, false);
      }
      case 'allowMissing':
      case 'allowMissingOrFailed':
        // Tokens at any provider's location are verified against the provider of their issuer.
        return authenticator(undefined, new Extractor(allProviders), undefined, rt.case === 'allowMissingOrFailed', true);
      case 'requiresAny': {
        // allow_missing(_or_failed) is a flag on the group, not a member, unless it is alone.
        let allowMissing = false;
        let allowFailed = false;
        const members: Verifier[] = [];
        rt.value.requirements.forEach((child, i) => {
          const c = child.requiresType.case;
          if (c === 'allowMissing') allowMissing = true;
          else if (c === 'allowMissingOrFailed') allowFailed = true;
          else members.push(compileRequirement(child, `${field}.requires_any.requirements[${i}]`));
        });
        if (members.length === 0 && (allowMissing || allowFailed)) {
          members.push(authenticator(undefined, new Extractor(allProviders), undefined, allowFailed, true));
        }
        return (ctx) => {
          // None passed: the most telling failure wins; "missing" and "unknown issuer" only when
          // nothing else went wrong (a token for one provider is "unknown issuer" to the others).
          let final: JwtStatus = JwtStatus.JwtMissed;
          for (const v of members) {
            const s = v(ctx);
            if (s === JwtStatus.Ok) return s;
            if ((s !== JwtStatus.JwtMissed && s !== JwtStatus.JwtUnknownIssuer) || final === JwtStatus.JwtMissed) final = s;
          }
          if (allowFailed || (allowMissing && final === JwtStatus.JwtMissed)) return JwtStatus.Ok;
          return final;
        };
      }
      case 'requiresAll': {
        const all = rt.value.requirements.map((c, i) => compileRequirement(c, `${field}.requires_all.requirements[${i}]`));
        return (ctx) => {
          for (const v of all) {
            const s = v(ctx);
            if (s !== JwtStatus.Ok) return s;
          }
          return JwtStatus.Ok;
        };
      }
      default:
        throw new ConfigError(field, 'unknown requirement type');
    }
  }

  const named = new Map<string, Verifier>();
  for (const [name, r] of Object.entries(config.requirementMap)) named.set(name, compileRequirement(r, `requirement_map[${name}]`));

  const rules = config.rules.map((rule, i) => {
    const field = `rules[${i}]`;
    const match = compileRouteMatch(rule.match, `${field}.match`).test;
    const rt = rule.requirementType;
    let verifier: Verifier | undefined;
    if (rt.case === 'requires') verifier = compileRequirement(rt.value, `${field}.requires`);
    else if (rt.case === 'requirementName') {
      verifier = named.get(rt.value);
      if (!verifier) throw new ConfigError(`${field}.requirement_name`, `${JSON.stringify(rt.value)} is not in requirement_map`);
    }
    return { match, verifier };
  });

  const bypassCors = config.bypassCorsPreflight;
  const strip = config.stripFailureResponse;

  return {
    stats,
    decodeHeaders(req) {
      if (bypassCors && req.method === 'OPTIONS' && req.headers.has('origin') && req.headers.has('access-control-request-method')) {
        stats.allowed++;
        return CONTINUE;
      }
      let rule: (typeof rules)[number] | undefined;
      for (const r of rules) {
        if (r.match(req)) {
          rule = r;
          break;
        }
      }
      if (!rule?.verifier) {
        stats.allowed++;
        return CONTINUE;
      }
      const ctx: Context = { req, payloads: {} };
      const status = rule.verifier(ctx);
      if (status === JwtStatus.Ok) {
        stats.allowed++;
        if (ctx.payloaded) {
          // This request's own object: a copy only to merge with what an earlier filter put there.
          const earlier = req.metadata[JWT_AUTHN_FILTER_NAME];
          req.metadata[JWT_AUTHN_FILTER_NAME] = earlier ? { ...earlier, ...ctx.payloads } : ctx.payloads;
        }
        return CONTINUE;
      }
      stats.denied++;
      log.debug(`request ${req.method} ${req.path} rejected: ${status}`);
      return { kind: 'reply', reply: failureReply(req, status, strip) };
    },
  };
}

function failureReply(req: StreamRequest, status: JwtStatus, strip: boolean): LocalReply {
  const code = status === JwtStatus.JwtAudienceNotAllowed ? 403 : 401;
  if (strip) return { status: code, body: '', headers: {}, details: rcDetails(status) };
  const realm = `${req.scheme}://${req.authority}${req.path.slice(0, MAX_REALM_PATH)}`;
  const challenge = `Bearer realm="${realm}"${status === JwtStatus.JwtMissed ? '' : ', error="invalid_token"'}`;
  return { status: code, body: status, headers: { 'www-authenticate': challenge }, details: rcDetails(status) };
}

function rcDetails(status: JwtStatus): string {
  return `jwt_authn_access_denied{${status.replace(/\s/g, '_')}}`;
}
