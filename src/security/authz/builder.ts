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
    const envoyPolicies: Record<string, Policy> = {};
    const layouts: Record<string, PolicyLayout> = {};
    for (const p of ofAction) {
      for (const [i, rule] of (p.spec.rules ?? []).entries()) {
        const name = rbacPolicyName(p.metadata.namespace, p.metadata.name, i);
        const result = translateRule(rule, ON_ERROR[action]);
        warnings.push(...result.warnings.map((w) => `AuthorizationPolicy ${p.metadata.namespace}/${p.metadata.name} rules[${i}].${w}`));
        if (result.policy && result.layout) {
          envoyPolicies[name] = result.policy;
          layouts[name] = result.layout;
        }
      }
    }
    const rules = { action: ENVOY_ACTION[action], policies: envoyPolicies };
    const config = create(RBACSchema, action === 'CUSTOM' ? { rules, rulesStatPrefix: CUSTOM_STAT_PREFIX } : { rules });
    filters.push({ name: RBAC_FILTER_NAME, action, config, layouts });
  }
  return { filters, warnings };
}
