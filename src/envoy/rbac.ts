// The rbac HTTP filter: an RBAC message compiled once into predicate trees over the request view.
//
// `compileRbacEngine` is independent of the proxy: it takes a config.rbac.v3.RBAC and answers for a
// RequestView, so the control plane can reuse it for an "explain" endpoint (which policy matched).
import { scope } from '../common/log.js';
import { RBAC_Action, type Permission, type Policy, type Principal, type RBAC as RbacRules } from '../gen/envoy/config/rbac/v3/rbac_pb.js';
import type { RBAC as RbacFilterConfig } from '../gen/envoy/extensions/filters/http/rbac/v3/rbac_pb.js';
import type { HeaderMatcher } from '../gen/envoy/config/route/v3/route_components_pb.js';
import type { MetadataMatcher } from '../gen/envoy/type/matcher/v3/metadata_pb.js';
import type { PathMatcher } from '../gen/envoy/type/matcher/v3/path_pb.js';
import { ConfigError } from './config-error.js';
import {
  compileCidr,
  compileHeaderMatcher,
  compileMetadataMatcher,
  compileStringMatcher,
  type Predicate,
} from './matchers.js';
import { pathOnly, type PeerIdentity, type RequestView, type StreamRequest } from './request.js';
import { CONTINUE, type FilterOutcome } from './filter.js';
import { RBAC_FILTER_NAME } from './names.js';
import { compileUriTemplate } from './uri-template.js';
import { indexPoliciesByPath } from './rbac-index.js';

const log = scope('rbac');

/** The dynamic-metadata namespace of the shadow results. */
export const RBAC_DENIED_BODY = 'RBAC: access denied';

export type RbacActionName = 'ALLOW' | 'DENY' | 'LOG';

export interface RbacResult {
  readonly allowed: boolean;
  /** The first policy (by name) that matched, if any: Envoy's effective policy id. */
  readonly matchedPolicy?: string;
}

export interface RbacExplanation extends RbacResult {
  readonly action: RbacActionName;
  /** Every policy, sorted by name, with whether it matched and which permission/principal did. */
  readonly policies: readonly { name: string; matched: boolean; permission?: number; principal?: number }[];
}

export interface RbacEngine {
  readonly action: RbacActionName;
  evaluate(req: RequestView): RbacResult;
  explain(req: RequestView): RbacExplanation;
}

type RequestMatcherSpec =
  | { case: 'header'; value: HeaderMatcher }
  | { case: 'urlPath'; value: PathMatcher }
  | { case: 'metadata'; value: MetadataMatcher };

/** The matchers permissions and principals share; header and url_path never match a connection. */
function compileRequestMatcher(spec: RequestMatcherSpec, field: string): Predicate<RequestView> {
  switch (spec.case) {
    case 'header': {
      const h = compileHeaderMatcher(spec.value, `${field}.header`);
      return (req) => !req.connectionOnly && h(req.header);
    }
    case 'urlPath': {
      if (spec.value.rule.case !== 'path') throw new ConfigError(`${field}.url_path`, 'path is required');
      const s = compileStringMatcher(spec.value.rule.value, `${field}.url_path.path`);
      return (req) => !req.connectionOnly && s(pathOnly(req.path));
    }
    case 'metadata': {
      const m = compileMetadataMatcher(spec.value, `${field}.metadata`);
      return (req) => m(req.metadata);
    }
  }
}

// and/or without a closure per evaluation; one member is that member (the Go mesh nests single
// ids and rules several levels deep).
function all<T>(ps: readonly Predicate<T>[]): Predicate<T> {
  if (ps.length === 1) return ps[0]!;
  return (v) => {
    for (const p of ps) if (!p(v)) return false;
    return true;
  };
}

function any<T>(ps: readonly Predicate<T>[]): Predicate<T> {
  if (ps.length === 1) return ps[0]!;
  return (v) => {
    for (const p of ps) if (p(v)) return true;
    return false;
  };
}

export function compilePermission(p: Permission, field: string): Predicate<RequestView> {
  const r = p.rule;
  switch (r.case) {
    case 'andRules':
      return all(r.value.rules.map((x, i) => compilePermission(x, `${field}.and_rules.rules[${i}]`)));
    case 'orRules':
      return any(r.value.rules.map((x, i) => compilePermission(x, `${field}.or_rules.rules[${i}]`)));
    case 'notRule': {
      const inner = compilePermission(r.value, `${field}.not_rule`);
      return (req) => !inner(req);
    }
    case 'any':
      if (!r.value) throw new ConfigError(`${field}.any`, 'must be true');
      return () => true;
    case 'header':
    case 'urlPath':
    case 'metadata':
      return compileRequestMatcher(r, field);
    case 'destinationIp': {
      const c = compileCidr(r.value, `${field}.destination_ip`);
      return (req) => c(req.destination.address);
    }
    case 'destinationPort': {
      const port = r.value;
      return (req) => req.destination.port === port;
    }
    case 'destinationPortRange': {
      const { start, end } = r.value;
      return (req) => req.destination.port >= start && req.destination.port < end;
    }
    case 'requestedServerName': {
      const s = compileStringMatcher(r.value, `${field}.requested_server_name`);
      return (req) => s(req.requestedServerName);
    }
    case 'uriTemplate': {
      const t = compileUriTemplate(r.value, `${field}.uri_template`);
      return (req) => !req.connectionOnly && t(pathOnly(req.path));
    }
    default:
      throw new ConfigError(field, `permission rule ${r.case ?? '(none)'} is not supported`);
  }
}

/** URI SANs first, then DNS SANs, then the subject, as Envoy matches principal_name. */
function principalNames(peer: PeerIdentity): string[] {
  return [...peer.uriSans, ...peer.dnsSans, peer.subject];
}

export function compilePrincipal(p: Principal, field: string): Predicate<RequestView> {
  const id = p.identifier;
  switch (id.case) {
    case 'andIds':
      return all(id.value.ids.map((x, i) => compilePrincipal(x, `${field}.and_ids.ids[${i}]`)));
    case 'orIds':
      return any(id.value.ids.map((x, i) => compilePrincipal(x, `${field}.or_ids.ids[${i}]`)));
    case 'notId': {
      const inner = compilePrincipal(id.value, `${field}.not_id`);
      return (req) => !inner(req);
    }
    case 'any':
      if (!id.value) throw new ConfigError(`${field}.any`, 'must be true');
      return () => true;
    case 'authenticated': {
      const pn = id.value.principalName;
      if (!pn) return (req) => req.peer !== undefined;
      const s = compileStringMatcher(pn, `${field}.authenticated.principal_name`);
      return (req) => req.peer !== undefined && principalNames(req.peer).some(s);
    }
    case 'sourceIp':
    case 'directRemoteIp': {
      const c = compileCidr(id.value, `${field}.${id.case === 'sourceIp' ? 'source_ip' : 'direct_remote_ip'}`);
      return (req) => c(req.source.address);
    }
    case 'remoteIp': {
      const c = compileCidr(id.value, `${field}.remote_ip`);
      return (req) => c(req.remote.address);
    }
    case 'header':
    case 'urlPath':
    case 'metadata':
      return compileRequestMatcher(id, field);
    default:
      throw new ConfigError(field, `principal ${id.case ?? '(none)'} is not supported`);
  }
}

interface CompiledPolicy {
  readonly name: string;
  readonly permissions: readonly Predicate<RequestView>[];
  readonly principals: readonly Predicate<RequestView>[];
  /** Some permission and some principal match. */
  readonly matches: Predicate<RequestView>;
}

function compilePolicy(name: string, p: Policy, field: string): CompiledPolicy {
  if (p.condition || p.checkedCondition) throw new ConfigError(`${field}.condition`, 'CEL conditions are not supported');
  if (p.permissions.length === 0) throw new ConfigError(`${field}.permissions`, 'at least one permission is required');
  if (p.principals.length === 0) throw new ConfigError(`${field}.principals`, 'at least one principal is required');
  const permissions = p.permissions.map((x, i) => compilePermission(x, `${field}.permissions[${i}]`));
  const principals = p.principals.map((x, i) => compilePrincipal(x, `${field}.principals[${i}]`));
  const permitted = any(permissions);
  const identified = any(principals);
  return { name, permissions, principals, matches: (req) => permitted(req) && identified(req) };
}

const ACTION_NAMES: Record<RBAC_Action, RbacActionName> = {
  [RBAC_Action.ALLOW]: 'ALLOW',
  [RBAC_Action.DENY]: 'DENY',
  [RBAC_Action.LOG]: 'LOG',
};

/** Compiles a config.rbac.v3.RBAC. Policies are tried in name order, like Envoy's ordered map. */
export function compileRbacEngine(rules: RbacRules, field = 'rules'): RbacEngine {
  const action = ACTION_NAMES[rules.action];
  if (!action) throw new ConfigError(`${field}.action`, `unknown action ${rules.action}`);
  const names = Object.keys(rules.policies).sort();
  const policies = names.map((name) => compilePolicy(name, rules.policies[name] as Policy, `${field}.policies[${name}]`));
  // Only the policies whose permissions could match the request's path are evaluated.
  const candidates = indexPoliciesByPath(names.map((name) => rules.policies[name] as Policy));
  const decide = (matched: boolean): boolean => (action === 'ALLOW' ? matched : action === 'DENY' ? !matched : true);
  return {
    action,
    evaluate(req) {
      for (const i of candidates(pathOnly(req.path))) {
        const p = policies[i]!;
        if (p.matches(req)) return { allowed: decide(true), matchedPolicy: p.name };
      }
      return { allowed: decide(false) };
    },
    explain(req) {
      let matchedPolicy: string | undefined;
      const details = policies.map((p) => {
        const permission = p.permissions.findIndex((f) => f(req));
        const principal = p.principals.findIndex((f) => f(req));
        const matched = permission >= 0 && principal >= 0;
        if (matched) matchedPolicy ??= p.name;
        return { name: p.name, matched, ...(permission >= 0 ? { permission } : {}), ...(principal >= 0 ? { principal } : {}) };
      });
      return {
        action,
        allowed: decide(matchedPolicy !== undefined),
        ...(matchedPolicy !== undefined ? { matchedPolicy } : {}),
        policies: details,
      };
    },
  };
}

/**
 * Counters named as Envoy's rbac filter stats: `<rules_stat_prefix>allowed|denied` and
 * `<shadow_rules_stat_prefix>shadow_allowed|shadow_denied` (the prefixes are usually empty). The
 * network filter puts its own `<stat_prefix>rbac.` in front.
 */
export type RbacStats = Record<string, number>;

/** What an rbac filter config (HTTP or network) names besides its rules. */
export interface RbacRulesConfig {
  readonly rules?: RbacRules | undefined;
  readonly shadowRules?: RbacRules | undefined;
  readonly rulesStatPrefix?: string;
  readonly shadowRulesStatPrefix: string;
}

/** The enforced rules' decision for one request or connection (shadow rules already counted and recorded). */
export interface RbacDecision extends RbacResult {
  /** False when the config has no enforced rules: nothing was decided, nothing counted. */
  readonly enforced: boolean;
}

export interface CompiledRbacRules {
  readonly stats: RbacStats;
  /** undefined when the config has no enforced rules (Envoy then enforces nothing). */
  readonly engine: RbacEngine | undefined;
  readonly shadowEngine: RbacEngine | undefined;
  /**
   * Evaluates the shadow rules (counted, logged, their result written to `req.metadata` under
   * `metadataNamespace`), then the enforced rules (counted). Shared by the HTTP and network filters.
   */
  decide(req: RequestView, metadataNamespace: string): RbacDecision;
}

/** Compiles enforced and shadow rules with their counters. */
export function compileRbacRules(config: RbacRulesConfig): CompiledRbacRules {
  const engine = config.rules ? compileRbacEngine(config.rules, 'rules') : undefined;
  const shadowEngine = config.shadowRules ? compileRbacEngine(config.shadowRules, 'shadow_rules') : undefined;
  const shadowPrefix = config.shadowRulesStatPrefix;
  const ALLOWED = `${config.rulesStatPrefix ?? ''}allowed`;
  const DENIED = `${config.rulesStatPrefix ?? ''}denied`;
  const SHADOW_ALLOWED = `${shadowPrefix}shadow_allowed`;
  const SHADOW_DENIED = `${shadowPrefix}shadow_denied`;
  const stats: RbacStats = { [ALLOWED]: 0, [DENIED]: 0, [SHADOW_ALLOWED]: 0, [SHADOW_DENIED]: 0 };
  const count = (name: string) => (stats[name] = (stats[name] ?? 0) + 1);
  return {
    stats,
    engine,
    shadowEngine,
    decide(req, metadataNamespace) {
      if (shadowEngine) {
        // Shadow rules (a dry-run policy): evaluated, counted, logged and recorded, never enforced.
        const r = shadowEngine.evaluate(req);
        count(r.allowed ? SHADOW_ALLOWED : SHADOW_DENIED);
        log.debug(`shadow rules ${r.allowed ? 'allowed' : 'denied'} ${describe(req)}, matched policy ${r.matchedPolicy ?? 'none'}`);
        const md = { ...(req.metadata[metadataNamespace] ?? {}) };
        md[`${shadowPrefix}shadow_engine_result`] = r.allowed ? 'allowed' : 'denied';
        if (r.matchedPolicy !== undefined) md[`${shadowPrefix}shadow_effective_policy_id`] = r.matchedPolicy;
        req.metadata[metadataNamespace] = md;
      }
      if (!engine) return { allowed: true, enforced: false };
      const r = engine.evaluate(req);
      count(r.allowed ? ALLOWED : DENIED);
      if (!r.allowed) log.debug(`${describe(req)} denied, matched policy ${r.matchedPolicy ?? 'none'}`);
      return r.matchedPolicy === undefined ? { allowed: r.allowed, enforced: true } : { allowed: r.allowed, matchedPolicy: r.matchedPolicy, enforced: true };
    },
  };
}

function describe(req: RequestView): string {
  return req.connectionOnly ? `connection from ${req.source.address}:${req.source.port}` : `request ${req.method} ${req.path}`;
}

export interface CompiledRbacFilter extends Omit<CompiledRbacRules, 'decide'> {
  decodeHeaders(req: StreamRequest): FilterOutcome;
}

/** Compiles the HTTP filter config: enforced rules, shadow rules (evaluated and counted only). */
export function compileRbacFilter(config: RbacFilterConfig): CompiledRbacFilter {
  if (config.matcher || config.shadowMatcher) throw new ConfigError('matcher', 'the matcher API is not supported; use rules/shadow_rules');
  const compiled = compileRbacRules(config);
  return {
    stats: compiled.stats,
    engine: compiled.engine,
    shadowEngine: compiled.shadowEngine,
    decodeHeaders(req) {
      const r = compiled.decide(req, RBAC_FILTER_NAME);
      if (r.allowed) return CONTINUE;
      return {
        kind: 'reply',
        reply: { status: 403, body: RBAC_DENIED_BODY, headers: {}, details: `rbac_access_denied_matched_policy[${r.matchedPolicy ?? 'none'}]` },
      };
    },
  };
}
