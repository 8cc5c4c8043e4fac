// The dry-run annotation: an AuthorizationPolicy that is evaluated and counted, never enforced.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { buildRbacFilters, DRY_RUN_ANNOTATION } from '../../src/security/authz/builder.js';
import { compileRbacFilter } from '../../src/envoy/rbac.js';
import { RBAC_FILTER_NAME } from '../../src/envoy/names.js';
import { requestView } from '../../src/envoy/request.js';
import type { AuthorizationPolicySpec } from '../../src/api/types.js';
import { authz, rbacJson } from './fixtures.js';

const dryRun = (name: string, spec: AuthorizationPolicySpec, value = 'true') => {
  const p = authz(name, spec);
  return { ...p, metadata: { ...p.metadata, annotations: { [DRY_RUN_ANNOTATION]: value } } };
};
const denyAdmin: AuthorizationPolicySpec = { action: 'DENY', rules: [{ to: [{ operation: { paths: ['/admin'] } }] }] };

test('a dry-run policy goes to shadow_rules with the dry-run stat prefix; no rules when nothing is enforced', () => {
  const { filters, warnings } = buildRbacFilters([dryRun('shadow', denyAdmin)]);
  assert.deepEqual(warnings, []);
  const json = rbacJson(filters[0]!.config) as Record<string, unknown>;
  assert.equal(json.rules, undefined);
  assert.equal(json.shadow_rules_stat_prefix, 'mesh_dry_run_deny_');
  assert.deepEqual(Object.keys((json.shadow_rules as { policies: object }).policies), ['ns[foo]-policy[shadow]-rule[0]']);
  const allow = rbacJson(buildRbacFilters([dryRun('a', { rules: [{}] })]).filters[0]!.config) as Record<string, unknown>;
  assert.equal(allow.shadow_rules_stat_prefix, 'mesh_dry_run_allow_');
});

test('the proxy evaluates a dry-run DENY, records and counts it, and lets the request through', () => {
  const f = compileRbacFilter(buildRbacFilters([dryRun('shadow', denyAdmin)]).filters[0]!.config);
  const req = requestView({ path: '/admin' });
  assert.deepEqual(f.decodeHeaders(req), { kind: 'continue' });
  assert.deepEqual(req.metadata[RBAC_FILTER_NAME], {
    mesh_dry_run_deny_shadow_engine_result: 'denied',
    mesh_dry_run_deny_shadow_effective_policy_id: 'ns[foo]-policy[shadow]-rule[0]',
  });
  assert.deepEqual(f.decodeHeaders(requestView({ path: '/public' })), { kind: 'continue' });
  assert.deepEqual(f.stats, { allowed: 0, denied: 0, mesh_dry_run_deny_shadow_allowed: 1, mesh_dry_run_deny_shadow_denied: 1 });
});

test('enforced and dry-run policies of one action: the enforced ones still decide', () => {
  const enforced = authz('enforced', { action: 'DENY', rules: [{ to: [{ operation: { paths: ['/secret'] } }] }] });
  const f = compileRbacFilter(buildRbacFilters([enforced, dryRun('shadow', denyAdmin)]).filters[0]!.config);
  assert.equal(f.decodeHeaders(requestView({ path: '/admin' })).kind, 'continue');
  assert.equal(f.decodeHeaders(requestView({ path: '/secret' })).kind, 'reply');
});

test('"false" enforces; a value that is not a boolean is a warning and the policy is enforced (fails closed)', () => {
  for (const value of ['false', 'yes']) {
    const { filters, warnings } = buildRbacFilters([dryRun('p', denyAdmin, value)]);
    assert.equal(compileRbacFilter(filters[0]!.config).decodeHeaders(requestView({ path: '/admin' })).kind, 'reply', value);
    assert.equal(warnings.length, value === 'yes' ? 1 : 0);
  }
  assert.match(buildRbacFilters([dryRun('p', denyAdmin, 'yes')]).warnings[0]!, /mesh\.io\/dry-run: "yes" is not a boolean.*enforced/);
});
