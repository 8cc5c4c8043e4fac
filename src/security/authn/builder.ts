// RequestAuthentications that select a workload -> its jwt_authn HTTP filter config. Pure: the key
// sets come from a lookup (the discovery server's JWKS resolver), inline `jwks` are checked here.
import { create, type MessageInitShape } from '@bufbuild/protobuf';
import {
  JwtAuthenticationSchema,
  JwtProviderSchema,
  JwtRequirementSchema,
  type JwtAuthentication,
  type JwtProvider,
  type JwtRequirement,
} from '../../gen/envoy/extensions/filters/http/jwt_authn/v3/config_pb.js';
import type { JwtRule, RequestAuthentication } from '../../api/types.js';
import { DurationError, parseDuration, toMillis } from '../../common/duration.js';
import { FAIL_CLOSED_JWKS, checkJwks } from '../../envoy/jwks.js';
import { JWT_PAYLOAD_METADATA_KEY, providerName } from './names.js';

/** Fetch timeout of a jwtRule without `timeout`. */
export const DEFAULT_JWKS_TIMEOUT_MS = 5_000;

/** Where a proxy looks for a token when a rule names no location (the same as Envoy's default). */
export const DEFAULT_TOKEN_HEADER = { name: 'Authorization', valuePrefix: 'Bearer ' } as const;
export const DEFAULT_TOKEN_PARAM = 'access_token';

/** The key set (JWKS JSON) of an issuer: never throws, returns FAIL_CLOSED_JWKS when it has none. */
export type JwksLookup = (issuer: string, jwksUri: string, timeoutMs: number) => string;

/** The fetch timeout of a rule, in milliseconds. */
export function ruleTimeoutMs(rule: JwtRule, warnings: string[] = []): number {
  if (rule.timeout === undefined) return DEFAULT_JWKS_TIMEOUT_MS;
  try {
    const ms = toMillis(parseDuration(rule.timeout));
    if (ms > 0) return ms;
  } catch (e) {
    if (!(e instanceof DurationError)) throw e;
  }
  warnings.push(`jwtRules issuer "${rule.issuer}": timeout "${rule.timeout}" is not a positive duration such as 5s; using ${DEFAULT_JWKS_TIMEOUT_MS}ms`);
  return DEFAULT_JWKS_TIMEOUT_MS;
}

/** The jwksUri the resolver fetches for a rule: none when an inline `jwks` takes precedence. */
function fetchedUri(rule: JwtRule): string | undefined {
  return rule.jwks === undefined && rule.jwksUri ? rule.jwksUri : undefined;
}

export interface JwksFetch {
  readonly issuer: string;
  readonly jwksUri: string;
  readonly timeoutMs: number;
}

/** Every JWKS the policies make the resolver fetch, with the issuer and the rule's timeout. */
export function jwksFetchesInUse(policies: readonly RequestAuthentication[]): JwksFetch[] {
  return policies.flatMap((p) =>
    (p.spec.jwtRules ?? []).flatMap((r) => {
      const jwksUri = fetchedUri(r);
      return jwksUri ? [{ issuer: r.issuer, jwksUri, timeoutMs: ruleTimeoutMs(r) }] : [];
    }),
  );
}


function keysOf(rule: JwtRule, lookup: JwksLookup, warnings: string[]): string {
  const uri = fetchedUri(rule);
  if (uri !== undefined) return lookup(rule.issuer, uri, ruleTimeoutMs(rule, warnings));
  if (rule.jwks !== undefined) {
    const check = checkJwks(rule.jwks);
    if (check.ok) return check.jwks;
    warnings.push(`jwtRules issuer "${rule.issuer}": inline jwks ${check.reason}; no token of this issuer is accepted`);
    return FAIL_CLOSED_JWKS;
  }
  warnings.push(`jwtRules issuer "${rule.issuer}": neither jwksUri nor jwks is set; no token of this issuer is accepted`);
  return FAIL_CLOSED_JWKS;
}

/** Claims that OAuth and the production mesh treat as space-separated lists, whatever the rule says. */
const SPACE_DELIMITED_CLAIMS = ['permission', 'scope'];

/** The rule's space-delimited claims plus `permission` and `scope`, sorted, once each. */
function spaceDelimitedClaims(rule: JwtRule): string[] {
  return [...new Set([...SPACE_DELIMITED_CLAIMS, ...(rule.spaceDelimitedClaims ?? [])])].sort();
}

function provider(rule: JwtRule, jwks: string): JwtProvider {
  const noLocation = !rule.fromHeaders?.length && !rule.fromParams?.length && !rule.fromCookies?.length;
  return create(JwtProviderSchema, {
    issuer: rule.issuer,
    audiences: rule.audiences ?? [],
    jwksSourceSpecifier: { case: 'localJwks', value: { specifier: { case: 'inlineString', value: jwks } } },
    forward: rule.forwardOriginalToken ?? false,
    fromHeaders: noLocation ? [DEFAULT_TOKEN_HEADER] : (rule.fromHeaders ?? []).map((h) => ({ name: h.name, valuePrefix: h.prefix ?? '' })),
    fromParams: noLocation ? [DEFAULT_TOKEN_PARAM] : (rule.fromParams ?? []),
    fromCookies: rule.fromCookies ?? [],
    forwardPayloadHeader: rule.outputPayloadToHeader ?? '',
    payloadInMetadata: JWT_PAYLOAD_METADATA_KEY,
    normalizePayloadInMetadata: { spaceDelimitedClaims: spaceDelimitedClaims(rule) },
    claimToHeaders: (rule.outputClaimToHeaders ?? []).map((c) => ({ headerName: c.header, claimName: c.claim })),
  });
}

const req = (r: MessageInitShape<typeof JwtRequirementSchema>['requiresType']): JwtRequirement => create(JwtRequirementSchema, { requiresType: r });
const byName = (name: string) => req({ case: 'providerName', value: name });
const anyOf = (requirements: JwtRequirement[]) => req({ case: 'requiresAny', value: { requirements } });
const optional = (name: string) => anyOf([byName(name), req({ case: 'allowMissing', value: {} })]);

/**
 * A token that is present must verify with some provider; no token passes (authorization decides).
 * One provider: any(P, allow_missing). Several: any(P1, ..., Pn, all(any(P1, allow_missing), ...)):
 * the last branch lets a request without any token through while still rejecting a bad token in
 * any provider's location, so a valid token in one place cannot mask a forged one in another.
 */
function requirement(names: string[]): JwtRequirement {
  if (names.length === 1) return optional(names[0]!);
  return anyOf([...names.map(byName), req({ case: 'requiresAll', value: { requirements: names.map(optional) } })]);
}

/**
 * The jwt_authn config for a workload, or null when no RequestAuthentication selects it (tokens are
 * then not inspected). `policies` are those selecting the workload, in selection order; their rules
 * are merged, one provider per rule.
 */
export function buildJwtAuthn(policies: readonly RequestAuthentication[], lookup: JwksLookup, warnings: string[] = []): JwtAuthentication | null {
  const rules = policies.flatMap((p) => p.spec.jwtRules ?? []);
  if (rules.length === 0) return null;
  const providers: Record<string, JwtProvider> = {};
  const names = rules.map((rule, i) => {
    const name = providerName(i);
    providers[name] = provider(rule, keysOf(rule, lookup, warnings));
    return name;
  });
  return create(JwtAuthenticationSchema, {
    providers,
    rules: names.length
      ? [{ match: { pathSpecifier: { case: 'prefix', value: '/' } }, requirementType: { case: 'requires', value: requirement(names) } }]
      : [],
    bypassCorsPreflight: true,
  });
}
