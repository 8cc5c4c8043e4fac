// A DestinationRule that turns TLS off (tls.mode DISABLE, at the top, a port or a subset) for a
// host whose namespace requires mutual TLS (STRICT, namespace-wide or mesh-wide): clients following
// the rule send plaintext, and the servers refuse it.
import type { DestinationRule, PeerAuthentication } from '../../api/types.js';
import { namespaceMtlsMode } from '../../security/mtls/peer-authentication.js';
import { message, qualifiedHost, type AnalysisInput, type AnalysisMessage, type Analyzer } from './types.js';

interface TlsHolder {
  readonly tls?: { readonly mode?: string };
  readonly portLevelSettings?: readonly { readonly tls?: { readonly mode?: string } }[];
}

/** Where in the rule TLS is disabled (`spec.trafficPolicy.tls.mode`, ...). */
function disabledAt(dr: DestinationRule): string[] {
  const at = (policy: TlsHolder | undefined, path: string): string[] => [
    ...(policy?.tls?.mode === 'DISABLE' ? [`${path}.tls.mode`] : []),
    ...(policy?.portLevelSettings ?? []).flatMap((p, i) => (p.tls?.mode === 'DISABLE' ? [`${path}.portLevelSettings[${i}].tls.mode`] : [])),
  ];
  return [
    ...at(dr.spec.trafficPolicy as TlsHolder | undefined, 'spec.trafficPolicy'),
    ...(dr.spec.subsets ?? []).flatMap((s, i) => at(s.trafficPolicy as TlsHolder | undefined, `spec.subsets[${i}].trafficPolicy`)),
  ];
}

/** The namespace of the service a host names: `<svc>.<ns>.svc.<domain>`, else the ServiceEntry declaring it. */
function hostNamespace(host: string, input: AnalysisInput): string | undefined {
  const m = new RegExp(`^[^.]+\\.([^.]+)\\.svc\\.${input.domain.replaceAll('.', '\\.')}$`).exec(host);
  if (m) return m[1];
  return input.list('ServiceEntry').find((se) => se.spec.hosts.includes(host))?.metadata.namespace;
}

export const mtlsDestinationRule: Analyzer = {
  name: 'destinationrule.mtls',
  analyze(input: AnalysisInput): AnalysisMessage[] {
    const policies: readonly PeerAuthentication[] = input.list('PeerAuthentication');
    return input.list('DestinationRule').flatMap((dr) => {
      const paths = disabledAt(dr);
      if (paths.length === 0) return [];
      const host = qualifiedHost(dr.spec.host ?? '', dr.metadata.namespace, input.domain);
      const ns = hostNamespace(host, input);
      if (!ns || namespaceMtlsMode(ns, policies.filter((p) => p.metadata.namespace === ns || p.metadata.namespace === input.rootNamespace), input.rootNamespace) !== 'STRICT') return [];
      return paths.map((path) => message('DestinationRuleDisablesStrictMtls', dr, path, `TLS is disabled for ${host}, but PeerAuthentication requires mutual TLS (STRICT) in namespace ${ns}: its servers refuse these clients' plaintext`));
    });
  },
};
