// Policy fixtures and helpers shared by the security tests.
import type { JsonValue } from '@bufbuild/protobuf';
import type { AuthorizationPolicy, AuthorizationPolicySpec, RequestAuthentication, RequestAuthenticationSpec } from '../../src/api/types.js';
import { RBACSchema, type RBAC } from '../../src/gen/envoy/extensions/filters/http/rbac/v3/rbac_pb.js';
import { JwtAuthenticationSchema, type JwtAuthentication } from '../../src/gen/envoy/extensions/filters/http/jwt_authn/v3/config_pb.js';
import { toEnvoyJson } from '../../src/xds/types.js';

export function authz(name: string, spec: AuthorizationPolicySpec, namespace = 'foo'): AuthorizationPolicy {
  return { apiVersion: 'security.mesh.io/v1beta1', kind: 'AuthorizationPolicy', metadata: { name, namespace }, spec };
}

export function reqAuthn(name: string, spec: RequestAuthenticationSpec, namespace = 'foo'): RequestAuthentication {
  return { apiVersion: 'security.mesh.io/v1beta1', kind: 'RequestAuthentication', metadata: { name, namespace }, spec };
}

export const rbacJson = (c: RBAC): JsonValue => toEnvoyJson(RBACSchema, c);
export const jwtJson = (c: JwtAuthentication): JsonValue => toEnvoyJson(JwtAuthenticationSchema, c);

// Expected Envoy JSON, spelled compactly.
export const andIds = (...ids: JsonValue[]): JsonValue => ({ and_ids: { ids } });
export const orIds = (...ids: JsonValue[]): JsonValue => ({ or_ids: { ids } });
export const notId = (id: JsonValue): JsonValue => ({ not_id: id });
export const andRules = (...rules: JsonValue[]): JsonValue => ({ and_rules: { rules } });
export const orRules = (...rules: JsonValue[]): JsonValue => ({ or_rules: { rules } });
export const notRule = (rule: JsonValue): JsonValue => ({ not_rule: rule });
/** A principal clause with only values: AND(OR(values)). */
export const idValues = (...ids: JsonValue[]): JsonValue => andIds(orIds(...ids));
export const ruleValues = (...rules: JsonValue[]): JsonValue => andRules(orRules(...rules));

export const payload = (path: string[], value: JsonValue): JsonValue => ({
  metadata: { filter: 'envoy.filters.http.jwt_authn', path: ['jwt_payload', ...path].map((key) => ({ key })), value },
});
export const claim = (path: string[], sm: JsonValue): JsonValue =>
  payload(path, { or_match: { value_matchers: [{ list_match: { one_of: { string_match: sm } } }, { string_match: sm }] } });
export const issSub = (iss: JsonValue, sub: JsonValue): JsonValue => andIds(payload(['iss'], { string_match: iss }), payload(['sub'], { string_match: sub }));

/** The single RBAC policy of a single-rule, single-filter build. */
export function onlyPolicy(json: JsonValue): JsonValue {
  const policies = (json as { rules: { policies: Record<string, JsonValue> } }).rules.policies;
  const values = Object.values(policies);
  if (values.length !== 1) throw new Error(`expected one policy, got ${Object.keys(policies).join(', ')}`);
  return values[0]!;
}
