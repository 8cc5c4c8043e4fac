// Policy fixtures and helpers shared by the security tests.
import type { JsonObject, JsonValue } from '@bufbuild/protobuf';
import type { DiscoveryOptions } from '../../src/cli/discovery-server.js';
import { compileRbacFilter } from '../../src/envoy/rbac.js';
import { requestView, type RequestViewInit } from '../../src/envoy/request.js';
import type { AuthorizationPolicy, AuthorizationPolicySpec, RequestAuthentication, RequestAuthenticationSpec } from '../../src/api/types.js';
import { RBACSchema, type RBAC } from '../../src/gen/envoy/extensions/filters/http/rbac/v3/rbac_pb.js';
import { JwtAuthenticationSchema, type JwtAuthentication } from '../../src/gen/envoy/extensions/filters/http/jwt_authn/v3/config_pb.js';
import { toEnvoyJson } from '../../src/envoy/types.js';

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

/**
 * Whether the data plane's compiled rbac filter (the one evaluator: the proxy runs it, and so does
 * /debug/authz_explain) lets a request through.
 */
export function rbacAllows(config: RBAC, init: RequestViewInit = {}): boolean {
  return compileRbacFilter(config).decodeHeaders(requestView(init)).kind === 'continue';
}

/** The jwt_authn payload metadata for a request view, as the jwt_authn filter writes it. */
export const withPayload = (payload: JsonObject): RequestViewInit => ({ metadata: { 'envoy.filters.http.jwt_authn': { jwt_payload: payload } } });

/** Options of an in-process discovery server on 127.0.0.1 port 0 reading its config from `configDir`. */
export function localDiscoveryOptions(configDir: string): DiscoveryOptions {
  return {
    httpAddr: '127.0.0.1:0',
    monitoringAddr: '127.0.0.1:0',
    grpcAddr: '127.0.0.1:0',
    httpsAddr: '127.0.0.1:0',
    configDir,
    orchestrator: {},
    registries: [],
    domain: 'cluster.local',
    clusterId: 'Kubernetes',
    keepaliveIntervalMs: 30_000,
    keepaliveTimeoutMs: 10_000,
    maxConnectionAgeMs: 0,
  };
}
