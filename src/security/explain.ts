// The decision a workload's proxy makes for one request (for /debug/authz_explain), computed by
// building the same filters the workload receives and evaluating those messages in chain order:
// jwt_authn, then the rbac filters (CUSTOM, AUDIT, DENY, ALLOW). Pure.
import type { AuthorizationAction, AuthorizationPolicy, RequestAuthentication } from '../api/types.js';
import { buildJwtAuthn, type JwksLookup } from './authn/jwt-filter.js';
import { FAIL_CLOSED_JWKS } from './authn/jwks.js';
import { evaluateJwtAuthn, type TokenState } from './authn/requirement.js';
import { buildRbacFilters, parseRbacPolicyName } from './authz/builder.js';
import { evaluateRbacFilter, type RequestContext } from './authz/evaluate.js';
import { verifyToken } from './authn/verify.js';
import { buildWorkloadSecurity } from './filters.js';
import type { WorkloadRef } from '../model/selection.js';

export interface ExplainRequest {
  readonly method: string;
  /** Path with optional query. */
  readonly path: string;
  readonly host?: string;
  readonly headers?: Readonly<Record<string, string>>;
  /** The token after signature and expiry checks (by the caller, with the resolver's keys). */
  readonly token: TokenState;
  /** Peer identity: `spiffe://td/ns/x/sa/y` or `td/ns/x/sa/y`; absent without mTLS. */
  readonly sourcePrincipal?: string;
  readonly sourceIp?: string;
  readonly remoteIp?: string;
  readonly destinationIp?: string;
  readonly destinationPort?: number;
  readonly sni?: string;
}

export interface ExplainPolicies {
  /** The policies that select the workload (see selection.ts). */
  readonly requestAuthentications: readonly RequestAuthentication[];
  readonly authorizationPolicies: readonly AuthorizationPolicy[];
}

export interface Explanation {
  readonly status: 200 | 401 | 403;
  readonly decision: 'allow' | 'deny';
  /** The filter that decided: `jwt_authn`, `rbac`, or `none` when every filter let it pass. */
  readonly stage: 'jwt_authn' | 'rbac' | 'none';
  readonly action?: AuthorizationAction;
  /** The AuthorizationPolicy and rule index that decided, when one did. */
  readonly policy?: { readonly namespace: string; readonly name: string; readonly rule: number };
  /** The condition that decided, in words. */
  readonly because: string;
  /** Every filter passed through, with its verdict. */
  readonly trace: readonly string[];
}

function context(req: ExplainRequest, metadata: Record<string, unknown>): RequestContext {
  const headers: Record<string, string> = {};
  for (const [k, v] of Object.entries(req.headers ?? {})) headers[k.toLowerCase()] = v;
  headers[':method'] = req.method.toUpperCase();
  headers[':path'] = req.path;
  const host = req.host ?? headers.host;
  if (host !== undefined) headers[':authority'] = host;
  const peer = req.sourcePrincipal;
  return {
    headers,
    metadata,
    ...(peer !== undefined ? { peerPrincipal: peer.startsWith('spiffe://') ? peer : `spiffe://${peer}` } : {}),
    ...(req.sourceIp !== undefined ? { sourceIp: req.sourceIp } : {}),
    ...(req.remoteIp !== undefined ? { remoteIp: req.remoteIp } : {}),
    ...(req.destinationIp !== undefined ? { destinationIp: req.destinationIp } : {}),
    ...(req.destinationPort !== undefined ? { destinationPort: req.destinationPort } : {}),
    ...(req.sni !== undefined ? { sni: req.sni } : {}),
  };
}

/** Keys do not matter here: the token arrives already verified or not. */
const noKeys: JwksLookup = () => FAIL_CLOSED_JWKS;

export function explain(policies: ExplainPolicies, req: ExplainRequest): Explanation {
  const trace: string[] = [];
  const jwt = buildJwtAuthn(policies.requestAuthentications, noKeys);
  let metadata: Record<string, unknown> = {};
  if (jwt) {
    const d = evaluateJwtAuthn(jwt, req.token, req.path);
    trace.push(`jwt_authn: ${d.allowed ? 'pass' : d.status}: ${d.because}`);
    if (d.status !== 200) return { status: d.status, decision: 'deny', stage: 'jwt_authn', because: d.because, trace };
    metadata = d.metadata;
  } else {
    trace.push('jwt_authn: absent (no RequestAuthentication selects the workload; tokens are not inspected)');
  }
  const ctx = context(req, metadata);
  for (const filter of buildRbacFilters(policies.authorizationPolicies).filters) {
    const d = evaluateRbacFilter(filter.config, ctx);
    const decided = d.matchedPolicy ? parseRbacPolicyName(d.matchedPolicy) : undefined;
    const misses = d.misses.map((m) => `${m.policy}: ${m.because}`);
    trace.push(`rbac ${filter.action}: ${d.allowed ? 'pass' : '403'}: ${d.matchedPolicy ? `${d.matchedPolicy} matched: ` : ''}${d.because}${misses.length ? ` [${misses.join('; ')}]` : ''}`);
    if (!d.allowed) {
      const because = d.matchedPolicy ? d.because : misses.length ? `${d.because}: ${misses.join('; ')}` : d.because;
      return { status: 403, decision: 'deny', stage: 'rbac', action: filter.action, ...(decided ? { policy: decided } : {}), because, trace };
    }
    if (filter.action === 'ALLOW' && decided) {
      return { status: 200, decision: 'allow', stage: 'rbac', action: 'ALLOW', policy: decided, because: d.because, trace };
    }
  }
  return { status: 200, decision: 'allow', stage: 'none', because: 'no filter rejected the request', trace };
}

export interface ExplainForWorkload {
  readonly workload: WorkloadRef;
  /** Every RequestAuthentication and AuthorizationPolicy in the store; selection happens here. */
  readonly requestAuthentications: readonly RequestAuthentication[];
  readonly authorizationPolicies: readonly AuthorizationPolicy[];
  /** The JWKS resolver's lookup: the raw token is verified with the keys the workload gets. */
  readonly lookup: JwksLookup;
  readonly request: Omit<ExplainRequest, 'token'> & { readonly token?: string };
  /** A token whose kid is in no key of its issuer: pass it to resolver.refreshForUnknownKid. */
  readonly onUnknownKid?: (issuer: string, kid: string) => void;
  readonly rootNamespace?: string;
}

/** /debug/authz_explain: selection, filters, token verification, then explain(). */
export async function explainForWorkload(input: ExplainForWorkload): Promise<Explanation & { readonly selected: readonly string[] }> {
  const sec = buildWorkloadSecurity(input.workload, input.requestAuthentications, input.authorizationPolicies, input.lookup, input.rootNamespace);
  const token = sec.jwtAuthn
    ? await verifyToken(sec.jwtAuthn, input.request.token)
    : input.request.token
      ? ({ kind: 'invalid', reason: 'not inspected: no RequestAuthentication selects the workload' } as const)
      : ({ kind: 'missing' } as const);
  if ('unknownKid' in token && token.unknownKid) input.onUnknownKid?.(token.unknownKid.issuer, token.unknownKid.kid);
  const selected = [...sec.requestAuthentications, ...sec.authorizationPolicies].map((p) => `${p.kind}/${p.metadata.namespace}/${p.metadata.name}`);
  return { ...explain(sec, { ...input.request, token }), selected };
}
