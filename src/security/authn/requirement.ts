// Evaluates a jwt_authn config's requirement tree for one request, with Envoy's semantics: a
// provider answers ok / missing (no token for it) / unknown issuer / failed; `requires_any`
// succeeds on the first ok child, otherwise reports the most telling failure (a failure other than
// missing or unknown issuer, then unknown issuer, then missing), and `allow_missing` in it turns
// only "missing" into ok; `requires_all` fails on the first failing child. Signature and expiry
// checks happen before (the token is given verified or not); this decides what follows from that.
import type { JwtAuthentication, JwtProvider, JwtRequirement } from '../../gen/envoy/extensions/filters/http/jwt_authn/v3/config_pb.js';
import { JWT_AUTHN_FILTER_NAME } from './names.js';

/** The token a request carries, as far as signature and time checks go. */
export type TokenState =
  | { readonly kind: 'missing' }
  | { readonly kind: 'invalid'; readonly reason?: string }
  | { readonly kind: 'verified'; readonly payload: Readonly<Record<string, unknown>> };

type Status = 'ok' | 'missing' | 'unknown_issuer' | 'failed';

interface Result {
  readonly status: Status;
  readonly because: string;
  /** The provider that verified the token, when ok because of one. */
  readonly provider?: string;
  /** A verified token whose audience is not allowed: Envoy answers 403, not 401. */
  readonly forbidden?: boolean;
}

export interface JwtDecision {
  /** false = the proxy answers `status`. */
  readonly allowed: boolean;
  /** 401 for a missing/invalid token or unknown issuer, 403 for an audience not allowed. */
  readonly status: 200 | 401 | 403;
  readonly because: string;
  readonly provider?: string;
  /** Dynamic metadata the filter writes (the payload for the rbac filters). */
  readonly metadata: Record<string, Record<string, unknown>>;
}

function audiences(payload: Readonly<Record<string, unknown>>): string[] {
  const aud = payload.aud;
  return typeof aud === 'string' ? [aud] : Array.isArray(aud) ? aud.filter((a): a is string => typeof a === 'string') : [];
}

function verifyWith(name: string, p: JwtProvider, token: TokenState): Result {
  if (token.kind === 'missing') return { status: 'missing', because: 'no token' };
  if (token.kind === 'invalid') return { status: 'failed', because: `the token does not verify${token.reason ? ` (${token.reason})` : ''}` };
  const iss = token.payload.iss;
  if (iss !== p.issuer) return { status: 'unknown_issuer', because: `issuer ${JSON.stringify(iss)} is not ${JSON.stringify(p.issuer)} of provider ${name}` };
  if (p.audiences.length && !audiences(token.payload).some((a) => p.audiences.includes(a))) {
    return { status: 'failed', forbidden: true, because: `audiences ${JSON.stringify(audiences(token.payload))} are not among ${JSON.stringify(p.audiences)} of provider ${name}` };
  }
  return { status: 'ok', because: `verified by provider ${name} (issuer ${p.issuer})`, provider: name };
}

function evaluate(req: JwtRequirement, config: JwtAuthentication, token: TokenState): Result {
  const r = req.requiresType;
  switch (r.case) {
    case 'providerName':
    case 'providerAndAudiences': {
      const name = r.case === 'providerName' ? r.value : r.value.providerName;
      const p = config.providers[name];
      if (!p) return { status: 'failed', because: `provider ${name} is not configured` };
      return verifyWith(name, p, token);
    }
    case 'requiresAll': {
      let last: Result = { status: 'ok', because: 'no requirement' };
      for (const child of r.value.requirements) {
        last = evaluate(child, config, token);
        if (last.status !== 'ok') return last;
      }
      return last;
    }
    case 'requiresAny': {
      const flags = new Set(r.value.requirements.map((c) => c.requiresType.case));
      const children = r.value.requirements.filter((c) => c.requiresType.case !== 'allowMissing' && c.requiresType.case !== 'allowMissingOrFailed');
      const results: Result[] = [];
      for (const child of children) {
        const res = evaluate(child, config, token);
        if (res.status === 'ok') return res;
        results.push(res);
      }
      if (children.length === 0) return allowWithoutProvider(config, token, flags.has('allowMissingOrFailed'));
      let final: Result = { status: 'missing', because: 'no token' };
      for (const res of results) if ((res.status !== 'missing' && res.status !== 'unknown_issuer') || final.status === 'missing') final = res;
      if (flags.has('allowMissingOrFailed')) return { status: 'ok', because: `${final.because}; allowed (allow_missing_or_failed)` };
      if (flags.has('allowMissing') && final.status === 'missing') return { status: 'ok', because: 'no token; allowed (allow_missing)' };
      return final;
    }
    case 'allowMissing':
      return allowWithoutProvider(config, token, false);
    case 'allowMissingOrFailed':
      return allowWithoutProvider(config, token, true);
    default:
      return { status: 'ok', because: 'no requirement' };
  }
}

/** allow_missing / allow_missing_or_failed on their own: any provider may verify a present token. */
function allowWithoutProvider(config: JwtAuthentication, token: TokenState, orFailed: boolean): Result {
  if (token.kind === 'missing') return { status: 'ok', because: 'no token; allowed (allow_missing)' };
  const results = Object.entries(config.providers).map(([name, p]) => verifyWith(name, p, token));
  const ok = results.find((x) => x.status === 'ok');
  if (ok) return ok;
  const failure = results.find((x) => x.status === 'failed') ?? results[0] ?? { status: 'unknown_issuer', because: 'no provider' };
  return orFailed ? { status: 'ok', because: `${failure.because}; allowed (allow_missing_or_failed)` } : failure;
}

/** The jwt_authn decision for a request to `path`, from the generated config. */
export function evaluateJwtAuthn(config: JwtAuthentication, token: TokenState, path: string): JwtDecision {
  const rule = config.rules.find((r) => {
    const m = r.match?.pathSpecifier;
    return m?.case === 'prefix' ? path.startsWith(m.value) : m?.case === 'path' ? path.split('?')[0] === m.value : false;
  });
  if (!rule || rule.requirementType.case !== 'requires') return { allowed: true, status: 200, because: 'no requirement applies to this path', metadata: {} };
  const res = evaluate(rule.requirementType.value, config, token);
  const provider = res.provider ? config.providers[res.provider] : undefined;
  const metadata: Record<string, Record<string, unknown>> = {};
  if (provider?.payloadInMetadata && token.kind === 'verified') metadata[JWT_AUTHN_FILTER_NAME] = { [provider.payloadInMetadata]: token.payload };
  const because = res.status === 'ok' ? res.because : `${res.because} (${res.status === 'unknown_issuer' ? 'unknown issuer' : res.status === 'missing' ? 'token required' : res.forbidden ? 'audience not allowed' : 'invalid token'})`;
  const status = res.status === 'ok' ? 200 : res.forbidden ? 403 : 401;
  return { allowed: res.status === 'ok', status, because, ...(res.provider ? { provider: res.provider } : {}), metadata };
}
