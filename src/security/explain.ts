// The decision a workload's proxy makes for one request (/debug/authz_explain). There is one
// evaluator: the data plane's. The workload's filter configs, as the builders generate them for the
// push, are compiled with the proxy's own jwt_authn and rbac compilers and run in chain order on a
// synthetic request, so the decision is by construction the proxy's. What this file adds is the
// explanation: the deciding RBAC policy name is mapped back to the AuthorizationPolicy and rule,
// and the matched (or failing) principal/permission to its `from`/`to` entry and `when`
// condition, each re-checked with the data plane's own matcher compilers.
import type { JsonObject, JsonValue } from '@bufbuild/protobuf';
import type { AuthorizationAction, AuthorizationPolicy, RequestAuthentication, Rule } from '../api/types.js';
import { compileJwtAuthn } from '../envoy/jwt-authn.js';
import { compilePermission, compilePrincipal, compileRbacFilter, type RbacExplanation } from '../envoy/rbac.js';
import { pathOnly, requestView, type RequestView, type StreamRequest } from '../envoy/request.js';
import type { JwtAuthentication } from '../gen/envoy/extensions/filters/http/jwt_authn/v3/config_pb.js';
import type { Permission, Policy, Principal } from '../gen/envoy/config/rbac/v3/rbac_pb.js';
import type { WorkloadRef } from '../model/selection.js';
import type { JwksLookup } from './authn/builder.js';
import { JWT_AUTHN_FILTER_NAME } from '../envoy/names.js';
import { JWT_PAYLOAD_METADATA_KEY } from './authn/names.js';
import { parseRbacPolicyName, type ExtAuthzFilter, type RbacFilter } from './authz/builder.js';
import { compileMetadataMatcher } from '../envoy/matchers.js';
import type { ClauseInfo, PolicyLayout } from './authz/rule.js';
import { bracketPath } from './authz/translators.js';
import { buildWorkloadSecurity, type SecurityOptions, type WorkloadSecurity } from './filters.js';

export interface ExplainRequest {
  readonly method: string;
  /** Path with optional query. */
  readonly path: string;
  readonly host?: string;
  readonly headers?: Readonly<Record<string, string>>;
  /** A raw JWT, put where the provider of its issuer looks for tokens (default `Authorization: Bearer`). */
  readonly token?: string;
  /** Peer identity: `spiffe://td/ns/x/sa/y` or `td/ns/x/sa/y`; absent without mTLS. */
  readonly sourcePrincipal?: string;
  readonly sourceIp?: string;
  readonly remoteIp?: string;
  readonly destinationIp?: string;
  readonly destinationPort?: number;
  readonly sni?: string;
}

export interface DecidingRule {
  readonly namespace: string;
  readonly name: string;
  readonly rule: number;
  /** The `from` entry whose principal matched (absent when the rule has no `from`). */
  readonly from?: number;
  /** The `to` entry whose permission matched (absent when the rule has no `to`). */
  readonly to?: number;
}

/** What the shadow rules of one filter (dry-run policies) would decide; never enforced. */
export interface ShadowDecision {
  readonly action: AuthorizationAction;
  /** The shadow engine's result, as the proxy records it in `<prefix>shadow_engine_result`. */
  readonly result: 'allowed' | 'denied';
  readonly policy?: DecidingRule;
  readonly because: string;
  /** False when an enforcing filter before it ends the request: the proxy neither counts nor logs it then. */
  readonly reached: boolean;
}

/** A CUSTOM policy matched: the proxy asks its provider, whose answer decides before the rest. */
export interface ExtAuthzCheck {
  readonly provider: string;
  /** Whether a CUSTOM rule matched, so the proxy asks the provider. */
  readonly asked: boolean;
  readonly policy?: DecidingRule;
  readonly because: string;
}

export interface Explanation {
  readonly status: number;
  readonly decision: 'allow' | 'deny';
  /** The filter that decided: `jwt_authn`, `rbac`, or `none` when every filter let it pass. */
  readonly stage: 'jwt_authn' | 'rbac' | 'none';
  readonly action?: AuthorizationAction;
  /** The AuthorizationPolicy, rule and entries that decided, when one did. */
  readonly policy?: DecidingRule;
  /** The condition that decided, in words. */
  readonly because: string;
  /** Every filter passed through, with its verdict. */
  readonly trace: readonly string[];
  /**
   * CUSTOM policies: their provider, and whether it is asked. When it is, the decision above is
   * what follows when it allows; when it denies, its answer is the reply.
   */
  readonly extAuthz?: ExtAuthzCheck;
  /** Dry-run policies: what their shadow rules would decide, separately from the decision. */
  readonly shadow?: readonly ShadowDecision[];
}

export interface ExplainOptions {
  /** A token whose kid is in no key of its issuer: pass it to resolver.refreshForUnknownKid. */
  readonly onUnknownKid?: (issuer: string, kid: string) => void;
}

/** The security part of a workload's build that explain() runs. */
export type ExplainSecurity = Pick<WorkloadSecurity, 'jwtAuthn' | 'rbac' | 'authorizationPolicies'>;

// ---------------------------------------------------------------------------------------------
// The synthetic request

function unverifiedIssuer(token: string): string | undefined {
  try {
    const payload = JSON.parse(Buffer.from(token.split('.')[1] ?? '', 'base64url').toString('utf8')) as unknown;
    const iss = (payload as { iss?: unknown } | null)?.iss;
    return typeof iss === 'string' ? iss : undefined;
  } catch {
    return undefined;
  }
}

/** Puts the token where the provider of its issuer (else the first provider) looks first. */
function placeToken(token: string, config: JwtAuthentication | null, headers: Record<string, string>, path: string): string {
  const providers = config ? Object.keys(config.providers).sort().map((n) => config.providers[n]!) : [];
  const iss = unverifiedIssuer(token);
  const p = providers.find((x) => x.issuer === iss) ?? providers[0];
  const header = p?.fromHeaders[0];
  if (header) headers[header.name.toLowerCase()] = `${header.valuePrefix}${token}`;
  else if (p?.fromParams[0]) return `${path}${path.includes('?') ? '&' : '?'}${encodeURIComponent(p.fromParams[0])}=${encodeURIComponent(token)}`;
  else if (p?.fromCookies[0]) headers.cookie = [headers.cookie, `${p.fromCookies[0]}=${token}`].filter(Boolean).join('; ');
  else headers.authorization = `Bearer ${token}`;
  return path;
}

function synthetic(req: ExplainRequest, jwt: JwtAuthentication | null): StreamRequest {
  const headers: Record<string, string> = {};
  for (const [k, v] of Object.entries(req.headers ?? {})) headers[k.toLowerCase()] = v;
  const path = req.token ? placeToken(req.token, jwt, headers, req.path) : req.path;
  const authority = req.host ?? headers.host ?? '';
  delete headers.host;
  const peer = req.sourcePrincipal;
  const source = { address: req.sourceIp ?? '0.0.0.0', port: 0 };
  return requestView({
    method: req.method.toUpperCase(),
    path,
    authority,
    headers,
    source,
    remote: { address: req.remoteIp ?? source.address, port: 0 },
    destination: { address: req.destinationIp ?? '0.0.0.0', port: req.destinationPort ?? 0 },
    requestedServerName: req.sni ?? '',
    ...(peer !== undefined ? { peer: { uriSans: [peer.startsWith('spiffe://') ? peer : `spiffe://${peer}`], dnsSans: [], subject: '' } } : {}),
  });
}

// ---------------------------------------------------------------------------------------------
// Words for what the request carries

function jwtPayload(view: RequestView): JsonObject | undefined {
  const p = view.metadata[JWT_AUTHN_FILTER_NAME]?.[JWT_PAYLOAD_METADATA_KEY];
  return p !== null && typeof p === 'object' && !Array.isArray(p) ? p : undefined;
}

function walk(root: JsonValue | undefined, keys: readonly string[]): JsonValue | undefined {
  let v = root;
  for (const k of keys) {
    if (v === null || typeof v !== 'object' || Array.isArray(v) || !Object.hasOwn(v, k)) return undefined;
    v = v[k];
  }
  return v;
}

/** The request's value of a policy attribute, for the explanation only (matching is the data plane's). */
function attributeValue(attribute: string, view: RequestView): JsonValue | undefined {
  const payload = jwtPayload(view);
  switch (attribute) {
    case 'host':
      return view.authority;
    case 'method':
      return view.method;
    case 'path':
      return pathOnly(view.path);
    case 'destination.port':
      return view.destination.port;
    case 'destination.ip':
      return view.destination.address;
    case 'connection.sni':
      return view.requestedServerName || undefined;
    case 'source.principal':
    case 'source.namespace':
      return view.peer?.uriSans[0];
    case 'source.ip':
      return view.source.address;
    case 'remote.ip':
      return view.remote.address;
    case 'request.auth.principal':
      return payload && typeof payload.iss === 'string' && typeof payload.sub === 'string' ? `${payload.iss}/${payload.sub}` : undefined;
    case 'request.auth.audiences':
      return payload?.aud;
    case 'request.auth.presenter':
      return payload?.azp;
  }
  const claim = bracketPath(attribute, 'request.auth.claims');
  if (claim) return walk(payload, claim);
  const header = bracketPath(attribute, 'request.headers');
  if (header) return view.header(header[0]!.toLowerCase());
  return undefined;
}

function describeClause(c: ClauseInfo, holds: boolean, view: RequestView): string {
  const v = attributeValue(c.attribute, view);
  const has = v === undefined ? `${c.attribute} is absent` : `${c.attribute} = ${JSON.stringify(v)}`;
  const want = [c.values.length ? `one of ${JSON.stringify(c.values)}` : '', c.notValues.length ? `none of ${JSON.stringify(c.notValues)}` : ''].filter(Boolean).join(' and ');
  return `${c.where} ${holds ? 'holds' : 'fails'}: ${has}, required ${want}`;
}

// ---------------------------------------------------------------------------------------------
// RBAC policy -> AuthorizationPolicy rule

type Side = 'principal' | 'permission';

/** The AND-elements of a generated principal/permission (an `any` has none), aligned with the layout. */
function elements(side: Side, m: Principal | Permission): (Principal | Permission)[] {
  if (side === 'principal') {
    const id = (m as Principal).identifier;
    return id.case === 'andIds' ? id.value.ids : [];
  }
  const r = (m as Permission).rule;
  return r.case === 'andRules' ? r.value.rules : [];
}

/** Each clause of entry `index` on one side, checked with the data plane's matcher compiler. */
function checkEntry(side: Side, policy: Policy, layout: PolicyLayout, index: number, view: RequestView): { clause: ClauseInfo; holds: boolean }[] {
  const matcher = side === 'principal' ? policy.principals[index]! : policy.permissions[index]!;
  const infos = side === 'principal' ? layout.principals[index]! : layout.permissions[index]!;
  return elements(side, matcher).map((el, k) => {
    const field = `${side}s[${index}][${k}]`;
    const holds = side === 'principal' ? compilePrincipal(el as Principal, field)(view) : compilePermission(el as Permission, field)(view);
    return { clause: infos[k]!, holds };
  });
}

/** An RBAC policy of the filter's enforced or shadow rules (names are unique across both). */
function policyOf(filter: RbacFilter, name: string): Policy | undefined {
  return filter.config.rules?.policies[name] ?? filter.config.shadowRules?.policies[name];
}

function ruleOf(sec: ExplainSecurity, d: { namespace: string; name: string; rule: number }): Rule | undefined {
  return sec.authorizationPolicies.find((p: AuthorizationPolicy) => p.metadata.namespace === d.namespace && p.metadata.name === d.name)?.spec.rules?.[d.rule];
}

/** Why a matched policy matched: the entries and every clause of them. */
function whyMatched(filter: RbacFilter, sec: ExplainSecurity, name: string, ex: RbacExplanation, view: RequestView): { policy?: DecidingRule; because: string } {
  const d = parseRbacPolicyName(name);
  const detail = ex.policies.find((p) => p.name === name);
  const policy = policyOf(filter, name);
  const layout = filter.layouts[name];
  if (!d || !detail || !policy || !layout) return { because: `${name} matched` };
  const rule = ruleOf(sec, d);
  const principal = detail.principal!;
  const permission = detail.permission!;
  const words = [...checkEntry('principal', policy, layout, principal, view), ...checkEntry('permission', policy, layout, permission, view)].map((c) => describeClause(c.clause, c.holds, view));
  const deciding: DecidingRule = {
    ...d,
    ...(rule?.from?.length ? { from: principal } : {}),
    ...(rule?.to?.length ? { to: permission } : {}),
  };
  return { policy: deciding, because: `${name} matched: ${words.length ? words.join('; ') : 'the rule matches every request'}` };
}

/** Why a policy did not match: the first failing clause of each entry of the side that failed. */
function whyNot(filter: RbacFilter, detail: RbacExplanation['policies'][number], view: RequestView): string {
  const policy = policyOf(filter, detail.name);
  const layout = filter.layouts[detail.name];
  if (!policy || !layout) return `${detail.name}: no match`;
  const side: Side = detail.permission === undefined ? 'permission' : 'principal';
  const count = side === 'principal' ? policy.principals.length : policy.permissions.length;
  const reasons = Array.from({ length: count }, (_, i) => {
    const failing = checkEntry(side, policy, layout, i, view).find((c) => !c.holds);
    return failing ? describeClause(failing.clause, false, view) : `${side} ${i} fails`;
  });
  return `${detail.name}: ${reasons.join(' | ')}`;
}

// ---------------------------------------------------------------------------------------------

/** Runs the workload's compiled filters in chain order on the request and explains the outcome. */
export async function explain(sec: ExplainSecurity, req: ExplainRequest, opts: ExplainOptions = {}): Promise<Explanation> {
  const trace: string[] = [];
  const view = synthetic(req, sec.jwtAuthn);
  if (sec.jwtAuthn) {
    const jwt = compileJwtAuthn(sec.jwtAuthn, opts.onUnknownKid ? { onUnknownKid: opts.onUnknownKid } : {});
    const out = jwt.decodeHeaders(view);
    if (out.kind === 'reply') {
      const because = `${out.reply.body || out.reply.details} (the token does not validate)`;
      trace.push(`jwt_authn: ${out.reply.status}: ${because}`);
      return { status: out.reply.status, decision: 'deny', stage: 'jwt_authn', because, trace };
    }
    const payload = jwtPayload(view);
    trace.push(
      payload
        ? `jwt_authn: pass: token verified, issuer ${JSON.stringify(payload.iss)}, subject ${JSON.stringify(payload.sub)}`
        : 'jwt_authn: pass: no token where the providers look for one; a missing token is allowed (allow_missing)',
    );
  } else {
    trace.push('jwt_authn: absent (no RequestAuthentication selects the workload; tokens are not inspected)');
  }
  const shadow: ShadowDecision[] = [];
  let extAuthz: ExtAuthzCheck | undefined;
  let at = 0;
  const done = (e: Explanation): Explanation => {
    // Dry-run policies of the filters the request no longer reaches: what they would decide.
    for (const filter of sec.rbac.slice(at + 1)) {
      const engine = filter.extAuthz ? undefined : compileRbacFilter(filter.config).shadowEngine;
      if (engine) shadow.push(shadowDecision(filter, sec, engine.explain(view), view, false));
    }
    return { ...e, ...(extAuthz ? { extAuthz } : {}), ...(shadow.length ? { shadow } : {}) };
  };
  for (const [i, filter] of sec.rbac.entries()) {
    at = i;
    const compiled = compileRbacFilter(filter.config);
    const out = compiled.decodeHeaders(view);
    const shadowEx = compiled.shadowEngine?.explain(view);
    if (shadowEx && filter.extAuthz) {
      extAuthz = customCheck(filter, filter.extAuthz, sec, shadowEx, view);
      trace.push(`rbac CUSTOM + ext_authz: ${extAuthz.because}`);
      continue;
    }
    if (shadowEx) {
      const d = shadowDecision(filter, sec, shadowEx, view, true);
      shadow.push(d);
      trace.push(`rbac ${filter.action} (dry-run, not enforced): would be ${d.result}: ${d.because}`);
    }
    const ex = compiled.engine?.explain(view);
    const verdict = out.kind === 'reply' ? String(out.reply.status) : 'pass';
    if (!ex) {
      trace.push(`rbac ${filter.action}: ${verdict}: no enforced rules`);
      continue;
    }
    if (ex.matchedPolicy !== undefined) {
      const m = whyMatched(filter, sec, ex.matchedPolicy, ex, view);
      trace.push(`rbac ${filter.action}: ${verdict}: ${m.because}`);
      if (out.kind === 'reply') return done({ status: out.reply.status, decision: 'deny', stage: 'rbac', action: filter.action, ...(m.policy ? { policy: m.policy } : {}), because: m.because, trace });
      if (filter.action === 'ALLOW') return done({ status: 200, decision: 'allow', stage: 'rbac', action: 'ALLOW', ...(m.policy ? { policy: m.policy } : {}), because: m.because, trace });
      continue;
    }
    const misses = ex.policies.map((p) => whyNot(filter, p, view));
    const none = filter.action === 'ALLOW' && misses.length === 0 ? 'the ALLOW filter has no rules: nothing is allowed' : `no ${filter.action} rule matched`;
    const because = misses.length ? `${none}: ${misses.join('; ')}` : none;
    trace.push(`rbac ${filter.action}: ${verdict}: ${because}`);
    if (out.kind === 'reply') return done({ status: out.reply.status, decision: 'deny', stage: 'rbac', action: filter.action, because, trace });
  }
  return done({ status: 200, decision: 'allow', stage: 'none', because: 'no filter rejected the request', trace });
}

/** What a filter's shadow rules (dry-run policies) would decide, in the policies' words. */
function shadowDecision(filter: RbacFilter, sec: ExplainSecurity, ex: RbacExplanation, view: RequestView, reached: boolean): ShadowDecision {
  const result = ex.allowed ? 'allowed' : 'denied';
  if (ex.matchedPolicy !== undefined) {
    const m = whyMatched(filter, sec, ex.matchedPolicy, ex, view);
    return { action: filter.action, result, reached, ...(m.policy ? { policy: m.policy } : {}), because: m.because };
  }
  const misses = ex.policies.map((p) => whyNot(filter, p, view));
  return { action: filter.action, result, reached, because: `no dry-run ${filter.action} rule matched${misses.length ? `: ${misses.join('; ')}` : ''}` };
}

/**
 * The CUSTOM pair as the proxy runs it: the shadow rules wrote their result into the request's
 * metadata, and the ext_authz filter's own filter_enabled_metadata matcher says whether it asks.
 */
function customCheck(filter: RbacFilter, ext: ExtAuthzFilter, sec: ExplainSecurity, ex: RbacExplanation, view: RequestView): ExtAuthzCheck {
  const gate = ext.config.filterEnabledMetadata;
  const asks = gate ? compileMetadataMatcher(gate, 'filter_enabled_metadata')(view.metadata) : true;
  if (!asks || ex.matchedPolicy === undefined) {
    const misses = ex.policies.map((p) => whyNot(filter, p, view));
    return { provider: ext.provider, asked: false, because: `not sent to provider ${JSON.stringify(ext.provider)}: no CUSTOM rule matched${misses.length ? `: ${misses.join('; ')}` : ''}` };
  }
  const m = whyMatched(filter, sec, ex.matchedPolicy, ex, view);
  return { provider: ext.provider, asked: true, ...(m.policy ? { policy: m.policy } : {}), because: `sent to provider ${JSON.stringify(ext.provider)}, whose answer decides first (denied: its reply; allowed: the filters below): ${m.because}` };
}

export interface ExplainForWorkload extends ExplainOptions {
  readonly workload: WorkloadRef;
  /** Every RequestAuthentication and AuthorizationPolicy in the store; selection happens here. */
  readonly requestAuthentications: readonly RequestAuthentication[];
  readonly authorizationPolicies: readonly AuthorizationPolicy[];
  /** The JWKS resolver's lookup: the filters carry the keys the workload gets. */
  readonly lookup: JwksLookup;
  readonly request: ExplainRequest;
  readonly rootNamespace?: string;
  /** --plugins and the mesh config's providers, as for the push. */
  readonly options?: SecurityOptions;
}

/** /debug/authz_explain: selection and both builders as for the push, then explain(). */
export async function explainForWorkload(input: ExplainForWorkload): Promise<Explanation & { readonly selected: readonly string[] }> {
  const sec = buildWorkloadSecurity(input.workload, input.requestAuthentications, input.authorizationPolicies, input.lookup, input.rootNamespace, input.options);
  const selected = [...sec.requestAuthentications, ...sec.authorizationPolicies].map((p) => `${p.kind}/${p.metadata.namespace}/${p.metadata.name}`);
  return { ...(await explain(sec, input.request, input.onUnknownKid ? { onUnknownKid: input.onUnknownKid } : {})), selected };
}
