// The one entry point for a workload's security filters: selection, then both builders. The
// listener builder inserts the result into the inbound HTTP connection manager (jwt_authn first,
// then the rbac filters in the order given, then the router); /debug/authorizationz shows it.
import type { AuthorizationPolicy, RequestAuthentication } from '../api/types.js';
import { create } from '@bufbuild/protobuf';
import { anyPack } from '@bufbuild/protobuf/wkt';
import { JwtAuthenticationSchema, type JwtAuthentication } from '../gen/envoy/extensions/filters/http/jwt_authn/v3/config_pb.js';
import { RBACSchema } from '../gen/envoy/extensions/filters/http/rbac/v3/rbac_pb.js';
import { HttpFilterSchema, type HttpFilter } from '../gen/envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager_pb.js';
import { JWT_AUTHN_FILTER_NAME } from './authn/names.js';
import { buildJwtAuthn, type JwksLookup } from './authn/jwt-filter.js';
import { buildRbacFilters, type RbacFilter } from './authz/builder.js';
import { selectPolicies, type WorkloadRef } from '../model/selection.js';

export interface WorkloadSecurity {
  readonly requestAuthentications: RequestAuthentication[];
  readonly authorizationPolicies: AuthorizationPolicy[];
  /** The `envoy.filters.http.jwt_authn` config, or null: no jwt_authn filter. */
  readonly jwtAuthn: JwtAuthentication | null;
  /** `envoy.filters.http.rbac` configs in chain order (CUSTOM, AUDIT, DENY, ALLOW). */
  readonly rbac: RbacFilter[];
  /** Untranslatable values, each naming policy, field and value: log them, they failed closed. */
  readonly warnings: string[];
}

export function buildWorkloadSecurity(
  workload: WorkloadRef,
  allRequestAuthentications: readonly RequestAuthentication[],
  allAuthorizationPolicies: readonly AuthorizationPolicy[],
  lookup: JwksLookup,
  rootNamespace?: string,
): WorkloadSecurity {
  const requestAuthentications = selectPolicies(workload, allRequestAuthentications, rootNamespace);
  const authorizationPolicies = selectPolicies(workload, allAuthorizationPolicies, rootNamespace);
  const warnings: string[] = [];
  const jwtAuthn = buildJwtAuthn(requestAuthentications, lookup, warnings);
  const rbac = buildRbacFilters(authorizationPolicies);
  return { requestAuthentications, authorizationPolicies, jwtAuthn, rbac: rbac.filters, warnings: [...warnings, ...rbac.warnings] };
}

/** The HTTP filters for the inbound chain's security slot: jwt_authn (if any), then the rbac filters. */
export function securityHttpFilters(sec: WorkloadSecurity): HttpFilter[] {
  const filters: HttpFilter[] = [];
  if (sec.jwtAuthn) {
    filters.push(create(HttpFilterSchema, { name: JWT_AUTHN_FILTER_NAME, configType: { case: 'typedConfig', value: anyPack(JwtAuthenticationSchema, sec.jwtAuthn) } }));
  }
  for (const r of sec.rbac) {
    filters.push(create(HttpFilterSchema, { name: r.name, configType: { case: 'typedConfig', value: anyPack(RBACSchema, r.config) } }));
  }
  return filters;
}
