// The security translation the discovery server runs per proxy: the policies selecting it (with
// the trust domain's aliases), the builders' options of a push (--plugins, the mesh config's
// providers), the inbound HTTP filters of sidecars and of proxyless gRPC servers, and the network
// filters of sidecars' inbound TCP chains. Untranslatable
// values are logged (they failed closed); a gRPC server's notes once per proxy and change.
import type { HttpFilter } from '../gen/envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager_pb.js';
import type { Filter } from '../gen/envoy/config/listener/v3/listener_components_pb.js';
import type { AuthorizationPolicy } from '../api/types.js';
import { scope } from '../common/log.js';
import { perObject } from '../common/same-inputs.js';
import { DEFAULT_MESH_CONFIG } from '../model/mesh-config.js';
import type { ExtensionProviders } from '../model/extension-providers.js';
import type { Proxy } from '../model/proxy.js';
import type { PushContext } from '../model/push-context.js';
import type { JwksResolver } from '../security/authn/jwks-resolver.js';
import { buildWorkloadSecurity, grpcServerHttpFilters, securityHttpFilters, securityNetworkFilters, type SecurityOptions, type WorkloadSecurity } from '../security/filters.js';
import { policyWithAliases, type TrustDomains } from '../security/mtls/trust-domain.js';
import { SECURITY_PLUGINS, securityOptionsFor, type SecurityPlugin } from '../security/plugins.js';

const log = scope('default');

export interface ProxySecurityOptions {
  readonly resolver: JwksResolver;
  readonly trustDomains: TrustDomains;
  /** --plugins; default all of them. */
  readonly plugins?: ReadonlySet<SecurityPlugin>;
  readonly extensionProviders?: ExtensionProviders;
}

export class ProxySecurity {
  private readonly grpcNotes = new Map<string, string>();

  constructor(private readonly o: ProxySecurityOptions) {}

  /**
   * --plugins and the mesh config's providers, resolved against the push's services; one object
   * per push, so that proxies selected by the same policies share their built filters.
   */
  readonly options = perObject((push: PushContext): SecurityOptions =>
    securityOptionsFor(push, this.o.plugins ?? new Set(SECURITY_PLUGINS), this.o.extensionProviders ?? DEFAULT_MESH_CONFIG.extensionProviders));

  /** A stored policy with the aliases' principals, once per policy: built filters are shared by identity. */
  private readonly withAliases = perObject((p: AuthorizationPolicy) => policyWithAliases(p, this.o.trustDomains));

  /** Each proxy's translation, once per push: its HTTP and TCP filters come from one build (and one round of warnings). */
  private readonly built = new WeakMap<PushContext, WeakMap<Proxy, WorkloadSecurity>>();

  /** Selection and both builders for a proxy. */
  workload(proxy: Proxy, push: PushContext): WorkloadSecurity {
    let ofPush = this.built.get(push);
    if (!ofPush) this.built.set(push, (ofPush = new WeakMap()));
    let sec = ofPush.get(proxy);
    if (!sec) ofPush.set(proxy, (sec = this.translate(proxy, push)));
    return sec;
  }

  private translate(proxy: Proxy, push: PushContext): WorkloadSecurity {
    const policies = push.policiesFor('AuthorizationPolicy', proxy).map(this.withAliases);
    const sec = buildWorkloadSecurity(proxy, push.policiesFor('RequestAuthentication', proxy), policies, this.o.resolver.lookup, push.rootNamespace, this.options(push));
    for (const w of sec.warnings) log.warn(w);
    return sec;
  }

  /** The jwt_authn and rbac filters of a proxy's inbound HTTP chains, from the policies selecting it. */
  httpFilters(proxy: Proxy, push: PushContext): HttpFilter[] {
    return securityHttpFilters(this.workload(proxy, push));
  }

  /** The network rbac filters of a proxy's inbound TCP chains (before tcp_proxy), from the same policies. */
  networkFilters(proxy: Proxy, push: PushContext): Filter[] {
    return securityNetworkFilters(this.workload(proxy, push));
  }

  /**
   * The rbac filters of a proxyless gRPC server; what it cannot enforce (RequestAuthentication,
   * AUDIT) is logged once per proxy and change, not on every push.
   */
  grpcServerFilters(proxy: Proxy, push: PushContext): HttpFilter[] {
    const { filters, notes } = grpcServerHttpFilters(this.workload(proxy, push));
    const summary = notes.join('\n');
    if (this.grpcNotes.get(proxy.id) !== summary) {
      this.grpcNotes.set(proxy.id, summary);
      for (const n of notes) log.warn(`proxy ${proxy.id}: ${n}`);
    }
    return filters;
  }
}
