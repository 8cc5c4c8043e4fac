// A mesh config ext_authz provider -> the `envoy.filters.http.ext_authz` config, as the production
// mesh writes it: the authorizer's service resolved to its outbound cluster, Envoy's defaults left
// to Envoy except the timeout (600 s when the provider sets none), and the filter enabled only when
// the CUSTOM rbac filter's shadow rules matched one of the provider's policies. Pure.
import { create, type MessageInitShape } from '@bufbuild/protobuf';
import { durationFromMs } from '@bufbuild/protobuf/wkt';
import { ExtAuthzSchema, type ExtAuthz } from '../../gen/envoy/extensions/filters/http/ext_authz/v3/ext_authz_pb.js';
import { ApiVersion } from '../../gen/envoy/config/core/v3/config_source_pb.js';
import { ListStringMatcherSchema, StringMatcherSchema, type ListStringMatcher, type StringMatcher } from '../../gen/envoy/type/matcher/v3/string_pb.js';
import { MetadataMatcherSchema, type MetadataMatcher } from '../../gen/envoy/type/matcher/v3/metadata_pb.js';
import { RBAC_FILTER_NAME } from '../../envoy/names.js';
import { outboundClusterName } from '../../networking/names.js';
import type { ExtAuthzProvider, ExtensionProviders, RequestBodyInCheck } from '../../model/extension-providers.js';
import { customPolicyPrefix } from './policy-names.js';

/** shadow_rules_stat_prefix of the CUSTOM rbac filter; its dynamic metadata keys start with it. */
export const CUSTOM_STAT_PREFIX = 'mesh_ext_authz_';

/** The production mesh's default ext_authz timeout. */
export const DEFAULT_EXT_AUTHZ_TIMEOUT_MS = 600_000;

/** Does a service of this hostname exist (in `namespace` when given, else in any namespace)? */
export type ServiceExists = (hostname: string, namespace: string | undefined) => boolean;

/** The authorizer's hostname and outbound cluster, or an error naming what is missing. */
export function resolveAuthorizer(p: ExtAuthzProvider, exists: ServiceExists): { hostname: string; cluster: string } | { error: string } {
  const slash = p.service.indexOf('/');
  const namespace = slash >= 0 ? p.service.slice(0, slash) : undefined;
  const hostname = slash >= 0 ? p.service.slice(slash + 1) : p.service;
  if (!hostname || (namespace !== undefined && !namespace)) return { error: `service ${JSON.stringify(p.service)} is not "[<namespace>/]<hostname>"` };
  if (!exists(hostname, namespace)) return { error: `service ${JSON.stringify(p.service)} is not in the service registry${namespace ? '' : ' (any namespace)'}` };
  return { hostname, cluster: outboundClusterName(p.port, hostname) };
}

/** Header names as the production mesh matches them: case-insensitive, `x-*` a prefix, `*-id` a suffix. */
function headerMatchers(headers: readonly string[]): ListStringMatcher | undefined {
  if (headers.length === 0) return undefined;
  const patterns = headers.map((h): MessageInitShape<typeof StringMatcherSchema> => {
    const pattern: StringMatcher['matchPattern'] = h.startsWith('*')
      ? { case: 'suffix', value: h.slice(1) }
      : h.endsWith('*')
        ? { case: 'prefix', value: h.slice(0, -1) }
        : { case: 'exact', value: h };
    return { ignoreCase: true, matchPattern: pattern };
  });
  return create(ListStringMatcherSchema, { patterns });
}

function bufferSettings(b: RequestBodyInCheck | undefined) {
  return b ? { withRequestBody: { maxRequestBytes: b.maxRequestBytes, allowPartialMessage: b.allowPartialMessage, packAsBytes: b.packAsBytes } } : {};
}

/** Enabled when the CUSTOM rbac filter's shadow rules matched a policy of this provider. */
function enabledWhenCustomRuleMatched(provider: string): MetadataMatcher {
  return create(MetadataMatcherSchema, {
    filter: RBAC_FILTER_NAME,
    path: [{ segment: { case: 'key', value: `${CUSTOM_STAT_PREFIX}shadow_effective_policy_id` } }],
    value: { matchPattern: { case: 'stringMatch', value: { matchPattern: { case: 'prefix', value: customPolicyPrefix(provider) } } } },
  });
}

/** The ext_authz filter config for a resolved provider. */
export function buildExtAuthz(p: ExtAuthzProvider, hostname: string, cluster: string): ExtAuthz {
  const timeout = durationFromMs(p.timeoutMs ?? DEFAULT_EXT_AUTHZ_TIMEOUT_MS);
  const common = {
    transportApiVersion: ApiVersion.V3,
    failureModeAllow: p.failOpen,
    filterEnabledMetadata: enabledWhenCustomRuleMatched(p.name),
    ...(p.statusOnError !== undefined ? { statusOnError: { code: p.statusOnError } } : {}),
    ...bufferSettings(p.includeRequestBodyInCheck),
  };
  if (p.kind === 'envoyExtAuthzGrpc') {
    return create(ExtAuthzSchema, {
      ...common,
      services: { case: 'grpcService', value: { timeout, targetSpecifier: { case: 'envoyGrpc', value: { clusterName: cluster, authority: hostname } } } },
    });
  }
  const additional = Object.keys(p.includeAdditionalHeadersInCheck).sort();
  const upstream = headerMatchers(p.headersToUpstreamOnAllow);
  const client = headerMatchers(p.headersToDownstreamOnDeny);
  const clientOnSuccess = headerMatchers(p.headersToDownstreamOnAllow);
  const allowed = headerMatchers(p.includeRequestHeadersInCheck);
  return create(ExtAuthzSchema, {
    ...common,
    ...(allowed ? { allowedHeaders: allowed } : {}),
    services: {
      case: 'httpService',
      value: {
        pathPrefix: p.pathPrefix ?? '',
        // The uri is required by Envoy but unused: requests go to the cluster.
        serverUri: { uri: `http://${hostname}`, httpUpstreamType: { case: 'cluster', value: cluster }, timeout },
        ...(additional.length ? { authorizationRequest: { headersToAdd: additional.map((key) => ({ key, value: p.includeAdditionalHeadersInCheck[key]! })) } } : {}),
        ...(upstream || client || clientOnSuccess
          ? { authorizationResponse: { allowedUpstreamHeaders: upstream, allowedClientHeaders: client, allowedClientHeadersOnSuccess: clientOnSuccess } }
          : {}),
      },
    },
  });
}

/** What the CUSTOM translation asks about a provider: its ext_authz config, or why there is none. */
export type AuthorizerLookup = (provider: string) => { readonly config: ExtAuthz } | { readonly error: string };

/** Without mesh config: no provider can be used. */
export const NO_AUTHORIZERS: AuthorizerLookup = (provider) => ({ error: `no extension provider ${JSON.stringify(provider)} in mesh config extensionProviders` });

/**
 * The providers of the mesh config, resolved against the service registry of a push. `disabled`:
 * why CUSTOM may not be translated at all (the ext_authz plugin left out of `--plugins`).
 */
export function authorizerLookup(providers: ExtensionProviders, exists: ServiceExists, disabled?: string): AuthorizerLookup {
  return (name) => {
    if (disabled) return { error: disabled };
    const p = providers.authorizers.get(name);
    if (!p) {
      const known = [...providers.authorizers.keys()].sort();
      return { error: `no ext_authz provider ${JSON.stringify(name)} in mesh config extensionProviders (${known.length ? `available: ${known.join(', ')}` : 'none defined'})` };
    }
    const r = resolveAuthorizer(p, exists);
    return 'error' in r ? { error: `provider ${JSON.stringify(name)}: ${r.error}` } : { config: buildExtAuthz(p, r.hostname, r.cluster) };
  };
}
