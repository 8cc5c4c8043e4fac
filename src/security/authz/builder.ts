// AuthorizationPolicies that select a workload -> its rbac HTTP filters.
// One filter per action present, in the order the proxy must run them: CUSTOM, AUDIT, DENY, ALLOW.
// AUDIT runs before the enforcing filters so that it also sees the requests they reject.
import { create } from '@bufbuild/protobuf';
import { RBACSchema, type RBAC } from '../../gen/envoy/extensions/filters/http/rbac/v3/rbac_pb.js';
import { RBAC_Action, type Policy } from '../../gen/envoy/config/rbac/v3/rbac_pb.js';
import { type AuthorizationAction, type AuthorizationPolicy } from '../../api/types.js';
import { RBAC_FILTER_NAME } from '../../envoy/names.js';
import { translateRule, type OnError, type PolicyLayout } from './rule.js';

export const FILTER_ORDER: readonly AuthorizationAction[] = ['CUSTOM', 'AUDIT', 'DENY', 'ALLOW'];

/** Prefix of the stats of the CUSTOM filter, which stands in for an external authorizer. */
export const CUSTOM_STAT_PREFIX = 'mesh_ext_authz_';

/** The annotation that makes an AuthorizationPolicy shadow only (the production mesh's `istio.io/dry-run`). */
export const DRY_RUN_ANNOTATION = 'mesh.io/dry-run';

/** shadow_rules_stat_prefix of the dry-run rules, by the Envoy action they run as. */
const DRY_RUN_STAT_PREFIX: Partial<Record<RBAC_Action, string>> = {
  [RBAC_Action.ALLOW]: 'mesh_dry_run_allow_',
  [RBAC_Action.DENY]: 'mesh_dry_run_deny_',
};

export interface RbacFilter {
  /** The HTTP filter name (the same for every rbac filter). */
  readonly name: string;
  readonly action: AuthorizationAction;
  readonly config: RBAC;
  /** By RBAC policy name: which from/to entry and `when` condition each generated matcher stands for. */
  readonly layouts: Readonly<Record<string, PolicyLayout>>;
}

export interface RbacBuild {
  readonly filters: RbacFilter[];
  /** Values that could not be translated, each naming the policy, rule, field and value. */
  readonly warnings: string[];
}

/** `ns[<namespace>]-policy[<name>]-rule[<index>]`, the production mesh's RBAC policy naming. */
export function rbacPolicyName(namespace: string, name: string, rule: number): string {
  return `ns[${namespace}]-policy[${name}]-rule[${rule}]`;
}

/** The inverse of rbacPolicyName, for explanations. */
export function parseRbacPolicyName(key: string): { namespace: string; name: string; rule: number } | undefined {
  const m = /^ns\[(.*)\]-policy\[(.*)\]-rule\[(\d+)\]$/.exec(key);
  return m ? { namespace: m[1]!, name: m[2]!, rule: Number(m[3]) } : undefined;
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

// CUSTOM delegates to an external authorizer, which the data plane does not have yet: the requests
// a CUSTOM policy would send there are denied (fail closed) rather than let through unchecked.
const ENVOY_ACTION: Readonly<Record<AuthorizationAction, RBAC_Action>> = {
  ALLOW: RBAC_Action.ALLOW,
  DENY: RBAC_Action.DENY,
  CUSTOM: RBAC_Action.DENY,
  AUDIT: RBAC_Action.LOG,
};

const ON_ERROR: Readonly<Record<AuthorizationAction, OnError>> = {
  ALLOW: 'drop-rule',
  AUDIT: 'drop-rule',
  DENY: 'drop-clause',
  CUSTOM: 'drop-clause',
};

/**
 * Builds the rbac filters for the policies selecting one workload (chosen by selectPolicies in src/model/selection.ts). Pure.
 * An ALLOW policy without rules contributes no Envoy policy, so a lone `spec: {}` yields an ALLOW
 * filter with no policies: every request is denied. A DENY policy without rules denies nothing.
 */
export function buildRbacFilters(policies: readonly AuthorizationPolicy[]): RbacBuild {
  const warnings: string[] = [];
  const filters: RbacFilter[] = [];
  for (const action of FILTER_ORDER) {
    const ofAction = policies.filter((p) => actionOf(p) === action);
    if (ofAction.length === 0) continue;
    // Dry-run policies go to shadow_rules: evaluated and counted, never enforced.
    const enforced: Record<string, Policy> = {};
    const shadow: Record<string, Policy> = {};
    let hasEnforced = false;
    let hasShadow = false;
    const layouts: Record<string, PolicyLayout> = {};
    for (const p of ofAction) {
      const dryRun = isDryRun(p, warnings);
      if (dryRun) hasShadow = true;
      else hasEnforced = true;
      for (const [i, rule] of (p.spec.rules ?? []).entries()) {
        const name = rbacPolicyName(p.metadata.namespace, p.metadata.name, i);
        const result = translateRule(rule, ON_ERROR[action]);
        warnings.push(...result.warnings.map((w) => `AuthorizationPolicy ${p.metadata.namespace}/${p.metadata.name} rules[${i}].${w}`));
        if (result.policy && result.layout) {
          (dryRun ? shadow : enforced)[name] = result.policy;
          layouts[name] = result.layout;
        }
      }
    }
    const envoyAction = ENVOY_ACTION[action];
    const rules = hasEnforced ? { rules: { action: envoyAction, policies: enforced }, ...(action === 'CUSTOM' ? { rulesStatPrefix: CUSTOM_STAT_PREFIX } : {}) } : {};
    const shadowRules = hasShadow ? { shadowRules: { action: envoyAction, policies: shadow }, shadowRulesStatPrefix: DRY_RUN_STAT_PREFIX[envoyAction] ?? '' } : {};
    const config = create(RBACSchema, { ...rules, ...shadowRules });
    filters.push({ name: RBAC_FILTER_NAME, action, config, layouts });
  }
  return { filters, warnings };
}
