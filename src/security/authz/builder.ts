// AuthorizationPolicies that select a workload -> its rbac HTTP filters (and, for CUSTOM, the
// ext_authz filter each CUSTOM rbac filter gates; authz/custom.ts).
// One filter per action present, in the order the proxy must run them: CUSTOM, AUDIT, DENY, ALLOW.
// AUDIT runs before the enforcing filters so that it also sees the requests they reject.
import { create } from '@bufbuild/protobuf';
import { RBACSchema, type RBAC } from '../../gen/envoy/extensions/filters/http/rbac/v3/rbac_pb.js';
import { RBAC_Action, type Policy } from '../../gen/envoy/config/rbac/v3/rbac_pb.js';
import type { ExtAuthz } from '../../gen/envoy/extensions/filters/http/ext_authz/v3/ext_authz_pb.js';
import { type AuthorizationAction, type AuthorizationPolicy } from '../../api/types.js';
import { RBAC_FILTER_NAME } from '../../envoy/names.js';
import { translateRule, type OnError, type PolicyLayout } from './rule.js';
import { buildCustomFilters, type Collected } from './custom.js';
import { NO_AUTHORIZERS, type AuthorizerLookup } from './ext-authz.js';
import { rbacPolicyName } from './policy-names.js';

export { parseRbacPolicyName, rbacPolicyName } from './policy-names.js';

export const FILTER_ORDER: readonly AuthorizationAction[] = ['CUSTOM', 'AUDIT', 'DENY', 'ALLOW'];

/** The annotation that makes an AuthorizationPolicy shadow only (the production mesh's `istio.io/dry-run`). */
export const DRY_RUN_ANNOTATION = 'mesh.io/dry-run';

/** shadow_rules_stat_prefix of the dry-run rules, by the Envoy action they run as. */
const DRY_RUN_STAT_PREFIX: Partial<Record<RBAC_Action, string>> = {
  [RBAC_Action.ALLOW]: 'mesh_dry_run_allow_',
  [RBAC_Action.DENY]: 'mesh_dry_run_deny_',
};

/** The ext_authz filter that follows a CUSTOM rbac filter and runs when its shadow rules matched. */
export interface ExtAuthzFilter {
  readonly provider: string;
  readonly config: ExtAuthz;
}

export interface RbacFilter {
  /** The HTTP filter name (the same for every rbac filter). */
  readonly name: string;
  readonly action: AuthorizationAction;
  readonly config: RBAC;
  /** By RBAC policy name: which from/to entry and `when` condition each generated matcher stands for. */
  readonly layouts: Readonly<Record<string, PolicyLayout>>;
  /** CUSTOM only: the external authorizer asked when this filter's shadow rules match. */
  readonly extAuthz?: ExtAuthzFilter;
}

export interface RbacBuild {
  readonly filters: RbacFilter[];
  /** Values that could not be translated, each naming the policy, rule, field and value. */
  readonly warnings: string[];
}

function actionOf(p: AuthorizationPolicy): AuthorizationAction {
  return p.spec.action ?? 'ALLOW';
}

/**
 * Whether the policy is dry-run. The value is a boolean as Go's ParseBool reads it; any other value
 * is a warning and the policy is enforced (fails closed), as in the production mesh.
 */
function isDryRun(p: AuthorizationPolicy, warnings: string[]): boolean {
  const value = p.metadata.annotations?.[DRY_RUN_ANNOTATION];
  if (value === undefined) return false;
  if (['1', 't', 'T', 'true', 'TRUE', 'True'].includes(value)) return true;
  if (['0', 'f', 'F', 'false', 'FALSE', 'False'].includes(value)) return false;
  warnings.push(`AuthorizationPolicy ${p.metadata.namespace}/${p.metadata.name}: annotation ${DRY_RUN_ANNOTATION}: "${value}" is not a boolean (expected "true" or "false"); the policy is enforced`);
  return false;
}

/** TCP chains have no ext_authz filter here (the Go mesh's network ext_authz is not built): CUSTOM rules deny. */
const NO_TCP_AUTHORIZER: AuthorizerLookup = (provider) => ({ error: `TCP chains have no network ext_authz filter to ask provider ${JSON.stringify(provider)}` });

const ENVOY_ACTION: Readonly<Record<Exclude<AuthorizationAction, 'CUSTOM'>, RBAC_Action>> = {
  ALLOW: RBAC_Action.ALLOW,
  DENY: RBAC_Action.DENY,
  AUDIT: RBAC_Action.LOG,
};

const ON_ERROR: Readonly<Record<AuthorizationAction, OnError>> = {
  ALLOW: 'drop-rule',
  AUDIT: 'drop-rule',
  DENY: 'drop-clause',
  CUSTOM: 'drop-clause',
};

/** On a TCP chain: an ALLOW rule with an HTTP-only field is left out, the others lose those fields (authz/rule.ts). */
const ON_HTTP_ONLY: Readonly<Record<AuthorizationAction, OnError>> = {
  ALLOW: 'drop-rule',
  AUDIT: 'drop-clause',
  DENY: 'drop-clause',
  CUSTOM: 'drop-clause',
};

/** Which chains the filters are for: HTTP connection managers, or TCP proxies (the network rbac filter). */
export type ChainProtocol = 'http' | 'tcp';

/** Translates the rules of `policies` into named RBAC policies; warnings name policy, rule and field. */
function collect(policies: readonly AuthorizationPolicy[], action: AuthorizationAction, warnings: string[], protocol: ChainProtocol, provider?: string): Collected {
  const out = { policies: {} as Record<string, Policy>, layouts: {} as Record<string, PolicyLayout> };
  for (const p of policies) {
    for (const [i, rule] of (p.spec.rules ?? []).entries()) {
      const name = rbacPolicyName(p.metadata.namespace, p.metadata.name, i, provider);
      const result = translateRule(rule, ON_ERROR[action], protocol === 'tcp' ? ON_HTTP_ONLY[action] : undefined);
      warnings.push(...result.warnings.map((w) => `AuthorizationPolicy ${p.metadata.namespace}/${p.metadata.name} rules[${i}].${w}`));
      if (result.policy && result.layout) {
        out.policies[name] = result.policy;
        out.layouts[name] = result.layout;
      }
    }
  }
  return out;
}

/**
 * Builds the rbac filters for the policies selecting one workload (chosen by selectPolicies in src/model/selection.ts). Pure.
 * An ALLOW policy without rules contributes no Envoy policy, so a lone `spec: {}` yields an ALLOW
 * filter with no policies: every request is denied. A DENY policy without rules denies nothing.
 * `authorizers` resolves the providers of CUSTOM policies (none: their rules deny).
 * `protocol` 'tcp': the rules as a TCP chain's network rbac filters see them (HTTP-only fields
 * handled as ON_HTTP_ONLY says); CUSTOM rules deny there, as no network ext_authz filter is built.
 */
export function buildRbacFilters(policies: readonly AuthorizationPolicy[], authorizers: AuthorizerLookup = NO_AUTHORIZERS, protocol: ChainProtocol = 'http'): RbacBuild {
  const warnings: string[] = [];
  const filters: RbacFilter[] = [];
  const dryRun = new Set(policies.filter((p) => isDryRun(p, warnings)));
  for (const action of FILTER_ORDER) {
    const ofAction = policies.filter((p) => actionOf(p) === action);
    if (ofAction.length === 0) continue;
    if (action === 'CUSTOM') {
      const run = (ps: readonly AuthorizationPolicy[], provider?: string) => collect(ps, action, warnings, protocol, provider);
      filters.push(...buildCustomFilters(ofAction, (p) => dryRun.has(p), run, protocol === 'tcp' ? NO_TCP_AUTHORIZER : authorizers, DRY_RUN_STAT_PREFIX[RBAC_Action.DENY]!, warnings));
      continue;
    }
    // Dry-run policies go to shadow_rules: evaluated and counted, never enforced.
    const enforcedPolicies = ofAction.filter((p) => !dryRun.has(p));
    const shadowPolicies = ofAction.filter((p) => dryRun.has(p));
    const enforced = collect(enforcedPolicies, action, warnings, protocol);
    const shadow = collect(shadowPolicies, action, warnings, protocol);
    const envoyAction = ENVOY_ACTION[action];
    const rules = enforcedPolicies.length ? { rules: { action: envoyAction, policies: enforced.policies } } : {};
    const shadowRules = shadowPolicies.length ? { shadowRules: { action: envoyAction, policies: shadow.policies }, shadowRulesStatPrefix: DRY_RUN_STAT_PREFIX[envoyAction] ?? '' } : {};
    const config = create(RBACSchema, { ...rules, ...shadowRules });
    filters.push({ name: RBAC_FILTER_NAME, action, config, layouts: { ...enforced.layouts, ...shadow.layouts } });
  }
  return { filters, warnings };
}
