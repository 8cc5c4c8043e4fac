// Ingress resources to the mesh's Gateways and VirtualServices (the Go mesh's ingress controller),
// pure: the Ingresses and IngressClasses read, the mesh config's settings and the registry's service
// ports in; generated resources and, per Ingress, what of it is not routed out.
import { compareText } from '../../common/compare.js';
import type { Gateway, VirtualService } from '../../api/types.js';
import type { Service } from '../service.js';
import { ingressName, isOurIngress, type IngressSettings, type OrchIngress, type OrchIngressClass } from './class.js';
import { ingressGateway } from './gateways.js';
import { ingressVirtualServices, type ServicePortsLookup } from './virtual-services.js';

export interface IngressInput {
  readonly ingresses: readonly OrchIngress[];
  readonly classes: readonly OrchIngressClass[];
  readonly settings: IngressSettings;
  /** Where the Gateways are generated: ORCH_INGRESS_NS, or the discovery server's namespace when that is empty. */
  readonly ingressNamespace: string;
  readonly domain: string;
  readonly servicePorts: ServicePortsLookup;
}

export interface IngressTranslation {
  readonly gateways: readonly Gateway[];
  readonly virtualServices: readonly VirtualService[];
  /** Ingresses (`namespace/name`) the mesh serves, in that order. */
  readonly served: readonly string[];
  /** Per served Ingress, sentences naming it and the field that is not routed; absent when all is. */
  readonly notices: ReadonlyMap<string, readonly string[]>;
}

export function translateIngresses(input: IngressInput): IngressTranslation {
  const classes = new Map(input.classes.map((c) => [c.metadata.name, c]));
  const ours = input.ingresses.filter((i) => isOurIngress(i, classes, input.settings)).sort((a, b) => compareText(ingressName(a), ingressName(b)));
  const gateways = ours.map((i) => ingressGateway(i, input.ingressNamespace, input.settings));
  const routes = ingressVirtualServices(ours, input);
  const notices = new Map<string, readonly string[]>();
  ours.forEach((i, n) => {
    const all = [...gateways[n]!.notices, ...(routes.notices.get(ingressName(i)) ?? [])];
    if (all.length > 0) notices.set(ingressName(i), all);
  });
  return { gateways: gateways.map((g) => g.gateway), virtualServices: routes.virtualServices, served: ours.map(ingressName), notices };
}

/** The ports of the service `<name>.<namespace>.svc.<domain>` of that namespace, from the registries' services. */
export function servicePortsOf(services: readonly Pick<Service, 'hostname' | 'namespace' | 'ports'>[], domain: string): ServicePortsLookup {
  return (namespace, name) => services.find((s) => s.namespace === namespace && s.hostname === `${name}.${namespace}.svc.${domain}`)?.ports;
}
