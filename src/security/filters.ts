// The one entry point for a workload's security filters: selection, then both builders. The
// listener builder inserts the result into the inbound HTTP connection manager (jwt_authn first,
// then the rbac filters in the order given, each CUSTOM one followed by its ext_authz filter, then
// the router); /debug/authorizationz shows it.
import type { AuthorizationPolicy, RequestAuthentication } from '../api/types.js';
import { create } from '@bufbuild/protobuf';
import { anyPack } from '@bufbuild/protobuf/wkt';
import { JwtAuthenticationSchema, type JwtAuthentication } from '../gen/envoy/extensions/filters/http/jwt_authn/v3/config_pb.js';
import { RBACSchema } from '../gen/envoy/extensions/filters/http/rbac/v3/rbac_pb.js';
import { ExtAuthzSchema } from '../gen/envoy/extensions/filters/http/ext_authz/v3/ext_authz_pb.js';
import { HttpFilterSchema, type HttpFilter } from '../gen/envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager_pb.js';
import { RBACSchema as NetworkRbacSchema } from '../gen/envoy/extensions/filters/network/rbac/v3/rbac_pb.js';
import { FilterSchema, type Filter } from '../gen/envoy/config/listener/v3/listener_components_pb.js';
import { EXT_AUTHZ_FILTER_NAME, JWT_AUTHN_FILTER_NAME, NETWORK_RBAC_FILTER_NAME, RBAC_FILTER_NAME } from '../envoy/names.js';
import { buildJwtAuthn, type JwksLookup } from './authn/builder.js';
import { buildRbacFilters, type RbacFilter } from './authz/builder.js';
import { NO_AUTHORIZERS, type AuthorizerLookup } from './authz/ext-authz.js';
import { customRulesDenied } from './authz/custom.js';
import { selectPolicies, type WorkloadRef } from '../model/selection.js';
import { perObject, sameInputs } from '../common/same-inputs.js';

/**
 * The rbac filters of a list of policies, built once for every proxy the same policies select
 * (a mesh-wide policy: all of them); stored policies are frozen and replaced when edited.
 */
const rbacFiltersOf = sameInputs(buildRbacFilters);
const tcpRbacFiltersOf = sameInputs((policies: readonly AuthorizationPolicy[], authorizers: AuthorizerLookup) => buildRbacFilters(policies, authorizers, 'tcp'));

export interface WorkloadSecurity {
  readonly requestAuthentications: RequestAuthentication[];
  readonly authorizationPolicies: AuthorizationPolicy[];
  /** The `envoy.filters.http.jwt_authn` config, or null: no jwt_authn filter. */
  readonly jwtAuthn: JwtAuthentication | null;
  /** `envoy.filters.http.rbac` configs in chain order (CUSTOM, AUDIT, DENY, ALLOW); a CUSTOM one may carry its ext_authz filter. */
  readonly rbac: RbacFilter[];
  /** The same policies for TCP chains (`envoy.filters.network.rbac`), same order; never an ext_authz. */
  readonly tcpRbac: RbacFilter[];
  /** Untranslatable values, each naming policy, field and value: log them, they failed closed. */
  readonly warnings: string[];
}

/** What the discovery server's settings decide for every workload. */
export interface SecurityOptions {
  /** The providers of CUSTOM policies (mesh config extensionProviders); absent: none can be used. */
  readonly authorizers?: AuthorizerLookup;
  /** `--plugins` without authn: RequestAuthentications are not translated. */
  readonly authn?: boolean;
  /** `--plugins` without authz: only CUSTOM AuthorizationPolicies are translated. */
  readonly authz?: boolean;
}

export function buildWorkloadSecurity(
  workload: WorkloadRef,
  allRequestAuthentications: readonly RequestAuthentication[],
  allAuthorizationPolicies: readonly AuthorizationPolicy[],
  lookup: JwksLookup,
  rootNamespace?: string,
  options: SecurityOptions = {},
): WorkloadSecurity {
  const requestAuthentications = options.authn === false ? [] : selectPolicies(workload, allRequestAuthentications, rootNamespace);
  const selected = selectPolicies(workload, allAuthorizationPolicies, rootNamespace);
  const authorizationPolicies = options.authz === false ? selected.filter((p) => p.spec.action === 'CUSTOM') : selected;
  const warnings: string[] = [];
  const jwtAuthn = buildJwtAuthn(requestAuthentications, lookup, warnings);
  const rbac = rbacFiltersOf(authorizationPolicies, options.authorizers ?? NO_AUTHORIZERS);
  const tcpRbac = tcpRbacFiltersOf(authorizationPolicies, options.authorizers ?? NO_AUTHORIZERS);
  // A value both builds could not translate is one warning.
  return { requestAuthentications, authorizationPolicies, jwtAuthn, rbac: rbac.filters, tcpRbac: tcpRbac.filters, warnings: [...new Set([...warnings, ...rbac.warnings, ...tcpRbac.warnings])] };
}

/** The Go mesh's stat_prefix of the network rbac filters: their stats are `tcp.rbac.allowed`, ... */
export const TCP_RBAC_STAT_PREFIX = 'tcp.';

/** A TCP rbac filter as a network filter, packed once per filter (shared by the proxies given it). */
export const rbacNetworkFilter = perObject((r: RbacFilter) =>
  create(FilterSchema, {
    name: NETWORK_RBAC_FILTER_NAME,
    configType: {
      case: 'typedConfig',
      value: anyPack(NetworkRbacSchema, create(NetworkRbacSchema, { statPrefix: TCP_RBAC_STAT_PREFIX, rules: r.config.rules, shadowRules: r.config.shadowRules, shadowRulesStatPrefix: r.config.shadowRulesStatPrefix })),
    },
  }),
);

/** The network filters placed before tcp_proxy on inbound TCP chains: the rbac filters, in order. */
export function securityNetworkFilters(sec: WorkloadSecurity): Filter[] {
  return sec.tcpRbac.map(rbacNetworkFilter);
}

/** An rbac filter as an HttpFilter, packed once per filter (shared by the proxies given it). */
const rbacHttpFilter = perObject((r: RbacFilter) => create(HttpFilterSchema, { name: r.name, configType: { case: 'typedConfig', value: anyPack(RBACSchema, r.config) } }));

/** A CUSTOM filter's ext_authz as an HttpFilter, packed once likewise. */
const extAuthzHttpFilter = perObject((e: NonNullable<RbacFilter['extAuthz']>) => create(HttpFilterSchema, { name: EXT_AUTHZ_FILTER_NAME, configType: { case: 'typedConfig', value: anyPack(ExtAuthzSchema, e.config) } }));

/** The HTTP filters for the inbound chain's security slot: jwt_authn (if any), then the rbac filters. */
export function securityHttpFilters(sec: WorkloadSecurity): HttpFilter[] {
  const filters: HttpFilter[] = [];
  if (sec.jwtAuthn) {
    filters.push(create(HttpFilterSchema, { name: JWT_AUTHN_FILTER_NAME, configType: { case: 'typedConfig', value: anyPack(JwtAuthenticationSchema, sec.jwtAuthn) } }));
  }
  for (const r of sec.rbac) {
    filters.push(rbacHttpFilter(r));
    if (r.extAuthz) filters.push(extAuthzHttpFilter(r.extAuthz));
  }
  return filters;
}

/**
 * A CUSTOM pair for a client that has no ext_authz filter: the shadow rules enforced as DENY, so
 * that what would have been sent to the authorizer is refused rather than let through.
 */
function customAsDeny(r: RbacFilter): RbacFilter {
  return customRulesDenied({ policies: r.config.shadowRules?.policies ?? {}, layouts: r.layouts });
}

export interface GrpcServerFilters {
  readonly filters: HttpFilter[];
  /** What the gRPC server will not enforce, naming the policies: log them. */
  readonly notes: string[];
}

/**
 * The HTTP filters of a proxyless gRPC server (xDS-enabled gRPC), which implements Envoy's RBAC
 * filter but neither jwt_authn nor the LOG action: the rbac filters of CUSTOM, DENY and ALLOW, in
 * order, each under its own name (gRPC refuses a listener with two filters of the same name).
 * RequestAuthentication is not enforced: tokens are not validated, and gRPC's RBAC never matches
 * metadata, so `requestPrincipals` and `request.auth.*` conditions never hold (ALLOW rules made of
 * them allow nothing; DENY rules made of them deny nothing). AUDIT policies are left out.
 */
export function grpcServerHttpFilters(sec: WorkloadSecurity): GrpcServerFilters {
  const notes: string[] = [];
  if (sec.requestAuthentications.length > 0) {
    const names = sec.requestAuthentications.map((p) => `${p.metadata.namespace}/${p.metadata.name}`).join(', ');
    notes.push(`RequestAuthentication ${names} is not enforced on a proxyless gRPC server (no jwt_authn): tokens are not validated, and requestPrincipals or request.auth conditions of AuthorizationPolicies never match there`);
  }
  const filters: HttpFilter[] = [];
  for (const r of sec.rbac) {
    if (r.action === 'AUDIT') {
      notes.push(`AUDIT AuthorizationPolicies are not sent to a proxyless gRPC server (gRPC refuses the RBAC action LOG)`);
      continue;
    }
    if (r.action === 'CUSTOM' && !r.config.rules && !r.extAuthz) {
      notes.push(`dry-run CUSTOM AuthorizationPolicies are not sent to a proxyless gRPC server (gRPC does not evaluate shadow rules)`);
      continue;
    }
    let filter = r;
    if (r.extAuthz) {
      notes.push(`CUSTOM AuthorizationPolicies (provider ${JSON.stringify(r.extAuthz.provider)}) are enforced as DENY on a proxyless gRPC server: it has no ext_authz filter`);
      filter = customAsDeny(r);
    }
    filters.push(create(HttpFilterSchema, { name: `${RBAC_FILTER_NAME}.${r.action.toLowerCase()}`, configType: { case: 'typedConfig', value: anyPack(RBACSchema, filter.config) } }));
  }
  return { filters, notes };
}
