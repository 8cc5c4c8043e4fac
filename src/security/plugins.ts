// pilot-discovery `--plugins`: which security translations run. The production mesh's names:
// `authn` (RequestAuthentication -> jwt_authn), `authz` (ALLOW/DENY/AUDIT -> rbac) and `ext_authz`
// (CUSTOM -> rbac shadow rules + ext_authz). Leaving one out is the operator's choice and is said
// at startup; CUSTOM without ext_authz still fails closed (its rules deny), unlike the production
// mesh, which then drops CUSTOM policies and checks nothing.
import type { ExtensionProviders } from '../model/extension-providers.js';
import type { PushContext } from '../model/push-context.js';
import { authorizerLookup, type ServiceExists } from './authz/ext-authz.js';
import type { SecurityOptions } from './filters.js';

export const SECURITY_PLUGINS = ['ext_authz', 'authn', 'authz'] as const;
export type SecurityPlugin = (typeof SECURITY_PLUGINS)[number];

export class PluginsError extends Error {}

/** The `--plugins` list as a set; an unknown name is an error naming it. */
export function parsePlugins(list: readonly string[]): ReadonlySet<SecurityPlugin> {
  const out = new Set<SecurityPlugin>();
  for (const name of list) {
    if (!(SECURITY_PLUGINS as readonly string[]).includes(name)) throw new PluginsError(`invalid argument ${JSON.stringify(name)} for "--plugins" flag: expected some of ${SECURITY_PLUGINS.join(', ')}`);
    out.add(name as SecurityPlugin);
  }
  return out;
}

/** What leaving plugins out means, to say at startup. */
export function pluginNotices(plugins: ReadonlySet<SecurityPlugin>): string[] {
  const notes: string[] = [];
  if (!plugins.has('authn')) notes.push('--plugins without authn: RequestAuthentications are not translated (no jwt_authn filter; tokens are not validated and requestPrincipals/request.auth conditions never match)');
  if (!plugins.has('authz')) notes.push('--plugins without authz: ALLOW, DENY and AUDIT AuthorizationPolicies are not translated (not enforced)');
  if (!plugins.has('ext_authz')) notes.push('--plugins without ext_authz: CUSTOM AuthorizationPolicies are not sent to their providers; the requests their rules match are denied');
  return notes;
}

const EXT_AUTHZ_DISABLED = 'the ext_authz plugin is not enabled (pilot-discovery --plugins)';

/** The builders' options for one push: plugins, and the providers resolved against its services. */
export function securityOptions(plugins: ReadonlySet<SecurityPlugin>, providers: ExtensionProviders, exists: ServiceExists): SecurityOptions {
  return {
    authn: plugins.has('authn'),
    authz: plugins.has('authz'),
    authorizers: authorizerLookup(providers, exists, plugins.has('ext_authz') ? undefined : EXT_AUTHZ_DISABLED),
  };
}

/** securityOptions with the services of a push: `[<namespace>/]<hostname>` as the production mesh looks it up. */
export function securityOptionsFor(push: PushContext, plugins: ReadonlySet<SecurityPlugin>, providers: ExtensionProviders): SecurityOptions {
  const exists: ServiceExists = (hostname, namespace) => (namespace === undefined ? push.services : push.servicesInNamespace(namespace)).some((s) => s.hostname === hostname);
  return securityOptions(plugins, providers, exists);
}
