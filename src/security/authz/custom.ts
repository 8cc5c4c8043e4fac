// CUSTOM AuthorizationPolicies -> the production mesh's filter pair: an rbac filter whose shadow
// rules are the CUSTOM rules (evaluated, never enforced; the matched policy's name lands in dynamic
// metadata) and the ext_authz filter, enabled only when that name is one of its provider's. So only
// the requests a CUSTOM rule matches are sent to the external authorizer. When the provider cannot
// be used (unknown, invalid, unresolvable service, several providers on one workload, the ext_authz
// plugin disabled) the CUSTOM rules become DENY rules: what would have been checked is refused.
import { create } from '@bufbuild/protobuf';
import { RBACSchema } from '../../gen/envoy/extensions/filters/http/rbac/v3/rbac_pb.js';
import { RBAC_Action, type Policy } from '../../gen/envoy/config/rbac/v3/rbac_pb.js';
import type { AuthorizationPolicy } from '../../api/types.js';
import { RBAC_FILTER_NAME } from '../../envoy/names.js';
import type { PolicyLayout } from './rule.js';
import type { RbacFilter } from './builder.js';
import { CUSTOM_STAT_PREFIX, type AuthorizerLookup } from './ext-authz.js';
import { BAD_CUSTOM_SUFFIX } from './policy-names.js';

/** Rules translated into named RBAC policies (and their layouts, for explanations). */
export interface Collected {
  readonly policies: Readonly<Record<string, Policy>>;
  readonly layouts: Readonly<Record<string, PolicyLayout>>;
}

/** Translates the policies' rules, naming each with `provider` in the CUSTOM prefix (or none). */
export type Collect = (policies: readonly AuthorizationPolicy[], provider?: string) => Collected;

const policyRef = (p: AuthorizationPolicy) => `${p.metadata.namespace}/${p.metadata.name}`;

/** The CUSTOM rules as DENY rules, each renamed so that the reason shows in stats and logs. */
export function customRulesDenied(c: Collected): RbacFilter {
  const policies: Record<string, Policy> = {};
  const layouts: Record<string, PolicyLayout> = {};
  for (const [name, policy] of Object.entries(c.policies)) {
    policies[name + BAD_CUSTOM_SUFFIX] = policy;
    layouts[name + BAD_CUSTOM_SUFFIX] = c.layouts[name]!;
  }
  return { name: RBAC_FILTER_NAME, action: 'CUSTOM', config: create(RBACSchema, { rules: { action: RBAC_Action.DENY, policies } }), layouts };
}

/**
 * The filters of the CUSTOM policies selecting a workload, in chain order. Dry-run CUSTOM
 * policies are only evaluated and counted (shadow rules, never sent to the authorizer: asking it
 * could change state there, and its answer would be thrown away).
 */
export function buildCustomFilters(
  policies: readonly AuthorizationPolicy[],
  dryRun: (p: AuthorizationPolicy) => boolean,
  collect: Collect,
  authorizers: AuthorizerLookup,
  shadowStatPrefix: string,
  warnings: string[],
): RbacFilter[] {
  const filters: RbacFilter[] = [];
  const shadowOnly = policies.filter(dryRun);
  const enforced = policies.filter((p) => !shadowOnly.includes(p));
  if (shadowOnly.length > 0) {
    const c = collect(shadowOnly);
    filters.push({ name: RBAC_FILTER_NAME, action: 'CUSTOM', config: create(RBACSchema, { shadowRules: { action: RBAC_Action.DENY, policies: c.policies }, shadowRulesStatPrefix: shadowStatPrefix }), layouts: c.layouts });
  }
  if (enforced.length === 0) return filters;
  const providers = [...new Set(enforced.map((p) => p.spec.provider?.name ?? ''))].sort();
  const provider = providers.length === 1 ? providers[0]! : undefined;
  const collected = collect(enforced, provider || undefined);
  let error: string | undefined;
  if (provider === undefined) error = `only one provider may be used per workload, found ${providers.map((p) => JSON.stringify(p)).join(', ')}`;
  else if (provider === '') error = 'no provider.name';
  let lookup: ReturnType<AuthorizerLookup> | undefined;
  if (!error) {
    lookup = authorizers(provider!);
    if ('error' in lookup) error = lookup.error;
  }
  if (error || !lookup || !('config' in lookup)) {
    warnings.push(`AuthorizationPolicy ${enforced.map(policyRef).join(', ')} (CUSTOM): ${error}; the requests its rules match are denied`);
    filters.push(customRulesDenied(collected));
    return filters;
  }
  filters.push({
    name: RBAC_FILTER_NAME,
    action: 'CUSTOM',
    config: create(RBACSchema, { shadowRules: { action: RBAC_Action.DENY, policies: collected.policies }, shadowRulesStatPrefix: CUSTOM_STAT_PREFIX }),
    layouts: collected.layouts,
    extAuthz: { provider: provider!, config: lookup.config },
  });
  return filters;
}
